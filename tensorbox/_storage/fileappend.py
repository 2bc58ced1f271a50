"""Rows appended to a leaf file: ``pwrite`` after its committed bytes, growth amortised.

A folder's part of ``extend_`` (:meth:`tensorbox._storage.folder.FolderStore.append`):
the new rows go after the bytes the tree's ``meta.json`` counts, which are never
touched, the file grown first (``ftruncate``) by a factor, as a list's capacity grows,
so one row at a time is not quadratic. A full disk is an ``OSError`` here, never a
SIGBUS through a mapping. The rows count once the grown tree is committed.

>>> grow_capacity(0, 8) == GROW_FLOOR, grow_capacity(1 << 20, (1 << 20) + 8) == 3 << 19
(True, True)
"""

from __future__ import annotations

import math
import os
from typing import Any

from torch import Tensor

from tensorbox._core.chunks import byte_chunks
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, _blank, map_file
from tensorbox._storage.store import TensorEntry

__all__ = ["GROW_FLOOR", "append_file", "grow_capacity", "maps_file"]

#: The smallest step a file grows by (sparse: it costs no disk until written).
GROW_FLOOR = 1 << 12


def grow_capacity(size: int, need: int) -> int:
    """The new length of a file of ``size`` bytes that must hold ``need``: by half its
    size at least (amortised, as a list's capacity), and by :data:`GROW_FLOOR`."""
    return max(need, size + max(size // 2, GROW_FLOOR))


def append_file(
    e: TensorEntry, rows: Tensor, fsync: bool, where: str, current: Tensor | None
) -> Tensor:
    """Write ``rows`` after the committed rows of the leaf file ``e``; the longer tensor.

    The tensor is a view of a mapping of the whole file, capacity included: the next
    appends reuse that mapping (``current``, the leaf they replace) until the file
    grows again, so most appends map and unmap nothing (both cost tens of
    microseconds on a virtual machine, where unmapping interrupts every other CPU).
    """
    start = e.nbytes
    new_shape = (e.shape[0] + rows.shape[0], *e.shape[1:])
    end = math.prod(new_shape) * e.dtype.itemsize
    fd = os.open(e.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != e.ident:  # read under the writer lock: cannot happen
            raise RuntimeError(f"{e.path} was replaced while {where} was being extended")
        if st.st_nlink > 1:
            # A second name (a hard link: cp -al, a snapshot tool): rows appended after
            # this tree's committed end would overwrite the rows the other name's tree
            # committed there. Nothing is written; nothing commits.
            raise RuntimeError(
                f"extend_: the file of key {where}, {e.path}, has {st.st_nlink} names (a hard "
                "link, from cp -al or a snapshot tool?); rows appended here would overwrite "
                "the rows another tree sharing it appended. Save the tree again from a copy "
                "(TensorDict.load_memmap(path).clone().memmap(path)) to give it files of its "
                "own, then extend_"
            )
        size = had = st.st_size
        try:
            if size < end:
                size = grow_capacity(size, end)
                os.ftruncate(fd, size)
            offset = start
            for chunk in byte_chunks(rows.detach().cpu() if rows.numel() else rows):
                while chunk:
                    n = os.pwrite(fd, chunk, offset)
                    chunk, offset = chunk[n:], offset + n
            if fsync:
                os.fsync(fd)
        except OSError as err:
            # Nothing committed: the file goes back to its length, so that a full disk
            # gets back the blocks these rows took, then the error names the leaf.
            if size != had:
                os.ftruncate(fd, had)
            raise OSError(
                err.errno, f"extend_: cannot write the rows of {where} ({err.strerror})", e.path
            ) from err
    finally:
        os.close(fd)
    storage = _reusable(current, e, end)
    if storage is None:
        return map_file(e.path, e.dtype, new_shape, "r+", size, e.ident, e.gen)
    t: Tensor = _blank(e.dtype).new().set_(storage, 0, new_shape)  # type: ignore[call-overload]
    t.__class__ = MemoryMappedTensor  # a fresh plain tensor: as map_file does
    return t


def _reusable(current: Tensor | None, e: TensorEntry, end: int) -> Any:
    """The storage of ``current`` when it is a shared mapping of ``e``'s file from its
    start, at least ``end`` bytes long (after a load it maps only the committed rows)."""
    if type(current) is not MemoryMappedTensor or current.storage_offset():
        return None
    storage = current.untyped_storage()
    if storage.filename is None or storage.nbytes() < end:
        return None
    if getattr(storage, "_tbx_id", None) != e.ident or getattr(storage, "_tbx_ro", None):
        return None
    return storage


def maps_file(e: TensorEntry, t: Tensor) -> bool | None:
    """Whether ``t`` maps ``e``'s file (None: ``t`` maps no file at all)."""
    if type(t) is not MemoryMappedTensor:
        return None
    return bool(getattr(t.untyped_storage(), "_tbx_id", None) == e.ident)
