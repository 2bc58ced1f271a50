"""A shim: tensordict's ``tensordict.memmap`` import path, forwarding to ``tensorbox``.

``from tensordict.memmap import MemoryMappedTensor`` becomes
``from tensorbox.memmap import MemoryMappedTensor``.
Any other public name of ``tensorbox`` resolves here too.

>>> import torch
>>> from tensorbox.memmap import MemoryMappedTensor
>>> MemoryMappedTensor.from_tensor(torch.arange(3)).tolist()
[0, 1, 2]
"""

from __future__ import annotations

from tensorbox._face import forward
from tensorbox._storage.memmap_tensor import MemoryMappedTensor

__all__ = ["MemoryMappedTensor"]

__getattr__, __dir__ = forward(__name__, "tensorbox")
