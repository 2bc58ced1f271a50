"""The slot tree: one memory-mapped TensorDict (or tensorclass) with a leading slot dim.

``allocate`` expands a one-sample layout to ``[capacity, batch_size, ...]`` and maps it
with ``memmap_like`` into a fresh folder ``tensorbox-buffer-XXXX`` under the root
(``/dev/shm`` by default): slot ``s`` is ``slots[s]``, a batch. Producer processes get
the tree pickled by file name and map the same files, so a batch written by a producer
is visible to the consumer without any copy.

Files are allocated up front (``posix_fallocate``), which on tmpfs costs about 0.1 s per
GiB here and buys two things: a buffer too big for the RAM disk fails now with a clear
``OSError`` instead of killing a producer with SIGBUS later, and first writes run about 4x
faster than page faults on a sparse file would let them.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from typing import Any

from tensorbox.buffer._plan import flatten, sample_nbytes

__all__ = ["allocate", "default_root", "parse_bytes", "remove"]

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10**3,
    "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
    "g": 1 << 30, "gib": 1 << 30, "gb": 10**9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10**12,
}  # fmt: skip


def parse_bytes(value: int | str) -> int:
    """``"2GiB"`` -> 2147483648; ``"1.5GB"`` -> 1500000000; an int is taken as bytes.

    >>> parse_bytes("512MiB"), parse_bytes("2G"), parse_bytes(1000)
    (536870912, 2147483648, 1000)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"capacity_bytes={value!r} is not a size; use an int (bytes) or a string such as "
            "'512MiB', '4GiB' or '2GB'"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def default_root() -> str:
    """``/dev/shm`` (RAM, shared between processes) when usable, else the temp folder."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def _memmap_like(expanded: Any, prefix: str) -> Any:
    return expanded.memmap_like(prefix)


def _fallocate(slots: Any, root: str) -> None:
    for path, t in flatten(slots, consts={}):
        name = t.untyped_storage().filename
        nbytes = t.untyped_storage().nbytes()
        if name is None or not nbytes:
            continue
        fd = os.open(name, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as err:
            if err.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # e.g. some network file systems
                return
            raise OSError(
                err.errno,
                f"cannot allocate {nbytes} bytes for buffer slots of key {path!r} in {root!r} "
                f"({err.strerror}); lower capacity or pass another dir=",
            ) from None
        finally:
            os.close(fd)


def allocate(
    layout: Any, capacity: int, batch_size: int, root: str, preallocate: bool
) -> tuple[Any, str]:
    """Slots ``[capacity, batch_size, *layout.batch_size]`` under a new folder in ``root``.

    Returns ``(slots, folder)``; the caller owns the folder and removes it with ``remove``.
    """
    need = capacity * batch_size * sample_nbytes(layout)
    os.makedirs(root, exist_ok=True)
    free = shutil.disk_usage(root).free
    if need > free:
        raise OSError(
            errno.ENOSPC,
            f"buffer slots need {need / 2**30:.2f} GiB ({capacity} batches of "
            f"{batch_size * sample_nbytes(layout) / 2**20:.1f} MiB) but {root!r} has "
            f"{free / 2**30:.2f} GiB free; lower capacity / capacity_bytes or pass another dir=",
        )
    folder = tempfile.mkdtemp(prefix="tensorbox-buffer-", dir=root)
    try:
        expanded = _expand(layout, capacity, batch_size)
        slots = _memmap_like(expanded, os.path.join(folder, "slots"))
        if preallocate:
            _fallocate(slots, root)
    except BaseException:
        remove(folder)
        raise
    return slots, folder


def _expand(layout: Any, capacity: int, batch_size: int) -> Any:
    """``layout`` expanded to ``(capacity, batch_size, ...)``, each non-tensor value kept
    as one value shared by every slot row (``expand`` gives one per element, as
    tensordict; slots hold one value for every sample)."""
    out = layout.expand(capacity, batch_size, *layout.batch_size)
    _share(out, layout)
    return out


def _share(out: Any, src: Any) -> None:
    from tensorbox import NonTensorData, is_tensor_collection

    for k, v in src._tensordict.items():
        if type(v) is NonTensorData and not v.stacked:
            out._tensordict[k] = NonTensorData(v.data)
        elif is_tensor_collection(v):
            _share(out._tensordict[k], v)


def in_memory(layout: Any, capacity: int, batch_size: int) -> Any:
    """Slots in this process's own memory (inline mode: no producer needs to see them)."""
    import torch

    expanded = _expand(layout, capacity, batch_size)
    return expanded.apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=t.device))


def remove(folder: str | None) -> None:
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
