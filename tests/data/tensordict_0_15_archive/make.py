"""How the archives here were made: tensordict 0.15.3 (torch 2.13), its own writer.

    python -m venv /tmp/tdvenv && /tmp/tdvenv/bin/pip install "tensordict>=0.14"
    /tmp/tdvenv/bin/python tests/data/tensordict_0_15_archive/make.py

One archive per compression: stored (zero-copy on load), deflate, bzip2, lzma.
"""

from pathlib import Path

import torch
from tensordict import NonTensorStack, TensorDict

here = Path(__file__).resolve().parent
td = TensorDict(
    {
        "obs": torch.arange(12.0).reshape(3, 4),
        "nested": {
            "half": torch.full((3, 2), 1.5, dtype=torch.bfloat16),
            "mask": torch.tensor([True, False, True]),
        },
        "note": "hello",
        "Weird key/x": torch.arange(3, dtype=torch.int16).reshape(3, 1),
    },
    batch_size=[3],
)
td["tags"] = NonTensorStack("a", "b", "c")
for name in ("stored", "deflate", "bzip2", "lzma"):
    td.save(here / f"{name}.tdz", archive=True, compression=None if name == "stored" else name)
