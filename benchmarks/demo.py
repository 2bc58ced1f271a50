"""``make demo``: ingest an image folder, then compare three data pipelines in images/s.

Run ``python benchmarks/demo.py`` from a checkout (``--small`` for a quick run, ``--root
PATH`` for your own ``root/<class>/<image>`` folder, or one with ``train/`` and ``val/``
inside).

Without ``--root`` a deterministic synthetic folder is generated once (1,200 train and
300 val JPEGs of 300-700 px, with a few PNGs and grayscale images) and cached under
``$TENSORBOX_CACHE`` (default ``./.cache/tensorbox-demo``). It is then ingested by
tensorbox and, when ``tensordict`` is installed, by the tensordict ImageNet tutorial's
method, and read back by three pipelines with the same number of CPU workers:

- a per-image ``DataLoader`` doing ``ImageFolder`` + ``RandomResizedCrop`` / flip /
  ``ToTensor`` / ``Normalize`` (train) or ``Resize`` / ``CenterCrop`` / ... (val);
- the tensordict tutorial path (batched indexing of its memmap + its batched transforms);
- tensorbox's ``BatchLoader`` (crop at read, flip, fused normalisation, reader threads).

``benchmarks/dataload.py`` measures the same things with repeats and medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from benchmarks.harness import pipelines as P
from benchmarks.harness import td_tutorial
from benchmarks.harness.reference import torchvision_available
from tensorbox.data import make_image_folder, scan_image_folder

DEFAULT_CACHE = os.path.join(".cache", "tensorbox-demo")


def cache_dir(explicit: str | None = None) -> Path:
    """``explicit``, else ``$TENSORBOX_CACHE``, else ``./.cache/tensorbox-demo``."""
    return Path(explicit or os.environ.get("TENSORBOX_CACHE") or DEFAULT_CACHE)


def demo_folders(root: str | None, cache: Path, small: bool) -> tuple[Path, Path, str]:
    """The train and val folders to use, and a description for the report."""
    if root is not None:
        r = Path(root)
        if (r / "train").is_dir() and (r / "val").is_dir():
            return r / "train", r / "val", str(r)
        return r, r, f"{r} (used for both train and val)"
    if small:
        n_train, n_val, lo, hi = 256, 128, 200, 400
    else:
        n_train, n_val, lo, hi = 1200, 300, 300, 700
    base = cache / f"synthetic-{n_train}-{n_val}-{lo}-{hi}"
    t0 = time.perf_counter()
    fresh = not (base / "train" / "COMPLETE").exists() or not (base / "val" / "COMPLETE").exists()
    if fresh:
        print(f"generating {n_train + n_val} synthetic images under {base} (once) ...", flush=True)
    train = make_image_folder(base / "train", num_images=n_train, min_size=lo, max_size=hi, seed=0)
    val = make_image_folder(base / "val", num_images=n_val, min_size=lo, max_size=hi, seed=1)
    if fresh:
        print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
    return train, val, f"synthetic, {lo}-{hi} px JPEG q90 + a few PNG/grayscale, cached in {base}"


def _row(name: str, cells: list[str]) -> str:
    return f"{name:<34}" + "".join(f"{c:>14}" for c in cells)


def _ratio(a: P.Rate | None, b: P.Rate | None) -> str:
    if a is None or b is None:
        return "-"
    return f"{a.per_s / b.per_s:.1f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/demo.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--root", help="an image folder (root/<class>/<image>, or with train/ and val/)"
    )
    parser.add_argument("--small", action="store_true", help="a quick run on a small folder")
    parser.add_argument(
        "--workers", type=int, default=min(2, os.cpu_count() or 1), help="CPU workers per pipeline"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--cache", help="cache folder (default $TENSORBOX_CACHE or ./.cache/tensorbox-demo)"
    )
    parser.add_argument(
        "--no-tutorial", action="store_true", help="skip the tensordict tutorial path"
    )
    args = parser.parse_args(argv)

    workers, bs = args.workers, args.batch_size
    P.set_threads(max(1, workers))
    cache = cache_dir(args.cache)
    train_root, val_root, what = demo_folders(args.root, cache, args.small)
    n_train, n_val = len(scan_image_folder(train_root)), len(scan_image_folder(val_root))
    tutorial = td_tutorial.available() and not args.no_tutorial
    print(f"tensorbox demo: {n_train} train + {n_val} val images ({what})")
    impl = "torchvision" if torchvision_available() else "Pillow equivalents of torchvision's"
    print(f"per-image pipeline: {impl} ImageFolder and transforms")
    print(
        f"each pipeline gets {workers} CPU worker(s) (processes, or threads for tensorbox's "
        f"loader); torch.set_num_threads({max(1, workers)}); batch size {bs}\n",
        flush=True,
    )
    min_s = 0.5 if args.small else 2.0
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=cache))
    try:
        print("ingesting ...", flush=True)
        ours = {
            k: P.time_ingest(r, work / f"tb-{k}", k, workers=workers, which="tensorbox")
            for k, r in (("train", train_root), ("val", val_root))
        }
        theirs = {}
        if tutorial:
            theirs = {
                k: P.time_ingest(r, work / f"td-{k}", k, workers=workers, which="tutorial")
                for k, r in (("train", train_root), ("val", val_root))
            }
        print("reading: per-image DataLoader ...", flush=True)
        rates: dict[str, dict[str, P.Rate | None]] = {
            "per-image": {},
            "tutorial": {},
            "tensorbox": {},
        }
        tutorial_threads: dict[str, int] = {}
        for kind, root in (("train", train_root), ("val", val_root)):
            loader = P.per_image_loader(root, kind, workers=workers, batch_size=bs)
            rates["per-image"][kind] = P.measure(lambda loader=loader: loader, max_epochs=1)
            del loader
        if tutorial:
            print("reading: tensordict tutorial path ...", flush=True)
            for kind in ("train", "val"):
                dl = td_tutorial.tutorial_loader(theirs[kind][0], kind=kind, batch_size=bs)
                rate, n = P.best_thread_setting(
                    lambda dl=dl: P.measure(lambda: dl, min_seconds=min_s), workers
                )
                rates["tutorial"][kind] = rate
                tutorial_threads[kind] = n
        print("reading: tensorbox BatchLoader ...\n", flush=True)
        for kind in ("train", "val"):
            bl = P.tensorbox_loader(ours[kind][0], kind, workers=workers, batch_size=bs)
            rates["tensorbox"][kind] = P.measure(lambda bl=bl: bl, min_seconds=min_s)

        print(_row("images/s", ["ingest", "train", "val"]))
        print(
            _row(
                "per-image DataLoader (Pillow)",
                ["-", str(rates["per-image"]["train"]), str(rates["per-image"]["val"])],
            )
        )
        if tutorial:
            t = rates["tutorial"]
            print(
                _row(
                    "tensordict tutorial path",
                    [str(theirs["train"][1]), str(t["train"]), str(t["val"])],
                )
            )
        t = rates["tensorbox"]
        print(_row("tensorbox", [str(ours["train"][1]), str(t["train"]), str(t["val"])]))
        pi = rates["per-image"]
        print(
            _row(
                "tensorbox / per-image",
                ["-", _ratio(t["train"], pi["train"]), _ratio(t["val"], pi["val"])],
            )
        )
        if tutorial:
            tu = rates["tutorial"]
            print(
                _row(
                    "tensorbox / tutorial",
                    [
                        _ratio(ours["train"][1], theirs["train"][1]),
                        _ratio(t["train"], tu["train"]),
                        _ratio(t["val"], tu["val"]),
                    ],
                )
            )
            print(
                "\ningested rows vs the tutorial's (train):",
                P.compare_ingested(train_root, ours["train"][0], theirs["train"][0]),
            )
        print(
            "\ntrain = random crop 224 + horizontal flip + normalise, float32 out (per-image: "
            "RandomResizedCrop from the original file); val = centre 224 + normalise."
        )
        print("repeatable numbers with medians: python benchmarks/dataload.py")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
