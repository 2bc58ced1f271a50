"""A deterministic folder of natural-looking synthetic images, for demos, tests and benchmarks.

``make_image_folder(root, ...)`` (public as ``tensorbox.data.make_image_folder``) writes
``root/<class>/<index>.jpg`` (a few PNGs and grayscale JPEGs mixed in, as in real
collections) and returns the root. The same arguments always give byte-identical
files, so a folder generated once is cached: a call that finds a complete folder
(``root/COMPLETE`` matching its arguments) returns at once.

Each image is 1/f-like smooth colour noise (several octaves) plus a linear gradient,
a few filled shapes and fine grain, so that JPEG sizes and decode times resemble
photographs rather than flat test patterns (a flat image decodes several times faster
and would flatter every loader). Each class has its own hue bias, so a model can
learn something from the data.

>>> import tempfile, pathlib
>>> root = make_image_folder(tempfile.mkdtemp(), num_images=6, num_classes=2,
...                          min_size=40, max_size=60, num_workers=0)
>>> sorted(p.name for p in (root / "class_00").iterdir())
['00000.jpg', '00002.jpg', '00004.jpg']
>>> make_image_folder(root, num_images=6, num_classes=2, min_size=40, max_size=60) == root
True
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from tensorbox.progress import Progress, logger

__all__ = ["make_image_folder", "synth_image"]

# Bump when the pixels change, so that caches made by an older generator are rebuilt.
_GENERATOR_VERSION = 1
_MARKER = "COMPLETE"


def synth_image(seed: int, index: int, label: int, width: int, height: int) -> Image.Image:
    """Return one deterministic RGB image of ``width`` x ``height`` for ``(seed, index)``.

    >>> synth_image(0, 3, 1, 64, 48).size
    (64, 48)
    """
    rng = np.random.default_rng([seed, index])
    img = np.zeros((height, width, 3), np.float32)
    # Octaves of smooth noise: a coarse grid of normals upsampled bicubically, with
    # amplitude falling as the grid gets finer (roughly the 1/f spectrum of photos). The
    # finest octave has features a few pixels wide: texture such as grass or fabric.
    fine = max(width, height) // 5
    for cells, amp in ((3, 45.0), (9, 25.0), (27, 14.0), (fine, 16.0)):
        grid = rng.standard_normal((cells, cells, 3), dtype=np.float32)
        for c in range(3):
            layer = Image.fromarray(grid[:, :, c], mode="F").resize(
                (width, height), Image.Resampling.BICUBIC
            )
            img[:, :, c] += amp * np.asarray(layer)
    # A class-dependent base colour and a linear gradient in a random direction.
    hue = np.array([(label * 67) % 256, (label * 151 + 80) % 256, (label * 29 + 160) % 256])
    angle = rng.uniform(0, 2 * np.pi)
    ramp = (
        np.cos(angle) * np.arange(width, dtype=np.float32)[None, :] / width
        + np.sin(angle) * np.arange(height, dtype=np.float32)[:, None] / height
    )
    img += (0.35 * hue + 80).astype(np.float32)
    img += ramp[:, :, None] * (50 * rng.uniform(-1, 1, size=3)).astype(np.float32)
    canvas = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), mode="RGB")
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(3, 9))):
        x0, x1 = sorted(rng.integers(0, width, size=2).tolist())
        y0, y1 = sorted(rng.integers(0, height, size=2).tolist())
        color = tuple(int(v) for v in np.clip(0.5 * hue + rng.normal(60, 50, 3), 0, 255))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse((x0, y0, x1 + 1, y1 + 1), fill=color)
        elif kind == 1:
            draw.rectangle((x0, y0, x1, y1), fill=color)
        else:
            xs, ys = rng.integers(0, width, 3).tolist(), rng.integers(0, height, 3).tolist()
            draw.polygon(list(zip(xs, ys)), fill=color)
    # Fine grain (sensor-like noise) keeps JPEG entropy close to that of photographs.
    arr = np.asarray(canvas).astype(np.float32)
    arr += rng.standard_normal((height, width, 3), dtype=np.float32) * 8.0
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), mode="RGB")


def _plan(
    seed: int, num_images: int, num_classes: int, min_size: int, max_size: int
) -> list[tuple[int, int, int, int, str, bool]]:
    """Per image: (index, label, width, height, format, grayscale); cheap and deterministic."""
    rng = np.random.default_rng([seed, 1 << 20])
    sizes = rng.integers(min_size, max_size + 1, size=(num_images, 2))
    kinds = rng.random(num_images)
    return [
        # Every 20th-ish image is a PNG and a few are grayscale JPEGs, as in ImageNet.
        (i, i % num_classes, int(w), int(h), "png" if k < 0.05 else "jpg", 0.05 <= k < 0.07)
        for i, ((w, h), k) in enumerate(zip(sizes.tolist(), kinds.tolist()))
    ]


def _write_one(args: tuple[Any, ...]) -> None:
    root, seed, quality, (index, label, width, height, fmt, gray) = args
    img = synth_image(seed, index, label, width, height)
    path = Path(root) / f"class_{label:02d}" / f"{index:05d}.{fmt}"
    if gray:
        img = img.convert("L")
    if fmt == "png":
        img.save(path, format="PNG", compress_level=1)
    else:
        img.save(path, format="JPEG", quality=quality)


def make_image_folder(
    root: str | os.PathLike[str],
    *,
    num_images: int = 1200,
    num_classes: int = 10,
    min_size: int = 300,
    max_size: int = 700,
    quality: int = 90,
    seed: int = 0,
    num_workers: int | None = None,
) -> Path:
    """Write (or find, when already complete) a synthetic ``root/<class>/<image>`` folder.

    ``num_images`` images, dealt round-robin to ``num_classes`` classes
    (``class_00``, ``class_01``...), named by index; about 5% are PNGs and 2% grayscale
    JPEGs, the rest RGB JPEGs of ``quality``. Widths and heights are drawn independently
    and uniformly from ``[min_size, max_size]``. The same arguments give byte-identical
    files, so a complete folder (its ``COMPLETE`` marker matches the arguments) is
    returned at once; one made with other arguments raises ``FileExistsError``.
    Generation runs in ``num_workers`` processes (default: all cores; 0 runs inline) and
    writes into a temporary sibling folder renamed into place at the end, so an
    interrupted run never leaves a folder that looks complete. Needs Pillow.

    The worker processes start by "spawn", which re-runs the calling script: when
    this call sits in the script's top-level code outside an
    ``if __name__ == "__main__":`` block, or the script came from standard input,
    workers cannot start cleanly, so the images are made in ``num_workers`` threads
    instead (a note goes to the ``tensorbox`` logger). A worker that dies raises
    ``RuntimeError``; it is never restarted. A summary line (images, time, rate) goes
    to the ``tensorbox`` logger at INFO.

    >>> import tempfile
    >>> from tensorbox.data import make_image_folder, scan_image_folder
    >>> root = make_image_folder(tempfile.mkdtemp() + "/imgs", num_images=4, num_classes=2,
    ...                          min_size=32, max_size=48, num_workers=0)
    >>> index = scan_image_folder(root)
    >>> index.classes, index.targets
    (['class_00', 'class_01'], [0, 0, 1, 1])
    """
    root = Path(root)
    if num_images < 1 or num_classes < 1:
        raise ValueError(
            f"num_images={num_images!r} and num_classes={num_classes!r} must both be >= 1"
        )
    if not 8 <= min_size <= max_size:
        raise ValueError(
            f"sizes must satisfy 8 <= min_size <= max_size, got min_size={min_size!r}, "
            f"max_size={max_size!r}"
        )
    params = {
        "generator_version": _GENERATOR_VERSION,
        "num_images": num_images,
        "num_classes": num_classes,
        "min_size": min_size,
        "max_size": max_size,
        "quality": quality,
        "seed": seed,
    }
    marker = root / _MARKER
    if marker.is_file():
        if json.loads(marker.read_text()) == params:
            return root
        raise FileExistsError(
            f"{str(root)!r} already holds a synthetic folder made with other parameters "
            f"({marker.read_text().strip()}); remove it or choose another root"
        )
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(
            f"{str(root)!r} exists and is not a complete synthetic folder; "
            "remove it or choose another root"
        )
    tmp = root.with_name(root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    for c in range(num_classes):
        (tmp / f"class_{c:02d}").mkdir(parents=True)
    jobs = [
        (str(tmp), seed, quality, p)
        for p in _plan(seed, num_images, num_classes, min_size, max_size)
    ]
    workers = (os.cpu_count() or 1) if num_workers is None else num_workers
    with Progress("make_image_folder", num_images, unit="img", progress=False) as progress:
        if workers == 0:
            for job in jobs:
                _write_one(job)
                progress.update(1, files=0)
        elif _spawn_can_start():
            _in_processes(jobs, workers, progress)
        else:
            logger.info(
                "make_image_folder: making images in %d threads, not processes: the calling "
                "script cannot be re-imported by spawned workers (the call is outside an "
                "`if __name__ == '__main__':` block, or the script came from standard input)",
                workers,
            )
            with ThreadPoolExecutor(workers) as pool:
                for _ in pool.map(_write_one, jobs):
                    progress.update(1, files=0)
    (tmp / _MARKER).write_text(json.dumps(params))
    if root.exists():
        root.rmdir()  # empty, checked above
    root.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, root)
    return root


def _in_processes(jobs: list[tuple[Any, ...]], workers: int, progress: Progress) -> None:
    # "spawn" keeps this safe to call from programs that already run threads. An
    # executor, not multiprocessing.Pool: a pool replaces a worker that dies at start
    # and so retries forever; an executor reports the broken pool.
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            for _ in pool.map(_write_one, jobs, chunksize=16):
                progress.update(1, files=0)
    except BrokenProcessPool as err:
        raise RuntimeError(
            "make_image_folder: a worker process died (see its traceback above); when it "
            "died while starting, the calling script probably re-ran this call on import: "
            "put the call under `if __name__ == '__main__':`, or pass num_workers=0"
        ) from err


def _spawn_can_start() -> bool:
    """Whether "spawn" workers can start: each re-runs the main script as ``__mp_main__``
    before it works, which is harmless only when that re-run cannot reach this call.

    Re-run is unsafe when this call happens (directly or through functions) from the
    main module's top-level code outside an ``if __name__ == "__main__":`` block, or
    when the main script has no file to re-run (standard input). An interactive
    session or ``python -c`` has no main script to re-run: safe.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # This process is itself a spawned worker still starting up (an unguarded call
        # reached again): starting processes now would fail, and inline work would only
        # repeat the parent's.
        raise RuntimeError(
            "make_image_folder was called while a worker process was starting: the "
            "calling script runs it on import; put the call under "
            "`if __name__ == '__main__':`, or pass num_workers=0"
        )
    main = sys.modules.get("__main__")
    if main is None:
        return True
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    if spec is None and path is None:
        return True  # interactive, or -c: workers do not re-run anything
    source = getattr(spec, "origin", None) or path
    if source is None or not os.path.isfile(source):
        return False  # standard input ("<stdin>"): workers cannot find the script
    line = _main_line(main.__dict__)
    if line is None:
        return True  # not called from the main module's top level (a thread, atexit...)
    try:
        tree = ast.parse(Path(source).read_bytes(), source)
    except (OSError, SyntaxError, ValueError):
        return False
    return any(
        _is_main_guard(node) and node.lineno <= line <= (node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.If)
    )


def _main_line(main_globals: dict[str, Any]) -> int | None:
    """The line of the main module's top-level code that led to this call, if any."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is main_globals and frame.f_code.co_name == "<module>":
            return frame.f_lineno
        frame = frame.f_back
    return None


def _is_main_guard(node: ast.If) -> bool:
    """``if __name__ == "__main__":`` (either side of the ``==``)."""
    test = node.test
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and len(test.comparators) == 1
    ):
        return False
    sides = {_name_or_constant(test.left), _name_or_constant(test.comparators[0])}
    return sides == {"name:__name__", "const:__main__"}


def _name_or_constant(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return f"name:{node.id}"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return f"const:{node.value}"
    return None
