"""consolidate(): ``to(device)`` and pickling of a 500-leaf container, consolidated and
not, tensorbox against tensordict.

Run: ``python benchmarks/consolidate.py`` (about a minute; ``--quick`` for a smoke run).

The container: 500 float32 leaves of shape [64, 16] (4 KiB each, 2 MiB in all) over two
levels (10 sub-containers of 50 leaves), batch size [64]. For each library and each
form (plain, consolidated) it times

- ``to(device)``: ``cuda`` when a GPU is present, else ``meta`` (no bytes move: what is
  left is the per-call cost, which is what consolidation removes);
- pickling: ``pickle.loads(pickle.dumps(td))``, protocol 5, in memory;
- ``consolidate()`` itself (the price of the one storage).

Contenders are timed in turn, round after round (interleaved), with torch on one
intra-op thread; each prints the median of its rounds. ``--json PATH`` writes the
medians.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import tensorbox
from benchmarks import _results

LEAVES, GROUPS, ROWS = 500, 10, 64


def _plain() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    per = LEAVES // GROUPS
    return {
        f"g{j}": {f"k{i}": torch.randn(ROWS, 16, generator=g) for i in range(per)}
        for j in range(GROUPS)
    }


def _tensordict() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import tensordict
    except ImportError:
        return None
    return tensordict


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _cases(device: str) -> dict[str, dict[str, Callable[[], Any]]]:
    """operation -> contender -> a call of it."""
    libs: dict[str, Any] = {"tensorbox": tensorbox}
    td_mod = _tensordict()
    if td_mod is not None:
        libs["tensordict"] = td_mod
    cases: dict[str, dict[str, Callable[[], Any]]] = {"to": {}, "pickle": {}, "consolidate": {}}
    for name, lib in libs.items():
        td = lib.TensorDict(_plain(), batch_size=[ROWS])
        c = td.consolidate()
        for form, obj in (("plain", td), ("consolidated", c)):

            def to(obj: Any = obj) -> Any:
                out = obj.to(device)
                _sync(device)
                return out

            def rt(obj: Any = obj) -> Any:
                return pickle.loads(pickle.dumps(obj, protocol=5))

            cases["to"][f"{name} {form}"] = to
            cases["pickle"][f"{name} {form}"] = rt
        cases["consolidate"][name] = td.consolidate
    return cases


def _check(cases: dict[str, dict[str, Callable[[], Any]]]) -> None:
    """Every contender returns the same values (a benchmark of a wrong answer is void)."""
    ref = tensorbox.TensorDict(_plain(), batch_size=[ROWS])
    for op in ("pickle", "consolidate"):
        for who, fn in cases[op].items():
            out = fn()
            for key, leaf in ref.items(True, True):
                assert torch.equal(out[key], leaf), (op, who, key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few rounds (smoke run)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per contender")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "meta")
    ap.add_argument("--json", type=Path, default=None, help="write the medians here")
    args = ap.parse_args()
    results = _results.start("consolidate") if args.json else None
    torch.set_num_threads(1)
    rounds = args.rounds or (5 if args.quick else 41)
    cases = _cases(args.device)
    _check(cases)
    times: dict[str, dict[str, list[float]]] = {op: {w: [] for w in c} for op, c in cases.items()}
    for _ in range(rounds):
        for op, contenders in cases.items():
            for who, fn in contenders.items():
                t0 = time.perf_counter()
                fn()
                times[op][who].append(time.perf_counter() - t0)
    print(
        f"{LEAVES} leaves of [{ROWS}, 16] float32 in {GROUPS} groups; to({args.device!r}); "
        f"torch {torch.__version__}, 1 thread, {rounds} interleaved rounds, medians"
    )
    medians: dict[str, dict[str, float]] = {}
    for op, per in times.items():
        medians[op] = {who: statistics.median(ts) for who, ts in per.items()}
        for who, m in medians[op].items():
            print(f"  {op:<12} {who:<26} {m * 1e3:9.3f} ms")
    if results is not None:
        _results.write(args.json, {**results, "device": args.device, "medians_s": medians})


if __name__ == "__main__":
    main()
