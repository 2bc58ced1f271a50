"""The built-in storage backends: a folder, an archive, a ``.safetensors`` file, a URL.

Each is one class over :class:`~tensorbox._storage.resolve.Backend`, registered by
name in :data:`tensorbox._storage.resolve.BACKENDS` and chosen by
:func:`~tensorbox._storage.resolve.resolve`; the entry points of
:mod:`tensorbox._storage.api` only call the backend they are given.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> from tensorbox._storage.resolve import resolve
>>> path = tempfile.mkdtemp() + "/t.tdz"
>>> b = resolve(path, save=True)
>>> type(b).__name__, b.exists()
('ArchiveBackend', False)
>>> _ = TensorDict(a=torch.arange(3), batch_size=[3]).memmap(path)
>>> type(resolve(path)).__name__, resolve(path).exists()
('ArchiveBackend', True)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch

from tensorbox._storage import backed as _backed
from tensorbox._storage import commit as _commit
from tensorbox._storage import remote as _remote
from tensorbox._storage.api import load_from
from tensorbox._storage.archive import store as _archive
from tensorbox._storage.backed import run
from tensorbox._storage.folder import FolderStore
from tensorbox._storage.format.spec import META
from tensorbox._storage.memmap_tensor import _check_mode
from tensorbox._storage.resolve import Backend, Where, is_zarr_store
from tensorbox._storage.save import Saver
from tensorbox._storage.store import Store
from tensorbox.errors import FormatError

__all__ = [
    "ArchiveBackend",
    "FolderBackend",
    "H5FileBackend",
    "RemoteBackend",
    "SafetensorsBackend",
    "StoreBackend",
    "ZarrFolderBackend",
    "store_backend",
]


def _mapped(device: torch.device | None) -> torch.device | None:
    """``load_memmap(device="cpu")`` keeps the leaves mapped, as tensordict does: they are
    in CPU memory already, and on a folder writes reach the files (None: no copy)."""
    return None if device is not None and device.type == "cpu" else device


class FolderBackend(Backend):
    """A folder tree (``meta.json`` and one file per leaf): read, saved, changed in place.
    No path at all is anonymous shared memory."""

    name = "folder"
    writable = True
    in_place = True

    def exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        p = self.where.path
        return p is not None and (os.path.isfile(p) or os.path.exists(os.path.join(p, META)))

    def store(self) -> FolderStore | None:
        """The folder store a save writes (None: anonymous shared memory)."""
        p = self.where.path
        if p is None:
            return None
        if os.path.isfile(p):
            _archive.refuse_folder_over(p)
        elif is_zarr_store(p):  # its files and a tree's would mix, and meta.json hide it
            raise FileExistsError(
                f"{p!r} is a zarr store, which is read-only: a tree cannot be saved into it. "
                "Save to another path, or remove the store first"
            )
        return FolderStore(os.path.realpath(p))

    def save(self, obj: Any, **options: Any) -> Any:
        layout, checksum = options["layout"], options["checksum"]
        if layout != "tensorbox" and checksum:
            raise ValueError(
                f"format={layout!r} has nowhere to record checksums: save with "
                "tensorbox's format for checksum=True"
            )
        saver = Saver(self.store(), "copy", True, options["fsync"], checksum=checksum,
                      layout=layout)  # fmt: skip
        saver.progress = options["progress"]
        return run(saver, obj, options["num_threads"])

    def save_in_place(self, what: str) -> FolderStore | None:
        return self.store()

    def load(self, cls: type, **o: Any) -> Any:
        dev, mode, fit = _mapped(o["device"]), o["mode"], o["fit"]
        nb, verify = o["non_blocking"], o["verify"]
        must_write = mode == "r+"  # asked for: an unwritable file raises (None falls back)
        mode = "r+" if mode is None else mode
        _check_mode(mode)
        root = os.path.realpath(os.fspath(self.where.prefix))
        lock = _commit.read_lock(root)
        store = FolderStore(root)
        try:
            copies: list[str] = []
            obj = load_from(
                FolderStore(root, must_write), "", cls, dev, nb, mode, verify, fit,
                lock=False, copies=copies,
            )  # fmt: skip
            if copies and mode == "r+":  # a tensordict lazy stack loads as a dense copy
                if must_write:
                    raise FormatError(
                        f"{copies[0]}: a tensordict lazy stack loads as a dense copy, which "
                        "writes would not reach; open the tree with mode='r'"
                    )
                mode = "r"  # all of it copy-on-write, so no write half-reaches the files
                obj = load_from(store, "", cls, dev, nb, mode, False, fit, lock=False)
            backed = mode == "r+" and dev is None  # writes reach this tree: mode="r" is a copy
            gen = store.generation() if backed else None  # this one, while locked
        finally:
            _commit.read_unlock(lock)
        if backed:
            _backed.register(obj, store, gen)
        return obj

    @contextlib.contextmanager
    def opened(self) -> Iterator[tuple[Store, str]]:
        root = os.path.realpath(os.fspath(self.where.prefix))
        lock = _commit.read_lock(root)
        try:
            yield FolderStore(root), ""
        finally:
            _commit.read_unlock(lock)


class ArchiveBackend(Backend):
    """A one-file archive (``FILE``, or sub-tree ``FILE::DIR``): written whole, read-only."""

    name = "archive"
    writable = True

    def exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        return self.where.path is not None and os.path.isfile(self.where.path)

    def _whole(self, what: str) -> str:
        if self.where.inner:
            self._refuse(
                what,
                f"'{self.where.path}::{self.where.inner}' names the sub-tree "
                f"{self.where.inner!r} inside the archive {self.where.path!r}, and archives are "
                "written whole: save the whole tree to the archive's path, or to a folder",
            )
        return os.path.realpath(os.fspath(self.where.path or ""))

    def save(self, obj: Any, **options: Any) -> Any:
        store = _archive.ArchiveStore(self._whole("memmap"))
        saver = Saver(store, "copy", True, options["fsync"], checksum=options["checksum"],
                      compression=options["compression"])  # fmt: skip
        saver.progress = options["progress"]
        return run(saver, obj, options["num_threads"])

    def save_in_place(self, what: str) -> Any:
        self._whole(what)
        _archive.refuse_folder_over(self.where.path)
        self._refuse(what, "archives are read-only: nothing could change it in place")

    def load(self, cls: type, **o: Any) -> Any:
        found = _archive.split(self.where.prefix)
        if found is None:  # gone since it was resolved
            raise FileNotFoundError(f"{str(self.where.prefix)!r}: no such archive")
        file, inner = found
        mode = o["mode"]
        if mode not in (None, "r"):
            if mode == "r+":
                raise ValueError(
                    f"{file} is an archive, which opens read-only: mode='r+' would let writes "
                    "reach it. Open it with mode='r' (copy-on-write), or unpack it (python -m "
                    "tensorbox unpack FILE DIR) and open the folder with mode='r+'"
                )
            _check_mode(mode)
        return load_from(
            _archive.ArchiveStore(file), inner, cls, _mapped(o["device"]), o["non_blocking"],
            "r", o["verify"], o["fit"], False,
        )  # fmt: skip

    @contextlib.contextmanager
    def opened(self) -> Iterator[tuple[Store, str]]:
        found = _archive.split(self.where.prefix)
        if found is None:
            raise FileNotFoundError(f"{str(self.where.prefix)!r}: no such archive")
        yield _archive.ArchiveStore(found[0]), found[1]


class SafetensorsBackend(Backend):
    """A ``.safetensors`` file: a read-only tree of its own (``tensorbox.interop``)."""

    name = "safetensors file"
    label = "a .safetensors file"

    def exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        return self.where.path is not None and os.path.exists(self.where.path)

    def _store(self) -> Store:
        from tensorbox.interop._safetensors_layout import SafetensorsStore

        return SafetensorsStore(self.where.path)  # FILE::DIR: the sub-tree DIR of FILE

    def _rel(self) -> str:
        """The store's name of the node ``FILE::DIR`` names (dotted keys, led by ".")."""
        inner = self.where.inner
        return "." + inner.replace("/", ".") if inner else ""

    def load(self, cls: type, **o: Any) -> Any:
        mode = o["mode"]
        if mode not in (None, "r"):
            _check_mode(mode)
            raise ValueError(
                f"{os.fspath(self.where.prefix)} is {self.label}, which opens read-only: "
                "mode='r+' would let writes reach it. Open it with mode='r' (copy-on-write), "
                "or save it as a tree (td.memmap(DIR)) and open that with mode='r+'"
            )
        store = self._store()
        try:
            return load_from(store, self._rel(), cls, _mapped(o["device"]),
                             o["non_blocking"], "r", o["verify"], o["fit"], False)  # fmt: skip
        finally:
            close = getattr(store, "close", None)
            if close is not None:  # an HDF5 file: the leaves are read or mapped by now
                close()

    @contextlib.contextmanager
    def opened(self) -> Iterator[tuple[Store, str]]:
        store = self._store()
        try:
            yield store, self._rel()
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                close()


class H5FileBackend(SafetensorsBackend):
    """An HDF5 file (``.h5``/``.hdf5``): a read-only tree, a group a node and the group
    attribute ``tensorbox_batch_size`` its batch size (``tensorbox.interop``)."""

    name = "HDF5 file"
    label = "an HDF5 file"
    layout = "h5"

    def _store(self) -> Store:
        from tensorbox.interop._group_layout import GroupStore

        return GroupStore(self.where.path, self.layout)  # FILE::DIR: DIR of FILE

    def _rel(self) -> str:
        return self.where.inner


class ZarrFolderBackend(H5FileBackend):
    """A zarr v3 store folder (``zarr.json`` and no ``meta.json``), read as ``H5FileBackend``."""

    name = "zarr store"
    label = "a zarr store"
    layout = "zarr"


class RemoteBackend(Backend):
    """An archive (or a folder tree, read-only) behind a URL, through fsspec
    (:mod:`tensorbox._storage.remote`): saved as one object, read lazily."""

    name = "URL"
    writable = True

    def __init__(self, where: Where) -> None:
        super().__init__(where)
        found = _remote.split_url(where.prefix)  # an unknown scheme raises ValueError
        assert found is not None
        self.url, self.sub = found[1], found[2]

    def exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        """Whether an object is at the URL (asked of its transport: fsspec or obstore)."""
        from tensorbox._storage.remote.stores import open_transport

        transport = open_transport(self.url, storage_options)
        try:
            transport.describe("")
        except FileNotFoundError:
            return False
        return True

    def save(self, obj: Any, **options: Any) -> Any:
        if not options["archive"]:
            _remote.folder_refusal("memmap", self.where.prefix)
        from tensorbox._storage.remote.writer import UploadStore

        # The one saver; the store's writer commits by uploading one object.
        store = UploadStore(self.url, self.sub, options["storage_options"],
                            not options.get("existsok", True))  # fmt: skip
        saver = Saver(store, "copy", True, False, checksum=options["checksum"],
                      compression=options["compression"])  # fmt: skip
        saver.progress = options["progress"]
        saved = run(saver, obj, options["num_threads"])
        _remote.default_cache().release()  # mapped: a copy past the bound goes now
        return saved

    def save_in_place(self, what: str) -> Any:
        if what == "memmap_like":
            _remote.refuse(
                "memmap_like",
                self.where.prefix,
                "memmap_like allocates files to be filled in place, which object storage "
                "cannot do; fill a local tree (or a container) and save it with "
                "memmap(url, archive=True)",
            )
        _remote.folder_refusal(what, self.where.prefix)

    def load(self, cls: type, **o: Any) -> Any:
        from tensorbox._storage import remote_tree as _remote_tree

        _remote.check_mode(self.where.prefix, o["mode"])
        store = _remote_tree.open_url(self.url, o["storage_options"], o["cache"])
        obj = load_from(store, self.sub or "", cls, o["device"], o["non_blocking"], "r",
                        o["verify"], o["fit"], False)  # fmt: skip
        if o["prefetch"]:
            _remote_tree.prefetch(obj).result()
        return obj

    @contextlib.contextmanager
    def opened(self) -> Iterator[tuple[Store, str]]:
        from tensorbox._storage import remote_tree as _remote_tree

        yield _remote_tree.open_url(self.url), self.sub or ""


class StoreBackend(Backend):
    """The backend of a :class:`~tensorbox._storage.store.Store` class registered alone
    (``register_backend("name", "module:StoreClass", schemes=...)``): the store is made
    with the path or URL (``store_class(path)``), and every entry point goes through it.
    Saves need its :meth:`~tensorbox._storage.store.Store.writer`; a store that commits in
    place (``in_place``) keeps what it saves and loads (``mode="r+"``) live."""

    #: The store class, made with the path or URL alone.
    store_class: ClassVar[type[Store]]

    def _store(self, what: str) -> Store:
        if self.where.path is None:
            self._refuse(what, "no path or URL given")
        make: Callable[[str], Store] = self.store_class
        return make(self.where.path)

    def exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        try:
            self._store("exists").read_meta("")
        except FileNotFoundError:
            return False
        return True  # a tree there, whole or not: existsok=False refuses both

    def save(self, obj: Any, **options: Any) -> Any:
        if self.where.inner:
            self._refuse("memmap", "a tree is saved whole: drop '::' and what follows")
        saver = Saver(self._store("memmap"), "copy", True, options["fsync"],
                      checksum=options["checksum"], layout=options["layout"])  # fmt: skip
        saver.progress = options["progress"]
        return run(saver, obj, options["num_threads"])

    def save_in_place(self, what: str) -> Store:
        if self.where.inner:
            self._refuse(what, "a tree is saved whole: drop '::' and what follows")
        return self._store(what).live(what)

    def load(self, cls: type, **o: Any) -> Any:
        store = self._store("load_memmap")
        mode = o["mode"] or ("r+" if store.in_place else "r")
        _check_mode(mode)
        if mode == "r+":
            store.live("load_memmap(mode='r+')")
        dev = _mapped(o["device"])
        inner = self.where.inner
        obj = load_from(store, inner, cls, dev, o["non_blocking"], mode, o["verify"], o["fit"],
                        lock=False)  # fmt: skip
        if mode == "r+" and dev is None:  # writes reach this tree: it is live
            tree = store.subtree(inner) if inner else store
            _backed.register(obj, tree, tree.generation())
        return obj

    @contextlib.contextmanager
    def opened(self) -> Iterator[tuple[Store, str]]:
        yield self._store("open"), self.where.inner


def store_backend(store_class: type[Store], name: str) -> type[StoreBackend]:
    """The :class:`StoreBackend` of ``store_class`` (registered as ``name``)."""
    return type(
        f"{store_class.__name__}Backend",
        (StoreBackend,),
        {"store_class": store_class, "name": name, "writable": True,
         "in_place": store_class.in_place, "__module__": __name__},
    )  # fmt: skip
