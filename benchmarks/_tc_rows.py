"""Tensorclass rows for benchmarks/ops.py: tensorbox against tensordict's @tensorclass
and the floor, a plain ``@dataclass`` handled field by field.

The class has 5 tensor fields over batch [1000] (construct uses batch [64]);
``torch.stack`` stacks 64 single samples (batch []), as a collate does.

``rows()`` returns ``(name, tensorbox_fn, tensordict_fn | None, floor_fn)`` tuples;
each fn takes no argument. Run this file alone for a quick table:

    python benchmarks/_tc_rows.py        # torch.set_num_threads(1), medians of 7 runs

Targets (issue 3): every row at most tensordict's time, and ``tc[int]`` within
1.5x of the floor.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import timeit
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorbox import tensorclass

Fn = Callable[[], Any]
N = 1000
SMALL = 64
FEATURES = {"a": (3,), "b": (4,), "c": (), "d": (2, 2), "e": (8,)}


def _fields(n: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {k: torch.randn((n, *shape), generator=g) for k, shape in FEATURES.items()}


@tensorclass
class TB:
    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    d: torch.Tensor
    e: torch.Tensor


@dataclasses.dataclass
class Floor:
    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    d: torch.Tensor
    e: torch.Tensor


def _floor_index(x: Floor, i: Any) -> Floor:
    return Floor(x.a[i], x.b[i], x.c[i], x.d[i], x.e[i])


def _floor_stack(xs: list[Floor]) -> Floor:
    return Floor(
        torch.stack([x.a for x in xs]),
        torch.stack([x.b for x in xs]),
        torch.stack([x.c for x in xs]),
        torch.stack([x.d for x in xs]),
        torch.stack([x.e for x in xs]),
    )


def _floor_construct(f: dict[str, torch.Tensor], n: int) -> Floor:
    # The floor checks shapes too: a container that validates nothing is not comparable.
    for v in f.values():
        if v.shape[:1] != (n,):
            raise ValueError("bad shape")
    return Floor(**f)


def _tensordict_class() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from tensordict import tensorclass as td_tensorclass
    except ImportError:
        return None

    @td_tensorclass
    class TD:
        a: torch.Tensor
        b: torch.Tensor
        c: torch.Tensor
        d: torch.Tensor
        e: torch.Tensor

    return TD


def rows() -> list[tuple[str, Fn, Fn | None, Fn]]:
    big, small = _fields(N), _fields(SMALL)
    idx = torch.randint(0, N, (64,), generator=torch.Generator().manual_seed(1))
    value = big["a"].clone()
    tb = TB(**big, batch_size=[N])
    fl = Floor(**big)
    tb_samples = [tb[i] for i in range(64)]
    fl_samples = [_floor_index(fl, i) for i in range(64)]

    def tb_set() -> None:
        tb.a = value

    def fl_set() -> None:
        fl.a = value

    out: list[tuple[str, Fn, Fn | None, Fn]] = [
        (
            "tc construct 5 fields [64]",
            lambda: TB(**small, batch_size=[SMALL]),
            None,
            lambda: _floor_construct(small, SMALL),
        ),
        ("tc[int]", lambda: tb[3], None, lambda: _floor_index(fl, 3)),
        ("tc[index tensor(64)]", lambda: tb[idx], None, lambda: _floor_index(fl, idx)),
        ("tc[slice]", lambda: tb[10:50], None, lambda: _floor_index(fl, slice(10, 50))),
        ("tc.field get", lambda: tb.a, None, lambda: fl.a),
        ("tc.field = tensor", tb_set, None, fl_set),
        (
            "torch.stack 64 tc samples",
            lambda: torch.stack(tb_samples),
            None,
            lambda: _floor_stack(fl_samples),
        ),
    ]
    TD = _tensordict_class()
    if TD is None:
        return out
    td = TD(**big, batch_size=[N])
    td_samples = [td[i] for i in range(64)]

    def td_set() -> None:
        td.a = value

    td_fns: list[Fn] = [
        lambda: TD(**small, batch_size=[SMALL]),
        lambda: td[3],
        lambda: td[idx],
        lambda: td[10:50],
        lambda: td.a,
        td_set,
        lambda: torch.stack(td_samples),
    ]
    return [(name, f_tb, f_td, f_fl) for (name, f_tb, _, f_fl), f_td in zip(out, td_fns)]


def _median_us(fn: Fn, repeat: int = 7, min_time: float = 0.1) -> float:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    number = max(1, int(number * min_time / 0.2))
    return statistics.median(t / number for t in timer.repeat(repeat, number)) * 1e6


def main() -> None:
    torch.set_num_threads(1)
    print(
        f"{'op':30} {'tensorbox':>10} {'tensordict':>11} {'floor':>8} {'tb/td':>6} {'tb/floor':>8}"
    )
    for name, f_tb, f_td, f_fl in rows():
        t_tb, t_fl = _median_us(f_tb), _median_us(f_fl)
        t_td = _median_us(f_td) if f_td is not None else float("nan")
        print(
            f"{name:30} {t_tb:9.2f}us {t_td:10.2f}us {t_fl:7.2f}us "
            f"{t_tb / t_td:6.2f} {t_tb / t_fl:8.2f}"
        )


if __name__ == "__main__":
    main()
