"""Image data loading: tensorbox against a per-image DataLoader and the tensordict tutorial.

Measures, in one run, with medians over ``--repeats`` rounds (the contenders of a row
alternate within each round, so a busy neighbour process hurts them alike):

- ingestion of the train folder: tensordict tutorial's method (per-image ``Resize((256,
  256))`` + to-tensor through a ``DataLoader``) vs ``ingest_image_folder``, and whether
  the rows agree (PNG identical; JPEG within the reduced-scale decoding tolerance);
- the train pipeline (random crop 224 + flip + normalise, float32 out, CPU) and the val
  pipeline (centre 224 + normalise) of the three pipelines of ``benchmarks/demo.py``;
- the loader alone (uint8 batches, no transform) against reading the same sorted
  batches from an ``np.memmap`` by hand (fancy indexing and ``np.take(out=)``).

Every pipeline gets ``--workers`` CPU workers (DataLoader processes; reader threads for
tensorbox). torch intra-op threads are pinned with ``torch.set_num_threads(--workers)``;
the tutorial path, whose transforms run in the main process, is timed with 1 and with
``--workers`` intra-op threads and keeps the faster. When a target is missed the script
prints the profile that says where the time goes.

Usage::

    python benchmarks/dataload.py             # 1,200 + 300 images, 3 rounds (a few minutes)
    python benchmarks/dataload.py --small     # the CI smoke run
    python benchmarks/dataload.py --root DIR  # your own image folder
"""

from __future__ import annotations

import argparse
import os
import resource
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PIL import Image

from benchmarks import _results
from benchmarks.demo import cache_dir, demo_folders
from benchmarks.harness import pipelines as P
from benchmarks.harness import td_tutorial
from tensorbox.data import BatchLoader, ingest_image_folder, scan_image_folder


def _median(rates: list[P.Rate]) -> float:
    return statistics.median(r.per_s for r in rates)


def _cpu() -> tuple[float, float]:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def bench_ingest(root: Path, work: Path, workers: int, repeats: int) -> dict[str, Any]:
    """Alternate tutorial / tensorbox / tensorbox without draft ingestion, ``repeats`` times."""
    rates: dict[str, list[P.Rate]] = {"tutorial": [], "tensorbox": [], "exact": []}
    cpu: dict[str, list[tuple[float, float]]] = {"tutorial": [], "tensorbox": []}
    kept: dict[str, Any] = {}
    for r in range(repeats):
        # Alternate the order, so that neither contender always runs first (cold-ish cache).
        order = (
            ("tutorial", "tensorbox", "exact") if r % 2 == 0 else ("exact", "tensorbox", "tutorial")
        )
        for which in order:
            dest = work / f"ingest-{which}-{r}"
            c0 = _cpu()
            if which == "exact":
                t0 = time.perf_counter()
                data = ingest_image_folder(
                    root, dest, P.STORE_SIZE, num_workers=workers, draft=False
                )
                rate = P.Rate(len(data), time.perf_counter() - t0)
            elif which == "tutorial" and not td_tutorial.available():
                continue
            else:
                data, rate = P.time_ingest(root, dest, "train", workers=workers, which=which)
            c1 = _cpu()
            rates[which].append(rate)
            if which in cpu:
                cpu[which].append((c1[0] - c0[0], c1[1] - c0[1]))
            if r == repeats - 1:
                kept[which] = data
            else:
                del data
                shutil.rmtree(dest, ignore_errors=True)
    return {"rates": rates, "cpu": cpu, "data": kept}


def bench_read(
    roots: dict[str, Path],
    ours: dict[str, Any],
    theirs: dict[str, Any],
    workers: int,
    bs: int,
    repeats: int,
    min_s: float,
) -> dict[str, dict[str, list[P.Rate]]]:
    """Train and val pipelines, contenders alternating within each round."""
    out: dict[str, dict[str, list[P.Rate]]] = {}
    for kind in ("train", "val"):
        per_image = P.per_image_loader(roots[kind], kind, workers=workers, batch_size=bs)
        ours_loader = P.tensorbox_loader(ours[kind], kind, workers=workers, batch_size=bs)
        tut = (
            td_tutorial.tutorial_loader(theirs[kind], kind=kind, batch_size=bs)
            if kind in theirs
            else None
        )
        for _ in per_image:  # start the persistent workers once, outside the timings
            pass
        res: dict[str, list[P.Rate]] = {"per-image": [], "tutorial": [], "tensorbox": []}
        for _ in range(repeats):
            res["per-image"].append(P.measure(lambda pi=per_image: pi, max_epochs=1))
            if tut is not None:
                rate, _n = P.best_thread_setting(
                    lambda t=tut: P.measure(lambda: t, min_seconds=min_s), workers
                )
                res["tutorial"].append(rate)
            res["tensorbox"].append(P.measure(lambda o=ours_loader: o, min_seconds=min_s))
        out[kind] = res
        del per_image
    return out


def bench_loader_alone(
    data: Any, workers: int, bs: int, repeats: int, min_s: float
) -> dict[str, list[P.Rate]]:
    """uint8 batches: BatchLoader vs the same sorted batches read by hand from np.memmap."""
    images = data.images
    path = images.untyped_storage().filename
    mm = np.memmap(path, dtype=np.uint8, mode="r", shape=tuple(images.shape))
    loader = BatchLoader(data, bs, seed=0, num_threads=workers)
    one = BatchLoader(data, bs, seed=0, num_threads=1)
    batches = [loader.batch_indices(0, b).numpy() for b in range(len(loader))]
    buf = np.empty((bs, *mm.shape[1:]), np.uint8)

    def fancy() -> list[int]:
        return [len(mm[idx]) for idx in batches]

    def take() -> list[int]:
        return [len(np.take(mm, idx, axis=0, out=buf[: len(idx)])) for idx in batches]

    def timed(fn: Callable[[], list[int]]) -> P.Rate:
        fn()
        n, s = 0, 0.0
        while s < min_s or not n:
            t0 = time.perf_counter()
            n += sum(fn())
            s += time.perf_counter() - t0
        return P.Rate(n, s)

    res: dict[str, list[P.Rate]] = {
        "np.memmap fancy": [],
        "np.memmap take(out=)": [],
        "loader": [],
        "loader 1 thread": [],
    }
    for _ in range(repeats):
        res["np.memmap fancy"].append(timed(fancy))
        res["np.memmap take(out=)"].append(timed(take))
        res["loader"].append(P.measure(lambda: loader, min_seconds=min_s))
        res["loader 1 thread"].append(P.measure(lambda: one, min_seconds=min_s))
    return res


def ingest_profile(root: Path, count: int = 150) -> list[tuple[str, float]]:
    """Per-image cost of each ingestion stage, in one process (ms per image)."""
    paths = scan_image_folder(root).paths[:count]
    stages: dict[str, float] = {
        "decode (full)": 0.0,
        "decode (draft)": 0.0,
        "resize 256x256": 0.0,
        "HWC->CHW copy": 0.0,
    }
    out = np.empty((3, P.STORE_SIZE, P.STORE_SIZE), np.uint8)
    for p in paths:
        t0 = time.perf_counter()
        with Image.open(p) as im:
            full = im.convert("RGB")
        t1 = time.perf_counter()
        with Image.open(p) as im:
            if im.format == "JPEG":
                im.draft("RGB", (P.STORE_SIZE, P.STORE_SIZE))
            im.convert("RGB")
        t2 = time.perf_counter()
        # Ingestion's squash geometry (size=256): one bilinear resize, no crop.
        small = full.resize((P.STORE_SIZE, P.STORE_SIZE), Image.Resampling.BILINEAR)
        t3 = time.perf_counter()
        np.copyto(out, np.asarray(small).transpose(2, 0, 1))
        t4 = time.perf_counter()
        for k, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            stages[k] += dt
    return [(k, 1000 * v / len(paths)) for k, v in stages.items()]


def _line(name: str, cells: list[str], width: int = 30) -> str:
    return f"{name:<{width}}" + "".join(f"{c:>13}" for c in cells)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--cache")
    ap.add_argument("--json", metavar="PATH", help="also write the medians as JSON (figures.py)")
    args = ap.parse_args(argv)
    meta = _results.start("dataload")  # the load average as the run starts
    workers, bs = args.workers, args.batch_size
    repeats = args.repeats or (1 if args.small else 3)
    min_s = 0.3 if args.small else 1.5
    torch.set_num_threads(workers)
    cache = cache_dir(args.cache)
    train_root, val_root, what = demo_folders(args.root, cache, args.small)
    roots = {"train": train_root, "val": val_root}
    n = {k: len(scan_image_folder(r)) for k, r in roots.items()}
    print(f"dataload benchmark: {n['train']} train + {n['val']} val images ({what})")
    print(
        f"workers={workers} (DataLoader processes / tensorbox reader threads), "
        f"torch.set_num_threads({workers}), batch size {bs}, medians of {repeats} round(s), "
        f"cpu_count={os.cpu_count()}, torch {torch.__version__}\n",
        flush=True,
    )
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=cache))
    try:
        ing = bench_ingest(train_root, work, workers, repeats)
        ours = {"train": ing["data"]["tensorbox"]}
        ours["val"], _ = P.time_ingest(
            val_root, work / "tb-val", "val", workers=workers, which="tensorbox"
        )
        theirs: dict[str, Any] = {}
        if "tutorial" in ing["data"]:
            theirs = {"train": ing["data"]["tutorial"]}
            theirs["val"], _ = P.time_ingest(
                val_root, work / "td-val", "val", workers=workers, which="tutorial"
            )
        reads = bench_read(roots, ours, theirs, workers, bs, repeats, min_s)
        alone = bench_loader_alone(ours["train"], workers, bs, repeats, min_s)
        results = report(ing, reads, alone, train_root, ours, theirs, n)
        if args.json:
            results = meta | results
            results["settings"] = {"images": what, "workers": workers, "rounds": repeats}
            _results.write(args.json, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(
    ing: dict, reads: dict, alone: dict, train_root: Path, ours: dict, theirs: dict, n: dict
) -> dict:
    r = {k: _median(v) for k, v in ing["rates"].items() if v}
    results: dict = {"benchmark": "dataload", "ingest_images_per_s": r, "read_images_per_s": {}}
    print("Ingestion of the train folder (images/s; CPU ms per image: main process + workers)")
    for k, label in (
        ("tutorial", "tensordict tutorial method"),
        ("tensorbox", "tensorbox ingest (draft)"),
        ("exact", "tensorbox ingest, draft=False"),
    ):
        if k in r:
            cpu = ing["cpu"].get(k)
            extra = ""
            if cpu:
                me = statistics.median(c[0] for c in cpu) * 1000 / n["train"]
                kids = statistics.median(c[1] for c in cpu) * 1000 / n["train"]
                extra = f"   cpu {me:.2f} + {kids:.2f} ms/img"
            print(_line(label, [f"{r[k]:,.0f}"]) + extra)
    checks: list[tuple[str, float, float, str]] = []
    if "tutorial" in r:
        print(
            "  rows vs tutorial (draft):   ",
            P.compare_ingested(train_root, ing["data"]["tensorbox"], ing["data"]["tutorial"]),
        )
        print(
            "  rows vs tutorial (no draft):",
            P.compare_ingested(train_root, ing["data"]["exact"], ing["data"]["tutorial"]),
        )
        checks.append(("ingestion vs tutorial", r["tensorbox"] / r["tutorial"], 2.0, "x"))
    print()
    print(
        _line(
            "Reading (images/s)",
            ["per-image", "tutorial", "tensorbox", "vs per-img", "vs tutorial"],
        )
    )
    for kind in ("train", "val"):
        m = {k: (_median(v) if v else float("nan")) for k, v in reads[kind].items()}
        results["read_images_per_s"][kind] = m
        print(
            _line(
                kind,
                [
                    f"{m['per-image']:,.0f}",
                    f"{m['tutorial']:,.0f}",
                    f"{m['tensorbox']:,.0f}",
                    f"{m['tensorbox'] / m['per-image']:.1f}x",
                    f"{m['tensorbox'] / m['tutorial']:.1f}x",
                ],
            )
        )
        checks.append(
            (
                f"{kind} vs per-image",
                m["tensorbox"] / m["per-image"],
                10.0 if kind == "train" else 30.0,
                "x",
            )
        )
        if kind == "train" and reads[kind]["tutorial"]:
            checks.append(("train vs tutorial", m["tensorbox"] / m["tutorial"], 3.0, "x"))
    print()
    a = {k: _median(v) for k, v in alone.items()}
    results["loader_alone_images_per_s"] = a
    floor = max(a["np.memmap fancy"], a["np.memmap take(out=)"])
    print("Loader alone, uint8 [64, 3, 256, 256] batches, shuffled (images/s)")
    for k, v in a.items():
        print(_line(f"  {k}", [f"{v:,.0f}"]))
    checks.append(("loader alone: floor / loader", floor / a["loader"], 1.5, "at most"))
    print("\nTargets")
    missed = []
    for name, value, target, kind in checks:
        ok = value <= target if kind == "at most" else value >= target
        cmp = f"<= {target}" if kind == "at most" else f">= {target}x"
        print(f"  {'PASS' if ok else 'MISS'}  {name}: {value:.2f} (target {cmp})")
        if not ok:
            missed.append(name)
    if any(m.startswith("ingestion") for m in missed):
        print("\nWhy ingestion is decode-bound (one process, ms per image):")
        for stage, ms in ingest_profile(train_root):
            print(f"  {stage:<18} {ms:6.2f}")
        print(
            "  Both methods pay decode + resize per image; tensorbox removes the rest (collate,\n"
            "  pickling through pipes, the main process's memmap writes) and decodes JPEGs that\n"
            "  are >= 2x the target at reduced scale. With sources close to 256 px, draft()\n"
            "  rarely applies and the ratio is bounded by (decode + resize + overhead) / (decode + resize)."
        )
    return results


if __name__ == "__main__":
    sys.exit(main())
