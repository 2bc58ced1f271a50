"""tensordict's ``tensordict.memmap`` module, under tensorbox: the same names.

``from tensordict.memmap import MemoryMappedTensor`` becomes
``from tensorbox.memmap import MemoryMappedTensor``.

>>> import torch
>>> from tensorbox.memmap import MemoryMappedTensor
>>> MemoryMappedTensor.from_tensor(torch.arange(3)).tolist()
[0, 1, 2]
"""

from __future__ import annotations

from typing import Any

from tensorbox._storage.memmap_tensor import MemoryMappedTensor

__all__ = ["MemoryMappedTensor"]


def __getattr__(name: str) -> Any:
    import tensorbox

    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(tensorbox, name)
