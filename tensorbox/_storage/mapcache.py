"""One mapping per file per process for unpickled read-only references.

A view of an archive pickles as a reference to the whole archive file (its leaves
are views of one mapping of it); unpickling each leaf on its own would map the
whole archive once per leaf. References opened read-only (``mode="r"``: private,
copy-on-write mappings) to the same file share one mapping while any tensor uses it,
as the leaves of one load do. The key is the file's identity and state: path,
(device, inode), size, modification and change times and generation id, so a file
replaced since (a new archive renamed in is a new inode) or rewritten in place gets a
new mapping, never a stale one (and a reference that recorded the file's state refuses
a file rewritten in place: :class:`~tensorbox._storage.fileref.FileRef`).

>>> import os, pickle, tempfile, torch
>>> from tensorbox import TensorDict
>>> path = os.path.join(tempfile.mkdtemp(), "m.tbx")
>>> td = TensorDict({"a": torch.zeros(3), "b": torch.ones(3)}, [3]).memmap(path, archive=True)
>>> a, b = pickle.loads(pickle.dumps([td["a"], td["b"]]))
>>> a.untyped_storage() is b.untyped_storage()
True
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["mapped"]

_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def mapped(
    path: str,
    mode: str,
    nbytes: int,
    st: os.stat_result,
    gen: str | None,
    _map_storage: Callable[[str, str, int, tuple[int, int]], Any],
    stamp: Any = None,
) -> Any:
    """The storage mapping ``nbytes`` of ``path`` (whose ``os.stat`` is ``st``), tagged
    with its generation ``gen`` (and ``stamp``, the file's state a reference recorded);
    read-only mappings of one file state are shared. ``_map_storage(path, mode, nbytes,
    ident)`` maps a file (the memory-mapped tensor module's, passed in: this cache sits
    below it)."""
    ident = (st.st_dev, st.st_ino)
    if mode != "r":  # a shared (writable) mapping: one per reference, as before
        storage = _map_storage(path, mode, nbytes, ident)
        storage._tbx_gen = gen
        return storage
    key = (path, nbytes, ident, st.st_size, st.st_mtime_ns, st.st_ctime_ns, gen)
    with _LOCK:  # two threads unpickling leaves of one archive map it once
        storage = _SHARED.get(key)
        if storage is None:
            storage = _map_storage(path, mode, nbytes, ident)
            storage._tbx_gen = gen
            storage._tbx_stamp = None if stamp is None else tuple(stamp)
            _SHARED[key] = storage
    return storage
