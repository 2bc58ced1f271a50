"""TensorDict operation overhead: tensorbox against tensordict and the plain-torch floor.

Prints one table: per operation the median time of tensorbox, of tensordict (when it
is installed) and of the floor (the same work as a dict comprehension over the
leaves), and the ratios tensorbox/tensordict and tensorbox/floor.

The standard container is the one of docs/design.md section 4: 10 float32 leaves,
batch size [1000] (a nested variant spreads the same leaves over three levels).
torch runs on ONE intra-op thread (``torch.set_num_threads(1)``) so the numbers
measure per-call overhead and do not swing with other processes on the machine.
Times are this process's CPU time by default (``time.process_time``: on a shared
machine it leaves out the time another process holds the CPU); ``--wall`` uses the
wall clock. The three contenders of a row are timed in turn, round after round, and
each reports the median of its rounds.

Usage::

    python benchmarks/ops.py            # full run (about a minute and a half)
    python benchmarks/ops.py --quick    # fewer repeats, for CI smoke runs
    python benchmarks/ops.py --wall     # wall-clock times
    python benchmarks/ops.py --json benchmarks/results/ops.json   # also the rows as JSON

The JSON (read by ``benchmarks/figures.py`` for the per-op ratio chart) holds every row's
three medians and two ratios, the summaries, the settings and the machine's load average.

A tensorclass benchmark adds its rows by providing ``benchmarks/_tc_rows.py`` with
``rows() -> list[tuple[name, tensorbox_fn, tensordict_fn | None, floor_fn]]``; each fn
takes no argument. The rows are appended to the table when the file exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import timeit
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorbox
from benchmarks import _results

Fn = Callable[[], Any]
Row = tuple[str, Fn, Fn | None, Fn]

N = 1000  # batch size
FEATURES = [(), (3,), (4,), (8,), (2, 2), (16,), (), (5,), (3, 3), (7,)]  # 10 leaves


def _tensordict() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import tensordict
    except ImportError:
        return None
    return tensordict


def _leaves(n: int = N, count: int = 10) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        f"k{i}": torch.randn((n, *FEATURES[i % len(FEATURES)]), generator=g) for i in range(count)
    }


def _nested_plain(leaves: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The same 10 leaves over three levels: 4 at the top, 3 under "a", 3 under ("a", "b")."""
    v = list(leaves.values())
    return {
        "k0": v[0],
        "k1": v[1],
        "k2": v[2],
        "k3": v[3],
        "a": {"k4": v[4], "k5": v[5], "k6": v[6], "b": {"c": v[7], "k8": v[8], "k9": v[9]}},
    }


def _flat_paths(d: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.extend(_flat_paths(v, (*prefix, k)))
        else:
            out.append((*prefix, k))
    return out


def core_rows() -> list[Row]:
    tdlib = _tensordict()
    TB = tensorbox.TensorDict
    TD = tdlib.TensorDict if tdlib else None

    leaves = _leaves()
    five = dict(list(leaves.items())[:5])
    nested = _nested_plain(leaves)
    bs = torch.Size([N])

    tb = TB(leaves, batch_size=[N])
    tbn = TB(nested, batch_size=[N])
    td = TD(leaves, batch_size=[N]) if TD else None
    tdn = TD(nested, batch_size=[N]) if TD else None

    mask = torch.rand(N, generator=torch.Generator().manual_seed(1)) > 0.5
    idx = torch.randint(0, N, (64,), generator=torch.Generator().manual_seed(2))
    c_val = torch.zeros(N, 3)
    upd = {"k0": leaves["k0"] + 1, "k1": leaves["k1"] + 1}

    # 64 samples (batch size []) of the nested container: what a collate stacks.
    tb_samples = list(tbn[:64].unbind(0))
    td_samples = list(tdn[:64].unbind(0)) if TD else None
    plain_samples = [_index_plain(nested, i) for i in range(64)]

    def floor_construct(src: dict[str, torch.Tensor] = five) -> dict[str, torch.Tensor]:
        # The minimum a constructor does: copy the mapping and check each leading shape.
        out = {}
        for k, v in src.items():
            if v.shape[:1] != bs:
                raise ValueError(k)
            out[k] = v
        return out

    def floor_nested(src: dict[str, Any] = nested) -> dict[str, Any]:
        out = {}
        for k, v in src.items():
            if isinstance(v, dict):
                out[k] = floor_nested(v)
            else:
                if v.shape[:1] != bs:
                    raise ValueError(k)
                out[k] = v
        return out

    def floor_keys(d: dict[str, Any] = nested, prefix: tuple[str, ...] = ()) -> list[Any]:
        out: list[Any] = []
        for k, v in d.items():
            key = (*prefix, k) if prefix else k
            out.append(key)
            if isinstance(v, dict):
                out.extend(floor_keys(v, (*prefix, k)))
        return out

    def floor_stack() -> dict[str, Any]:
        return _stack_plain(plain_samples)

    def floor_eq_all() -> bool:
        return all(bool((v == v).all()) for v in leaves.values())

    def floor_update() -> dict[str, torch.Tensor]:
        d = dict(leaves)
        d.update(upd)
        return d

    def floor_get() -> torch.Tensor:
        return nested["a"]["b"]["c"]

    def floor_set() -> None:
        nested["a"]["b"]["c"] = c_val

    def dict_floor(fn: Callable[[torch.Tensor], Any]) -> Fn:
        return lambda: {k: fn(v) for k, v in leaves.items()}

    def both(fn_tb: Callable[[Any], Any], obj_tb: Any, obj_td: Any) -> tuple[Fn, Fn | None]:
        return (lambda: fn_tb(obj_tb)), ((lambda: fn_tb(obj_td)) if TD else None)

    rows: list[Row] = []

    def add(name: str, fn: Callable[[Any], Any], floor: Fn, nested_td: bool = False) -> None:
        a, b = both(fn, tbn if nested_td else tb, tdn if nested_td else td)
        rows.append((name, a, b, floor))

    rows.append(
        (
            "construct (5 leaves)",
            lambda: TB(five, batch_size=[N]),
            (lambda: TD(five, batch_size=[N])) if TD else None,
            floor_construct,
        )
    )
    rows.append(
        (
            "construct nested (10 leaves, 3 levels)",
            lambda: TB(nested, batch_size=[N]),
            (lambda: TD(nested, batch_size=[N])) if TD else None,
            floor_nested,
        )
    )
    add("td[int]", lambda t: t[3], dict_floor(lambda v: v[3]))
    add("td[slice]", lambda t: t[10:500], dict_floor(lambda v: v[10:500]))
    add("td[mask]", lambda t: t[mask], dict_floor(lambda v: v[mask]))
    add("td[index tensor(64)]", lambda t: t[idx], dict_floor(lambda v: v.index_select(0, idx)))
    add("apply(x + 1)", lambda t: t.apply(lambda x: x + 1), dict_floor(lambda v: v + 1))
    add("to(float64)", lambda t: t.to(torch.float64), dict_floor(lambda v: v.to(torch.float64)))
    add("clone", lambda t: t.clone(), dict_floor(lambda v: v.clone()))
    rows.append(
        (
            "torch.stack of 64 nested samples",
            lambda: torch.stack(tb_samples, 0),
            (lambda: torch.stack(td_samples, 0)) if TD else None,
            floor_stack,
        )
    )
    add(
        "unbind(0) (1000 parts)",
        lambda t: t.unbind(0),
        lambda: [dict(zip(leaves, vs)) for vs in zip(*(v.unbind(0) for v in leaves.values()))],
    )
    add("get(('a', 'b', 'c'))", lambda t: t.get(("a", "b", "c")), floor_get, nested_td=True)
    add("set(('a', 'b', 'c'), x)", lambda t: t.set(("a", "b", "c"), c_val), floor_set, True)
    add("keys(include_nested=True)", lambda t: list(t.keys(True)), floor_keys, nested_td=True)
    add("(td == td).all()", lambda t: (t == t).all(), floor_eq_all)
    add("select(3 keys)", lambda t: t.select("k0", "k1", "k2"), lambda: _select(leaves))
    add("exclude(3 keys)", lambda t: t.exclude("k0", "k1", "k2"), lambda: _exclude(leaves))
    add("update(2 keys)", lambda t: t.update(upd), floor_update)
    return rows


def _index_plain(d: dict[str, Any], i: int) -> dict[str, Any]:
    return {k: (_index_plain(v, i) if isinstance(v, dict) else v[i]) for k, v in d.items()}


def _stack_plain(items: list[dict[str, Any]]) -> dict[str, Any]:
    first = items[0]
    return {
        k: (
            _stack_plain([it[k] for it in items])
            if isinstance(v, dict)
            else torch.stack([it[k] for it in items])
        )
        for k, v in first.items()
    }


def _select(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: d[k] for k in ("k0", "k1", "k2")}


def _exclude(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    drop = {"k0", "k1", "k2"}
    return {k: v for k, v in d.items() if k not in drop}


def extra_rows() -> list[Row]:
    """Rows contributed by ``benchmarks/_tc_rows.py`` (the tensorclass benchmark), if any."""
    path = Path(__file__).with_name("_tc_rows.py")
    if not path.exists():
        return []
    spec = importlib.util.spec_from_file_location("_tc_rows", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.rows())


def _number(fn: Fn, min_time: float, clock: Callable[[], float]) -> int:
    """Calls per timing run so that one run lasts about ``min_time`` seconds."""
    number, t = timeit.Timer(fn, timer=clock).autorange()
    return max(1, int(number * min_time / max(t, 1e-9)))


def measure(
    fns: list[Fn | None], repeat: int, min_time: float, clock: Callable[[], float]
) -> list[float | None]:
    """Median per-call time in us of each fn. The fns of one row are timed in turn,
    ``repeat`` rounds, so load from other processes hits all of them alike."""
    timers = [timeit.Timer(f, timer=clock) if f is not None else None for f in fns]
    numbers = [_number(f, min_time, clock) if f is not None else 0 for f in fns]
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, timer in enumerate(timers):
            if timer is not None:
                runs[i].append(timer.timeit(numbers[i]) / numbers[i] * 1e6)
    return [statistics.median(r) if r else None for r in runs]


def _r(x: float | None) -> float | None:
    """Four significant digits: the JSON stays readable, the medians are not that exact."""
    return None if x is None else float(f"{x:.4g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument(
        "--wall",
        action="store_true",
        help="time with the wall clock (default: this process's CPU time, which does not "
        "count the time other processes on a shared machine hold the CPU)",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the rows as JSON (benchmarks/figures.py)"
    )
    args = parser.parse_args(argv)
    results = _results.start("ops") if args.json else None
    clock = time.perf_counter if args.wall else time.process_time
    torch.set_num_threads(1)
    repeat, min_time = (5, 0.01) if args.quick else (15, 0.04)

    core, extra = core_rows(), extra_rows()
    tdlib = _tensordict()
    print(
        f"torch {torch.__version__}, tensorbox {tensorbox.__version__}, "
        f"tensordict {tdlib.__version__ if tdlib else 'not installed'}; "
        f"torch.set_num_threads(1); {'wall-clock' if args.wall else 'CPU-time'} median of "
        f"{repeat} interleaved rounds; "
        f"{N} rows x {len(FEATURES)} float32 leaves"
    )
    header = (
        f"| {'operation':<40} | {'tensorbox us':>12} | {'tensordict us':>13} | "
        f"{'floor us':>9} | {'tb/td':>6} | {'tb/floor':>8} |"
    )
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    groups: dict[str, tuple[list[float], list[float]]] = {"core": ([], []), "extra": ([], [])}
    table: list[dict[str, Any]] = []
    for group, rows in (("core", core), ("extra", extra)):
        r_td, r_floor = groups[group]
        for name, f_tb, f_td, f_floor in rows:
            t_tb, t_td, t_fl = measure([f_tb, f_td, f_floor], repeat, min_time, clock)
            assert t_tb is not None and t_fl is not None
            ratio_td = t_tb / t_td if t_td else None
            ratio_fl = t_tb / t_fl
            if ratio_td is not None:
                r_td.append(ratio_td)
            r_floor.append(ratio_fl)
            table.append(
                {
                    "op": name,
                    "group": "TensorDict" if group == "core" else "tensorclass",
                    "tensorbox_us": _r(t_tb),
                    "tensordict_us": _r(t_td),
                    "floor_us": _r(t_fl),
                    "tb_over_td": _r(ratio_td),
                    "tb_over_floor": _r(ratio_fl),
                }
            )
            td_cell = f"{t_td:>13.2f}" if t_td is not None else f"{'-':>13}"
            ratio_cell = f"{ratio_td:>6.2f}" if ratio_td is not None else f"{'-':>6}"
            print(
                f"| {name:<40} | {t_tb:>12.2f} | {td_cell} | {t_fl:>9.2f} | "
                f"{ratio_cell} | {ratio_fl:>8.2f} |"
            )
    summaries: dict[str, dict[str, float]] = {}
    for label, (r_td, r_floor) in (
        ("TensorDict rows", groups["core"]),
        (
            "all rows",
            (groups["core"][0] + groups["extra"][0], groups["core"][1] + groups["extra"][1]),
        ),
    ):
        if not r_floor or (label == "all rows" and not extra):
            continue
        summary = f"{label}: median tb/floor {statistics.median(r_floor):.2f}"
        if r_td:
            summary += f", median tb/td {statistics.median(r_td):.2f} (max {max(r_td):.2f})"
        print(summary)
        summaries[label] = {"median_tb_over_floor": _r(statistics.median(r_floor))}
        if r_td:
            summaries[label] |= {
                "median_tb_over_td": _r(statistics.median(r_td)),
                "max_tb_over_td": _r(max(r_td)),
            }
    if results is not None:
        results["settings"] = {
            "clock": "wall" if args.wall else "process CPU time",
            "rounds": repeat,
            "torch_threads": 1,
            "container": f"{N} rows x {len(FEATURES)} float32 leaves",
        }
        results["rows"] = table
        results["summary"] = summaries
        _results.write(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
