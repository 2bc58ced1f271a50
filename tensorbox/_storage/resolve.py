"""Which backend a path or URL names: the one grammar every entry point goes through.

``memmap``/``memmap_``/``memmap_like``, ``load_memmap``, ``existsok=False``, the CLI
(``opened``) and the path storage of ``from_schema`` (``storage="memmap"``, through
``memmap_like``) all call :func:`resolve`. It reads a ``prefix`` once, by table:

1. ``scheme://...``: the backend registered for the scheme (:data:`SCHEMES`), else
   the remote backend (fsspec's schemes: ``s3``, ``gs``, ``http``, ``memory``...; an
   unknown one raises ``ValueError``);
2. ``FILE::DIR``: sub-tree ``DIR`` of the archive ``FILE`` when ``FILE`` is a file, or,
   for a save that writes an archive, always (a save never creates a file named
   ``a.tdz::sub``: archives are written whole, so it is refused, naming the archive);
3. an existing file, by suffix (:data:`SUFFIXES`: ``.safetensors``, ``.h5``/``.hdf5``),
   else an archive;
4. a folder holding ``zarr.json`` and no ``meta.json``: a zarr store (read-only);
5. anything else: a folder (``None``: anonymous shared memory).

Each backend is one class (:class:`Backend`), named in :data:`BACKENDS` by a lazy
``"module:Class"`` path and imported on first use, as fsspec's registry does
(``fsspec.registry.known_implementations``). A new backend is one class and one
:func:`register_backend` line. The class may be a
:class:`~tensorbox._storage.store.Store` alone, made with the path or URL (``cls(path)``):
the generic backend over it (:func:`tensorbox._storage.backends.store_backend`) loads,
saves and answers ``existsok`` through the store, and when the store commits in place
(``Store.in_place``) its trees are live (write-through, ``extend_``, ``make_memmap``):

>>> from tensorbox._storage.resolve import register_backend, resolve
>>> type(resolve("/tmp/no/such/tree")).__name__
'FolderBackend'
>>> register_backend("demo", "tensorbox._storage.backends:FolderBackend", schemes=("demo",))
>>> b = resolve("demo://somewhere::inner")
>>> type(b).__name__, b.where.path, b.where.inner
('FolderBackend', 'demo://somewhere', 'inner')
>>> unregister_backend("demo")
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import import_module
from typing import Any, ClassVar, NoReturn

from tensorbox._storage.format.spec import META
from tensorbox.errors import TreeExistsError

__all__ = [
    "BACKENDS",
    "SCHEMES",
    "SEP",
    "SUFFIXES",
    "Backend",
    "Where",
    "register_backend",
    "resolve",
    "unregister_backend",
]

#: ``FILE::DIR`` (and ``URL::DIR``): the sub-tree ``DIR`` inside the archive ``FILE``.
SEP = "::"
#: tensordict's archive suffix: a save to a path ending with it writes an archive.
ARCHIVE_SUFFIX = ".tdz"

#: backend name -> ``"module:Class"``, imported on first use.
BACKENDS: dict[str, str] = {
    "folder": "tensorbox._storage.backends:FolderBackend",
    "archive": "tensorbox._storage.backends:ArchiveBackend",
    "safetensors": "tensorbox._storage.backends:SafetensorsBackend",
    "h5": "tensorbox._storage.backends:H5FileBackend",
    "zarr": "tensorbox._storage.backends:ZarrFolderBackend",
    "remote": "tensorbox._storage.backends:RemoteBackend",
}
#: The generic backend over a ``Store`` class registered alone (a lazy path, as above).
_STORE_BACKEND = "tensorbox._storage.backends:store_backend"
#: URL scheme -> backend name; a scheme not listed goes to ``"remote"`` (fsspec).
SCHEMES: dict[str, str] = {}
#: suffix of an existing file -> backend name; any other file is an archive.
SUFFIXES: dict[str, str] = {".safetensors": "safetensors", ".h5": "h5", ".hdf5": "h5"}

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_LOADED: dict[str, type[Backend]] = {}


@dataclass(frozen=True)
class Where:
    """A place a tree is, as :func:`resolve` read it."""

    prefix: Any  # what the caller passed
    path: str | None  # the file, folder or URL (without ``::DIR``); None: shared memory
    inner: str = ""  # the sub-tree inside it (``FILE::DIR``)
    scheme: str | None = None  # the URL scheme, None for a local path


class Backend:
    """One kind of place a tree can be: how it is opened, saved and tested.

    A backend overrides what it can do; the rest refuses with an error naming the
    place. ``writable`` (a save can write it), ``in_place`` (a saved tree takes
    changes where it is: write-through, ``extend_``, ``memmap_like``) are its
    capabilities.
    """

    name: ClassVar[str] = "backend"
    writable: ClassVar[bool] = False
    in_place: ClassVar[bool] = False

    def __init__(self, where: Where) -> None:
        self.where = where

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where.prefix!r})"

    def _refuse(self, what: str, why: str) -> NoReturn:
        raise ValueError(f"{what}({_shown(str(self.where.prefix))!r}): {why}")

    def exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        """Whether a tree (or an object) is there already (``existsok=False`` refuses)."""
        return False

    def load(self, cls: type, **options: Any) -> Any:
        """The tree here, opened lazily as ``cls`` (``load_memmap``'s options)."""
        self._refuse("load_memmap", f"a {self.name} cannot be opened as a tree")

    def save(self, obj: Any, **options: Any) -> Any:
        """A saved copy of ``obj`` written here (``memmap``'s options)."""
        self._refuse("memmap", f"a {self.name} is read-only: nothing can be saved there")

    def save_in_place(self, what: str) -> Any:
        """The store ``memmap_``/``memmap_like`` write (a tree that takes later writes)."""
        self._refuse(what, f"a {self.name} cannot hold a tree that changes in place")

    @contextlib.contextmanager
    def opened(self) -> Iterator[tuple[Any, str]]:
        """``(store, node)`` of the tree here, read-locked meanwhile (the CLI)."""
        self._refuse("open", f"a {self.name} cannot be opened as a tree")
        yield None, ""  # pragma: no cover


def register_backend(
    name: str,
    path: str,
    *,
    schemes: tuple[str, ...] = (),
    suffixes: tuple[str, ...] = (),
) -> None:
    """Make ``name`` the backend of ``"module:Class"`` (imported on first use), for URLs
    of ``schemes`` and existing files ending with ``suffixes``.

    >>> register_backend("mine", "tensorbox._storage.backends:ArchiveBackend", suffixes=(".mine",))
    >>> SUFFIXES[".mine"]
    'mine'
    >>> unregister_backend("mine")
    """
    module, sep, cls = path.partition(":")
    if not (sep and module and cls):
        raise ValueError(
            f"register_backend({name!r}, {path!r}): the class path must be 'module:Class'"
        )
    BACKENDS[name] = path
    _LOADED.pop(name, None)
    for s in schemes:
        SCHEMES[s.lower()] = name
    for s in suffixes:
        SUFFIXES[s] = name


def unregister_backend(name: str) -> None:
    """Forget the backend ``name`` and the schemes and suffixes that named it."""
    BACKENDS.pop(name, None)
    _LOADED.pop(name, None)
    for table in (SCHEMES, SUFFIXES):
        for key in [k for k, v in table.items() if v == name]:
            del table[key]


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name``, imported on first use."""
    found = _LOADED.get(name)
    if found is None:
        path = BACKENDS.get(name)
        if path is None:
            raise ValueError(f"no storage backend is registered as {name!r} ({sorted(BACKENDS)})")
        module, _, attr = path.partition(":")
        where = f"storage backend {name!r} ({path!r})"
        try:
            found = getattr(import_module(module), attr)
        except ImportError as err:  # a typo in the path, or the package is not installed
            raise ImportError(f"{where}: cannot import {module!r} ({err})") from err
        except AttributeError:
            raise ImportError(f"{where}: module {module!r} has no {attr!r}") from None
        if isinstance(found, type) and not issubclass(found, Backend):
            from tensorbox._storage.store import Store

            if issubclass(found, Store):  # a store alone: the generic backend over it
                module, _, attr = _STORE_BACKEND.partition(":")
                found = getattr(import_module(module), attr)(found, name)
        if not (isinstance(found, type) and issubclass(found, Backend)):
            raise TypeError(
                f"{where}: {attr!r} is a {type(found).__name__}, not a subclass of "
                "tensorbox._storage.resolve.Backend or tensorbox._storage.store.Store"
            )
        _LOADED[name] = found
    return found


def _is_file(path: str) -> bool:
    return os.path.isfile(path)


def resolve(prefix: Any, *, archive: bool | None = None, save: bool = False) -> Backend:
    """The backend of ``prefix`` (see the module doc). ``save``: resolved for a save,
    with ``archive`` as ``memmap`` takes it (None: a ``.tdz`` name writes an archive)."""
    if prefix is None:
        return backend_class("folder")(Where(None, None))
    if isinstance(prefix, bytes):
        prefix = os.fsdecode(prefix)
    if isinstance(prefix, str):
        m = _URL.match(prefix)
        if m is not None:
            scheme = m.group(1).lower()
            url, sep, inner = prefix.partition(SEP)
            name = SCHEMES.get(scheme, "remote")
            return backend_class(name)(Where(prefix, url, inner.strip("/") if sep else "", scheme))
    if not isinstance(prefix, str | os.PathLike):
        raise TypeError(
            f"expected a path (str or os.PathLike) or a URL, got {type(prefix).__name__}"
        )
    p = os.fsdecode(os.fspath(prefix))
    if p.endswith("/") and p.rstrip("/"):  # "x.tdz/" names x.tdz, as a save reads it
        p = prefix = p.rstrip("/")
    file, sep, inner = p.rpartition(SEP)
    if sep and _is_file(file):  # a sub-tree of the file, read as the bare file is
        return backend_class(_by_suffix(file))(Where(prefix, file, inner.strip("/")))
    if sep and save and _archive_wanted(file, archive):
        return backend_class("archive")(Where(prefix, file, inner.strip("/")))
    if save:
        if _archive_wanted(p, archive):
            return backend_class("archive")(Where(prefix, p))
        return backend_class("folder")(Where(prefix, p))
    if _is_file(p):
        return backend_class(_by_suffix(p))(Where(prefix, p))
    if is_zarr_store(p):
        return backend_class("zarr")(Where(prefix, p))  # to_zarr's folder, or another tool's
    return backend_class("folder")(Where(prefix, p))


def _shown(text: str) -> str:
    """``text`` with a URL's password masked (imported late: the remote package is heavy)."""
    if "@" not in text:
        return text
    from tensorbox._storage.remote.transport import shown

    return shown(text)


def is_zarr_store(path: str) -> bool:
    """A folder holding ``zarr.json`` and no ``meta.json``: a zarr store (read-only)."""
    return os.path.isfile(os.path.join(path, "zarr.json")) and not os.path.exists(
        os.path.join(path, META)
    )


def _by_suffix(file: str) -> str:
    """The backend of an existing file: by its suffix (:data:`SUFFIXES`), else an archive."""
    return next((v for k, v in SUFFIXES.items() if file.endswith(k)), "archive")


def _archive_wanted(path: str, archive: bool | None) -> bool:
    if archive is not None:
        return archive
    return os.path.splitext(path)[1] == ARCHIVE_SUFFIX


def refuse_existing(
    prefix: Any,
    existsok: bool,
    storage_options: dict[str, Any] | None = None,
    archive: bool | None = None,
) -> None:
    """``existsok=False``: raise ``TreeExistsError`` when ``prefix`` holds a tree (a
    folder's ``meta.json``, a file) or, for a URL, an object."""
    if existsok or prefix is None:
        return
    if resolve(prefix, archive=archive, save=True).exists(storage_options):
        raise TreeExistsError(
            f"{_shown(str(prefix))!r} already holds a saved tree (existsok=False); pass existsok=True "
            "to replace it"
        )
