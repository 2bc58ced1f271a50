"""Optional checksums of saved tensors: SHA-256 of the tensor's bytes, as the file holds them.

Recorded at save time when asked (``checksum=True``), checked by ``load_memmap(...,
verify=True)`` and ``python -m tensorbox verify --read``. They describe the bytes at
the moment of the save: a write through a mapping afterwards (a row written into a
loaded tree) makes them stale, and the next check says so.

>>> import torch
>>> tensor_sha256(torch.zeros(2, dtype=torch.uint8)) == tensor_sha256(None, torch.zeros(2))
False
>>> tensor_sha256(torch.zeros(2, dtype=torch.uint8)) == tensor_sha256(None, torch.zeros(1, 2, dtype=torch.uint8)[0])
True
"""

from __future__ import annotations

import hashlib
import os

from torch import Tensor

from tensorbox._core.chunks import byte_chunks
from tensorbox.errors import FormatError

__all__ = ["check_file", "tensor_sha256"]

_ZEROS = bytes(1 << 20)


def tensor_sha256(t: Tensor | None, like: Tensor | None = None) -> str:
    """The SHA-256 of ``t``'s bytes in C order; with ``t`` None, of zeros the size of ``like``."""
    h = hashlib.sha256()
    if t is None:
        assert like is not None
        n = like.numel() * like.element_size()
        while n:
            step = min(n, len(_ZEROS))
            h.update(_ZEROS[:step])
            n -= step
        return h.hexdigest()
    for chunk in byte_chunks(t):
        h.update(chunk)
    return h.hexdigest()


def check_file(path: str, nbytes: int, expected: str | None) -> None:
    """Read the first ``nbytes`` of ``path``; FormatError when short or when the SHA-256
    differs from ``expected`` (None: only read)."""
    h = hashlib.sha256()
    left = nbytes
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                raise FormatError(f"{path}: ended {left} bytes early while reading")
            h.update(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    if expected is not None and h.hexdigest() != expected:
        raise FormatError(
            f"{path}: the bytes do not match the SHA-256 recorded when the tree was saved "
            f"(expected {expected}, found {h.hexdigest()}): the file is damaged, or was "
            "written in place since; save the tree again to record new checksums"
        )
