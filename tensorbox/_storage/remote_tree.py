"""Trees behind URLs, read lazily: the import path of earlier versions, kept (pickles
name ``_attach`` here). The code lives in :mod:`tensorbox._storage.remote`: its
``stores``, ``leaf`` and ``tensor`` modules."""

from __future__ import annotations

from tensorbox._storage.remote.leaf import PART_BYTES, ensure, gap, request_size
from tensorbox._storage.remote.stores import (
    RemoteArchiveStore,
    RemoteFolderStore,
    _attach,
    _opened,
    open_url,
    tree_id,
)
from tensorbox._storage.remote.tensor import RemoteRef, RemoteTensor, prefetch

__all__ = [
    "PART_BYTES",
    "RemoteArchiveStore",
    "RemoteFolderStore",
    "RemoteRef",
    "RemoteTensor",
    "_attach",
    "_opened",
    "ensure",
    "gap",
    "open_url",
    "prefetch",
    "request_size",
    "tree_id",
]
