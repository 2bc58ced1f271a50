"""A save to a URL as a :class:`~tensorbox._storage.store.Writer` whose commit uploads
one object.

``memmap(url, archive=True)`` runs the one :class:`~tensorbox._storage.save.Saver` over
an :class:`UploadStore`: its writer lays the archive out as a local archive save does,
in a new file of the cache, and its commit puts that file to the URL as one object
(:func:`tensorbox._storage.remote.upload`: readers see the old object or the new one,
whole). The saved container then maps the local copy, kept in the cache.

The copy is kept under an identity tied to its own bytes, never under one read
afterwards (another writer's upload may land between a put and a look):

- where the transport returns the upload's reply (obstore: its ETag or version id),
  under that reply;
- otherwise (fsspec's put returns nothing) under the archive's tree id, the SHA-256
  of its index, which holds every entry's CRC-32 and each ``meta.json``'s new file
  ids; the next open compares it with the tree id of the object's own index, read from
  the server (:func:`tensorbox._storage.remote.local_archive`), and uses the copy only
  when they agree.

>>> import torch
>>> from tensorbox import TensorDict
>>> saved = TensorDict(x=torch.arange(3)).memmap("memory://docs-upload/t.tdz", archive=True)
>>> saved["x"].tolist(), TensorDict.load_memmap("memory://docs-upload/t.tdz")["x"].tolist()
([0, 1, 2], [0, 1, 2])
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from tensorbox._storage.archive.store import Archive, ArchiveStore, ArchiveWriter, _map

__all__ = ["UploadStore", "UploadWriter"]


class UploadStore(ArchiveStore):
    """The archive object at ``url`` as a save writes it: staged in a new file of the
    cache (``URL::DIR`` and read-only schemes refused first, naming the URL)."""

    def __init__(
        self,
        url: str,
        sub: str | None = None,
        storage_options: dict[str, Any] | None = None,
        create: bool = False,
    ) -> None:
        from tensorbox._storage import remote as _remote

        # absolute: the writer lock and the staging file sit beside it
        super().__init__(os.path.realpath(_remote.save_target(url, sub)))
        self.name, self.url, self.options = url, url, storage_options
        self.create = create  # existsok=False: the upload only where no object is

    def writer(self, **options: Any) -> UploadWriter:
        options.pop("sparse", None)
        return UploadWriter(self, **options)


class UploadWriter(ArchiveWriter):
    """An archive written to the store's local file, then uploaded at :meth:`commit`;
    nothing is at the URL until the upload, and a failure leaves no local file."""

    def __init__(self, store: UploadStore, fsync: bool = False, compression: Any = None) -> None:
        super().__init__(store.root, fsync, compression)
        self.store = store

    def abort(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root)

    def commit(self, num_threads: int = 0) -> None:
        from tensorbox._storage import remote as _remote

        try:
            super().commit(num_threads)  # the whole archive, local, mapped
        except OSError as err:  # the cache's disk (full: ENOSPC): named, with the URL
            self.abort()
            cache = _remote.default_cache()
            raise cache.failure(err, _remote.shown(self.store.url), self.root) from err
        except BaseException:
            self.abort()
            raise
        local = _remote.upload(self.root, self.store.url, self.store.options, self.store.create)
        if local != self.root:  # moved into the cache: the saved leaves map it there
            self.root = local
            if self.ar is not None:
                self.ar = Archive(local)
            else:
                self.storage = _map(local)[0]
