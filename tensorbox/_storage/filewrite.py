"""Writing the file of one tensor: the bytes of a leaf, or a sparse file of zeros.

Used by the folder writer (:mod:`tensorbox._storage.folder`) for every leaf of a saved
tree, and by :class:`~tensorbox._storage.memmap_tensor.MemoryMappedTensor`'s
constructors. Files are written with ``os.write`` from the tensor's own bytes (no extra
copy when contiguous), 3-4x faster here than copying into a fresh shared mapping. A
tensor that is not contiguous or not on the CPU is written in pieces of at most
:data:`tensorbox.weights.CHUNK_BYTES`, so an expanded or GPU tensor never needs
its full size in RAM. An existing file is never written into (another mapping may be
reading it): the new content goes to a temporary file that replaces it.

>>> import os, tempfile, torch
>>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
>>> _ = write_file(path, torch.arange(4, dtype=torch.int32))
>>> os.path.getsize(path)
16
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from tensorbox._core.chunks import as_bytes, byte_chunks
from tensorbox._storage.atomic import fsync_dir, replacing
from tensorbox._storage.memmap_args import (
    MemmapFileExistsError,
)

__all__ = ["write_file"]

#: Largest piece copied through RAM when writing a non-contiguous or non-CPU tensor.
# Linux writes at most 0x7FFFF000 bytes per write() call.
_MAX_WRITE = 1 << 30
_O_BINARY = getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY


def _refuse_replacing(path: str, existsok: bool) -> None:
    """``path`` exists: refuse a symlink, and any file unless ``existsok``."""
    if os.path.islink(path):  # replacing it would cut the link, not write its target
        raise MemmapFileExistsError(
            f"{path} is a symlink: a memory-mapped tensor is never written through "
            "symlink; pass the path of the file it points to, or remove the link"
        )
    if not existsok:
        raise MemmapFileExistsError(
            f"{path} already exists; pass existsok=True to replace it (it is replaced by a new "
            "file, so tensors already mapped from it keep the old data)"
        )


def write_file(
    path: str,
    tensor: Tensor | None = None,
    nbytes: int = 0,
    *,
    existsok: bool = True,
    fsync: bool = False,
    sync_dir: bool = True,
) -> tuple[int, int]:
    """Create ``path`` holding ``tensor``'s bytes, or ``nbytes`` zero bytes (a sparse file).

    ``fsync`` makes the bytes durable, and the directory entry too unless ``sync_dir``
    is False (a caller writing many files syncs their directory once). Returns the
    file's identity (device, inode), which :func:`map_file` records. An existing file
    is replaced (:func:`~tensorbox._storage.atomic.replacing`), never written into.
    """
    try:
        fd: int | None = os.open(path, _NEW, 0o666)
    except FileExistsError:
        fd = None
    if fd is not None:
        ident = _fill(fd, path, tensor, nbytes, fsync)
    else:
        _refuse_replacing(path, existsok)
        with replacing(path) as tmp:
            ident = _fill(os.open(tmp, _NEW, 0o666), tmp, tensor, nbytes, fsync)
    if fsync and sync_dir:
        fsync_dir(os.path.dirname(path))
    return ident


def _fill(fd: int, path: str, tensor: Tensor | None, nbytes: int, fsync: bool) -> tuple[int, int]:
    """Write the new file ``fd`` at ``path`` and close it (deleted when a write fails)."""
    try:
        if tensor is None:
            if nbytes:
                os.ftruncate(fd, nbytes)
        elif (
            tensor.device.type == "cpu"
            and tensor.is_contiguous()
            and tensor.layout is torch.strided
            and not (tensor.is_conj() or tensor.is_neg() or tensor.is_nested)
        ):  # the usual case, without byte_chunks' generator (a save calls this per leaf)
            chunk = as_bytes(tensor.detach())
            while chunk:
                chunk = chunk[os.write(fd, chunk[:_MAX_WRITE]) :]
        else:
            for chunk in byte_chunks(tensor):
                while chunk:
                    chunk = chunk[os.write(fd, chunk[:_MAX_WRITE]) :]
        if fsync:
            os.fsync(fd)
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return (st.st_dev, st.st_ino)
