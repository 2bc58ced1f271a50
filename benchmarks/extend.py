"""Appending rows to a saved tree (``extend_``) against a preallocated ``np.memmap``.

Run: ``python benchmarks/extend.py`` (about a minute) or ``--small`` (a few seconds).

The dataset has three leaves per row: a uint8 image 3x32x32, an int64 label and a
float32 vector of 16 (3,144 bytes a row). For 1-row, 64-row and 4,096-row appends:

- ``extend_``: each append writes the rows after the committed ones and commits the
  new size (a new ``meta.json`` beside hard links of the same files, swapped in);
- ``np.memmap``: the same rows written into files preallocated for every row, one
  slice assignment per leaf: the floor (no commit, nothing crash-safe about the size).

Rows per second are medians over the appends. Then, to show growth is not quadratic,
the median time of a 1-row append when the tree already holds n rows, for growing n;
and where a 1-row append's time goes (``--stages``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from benchmarks import _results
from tensorbox import TensorDict

LEAVES = {
    "image": ((3, 32, 32), torch.uint8),
    "label": ((), torch.int64),
    "vec": ((16,), torch.float32),
}


def rows(k: int, start: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(start)
    return TensorDict(
        {
            "image": torch.randint(0, 256, (k, 3, 32, 32), dtype=torch.uint8, generator=g),
            "label": torch.arange(start, start + k),
            "vec": torch.rand(k, 16, generator=g),
        },
        [k],
    )


def _tree(path: Path, n: int = 0) -> TensorDict:
    td = rows(0).memmap(path)
    while td.batch_size[0] < n:  # big appends: a tree of n rows
        td.extend_(rows(min(4096, n - td.batch_size[0])))
    # Written back before timing: with a few hundred MB dirty, ext4's journal makes the
    # next renames and unlinks wait for the write-back (the build's cost, not the append's).
    os.sync()
    return td


def bench_extend(root: Path, k: int, appends: int) -> list[float]:
    td, batch, times = _tree(root / f"extend-{k}"), rows(k), []
    for _ in range(appends):
        t0 = time.perf_counter()
        td.extend_(batch)
        times.append(time.perf_counter() - t0)
    assert td.batch_size[0] == k * appends
    return times


def bench_np_memmap(root: Path, k: int, appends: int) -> list[float]:
    total = k * appends
    (root / f"np-{k}").mkdir()
    files = {
        name: np.memmap(root / f"np-{k}" / name, dtype=torch.empty(0, dtype=dt).numpy().dtype,
                        mode="w+", shape=(total, *shape))
        for name, (shape, dt) in LEAVES.items()
    }  # fmt: skip
    batch = {name: t.numpy() for name, t in rows(k).items()}
    os.sync()
    times = []
    for i in range(appends):
        t0 = time.perf_counter()
        for name, mm in files.items():
            mm[i * k : (i + 1) * k] = batch[name]
        times.append(time.perf_counter() - t0)
    for mm in files.values():
        mm.flush()
    return times


def flatness(root: Path, sizes: list[int], appends: int) -> list[tuple[int, float]]:
    """Median seconds of a 1-row append to a tree already holding n rows."""
    out = []
    one = rows(1)
    for n in sizes:
        td = _tree(root / f"flat-{n}", n)
        times = []
        for _ in range(appends):
            t0 = time.perf_counter()
            td.extend_(one)
            times.append(time.perf_counter() - t0)
        out.append((n, statistics.median(times)))
        shutil.rmtree(root / f"flat-{n}")
    return out


def stages(root: Path, appends: int) -> dict[str, float]:
    """Microseconds per 1-row append spent in each step (wrapped module functions)."""
    from tensorbox._storage import backed as _backed
    from tensorbox._storage import commit as _commit
    from tensorbox._storage import extend as _extend
    from tensorbox._storage import folder as _folder
    from tensorbox._storage import store as _store

    spent: dict[str, float] = {}
    wrapped: list[tuple[Any, str, Callable[..., Any]]] = []

    def wrap(module: Any, name: str, label: str) -> None:
        fn = getattr(module, name)

        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0

        wrapped.append((module, name, fn))
        setattr(module, name, timed)

    wrap(_folder.FolderStore, "node", "read meta.json files")
    wrap(_extend, "_append_dense", "grow + pwrite + map the leaves")
    dense = _extend.DISK_KINDS[_store.TensorEntry]
    _extend.DISK_KINDS[_store.TensorEntry] = dense._replace(append=_extend._append_dense)
    wrap(_extend, "check_rows", "check the rows")
    wrap(_extend, "_check_same_tree", "check the tree is the one mapped")
    wrap(_commit, "new_stage", "mkdir the stage")
    wrap(_folder, "_link", "hard links")
    wrap(_folder, "write_new_meta", "write meta.json files")
    wrap(_folder, "old_node_dirs", "list old node dirs")
    wrap(_commit, "exchange", "exchange (renameat2)")
    wrap(_commit, "dispose", "dispose of the old tree")
    wrap(_backed, "register", "register the nodes")
    td, one = _tree(root / "stages"), rows(1)
    td.extend_(one)
    spent.clear()
    t0 = time.perf_counter()
    for _ in range(appends):
        td.extend_(one)
    total = time.perf_counter() - t0
    for module, name, fn in wrapped:
        setattr(module, name, fn)
    _extend.DISK_KINDS[_store.TensorEntry] = dense
    out = {label: s / appends * 1e6 for label, s in spent.items()}
    out["(rest: lock, plan, rebinding)"] = total / appends * 1e6 - sum(out.values())
    out["total"] = total / appends * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="fewer appends, smaller trees")
    parser.add_argument("--stages", action="store_true", help="where a 1-row append's time goes")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--json", metavar="PATH", help="also write the medians as JSON")
    args = parser.parse_args()
    results = _results.start("extend")
    results |= {"row_bytes": None, "appends": [], "flatness": [], "stages_us": None}
    torch.set_num_threads(1)
    plan = {1: 200, 64: 100, 4096: 8} if args.small else {1: 2000, 64: 500, 4096: 40}
    sizes = [0, 4096, 16384] if args.small else [0, 16384, 65536]
    row_bytes = sum(
        torch.empty(shape, dtype=dt).numel() * dt.itemsize for shape, dt in LEAVES.values()
    )
    root = Path(tempfile.mkdtemp(prefix="tbx-extend-", dir=args.dir))
    try:
        print(f"rows of {row_bytes} bytes (3 leaves), medians; torch threads 1; {root}")
        print("\n| rows per append | appends | extend_ rows/s | np.memmap rows/s | ratio |")
        print("|---:|---:|---:|---:|---:|")
        for k, appends in plan.items():
            ext = statistics.median(bench_extend(root, k, appends))
            npm = statistics.median(bench_np_memmap(root, k, appends))
            print(f"| {k:,} | {appends:,} | {k / ext:,.0f} | {k / npm:,.0f} | {ext / npm:,.1f}x |")
            results["appends"].append(
                {"rows_per_append": k, "appends": appends, "extend_rows_per_s": k / ext,
                 "np_memmap_rows_per_s": k / npm}
            )  # fmt: skip
        print("\n| tree rows before | 1-row append, median µs |")
        print("|---:|---:|")
        for n, t in flatness(root, sizes, 50 if args.small else 200):
            print(f"| {n:,} | {t * 1e6:,.0f} |")
            results["flatness"].append({"rows_before": n, "one_row_append_us": t * 1e6})
        if args.stages:
            print("\n| step of a 1-row append | µs |")
            print("|---|---:|")
            results["stages_us"] = stages(root, 100 if args.small else 500)
            for label, us in results["stages_us"].items():
                print(f"| {label} | {us:,.0f} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        results["row_bytes"] = row_bytes
        results["settings"] = {"small": args.small, "torch_threads": 1}
        _results.write(args.json, results)


if __name__ == "__main__":
    main()
