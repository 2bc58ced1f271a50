"""Saving containers as directory trees and opening them again (memmap_, memmap, load_memmap).

The format is specified in :mod:`tensorbox._format`. This module walks a
``TensorDict`` or tensorclass instance, writes one file per tensor leaf and one
``meta.json`` per node, and maps the files back.

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

- ``memmap_()`` on data that is already mapped keeps its files (or shared memory).
- ``memmap_(prefix)`` on data mapped elsewhere raises, unless ``copy_existing=True``.
- Saving again at the same ``prefix`` first removes the old ``meta.json`` files
  (a crash from then on leaves a tree that is refused as incomplete), writes
  every changed leaf to a new file that replaces the old one (so nothing already
  mapped, including the data being saved, sees its file change underneath it),
  writes ``meta.json`` last, then deletes the files of the old tree that the new
  one no longer uses.
- ``prefix=None`` keeps the tensors in anonymous shared memory: no files, nothing
  to clean up, shared without copies with DataLoader workers.

Loading never unpickles and never imports: a tensorclass is rebuilt from the
class passed by the caller (``MyClass.load_memmap(path)``) or from the classes
registered by ``@tensorclass`` in this process. Otherwise the node loads as a
``TensorDict`` and :func:`saved_type` tells what it was.
"""

from __future__ import annotations

import contextlib
import os
import stat
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import torch
from torch import Tensor

from . import _format as fmt
from ._keys import format_key
from ._memmap_tensor import (
    MemoryMappedTensor,
    _check_mode,
    _shared_memory,
    map_file,
    write_file,
)
from ._nontensor import NonTensorData
from ._tensordict import TensorDict, is_tensor_collection
from ._tree import CLASS_REGISTRY, is_coll, iter_shaped, type_name

__all__ = ["is_memmap", "load_memmap", "memmap", "memmap_", "memmap_like", "saved_type"]


# ---------------------------------------------------------------- public functions


def memmap_(
    obj: Any,
    prefix: Any = None,
    *,
    num_threads: int = 0,
    copy_existing: bool = False,
    fsync: bool = False,
) -> Any:
    """Convert ``obj`` in place: every tensor leaf becomes a MemoryMappedTensor; lock it."""
    _Saver(prefix, "inplace", copy_existing, fsync).run(obj, num_threads)
    return obj


def memmap(obj: Any, prefix: Any = None, *, num_threads: int = 0, fsync: bool = False) -> Any:
    """A memory-mapped copy of ``obj`` (locked); ``obj`` is unchanged."""
    return _Saver(prefix, "copy", True, fsync).run(obj, num_threads)


def memmap_like(obj: Any, prefix: Any = None, *, num_threads: int = 0, fsync: bool = False) -> Any:
    """Zero-filled files of ``obj``'s structure; no data is read or copied.

    Files are created sparse: ``memmap_like`` of a container expanded to a
    million rows takes no memory and no disk until rows are written.
    """
    return _Saver(prefix, "like", True, fsync).run(obj, num_threads)


def load_memmap(
    cls: type, prefix: Any, *, device: Any = None, non_blocking: bool = False, mode: str = "r+"
) -> Any:
    """Open the tree at ``prefix`` lazily, as ``cls`` (see the module doc), locked.

    ``mode="r+"`` maps the files shared (writes reach them; files this process may
    not write open as ``"r"``), ``mode="r"`` copy-on-write (the files never change:
    fine-tuning loaded weights in place leaves the checkpoint alone). With
    ``device``, every leaf is copied there (``"cpu"``: read into memory).
    """
    _check_mode(mode)
    root = os.path.realpath(os.fspath(prefix))
    dev = None if device is None else torch.device(device)
    loader = _Loader(root, CLASS_REGISTRY, dev, non_blocking, mode)
    obj = loader.node(fmt.read_node(root, root), cls, 0)
    obj.lock_()
    return obj


def is_memmap(obj: Any) -> bool:
    """True when every tensor leaf is a MemoryMappedTensor (and there is one, or it is locked)."""
    found = False
    for _, t in iter_shaped(obj):
        if not isinstance(t, MemoryMappedTensor):
            return False
        found = True
    return found or obj.is_locked


def saved_type(obj: Any) -> str | None:
    """The ``type`` a loaded node was saved with, when it could not be rebuilt as that class."""
    entry = _saved_types.get(id(obj))
    return entry[0] if entry is not None and entry[1]() is obj else None


# ---------------------------------------------------------------- helpers


def _type_name(obj: Any) -> str:
    return type_name(type(obj))


_saved_types: dict[int, tuple[str, Any]] = {}


def _remember_type(obj: Any, name: str) -> None:
    # TensorDict is unhashable (== is elementwise), so key by id with a weakref guard.
    key = id(obj)
    _saved_types[key] = (name, weakref.ref(obj, lambda _, key=key: _saved_types.pop(key, None)))


_CPU = torch.device("cpu")
_DTYPE_NAMES = {dt: name for name, dt in fmt.DTYPES.items()}


def _cpu(device: torch.device | None) -> torch.device | None:
    """Memory-mapped leaves live on the CPU: a fixed device becomes the CPU."""
    return None if device is None else _CPU


# ---------------------------------------------------------------- saving


class _Saver:
    """One save: walk the container, plan files and meta.json, then do the I/O.

    mode: "inplace" (memmap_), "copy" (memmap), "like" (memmap_like).
    """

    def __init__(self, prefix: Any, mode: str, copy_existing: bool, fsync: bool) -> None:
        self.root = None if prefix is None else os.path.realpath(os.fspath(prefix))
        self.mode = mode
        self.copy_existing = copy_existing
        self.fsync = fsync
        self.writes: list[tuple[str, Tensor, dict, str]] = []  # path, tensor, store, key
        self.keeps: list[str] = []  # files kept as they are (already mapped there)
        self.dirs: list[str] = []  # node directories, parents first
        # (container, its new store, parent store, key in parent, meta.json plan): post-order
        self.nodes: list[tuple[Any, dict, dict | None, str | None, tuple | None]] = []

    def run(self, obj: Any, num_threads: int) -> Any:
        self._walk(obj, self.root, (), None, None)
        if self.root is not None:
            idents = self._write_tree(num_threads)
            for (path, t, store, key), ident in zip(self.writes, idents, strict=True):
                # swapped in only once everything is written
                store[key] = map_file(path, t.dtype, tuple(t.shape), ident=ident)
        else:
            for _, t, store, key in self.writes:
                store[key] = (
                    _shared_memory(tuple(t.shape), t.dtype)
                    if self.mode == "like"
                    else MemoryMappedTensor.from_tensor(t)
                )
        result = self._build()
        result.lock_()
        return result

    # ------------------------------------------------------------ the walk

    def _walk(
        self, obj: Any, directory: str | None, path: tuple[str, ...], parent: dict | None, key: Any
    ) -> None:
        td = obj
        if directory is not None:
            self.dirs.append(directory)
        store = td._tensordict if self.mode == "inplace" else {}
        entries: dict[str, Any] = {}
        std_json = False
        for k, v in td._tensordict.items():
            kpath = (*path, k)
            if self.mode != "inplace":
                store[k] = v  # a placeholder that keeps the key order; replaced below
            if isinstance(v, Tensor):
                entries[k] = self._leaf(v, k, kpath, directory, store)
            elif is_coll(v):
                name = fmt.encode_key(k, node=True)
                entries[k] = {"kind": "node", "dir": name}
                sub = None if directory is None else f"{directory}{os.sep}{name}"
                self._walk(v, sub, kpath, store, k)
            else:
                entry, needs_std = _json_entry(v, kpath, td.batch_size)
                std_json |= needs_std
                entries[k] = entry
        meta = None
        if directory is not None:
            meta = fmt.node_meta(_type_name(obj), td.batch_size, td.device, entries)
            meta = (directory, meta, std_json)
        self.nodes.append((obj, store, parent, key, meta))

    def _leaf(
        self, t: Tensor, k: str, kpath: tuple[str, ...], directory: str | None, store: dict
    ) -> dict:
        # Error messages are built only on error: a save of many small leaves spends its
        # Python time here.
        dtype = _DTYPE_NAMES.get(t.dtype)
        if dtype is None:
            dtype = fmt.dtype_name(t.dtype, f"key {format_key(kpath)}")  # raises
        if t.layout is not torch.strided or t.is_nested:
            where = f"key {format_key(kpath)}"
            raise TypeError(f"{where} is a {t.layout} tensor; only dense tensors can be saved")
        if t.device.type == "meta" and self.mode != "like":
            where = f"key {format_key(kpath)}"
            raise TypeError(f"{where} is on the meta device and has no data to save")
        if directory is None:
            if not (self.mode == "inplace" and isinstance(t, MemoryMappedTensor)):
                self.writes.append(("", t, store, k))
            return {}
        file = fmt.encode_key(k) + fmt.SUFFIX
        target = f"{directory}{os.sep}{file}"  # an encoded name: a single plain component
        if self.mode == "inplace" and isinstance(t, MemoryMappedTensor):
            if self._same_file(t, target):
                self.keeps.append(target)
                return {"kind": "tensor", "dtype": dtype, "shape": list(t.shape), "file": file}
            where_now = t.filename or "anonymous shared memory"
            assert self.root is not None
            if not self.copy_existing and not where_now.startswith(self.root + os.sep):
                raise RuntimeError(
                    f"key {format_key(kpath)} is already memory-mapped at {where_now!r}; "
                    f"memmap_({self.root!r}) would leave it there. Pass copy_existing=True to "
                    "copy it into the new prefix, or call memmap_() without a prefix to keep "
                    "the files"
                )
        self.writes.append((target, t, store, k))
        return {"kind": "tensor", "dtype": dtype, "shape": list(t.shape), "file": file}

    @staticmethod
    def _same_file(t: MemoryMappedTensor, target: str) -> bool:
        name = t.filename
        if name is None or t.mode != "r+" or t.storage_offset() or not t.is_contiguous():
            return False
        if t.untyped_storage().nbytes() != t.numel() * t.element_size():
            return False
        if name == target:
            return True
        try:
            return os.path.basename(name) == os.path.basename(target) and os.path.samefile(
                name, target
            )
        except OSError:
            return False

    # ------------------------------------------------------------ the I/O

    def _write_tree(self, num_threads: int) -> list[tuple[int, int]]:
        """Write the files and meta.json (see the module doc); returns the files' identities."""
        assert self.root is not None
        os.makedirs(self.root, exist_ok=True)
        old_files, old_dirs = _old_tree(self.root)
        # Invalidate first: from here on a crash leaves a tree refused as incomplete.
        for d in [self.root, *self.dirs[1:], *old_dirs]:
            try:
                os.unlink(os.path.join(d, fmt.META))
            except (FileNotFoundError, NotADirectoryError):
                continue
            if self.fsync:
                fmt.fsync_dir(d)
        for d in self.dirs[1:]:
            _make_dir(d)
        like = self.mode == "like"

        def write(job: tuple[str, Tensor, dict, str]) -> tuple[int, int]:
            path, t = job[0], job[1]
            nbytes = t.numel() * t.element_size()
            return write_file(path, None if like else t, nbytes, fsync=self.fsync, sync_dir=False)

        def write_meta(meta: tuple[str, dict, bool]) -> None:
            fmt.write_meta(meta[0], meta[1], fsync=self.fsync, std_json=meta[2])

        metas = [node[4] for node in self.nodes]  # post-order: the root's is last
        threads = ThreadPoolExecutor(num_threads) if num_threads > 0 else None
        with threads or contextlib.nullcontext():
            run = threads.map if threads is not None else map
            idents = list(run(write, self.writes))
            if self.fsync:  # the files' directory entries, once per directory
                list(run(fmt.fsync_dir, self.dirs))
            # Every leaf is complete, so every sub-node is: their meta.json may go in any
            # order. The root's goes last: it is what makes the tree valid.
            list(run(write_meta, metas[:-1]))
        write_meta(metas[-1])
        new_files = {job[0] for job in self.writes}.union(self.keeps)
        for f in old_files - new_files:
            _remove(f)
        for d in sorted(set(old_dirs) - set(self.dirs), key=len, reverse=True):
            _remove(d, rmdir=True)
        if self.fsync:
            fmt.fsync_dir(os.path.dirname(self.root))
        return idents

    def _build(self) -> Any:
        """New containers from the planned stores (copy/like); the same object in place."""
        result = None
        for obj, store, parent, key, _ in self.nodes:
            td = obj
            if self.mode == "inplace":
                if td.device is not None:
                    td._device = _cpu(td.device)
                result = obj
                continue
            result = type(td)._new_unsafe(store, td.batch_size, _cpu(td.device))
            if parent is not None:
                parent[key] = result
        return result


def _json_entry(v: Any, kpath: tuple[str, ...], batch_size: torch.Size) -> tuple[dict, bool]:
    where = f"key {format_key(kpath)}"
    if not isinstance(v, NonTensorData):  # not produced by TensorDict; kept for safety
        v = NonTensorData(v)
    if v.stacked:
        if tuple(v.data.shape) != tuple(batch_size):
            raise ValueError(
                f"{where} holds stacked values of shape {tuple(v.data.shape)}, which is not the "
                f"batch_size {tuple(batch_size)}; a saved tree stacks values over the whole batch"
            )
        value = v.data.tolist()
        return {"kind": "json", "value": value, "stacked": True}, fmt.check_json_value(value, where)
    return {"kind": "json", "value": v.data}, fmt.check_json_value(v.data, where)


def _make_dir(d: str) -> None:
    try:
        os.mkdir(d)
    except FileExistsError:
        # Never write through a symlink or into a file: it could lead outside the tree.
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            raise FileExistsError(
                f"{d} exists and is not a directory (a file or a symlink): refusing to write "
                "a node there"
            ) from None


def _remove(path: str, rmdir: bool = False) -> None:
    with contextlib.suppress(OSError):  # already gone, or not empty: leave it
        os.rmdir(path) if rmdir else os.unlink(path)


def _old_tree(root: str) -> tuple[set[str], list[str]]:
    """Files and node directories of a tensorbox tree already at ``root`` (best effort).

    Only what the old ``meta.json`` files name is ever deleted, never other files.
    """
    files: set[str] = set()
    dirs: list[str] = []
    todo = [root]
    while todo:
        d = todo.pop()
        try:
            with open(os.path.join(d, fmt.META), "rb") as f:
                doc = orjson.loads(f.read())
            entries = doc["entries"] if doc.get("format") == fmt.FORMAT else {}
        except Exception:  # missing, damaged, foreign: nothing to clean there
            continue
        for e in entries.values() if isinstance(entries, dict) else ():
            name = (e.get("file") or e.get("dir")) if isinstance(e, dict) else None
            if not fmt.is_plain_name(name):
                continue
            p = os.path.join(d, name)
            if e.get("kind") == "tensor" and os.path.isfile(p) and not os.path.islink(p):
                files.add(p)
            elif e.get("kind") == "node" and os.path.isdir(p) and not os.path.islink(p):
                dirs.append(p)
                todo.append(p)
    return files, dirs


# ---------------------------------------------------------------- loading


class _Loader:
    """One load: the tree's settings, shared by every node."""

    def __init__(
        self,
        root: str,
        registry: dict[str, type],
        device: torch.device | None,
        non_blocking: bool,
        mode: str,
    ) -> None:
        self.root, self.registry, self.device = root, registry, device
        self.non_blocking, self.mode = non_blocking, mode

    def node(self, node: fmt.Node, cls: type | None, depth: int) -> Any:
        store: dict[str, Any] = {}
        device = self.device
        tensor_entry, mode = fmt.TensorEntry, self.mode
        for key, e in node.entries.items():
            if type(e) is tensor_entry:
                try:  # the common case inline: a tree of many small leaves spends its time here
                    leaf = map_file(e.path, e.dtype, e.shape, mode, e.nbytes, e.ident)
                except PermissionError:
                    leaf = self.leaf(e)
                store[key] = (
                    leaf
                    if device is None
                    else leaf.to(device, non_blocking=self.non_blocking, copy=True)
                )
            elif type(e) is fmt.NodeEntry:
                sub = fmt.read_child(node, e, self.root, depth + 1)
                store[key] = self.node(sub, None, depth + 1)
            else:
                store[key] = NonTensorData(e.value, stacked=e.stacked)
        # Mapped leaves live on the CPU; a copy lives on ``device``.
        want = device if device is not None else (None if node.device is None else _CPU)
        return self.rebuild(node, store, want, cls)

    def leaf(self, e: fmt.TensorEntry) -> Tensor:
        """A leaf that could not be mapped with ``mode``: read-only files map copy-on-write."""
        if self.mode == "r":
            return map_file(e.path, e.dtype, e.shape, "r", e.nbytes, e.ident)
        try:
            return map_file(e.path, e.dtype, e.shape, "r+", e.nbytes, e.ident)
        except PermissionError:  # a tree we may read but not write: copy-on-write mapping
            return map_file(e.path, e.dtype, e.shape, "r", e.nbytes, e.ident)

    def rebuild(
        self, node: fmt.Node, store: dict[str, Any], device: torch.device | None, cls: type | None
    ) -> Any:
        """The container ``node`` was saved from: the caller's class, a registered one, or a
        TensorDict that remembers the saved type name."""
        target = cls
        if target is None or (issubclass(target, TensorDict) and node.type != "TensorDict"):
            target = self.registry.get(node.type, target)
        if target is None or not is_tensor_collection(target):
            target = TensorDict
        bs = torch.Size(node.batch_size)
        if issubclass(target, TensorDict):
            out = target._new_unsafe(store, bs, device)
            if node.type != "TensorDict" and node.type != _type_name(out):
                _remember_type(out, node.type)
            return out
        td = TensorDict._new_unsafe(store, bs, device)
        try:  # checks the keys against the fields (a class may have changed since the save)
            return target.from_tensordict(td, run_post_init=False)
        except (KeyError, TypeError, ValueError) as err:
            if target is cls:  # asked for by the caller: say why it does not fit
                raise fmt.FormatError(
                    f"{os.path.join(node.path, fmt.META)}: the saved {node.type!r} does not fit "
                    f"{target.__qualname__}: {err}"
                ) from None
            _remember_type(td, node.type)  # found in the registry: the data still loads
            return td
