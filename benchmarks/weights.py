"""Saving and loading model weights: tensorbox against tensordict, torch.save and safetensors.

The model is ``nn.Transformer(768, 12, 6, 6, 3072)``: 99.2M parameters, 184 tensors,
397 MB in float32 (``--small``: ``nn.Transformer(64, 4, 2, 2, 256)``, for CI).

Per method, medians over ``--repeats`` runs of:

* **save**: model -> files on disk (no fsync: what a training loop pays).
* **load**: files -> weights in a second model, ready to call (each method's own
  fast path: zero-copy swap for the memory-mapped ones, ``assign=True`` for
  ``torch.load(mmap=True)`` and safetensors, the usual copying
  ``load_state_dict`` for plain ``torch.load``).
* **load+read**: load, then one pass over every weight (``t.sum()``), so that lazy
  loaders pay for their bytes too. ``warm``: the files are in the page cache
  (just written). ``cold``: each file was fsync'ed and evicted with
  ``posix_fadvise(DONTNEED)`` first, so the bytes come from the disk.

A second table loads sub-trees of the tensorbox save
(``load_memmap(path / "decoder")`` ...): the cost follows the bytes of the sub-tree.

torch runs on ``--threads`` intra-op threads (``torch.set_num_threads``, default 2,
the core count of the reference machine); the savers that take a thread count
(tensorbox, tensordict) get the same number. The files go to a temporary directory
under ``--dir`` (default ``/var/tmp``, on the real disk rather than tmpfs).

Usage::

    python benchmarks/weights.py            # full run (about four minutes on 2 cores)
    python benchmarks/weights.py --small    # tiny model, a few seconds
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorbox import TensorDict


class Method(NamedTuple):
    name: str
    save: Callable[[nn.Module, Path], None]
    load: Callable[[Path, nn.Module], None]


def make_model(small: bool) -> nn.Module:
    args = (64, 4, 2, 2, 256) if small else (768, 12, 6, 6, 3072)
    # batch_first only silences a construction warning; the weights are the same.
    return nn.Transformer(*args, batch_first=True).eval()


def methods(threads: int) -> list[Method]:
    out = [
        Method(
            "tensorbox memmap",
            lambda m, p: TensorDict.from_module(m).memmap(p, num_threads=threads),
            lambda p, m: TensorDict.load_memmap(p).to_module(m),
        )
    ]
    if importlib.util.find_spec("tensordict") is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import tensordict

        out.append(
            Method(
                f"tensordict {tensordict.__version__.split('+')[0]} memmap",
                lambda m, p: tensordict.TensorDict.from_module(m).memmap(p, num_threads=threads),
                lambda p, m: tensordict.TensorDict.load_memmap(p).to_module(m),
            )
        )
    out += [
        Method(
            "torch.save / torch.load",
            lambda m, p: torch.save(m.state_dict(), p),
            lambda p, m: m.load_state_dict(torch.load(p)),
        ),
        Method(
            "torch.save / torch.load(mmap)",
            lambda m, p: torch.save(m.state_dict(), p),
            lambda p, m: m.load_state_dict(torch.load(p, mmap=True), assign=True),
        ),
    ]
    if importlib.util.find_spec("safetensors") is not None:
        from safetensors.torch import load_file, save_file

        out.append(
            Method(
                "safetensors",
                lambda m, p: save_file(m.state_dict(), p),
                lambda p, m: m.load_state_dict(load_file(p), assign=True),
            )
        )
    return out


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def files(path: Path) -> list[Path]:
    return [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]


def evict(path: Path) -> None:
    """Drop the files' pages from the page cache (fsync first: dirty pages stay)."""
    for f in files(path):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_all(model: nn.Module) -> None:
    for t in model.state_dict().values():
        t.sum()


def reset(model: nn.Module, fresh: TensorDict) -> None:
    """Give ``model`` private weights again, so that no mapping of a file stays alive."""
    fresh.clone().to_module(model)
    gc.collect()


def bench_methods(
    meths: list[Method],
    model: nn.Module,
    model2: nn.Module,
    fresh: TensorDict,
    root: Path,
    repeats: int,
) -> dict[str, dict[str, float]]:
    """Round robin over the methods, so that load from other processes hits all alike."""
    paths = {m.name: root / re.sub(r"\W+", "_", m.name) for m in meths}
    times: dict[str, dict[str, list[float]]] = {
        m.name: {"save": [], "load": [], "warm": [], "cold": []} for m in meths
    }
    for _ in range(repeats):
        for meth in meths:
            path = paths[meth.name]
            remove(path)
            gc.collect()
            times[meth.name]["save"].append(timed(lambda m=meth, p=path: m.save(model, p)))
    for _ in range(repeats):
        for meth in meths:
            t, path = times[meth.name], paths[meth.name]

            def load(m: Method = meth, p: Path = path, read: bool = False) -> None:
                m.load(p, model2)
                if read:
                    read_all(model2)

            reset(model2, fresh)
            t["load"].append(timed(load))
            reset(model2, fresh)
            t["warm"].append(timed(lambda load=load: load(read=True)))
            reset(model2, fresh)
            evict(path)
            t["cold"].append(timed(lambda load=load: load(read=True)))
            with torch.no_grad():  # the loaded weights are the saved ones
                for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
                    assert torch.equal(a, b), f"{meth.name}: {k} differs after loading"
    reset(model2, fresh)
    for path in paths.values():
        remove(path)
    return {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}


def bench_partial(
    model: nn.Module, model2: nn.Module, fresh: TensorDict, root: Path, repeats: int, threads: int
) -> list[tuple[str, float, float, float, float]]:
    path = root / "partial"
    TensorDict.from_module(model).memmap(path, num_threads=threads)
    total = sum(t.nbytes for t in model.state_dict().values())
    rows = []
    for sub in ["", "decoder", "encoder.layers.0", "decoder.norm"]:
        target = model2.get_submodule(sub)
        where = path.joinpath(*sub.split(".")) if sub else path
        nbytes = sum(t.nbytes for t in target.state_dict().values())
        loads, warm, cold = [], [], []

        def load(where: Path = where, target: nn.Module = target, read: bool = False) -> None:
            TensorDict.load_memmap(where).to_module(target)
            if read:
                read_all(target)

        for _ in range(repeats):
            reset(model2, fresh)
            loads.append(timed(load))
            reset(model2, fresh)
            warm.append(timed(lambda load=load: load(read=True)))
            reset(model2, fresh)
            evict(path)
            cold.append(timed(lambda load=load: load(read=True)))
        rows.append(
            (
                sub or "(whole model)",
                nbytes / total,
                statistics.median(loads),
                statistics.median(warm),
                statistics.median(cold),
            )
        )
    reset(model2, fresh)
    remove(path)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny model, few repeats (CI)")
    ap.add_argument("--threads", type=int, default=2, help="torch and saver threads")
    ap.add_argument("--repeats", type=int, default=None, help="runs per median")
    ap.add_argument("--dir", default="/var/tmp", help="where the temporary files go")
    args = ap.parse_args()
    repeats = args.repeats or (3 if args.small else 5)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, model2 = make_model(args.small), make_model(args.small)
    fresh = TensorDict.from_module(model2).detach().clone()
    sd = model.state_dict()
    nbytes = sum(t.nbytes for t in sd.values())
    root = Path(tempfile.mkdtemp(prefix="tensorbox-bench-", dir=args.dir))
    mounts = [ln.split() for ln in Path("/proc/mounts").read_text().splitlines()]
    fs = max((m for m in mounts if root.as_posix().startswith(m[1])), key=lambda m: len(m[1]))[2]
    print(
        f"model: {type(model).__name__}, {sum(t.numel() for t in sd.values()) / 1e6:.1f}M "
        f"values, {len(sd)} tensors, {nbytes / 2**20:.0f} MiB | torch {torch.__version__}, "
        f"set_num_threads({args.threads}) | files in {root} ({fs}) | medians of {repeats} | "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    try:
        results = bench_methods(methods(args.threads), model, model2, fresh, root, repeats)
        partial = bench_partial(model, model2, fresh, root, repeats, args.threads)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
    ref = results["tensorbox memmap"]
    print(
        "\n| method | save ms | load ms | load+read warm ms | load+read cold ms "
        "| save / tensorbox | load / tensorbox |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['save'] * 1e3:.1f} | {r['load'] * 1e3:.2f} | {r['warm'] * 1e3:.1f} "
            f"| {r['cold'] * 1e3:.1f} | {r['save'] / ref['save']:.2f}x "
            f"| {r['load'] / ref['load']:.1f}x |"
        )
    print(f"\nsave throughput, tensorbox: {nbytes / ref['save'] / 1e9:.2f} GB/s")
    print("\ntensorbox partial loads (load_memmap(path / sub-tree) + to_module(submodule))")
    print("| sub-tree | share of bytes | load ms | load+read warm ms | load+read cold ms |")
    print("|---|---|---|---|---|")
    for sub, frac, load, warm, cold in partial:
        print(f"| {sub} | {frac:.1%} | {load * 1e3:.2f} | {warm * 1e3:.1f} | {cold * 1e3:.1f} |")


if __name__ == "__main__":
    main()
