"""Reserve the disk blocks a row write will touch, before it copies into the mapping.

``memmap_like`` creates sparse files (as tensordict): a million-row dataset costs no
disk until rows are written. A write through a shared mapping into a hole of a sparse
file on a full disk kills the process with SIGBUS; reserving the byte range first
(``posix_fallocate``) turns that into an ``OSError`` naming the key and the rows, and
leaves the file as it was.

The range reserved is the span of rows along the leaf's first dim that the index
touches (from the first to the last), in the leaf's own file. Blocks already
allocated cost nothing to reserve again.

Every in-place write into a file-backed leaf reserves first: a row write
(``td[rows] = ...``, :func:`reserve_rows`), ``set_``/``update_``/``set(inplace=True)``
(the core's ``copy_leaf`` calls :func:`reserve_leaf` through its ``reserve`` port,
which the package face binds here), ``apply_``/``zero_``/``fill_`` (every mapped leaf,
through the same port, before the function runs), ``load_state_dict`` and
``to_module(inplace=True)`` (every destination reserved before the first copy:
:func:`reserve_all`). ``extend_`` writes with ``pwrite`` after growing the files,
never through a mapping. A write through a raw mapped tensor (``td["k"][rows] = v``
on the tensor itself) bypasses all of these.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensorbox._core.nestedkey import format_key
from tensorbox._core.tree import is_coll

__all__ = ["reserve_all", "reserve_leaf", "reserve_rows"]


def _row_span(t: Tensor, index: Any) -> tuple[int, int] | None:
    """First and last row (dim 0) of ``t`` that ``t[index]`` touches; None for none."""
    if t.ndim == 0:
        return (0, 0)
    first = index[0] if type(index) is tuple and index else index
    if first is Ellipsis or first is None or (type(index) is tuple and not index):
        return (0, t.shape[0] - 1)
    if isinstance(first, Tensor) and first.dtype == torch.bool and first.ndim > 1:
        first = first.reshape(first.shape[0], -1).any(1)  # a mask over several batch dims
    try:
        rows = torch.arange(t.shape[0])[first]
    except (IndexError, TypeError, RuntimeError):
        return (0, t.shape[0] - 1)  # an index read otherwise: reserve every row
    if rows.numel() == 0:
        return None
    return int(rows.min()), int(rows.max())


def _reserve(t: Tensor, index: Any, key: tuple[str, ...]) -> None:
    if t.device.type != "cpu" or not hasattr(os, "posix_fallocate"):
        return
    name = t.untyped_storage().filename
    if name is None:
        return
    span = _row_span(t, index)
    if span is None:
        return
    item = t.element_size()
    row = (t.stride(0) if t.ndim else 1) * item
    start = int(t.storage_offset()) * item + span[0] * row  # an int on CPU (SymInt: tracing)
    length = (span[1] - span[0] + 1) * row if t.ndim else item
    if length <= 0:
        return
    fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC)
    try:
        fallocate(
            fd,
            start,
            length,
            lambda: (
                f"no space left on the device to write rows {span[0]}..{span[1]} of key "
                f"{format_key(key)} ({length} bytes of {name}); nothing was written: free "
                "space and write the rows again"
            ),
        )
    finally:
        os.close(fd)


def fallocate(fd: int, start: int, length: int, full: Callable[[], str]) -> bool:
    """Reserve the blocks of ``length`` bytes from ``start`` (``posix_fallocate``):
    True when done, False where the file system cannot (EOPNOTSUPP, EINVAL). A full
    disk is an ENOSPC ``OSError`` with the message ``full()`` (built only then)."""
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise OSError(errno.ENOSPC, full()) from None
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        return False
    return True


def reserve_rows(td: Any, index: Any, path: tuple[str, ...] = ()) -> None:
    """Reserve, in every file-backed leaf of ``td``, the rows ``td[index] = ...`` writes."""
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            _reserve(v, index, (*path, k))
        elif is_coll(v):
            reserve_rows(v, index, (*path, k))


def reserve_leaf(t: Tensor, key: tuple[str, ...] = ()) -> None:
    """Reserve every byte of ``t`` in its file (nothing for a tensor in memory)."""
    _reserve(t, Ellipsis, key)


def reserve_all(pairs: Any) -> None:
    """Reserve each ``(tensor, key)`` of ``pairs``: a full disk raises before any copy."""
    for t, key in pairs:
        _reserve(t, Ellipsis, key)
