"""Saving and loading model weights: tensorbox (folder and one-file archive) against
tensordict, torch.save and safetensors.

The model is ``nn.Transformer(512, 8, 6, 6, 2048)``: 44.1M values, 184 tensors, 168 MiB
in float32 (the issue's figures; its text says ``(512, 8, 4, 4, 2048)``, which has 29M) (``--large``: ``nn.Transformer(768, 12, 6, 6, 3072)``, 397 MB; ``--small``:
``nn.Transformer(64, 4, 2, 2, 256)``, for CI).

**Saves** are timed the way that gives stable ratios on a machine that hands idle
memory back to its host (re-touching it then runs at ~0.6 GB/s): before each save,
``os.sync()`` and a pre-touch of ~600 MiB; after it, the output is deleted; the order
of the methods rotates every round; each method's figure is the median over rounds of
its ratio to safetensors in the same round (and of its time). Without that, ordering
and memory effects swing the ratios by 2x. Two floors are timed alike: ``raw write()``
(one ``open``/``write``/``close`` per tensor in one folder: a folder save's floor, one
create per leaf plus the bytes) and ``one write()`` (every byte into one file: an
archive's floor).

**Loads**, per method, medians over ``--repeats`` runs of:

* **load**: files -> weights in a second model, ready to call (each method's own
  fast path: zero-copy swap for the memory-mapped ones, ``assign=True`` for
  ``torch.load(mmap=True)`` and safetensors, the usual copying
  ``load_state_dict`` for plain ``torch.load``).
* **load+read**: load, then one pass over every weight (``t.sum()``), so that lazy
  loaders pay for their bytes too. ``warm``: the files are in the page cache
  (just written). ``cold``: each file was fsync'ed and evicted with
  ``posix_fadvise(DONTNEED)`` first, so the bytes come from the disk.

A last table loads sub-trees of the tensorbox folder (``load_memmap(path / "decoder")``)
and of the archive (``load_memmap(f"{file}::decoder")``): the cost follows the bytes of
the sub-tree.

torch runs on ``--threads`` intra-op threads (``torch.set_num_threads``, default 2,
the core count of the reference machine); the savers that take a thread count
(tensorbox, tensordict) get the same number. The files go to a temporary directory
under ``--dir`` (default ``/var/tmp``, on the real disk; ``/dev/shm`` for tmpfs).

Usage::

    python benchmarks/weights.py            # about two minutes on 2 cores
    python benchmarks/weights.py --dir /dev/shm
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

from benchmarks import _results
from tensorbox import TensorDict


class Method(NamedTuple):
    name: str
    save: Callable[[nn.Module, Path], None]
    load: Callable[[Path, nn.Module], None]


def make_model(size: str) -> nn.Module:
    args = {"small": (64, 4, 2, 2, 256), "default": (512, 8, 6, 6, 2048)}.get(
        size, (768, 12, 6, 6, 3072)
    )
    # batch_first only silences a construction warning; the weights are the same.
    return nn.Transformer(*args, batch_first=True).eval()


def methods(threads: int) -> list[Method]:
    out = [
        Method(
            "tensorbox archive",
            lambda m, p: TensorDict.from_module(m).memmap(p, num_threads=threads, archive=True),
            lambda p, m: TensorDict.load_memmap(p).to_module(m),
        ),
        Method(
            "tensorbox memmap",
            lambda m, p: TensorDict.from_module(m).memmap(p, num_threads=threads),
            lambda p, m: TensorDict.load_memmap(p).to_module(m),
        ),
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
    out += [
        Method("raw write() per tensor", raw_files, None),
        Method("one write()", one_file, None),
    ]
    return out


def _bytes(t: torch.Tensor) -> memoryview:
    return memoryview(t.detach().reshape(-1).view(torch.uint8).numpy())


def raw_files(model: nn.Module, path: Path) -> None:
    """A folder save's floor: one create + write + close per tensor, one folder."""
    os.mkdir(path)
    for i, t in enumerate(model.state_dict().values()):
        fd = os.open(path / f"{i}.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        os.write(fd, _bytes(t))
        os.close(fd)


def one_file(model: nn.Module, path: Path) -> None:
    """An archive's floor: every byte into one file, in 1 MiB writes (a single write of
    everything runs 2x slower here: the kernel then allocates its page cache in one go)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    for t in model.state_dict().values():
        view = _bytes(t)
        for i in range(0, len(view), 1 << 20):
            os.write(fd, view[i : i + (1 << 20)])
    os.close(fd)


PRETOUCH = 600 << 20


def settle() -> None:
    """sync, then touch ~600 MiB so the next save does not pay for memory the host took back."""
    os.sync()
    torch.empty(PRETOUCH, dtype=torch.uint8).fill_(1)
    gc.collect()


def bench_saves(
    meths: list[Method], model: nn.Module, root: Path, rounds: int, ref: str
) -> dict[str, tuple[float, float]]:
    """(median time, median ratio to ``ref`` in the same round) per method."""
    paths = {m.name: root / re.sub(r"\W+", "_", m.name) for m in meths}
    times: dict[str, list[float]] = {m.name: [] for m in meths}
    for r in range(rounds):
        for meth in meths[r % len(meths) :] + meths[: r % len(meths)]:
            path = paths[meth.name]
            remove(path)
            settle()
            times[meth.name].append(timed(lambda m=meth, p=path: m.save(model, p)))
            remove(path)
    return {
        name: (
            statistics.median(t),
            statistics.median(a / b for a, b in zip(t, times[ref], strict=True)),
        )
        for name, t in times.items()
    }


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
    meths = [m for m in meths if m.load is not None]
    paths = {m.name: root / re.sub(r"\W+", "_", m.name) for m in meths}
    times: dict[str, dict[str, list[float]]] = {
        m.name: {"load": [], "warm": [], "cold": []} for m in meths
    }
    for meth in meths:
        remove(paths[meth.name])
        meth.save(model, paths[meth.name])
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
    file = root / "partial.tbx"
    TensorDict.from_module(model).memmap(path, num_threads=threads)
    TensorDict.from_module(model).memmap(file, num_threads=threads, archive=True)
    total = sum(t.nbytes for t in model.state_dict().values())
    rows = []
    for sub, archive in [
        (s, a) for s in ["", "decoder", "encoder.layers.0", "decoder.norm"] for a in (0, 1)
    ]:
        target = model2.get_submodule(sub)
        if archive:
            where: Any = f"{file}::{sub.replace('.', '/')}" if sub else file
        else:
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
            evict(file if archive else path)
            cold.append(timed(lambda load=load: load(read=True)))
        rows.append(
            (
                (sub or "(whole model)") + (" (archive)" if archive else " (folder)"),
                nbytes / total,
                statistics.median(loads),
                statistics.median(warm),
                statistics.median(cold),
            )
        )
    reset(model2, fresh)
    remove(path)
    remove(file)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny model, few repeats (CI)")
    ap.add_argument("--large", action="store_true", help="nn.Transformer(768, 12, 6, 6, 3072)")
    ap.add_argument("--threads", type=int, default=2, help="torch and saver threads")
    ap.add_argument("--repeats", type=int, default=None, help="runs per median")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of saves")
    ap.add_argument("--saves-only", action="store_true", help="only the save table")
    ap.add_argument("--dir", default="/var/tmp", help="where the temporary files go")
    ap.add_argument("--json", metavar="PATH", help="also write the medians as JSON")
    args = ap.parse_args()
    out = _results.start("weights")
    repeats = args.repeats or (3 if args.small else 5)
    rounds = args.rounds or (3 if args.small else 12)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    size = "small" if args.small else "large" if args.large else "default"
    model, model2 = make_model(size), make_model(size)
    fresh = TensorDict.from_module(model2).detach().clone()
    sd = model.state_dict()
    nbytes = sum(t.nbytes for t in sd.values())
    root = Path(tempfile.mkdtemp(prefix="tensorbox-bench-", dir=args.dir))
    mounts = [ln.split() for ln in Path("/proc/mounts").read_text().splitlines()]
    fs = max((m for m in mounts if root.as_posix().startswith(m[1])), key=lambda m: len(m[1]))[2]
    print(
        f"model: {type(model).__name__}, {sum(t.numel() for t in sd.values()) / 1e6:.1f}M "
        f"values, {len(sd)} tensors, {nbytes / 2**20:.0f} MiB | torch {torch.__version__}, "
        f"set_num_threads({args.threads}) | files in {root} ({fs}) | {rounds} rounds of saves, "
        f"medians of {repeats} loads | load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores"
    )
    meths = methods(args.threads)
    names = [m.name for m in meths]
    ref = "safetensors" if "safetensors" in names else "torch.save / torch.load"
    try:
        saves = bench_saves(
            [m for m in meths if "torch.load(mmap)" not in m.name], model, root, rounds, ref
        )
        if not args.saves_only:
            results = bench_methods(meths, model, model2, fresh, root, repeats)
            partial = bench_partial(model, model2, fresh, root, repeats, args.threads)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
    floor = saves["raw write() per tensor"][0]
    print(f"\n| save | ms | / {ref} (median of per-round ratios) | / raw write() per tensor |")
    print("|---|---|---|---|")
    for name, (t, ratio) in saves.items():
        label = name.replace(" / torch.load", "")
        print(f"| {label} | {t * 1e3:.1f} | {ratio:.2f}x | {t / floor:.2f}x |")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    out["settings"] = {"model": size, "threads": args.threads, "rounds": rounds, "repeats": repeats}
    out["model"] = {"tensors": len(sd), "mib": nbytes / 2**20}
    out["save"] = {
        n.replace(" / torch.load", ""): {"ms": t * 1e3, f"over {ref}": r}
        for n, (t, r) in saves.items()
    }
    if args.saves_only:
        if args.json:
            _results.write(args.json, out)
        return
    out["load_ms"] = {
        n: {
            "load": r["load"] * 1e3,
            "load_read_warm": r["warm"] * 1e3,
            "load_read_cold": r["cold"] * 1e3,
        }
        for n, r in results.items()
    }
    out["partial_ms"] = [
        {
            "sub_tree": sub,
            "share": frac,
            "load": a * 1e3,
            "load_read_warm": w * 1e3,
            "load_read_cold": c * 1e3,
        }
        for sub, frac, a, w, c in partial
    ]
    if args.json:
        _results.write(args.json, out)
    print(
        f"\n| method | load ms | load+read warm ms | load+read cold ms | load+read warm / {ref} |"
    )
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['load'] * 1e3:.2f} | {r['warm'] * 1e3:.1f} | {r['cold'] * 1e3:.1f} "
            f"| {r['warm'] / results[ref]['warm']:.2f}x |"
        )
    print("\npartial loads (load_memmap(sub-tree) + to_module(submodule))")
    print("| sub-tree | share of bytes | load ms | load+read warm ms | load+read cold ms |")
    print("|---|---|---|---|---|")
    for sub, frac, load, warm, cold in partial:
        print(f"| {sub} | {frac:.1%} | {load * 1e3:.2f} | {warm * 1e3:.1f} | {cold * 1e3:.1f} |")


if __name__ == "__main__":
    main()
