"""Saving containers and opening them again (memmap_, memmap, memmap_like, load_memmap).

The public entry points: each resolves its path once, with
:func:`~tensorbox._storage.resolve.resolve` (a folder, an archive, a ``.safetensors``
file, a URL, or a registered backend: :mod:`tensorbox._storage.backends`), and the
backend takes the writer or reader lock and runs the one
:class:`~tensorbox._storage.save.Saver` or :class:`~tensorbox._storage.load.Loader`
over its store. This module was ``persist.py`` (that name still imports). The format is specified in
:mod:`tensorbox._storage.format.spec`.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> path = tempfile.mkdtemp()
>>> td = TensorDict({"obs": torch.arange(6.0).reshape(3, 2), "info": {"id": torch.arange(3)},
...                  "name": "run-1"}, batch_size=[3])
>>> saved = td.memmap(path)          # files written, mapped back, locked
>>> saved.is_memmap(), saved.is_locked
(True, True)
>>> back = TensorDict.load_memmap(path)   # lazy: nothing is read until used
>>> back["info", "id"].tolist(), back["name"]
([0, 1, 2], 'run-1')
>>> TensorDict.load_memmap(f"{path}/info")["id"].tolist()   # any node opens on its own
[0, 1, 2]

Semantics of repeated calls:

- ``memmap_()`` on data that is already mapped keeps its files (or shared memory);
  on a tree-backed container (one returned by a save or a load) it saves every
  pending change into its own tree. Other writes to a tree-backed container are
  saved as they happen (:mod:`tensorbox._storage.writethrough`).
- ``memmap_(prefix)`` on data mapped elsewhere raises, unless ``copy_existing=True``.
- Saving again at the same ``prefix`` builds the whole new tree beside the old one
  and swaps it in at once (:mod:`tensorbox._storage.commit`): unchanged files are
  hard-linked, changed leaves go to new files (so nothing already mapped, including
  the data being saved, sees its file change underneath it), and a failed or killed
  save leaves the old tree.
- ``prefix=None`` keeps the tensors in anonymous shared memory: no files, nothing
  to clean up, shared without copies with DataLoader workers.

Loading never unpickles and never imports: a tensorclass is rebuilt from the
class passed by the caller (``MyClass.load_memmap(path)``) or from the classes
registered by ``@tensorclass`` in this process. Otherwise the node loads as a
``TensorDict`` and :func:`saved_type` tells what it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from tensorbox._core.jagged import NJT, parts
from tensorbox._core.tree import CLASS_REGISTRY, iter_shaped
from tensorbox._storage import backed as _backed
from tensorbox._storage import resolve as _resolve
from tensorbox._storage import writethrough as _persist_writes
from tensorbox._storage.archive import store as _archive
from tensorbox._storage.backed import run
from tensorbox._storage.load import Loader, _fit, saved_type
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.resolve import resolve
from tensorbox._storage.save import Saver
from tensorbox._storage.store import Node, Store, verify

__all__ = [
    "is_memmap",
    "load_from",
    "load_memmap",
    "memmap",
    "memmap_",
    "memmap_like",
    "opened",
    "save_to",
    "saved_type",
]


# ---------------------------------------------------------------- public functions


def memmap_(
    obj: Any,
    prefix: Any = None,
    *,
    num_threads: int = 0,
    copy_existing: bool = False,
    fsync: bool = False,
    checksum: bool = False,
    progress: bool | None = None,
    _expect: tuple[int, int] | None = None,
) -> Any:
    """Convert ``obj`` in place: every tensor leaf becomes a MemoryMappedTensor; lock it.

    With no ``prefix``, a tree-backed ``obj`` (or a node of one) is saved into its own
    tree, pending changes included (:mod:`tensorbox._storage.writethrough`); any other
    ``obj`` moves to anonymous shared memory.
    """
    target = resolve(prefix, archive=False, save=True).save_in_place("memmap_")
    if prefix is None:
        found = _backed.tree_of(obj)
        if found is not None:
            _persist_writes.commit(*found, num_threads=num_threads, fsync=fsync, checksum=checksum)
            return obj.lock_()
    saver = Saver(target, "inplace", copy_existing, fsync, checksum=checksum)
    saver.progress = progress
    run(saver, obj, num_threads, expect=_expect)
    return obj


def memmap(
    obj: Any,
    prefix: Any = None,
    *,
    num_threads: int = 0,
    fsync: bool = False,
    checksum: bool = False,
    progress: bool | None = None,
    archive: bool = False,
    compression: Any = None,
    storage_options: dict[str, Any] | None = None,
    layout: str = "tensorbox",
    existsok: bool = True,
) -> Any:
    """A memory-mapped copy of ``obj`` (locked); ``obj`` is unchanged.

    ``checksum=True`` records each tensor's SHA-256 in ``meta.json``, which
    ``load_memmap(..., verify=True)`` and ``python -m tensorbox verify --read`` check
    (off by default: hashing runs slower than writing). ``archive=True`` writes one
    file instead of a folder (:mod:`tensorbox._storage.archive.store`), ``compression``
    compresses its leaves. A URL ``prefix`` takes archives only
    (:mod:`tensorbox._storage.remote`). ``layout="tensordict"`` writes tensordict's own
    folder layout (:mod:`tensorbox._storage.format.legacy`). ``existsok=False`` (looked
    at first by :func:`refuse_existing`) makes a URL's upload conditional where the
    transport can (:func:`tensorbox._storage.remote.upload`).
    """
    backend = resolve(prefix, archive=archive, save=True)
    if layout != "tensorbox" and (archive or backend.name != "folder"):
        raise ValueError(
            f"format={layout!r} writes a folder: pass a local folder path without "
            "archive=True (tensorbox's archives use tensorbox's format)"
        )
    if archive and prefix is None:
        raise ValueError("archive=True needs a file path to write (prefix is None)")
    return backend.save(
        obj,
        num_threads=num_threads,
        fsync=fsync,
        checksum=checksum,
        progress=progress,
        archive=archive,
        compression=compression,
        storage_options=storage_options,
        layout=layout,
        existsok=existsok,
    )


def memmap_like(
    obj: Any,
    prefix: Any = None,
    *,
    num_threads: int = 0,
    fsync: bool = False,
    sparse: bool = True,
    checksum: bool = False,
    progress: bool | None = None,
) -> Any:
    """Zero-filled files of ``obj``'s structure; no data is read or copied.

    The files are sparse by default (as tensordict): ``memmap_like`` of a container
    expanded to a million rows takes no disk until rows are written, and each row
    write through the container reserves its blocks first (``_storage.reserve``), so a
    full disk is an ``OSError`` then. ``sparse=False`` reserves every block now
    (``posix_fallocate``): a disk too small is an ``OSError`` here.
    """
    target = resolve(prefix, archive=False, save=True).save_in_place("memmap_like")
    saver = Saver(target, "like", True, fsync, sparse=sparse, checksum=checksum)
    saver.progress = progress
    return run(saver, obj, num_threads)


def load_memmap(
    cls: type,
    prefix: Any,
    *,
    device: Any = None,
    non_blocking: bool = False,
    mode: str | None = None,
    verify: bool = False,
    strict: bool = True,
    storage_options: dict[str, Any] | None = None,
    cache: bool = True,
    prefetch: bool = False,
) -> Any:
    """Open the tree at ``prefix`` lazily, as ``cls`` (see the module doc), unlocked (as
    tensordict): keys set or removed are saved to a folder tree at once (write-through).

    A file at ``prefix`` (or ``FILE::DIR``, a sub-tree) is an archive
    (:mod:`tensorbox._storage.archive.store`): read-only, ``mode`` None or ``"r"``.

    ``mode="r+"`` maps the files shared (writes reach them; a file this process may
    not write raises ``PermissionError`` naming it), ``mode=None`` (the default) the
    same but files it may not write open as ``"r"``, ``mode="r"`` copy-on-write (the files never change:
    fine-tuning loaded weights in place leaves the checkpoint alone). With
    ``device``, every leaf is copied there; ``"cpu"`` keeps the leaves mapped (they are in
    CPU memory already), as tensordict does, so writes reach a folder's files.
    ``verify=True`` first reads every byte and checks the checksums the save recorded
    (FormatError naming the file when one differs).

    A tensorclass that gained a field with a default since the save loads the tree
    with the default filled in. One that lost a field refuses a tree holding it
    (FormatError naming the field) unless ``strict=False``, which leaves it out.

    The tree opened is one generation: a save running at the same path is waited
    for only while it swaps the trees (see :mod:`tensorbox._storage.commit`).
    """
    return resolve(prefix).load(
        cls,
        device=None if device is None else torch.device(device),
        non_blocking=non_blocking,
        mode=mode,
        verify=verify,
        fit=_fit(cls, strict),
        storage_options=storage_options,
        cache=cache,
        prefetch=prefetch,
    )


def load_from(
    store: Store,
    rel: str = "",
    cls: type | None = None,
    device: torch.device | None = None,
    non_blocking: bool = False,
    mode: str = "r",
    check: bool = False,
    fit: str = "fallback",
    lock: bool = True,
    top: Node | None = None,
    copies: list[str] | None = None,
) -> Any:
    """The container saved in ``store`` (node ``rel``, already read as ``top``), as
    ``cls``; ``check`` reads every byte first (:func:`~tensorbox._storage.store.verify`).
    Locked unless ``lock=False``. ``copies`` receives the nodes loaded as copies."""
    loader = Loader(store, CLASS_REGISTRY, device, non_blocking, mode, fit)
    top = top or store.node(rel)
    if check:
        verify(store, rel, top)
    obj = loader.node(top, cls, 0)
    if copies is not None:  # the nodes loaded as copies, for a caller that maps r+
        copies.extend(loader.copies)
    return obj.lock_() if lock else obj


def save_to(obj: Any, store: Store, *, num_threads: int = 0, checksum: bool = False) -> Any:
    """Save a copy of ``obj`` into ``store`` (any store with a writer); the saved copy."""
    return Saver(store, "copy", True, False, checksum=checksum).run(obj, num_threads).lock_()


def is_memmap(obj: Any) -> bool:
    """True when every tensor leaf is a MemoryMappedTensor (and there is one, or it is locked)."""
    found = False
    for _, t in iter_shaped(obj):
        if type(t) is NJT:  # mapped when its offsets are (values() is a plain view)
            t = parts(t)[1]
        if not isinstance(t, MemoryMappedTensor):
            return False
        found = True
    return found or obj.is_locked


# ---------------------------------------------------------------- resolving paths


@contextlib.contextmanager
def opened(prefix: Any) -> Iterator[tuple[Store, str]]:
    """``(store, node)`` of the tree a user names by ``prefix``: an archive (``FILE`` or
    ``FILE::DIR``, or a URL of one, read from the local cache) or a folder, read-locked
    meanwhile (one generation)."""
    with resolve(prefix).opened() as found:
        yield found


# ------------------------------------------ the rest of the core's persistence port
# (``tensorbox._core.ports.Persistence``): what the container's methods call besides
# the four entry points above.


def wants_archive(prefix: Any, archive: bool | None, compression: Any) -> bool:
    """Whether a save to ``prefix`` writes one archive file (``archive=None``: a ``.tdz``
    name does)."""
    return bool(_archive.wanted(prefix, archive, compression))


def refuse_existing(
    prefix: Any, existsok: bool, storage_options: Any = None, archive: bool | None = None
) -> None:
    """Raise ``TreeExistsError`` when ``existsok`` is False and ``prefix`` holds a tree, or
    for a URL an object (:func:`tensorbox._storage.resolve.refuse_existing`)."""
    _resolve.refuse_existing(prefix, existsok, storage_options, archive)


def extend_(td: Any, rows: Any, *, fsync: bool = False) -> Any:
    """``td.extend_(rows)`` (:mod:`tensorbox._storage.extend`)."""
    from tensorbox._storage import extend as _extend

    return _extend.extend_(td, rows, fsync=fsync)


def make_new(td: Any, key: Any, shape: Any, dtype: Any) -> torch.Tensor:
    """``td.make_memmap(key, shape)`` (:mod:`tensorbox._storage.make_entry`)."""
    from tensorbox._storage import make_entry

    return make_entry.make_new(td, key, shape, dtype)


def make_from_tensor(td: Any, key: Any, tensor: Any, copy_data: bool) -> torch.Tensor:
    """``td.make_memmap_from_tensor(key, tensor)``."""
    from tensorbox._storage import make_entry

    return make_entry.make_from_tensor(td, key, tensor, copy_data)


def make_from_storage(td: Any, key: Any, storage: Any, shape: Any, dtype: Any) -> torch.Tensor:
    """``td.make_memmap_from_storage(key, storage, shape)``."""
    from tensorbox._storage import make_entry

    return make_entry.make_from_storage(td, key, storage, shape, dtype)
