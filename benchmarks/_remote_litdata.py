"""LitData's side of ``benchmarks/remote.py``, run by that script in the Python that has
LitData installed (its own virtual environment: LitData is not a tensorbox dependency).

``prepare IMAGES.npy TARGETS.npy WORKDIR URL``: ``optimize()`` the images into LitData
chunks in WORKDIR, then upload them to URL (``s3://bucket/prefix``).
``epoch URL CACHE_DIR BATCH``: one epoch of ``StreamingDataset`` + ``StreamingDataLoader``
over URL, shuffled, the same "training step" as the tensorbox runs; prints a JSON line
with the seconds to the first batch, the whole epoch's seconds and the images seen.

Endpoint and credentials come from the ``AWS_*`` variables (``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def _item(i: int) -> dict[str, object]:
    return {"image": _IMAGES[i], "target": int(_TARGETS[i])}


_IMAGES: np.ndarray
_TARGETS: np.ndarray


def prepare(images: str, targets: str, workdir: str, url: str) -> None:
    global _IMAGES, _TARGETS
    import litdata
    import s3fs

    _IMAGES, _TARGETS = np.load(images), np.load(targets)
    out = os.path.join(workdir, "optimized")
    litdata.optimize(
        fn=_item,
        inputs=list(range(len(_TARGETS))),
        output_dir=out,
        chunk_bytes="16MB",
        num_workers=1,
        verbose=False,
        start_method="fork",
    )
    fs = s3fs.S3FileSystem()
    fs.put(out + "/", url.removeprefix("s3://") + "/", recursive=True)


def epoch(url: str, cache_dir: str, batch: int) -> None:
    import torch
    from litdata import StreamingDataLoader, StreamingDataset

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ds = StreamingDataset(url, cache_dir=cache_dir, shuffle=True, seed=0, max_cache_size="20GB")
    loader = StreamingDataLoader(ds, batch_size=batch, num_workers=2)
    first = None
    n = 0
    total = 0.0
    for b in loader:
        x = b["image"]
        total += float(x.float().mean())  # the same stand-in for a training step
        n += int(x.shape[0])
        if first is None:
            first = time.perf_counter() - t0
    print(json.dumps({"first": first, "seconds": time.perf_counter() - t0, "images": n}))


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(*sys.argv[2:6])
    else:
        epoch(sys.argv[2], sys.argv[3], int(sys.argv[4]))
