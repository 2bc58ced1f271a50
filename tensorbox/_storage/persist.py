"""Saving containers as directory trees and opening them again (memmap_, memmap, load_memmap).

The format is specified in :mod:`tensorbox._storage.format.spec`. This module walks a
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

- ``memmap_()`` on data that is already mapped keeps its files (or shared memory);
  on a tree-backed container (one returned by a save or a load) it saves every
  pending change into its own tree. Other writes to a tree-backed container are
  saved as they happen (:mod:`tensorbox._storage.writethrough`).
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
import errno
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import torch
from torch import Tensor

from tensorbox._core.jagged import NJT, from_parts, parts
from tensorbox._core.keys import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import CLASS_REGISTRY, is_coll, iter_shaped, type_name
from tensorbox._storage import checksum as _checksum
from tensorbox._storage import commit as _commit
from tensorbox._storage import jagged_io as _jagged_io
from tensorbox._storage import writethrough as _persist_writes
from tensorbox._storage.format import spec as fmt
from tensorbox._storage.load import _CPU, _fit, _Loader, saved_type
from tensorbox._storage.memmap_tensor import (
    MemoryMappedTensor,
    _check_mode,
    _shared_memory,
    map_file,
    write_file,
)

__all__ = [
    "is_memmap",
    "load_memmap",
    "memmap",
    "memmap_",
    "memmap_like",
    "saved_type",
    "verify_tree",
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
    _expect: tuple[int, int] | None = None,
) -> Any:
    """Convert ``obj`` in place: every tensor leaf becomes a MemoryMappedTensor; lock it.

    With no ``prefix``, a tree-backed ``obj`` (or a node of one) is saved into its own
    tree, pending changes included (:mod:`tensorbox._storage.writethrough`); any other ``obj``
    moves to anonymous shared memory.
    """
    if prefix is None:
        found = _persist_writes.tree_of(obj)
        if found is not None:
            _persist_writes.commit(*found, num_threads=num_threads, fsync=fsync, checksum=checksum)
            return obj.lock_()
    _refuse_archive(prefix)
    saver = _Saver(prefix, "inplace", copy_existing, fsync, checksum=checksum)
    saver.expect = _expect
    saver.run(obj, num_threads)
    return obj


def memmap(
    obj: Any,
    prefix: Any = None,
    *,
    num_threads: int = 0,
    fsync: bool = False,
    checksum: bool = False,
    archive: bool = False,
    compression: Any = None,
) -> Any:
    """A memory-mapped copy of ``obj`` (locked); ``obj`` is unchanged.

    ``checksum=True`` records each tensor's SHA-256 in ``meta.json``, which
    ``load_memmap(..., verify=True)`` and ``python -m tensorbox verify --read`` check
    (off by default: hashing runs slower than writing). ``archive=True`` writes one
    file instead of a folder (:mod:`tensorbox._storage.archive.store`).
    """
    if archive:
        from tensorbox._storage.archive import store as _archive

        return _archive.save(
            obj,
            prefix,
            num_threads=num_threads,
            fsync=fsync,
            checksum=checksum,
            compression=compression,
        )
    _refuse_archive(prefix)
    return _Saver(prefix, "copy", True, fsync, checksum=checksum).run(obj, num_threads)


def memmap_like(
    obj: Any,
    prefix: Any = None,
    *,
    num_threads: int = 0,
    fsync: bool = False,
    sparse: bool = False,
    checksum: bool = False,
) -> Any:
    """Zero-filled files of ``obj``'s structure; no data is read or copied.

    The files' blocks are reserved (``posix_fallocate``), so a disk too small is an
    ``OSError`` here, not a crash (SIGBUS) when rows are written later. ``sparse=True``
    creates sparse files instead: ``memmap_like`` of a container expanded to a million
    rows then takes no disk until rows are written, and a full disk shows up then.
    """
    _refuse_archive(prefix)
    saver = _Saver(prefix, "like", True, fsync, sparse=sparse, checksum=checksum)
    return saver.run(obj, num_threads)


def load_memmap(
    cls: type,
    prefix: Any,
    *,
    device: Any = None,
    non_blocking: bool = False,
    mode: str | None = None,
    verify: bool = False,
    strict: bool = True,
) -> Any:
    """Open the tree at ``prefix`` lazily, as ``cls`` (see the module doc), locked.

    A file at ``prefix`` (or ``FILE::DIR``, a sub-tree) is an archive, opened by
    :mod:`tensorbox._storage.archive.store`: read-only, ``mode`` None or ``"r"``.

    ``mode="r+"`` maps the files shared (writes reach them; a file this process may
    not write raises ``PermissionError`` naming it), ``mode=None`` (the default) the
    same but files it may not write open as ``"r"``, ``mode="r"`` copy-on-write (the files never change:
    fine-tuning loaded weights in place leaves the checkpoint alone). With
    ``device``, every leaf is copied there (``"cpu"``: read into memory).
    ``verify=True`` first reads every byte and checks the checksums the save recorded
    (FormatError naming the file when one differs).

    A tensorclass that gained a field with a default since the save loads the tree
    with the default filled in. One that lost a field refuses a tree holding it
    (FormatError naming the field) unless ``strict=False``, which leaves it out.

    The tree opened is one generation: a save running at the same path is waited
    for only while it swaps the trees (see :mod:`tensorbox._storage.commit`).
    """
    from tensorbox._storage.archive import store as _archive

    found = _archive.split(prefix)
    if found is not None:
        return _archive.load(
            cls,
            *found,
            device=device,
            non_blocking=non_blocking,
            mode=mode,
            verify=verify,
            strict=strict,
        )
    strict_rw = mode == "r+"
    mode = "r+" if mode is None else mode
    _check_mode(mode)
    root = os.path.realpath(os.fspath(prefix))
    dev = None if device is None else torch.device(device)
    loader = _Loader(root, CLASS_REGISTRY, dev, non_blocking, mode, _fit(cls, strict))
    loader.strict = strict_rw
    lock = _commit.read_lock(root)
    try:
        top = fmt.read_node(root, root, lock)
        if verify:
            verify_tree(root, top)
        obj = loader.node(top, cls, 0)
        backed = mode == "r+" and dev is None  # writes reach this tree: mode="r" is a copy
        gen = _persist_writes.generation(root) if backed else None  # this one, while locked
    finally:
        _commit.read_unlock(lock)
    obj.lock_()
    if backed:
        _persist_writes.register(obj, root, gen)
    return obj


def verify_tree(root: str, top: fmt.Node | None = None) -> tuple[int, int, int]:
    """Check every node of the tree at ``root`` and read every byte, checking recorded
    checksums; returns (nodes, tensors, bytes). The caller holds the read lock."""
    nodes = tensors = total = 0
    for _, node in fmt.iter_tree(root, top):
        nodes += 1
        for e in node.entries.values():
            if type(e) is fmt.TensorEntry:
                tensors += 1
                total += e.nbytes
                _checksum.check_file(e.path, e.nbytes, e.sha256)
            elif type(e) is _jagged_io.JaggedEntry:
                tensors += 1
                total += e.values.nbytes + e.offsets.nbytes
                _jagged_io.verify(e)
    return nodes, tensors, total


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


# ---------------------------------------------------------------- helpers


def _refuse_archive(prefix: Any) -> None:
    if prefix is not None and os.path.isfile(os.fspath(prefix)):
        from tensorbox._storage.archive import store as _archive

        _archive.refuse_folder_over(prefix)


def _type_name(obj: Any) -> str:
    return type_name(type(obj))


_DTYPE_NAMES = {dt: name for name, dt in fmt.DTYPES.items()}


def _cpu(device: torch.device | None) -> torch.device | None:
    """Memory-mapped leaves live on the CPU: a fixed device becomes the CPU."""
    return None if device is None else _CPU


# ---------------------------------------------------------------- saving


class _Saver:
    """One save: walk the container, plan files and meta.json, then do the I/O.

    mode: "inplace" (memmap_), "copy" (memmap), "like" (memmap_like).
    """

    def __init__(
        self,
        prefix: Any,
        mode: str,
        copy_existing: bool,
        fsync: bool,
        sparse: bool = False,
        checksum: bool = False,
    ) -> None:
        self.root = None if prefix is None else os.path.realpath(os.fspath(prefix))
        self.mode = mode
        self.copy_existing = copy_existing
        self.fsync = fsync
        self.sparse = sparse
        self.checksum = checksum
        self.expect: tuple[int, int] | None = None  # the generation a write-through expects
        self.held = False  # the caller holds the tree's writer lock (extend_)
        self.types: dict[int, str] = {}  # type names to write, by id(node), over the classes'
        self.gen: tuple[int, int] | None = None
        # path, tensor, store, key, entry (its "id" set here, its "sha256" when asked)
        self.writes: list[tuple[str, Tensor, dict[Any, Any], str, dict[Any, Any]]] = []
        self.keeps: list[
            tuple[str, Tensor, dict[Any, Any], str, dict[Any, Any]]
        ] = []  # already mapped there
        self.dirs: list[str] = []  # node directories, parents first
        # jagged leaves: (holder of the two mapped files, store, key); offsets entries
        # (by id) written with their data even by memmap_like (they are structure)
        self.jagged: list[tuple[dict[str, Any], dict[Any, Any], str]] = []
        self.structure: set[int] = set()
        # (container, its new store, parent store, key in parent, meta.json plan): post-order
        self.nodes: list[tuple[Any, dict[Any, Any], dict[Any, Any] | None, str | None, Any]] = []

    def run(self, obj: Any, num_threads: int) -> Any:
        if self.root is None:
            self._walk(obj, None, (), None, None)
            for _, t, store, key, entry in self.writes:
                store[key] = (
                    _shared_memory(tuple(t.shape), t.dtype)
                    if self.mode == "like" and id(entry) not in self.structure
                    else MemoryMappedTensor.from_tensor(t)
                )
        else:
            held = contextlib.nullcontext() if self.held else _commit.writing(self.root)
            with held:  # one writer at a time at this path
                if self.expect is not None and _persist_writes.generation(self.root) != self.expect:
                    raise RuntimeError(
                        f"the tree at {self.root!r} was saved again since this container was "
                        "loaded or saved: its changes would drop that save's. Load it again "
                        "and repeat the write, or call memmap_(path) to replace that tree "
                        "with this container"
                    )
                self._walk(obj, self.root, (), None, None)  # every value checked: no I/O yet
                idents = self._write_tree(num_threads)
                self.gen = _persist_writes.generation(self.root)
                # Mapped while the lock is held: no other save can have replaced the files.
                for (path, t, store, key, entry), ident in zip(self.writes, idents, strict=True):
                    store[key] = map_file(
                        path, t.dtype, tuple(t.shape), ident=ident, gen=entry["id"]
                    )
                for _, t, _, _, entry in self.keeps:
                    t.untyped_storage()._tbx_gen = entry["id"]  # type: ignore[attr-defined]
        for holder, store, key in self.jagged:  # both files mapped: the leaf again
            store[key] = from_parts(holder["values"], holder["offsets"])
        result = self._build()
        result.lock_()
        if self.root is not None:
            _persist_writes.register(result, self.root, self.gen)
        return result

    # ------------------------------------------------------------ the walk

    def _walk(
        self,
        obj: Any,
        directory: str | None,
        path: tuple[str, ...],
        parent: dict[Any, Any] | None,
        key: Any,
    ) -> None:
        if len(path) > fmt.MAX_DEPTH:
            raise ValueError(
                f"key {format_key(path)} is a node nested {len(path)} deep; a saved tree nests "
                f"at most {fmt.MAX_DEPTH} deep (loading refuses deeper trees): flatten it"
            )
        td = obj
        if directory is not None:
            self.dirs.append(directory)
        store = td._tensordict if self.mode == "inplace" else {}
        entries: dict[str, Any] = {}
        std_json = False
        version = 2  # 3 only where a node holds a jagged entry (see the format spec)
        for k, v in td._tensordict.items():
            kpath = (*path, k)
            if self.mode != "inplace":
                store[k] = v  # a placeholder that keeps the key order; replaced below
            if type(v) is NJT:
                entries[k] = self._jagged_leaf(v, k, kpath, directory, store)
                version = 3
            elif isinstance(v, Tensor):
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
        meta: Any = None
        if directory is not None:
            name = self.types.get(id(obj)) or _type_name(obj)
            meta = fmt.node_meta(name, td.batch_size, td.device, entries, version)
            meta = (directory, meta, std_json)
        self.nodes.append((obj, store, parent, key, meta))

    def _leaf(
        self,
        t: Tensor,
        k: str,
        kpath: tuple[str, ...],
        directory: str | None,
        store: dict[Any, Any],
    ) -> dict[Any, Any]:
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
                self.writes.append(("", t, store, k, {}))
            return {}
        file = fmt.encode_key(k) + fmt.SUFFIX
        target = f"{directory}{os.sep}{file}"  # an encoded name: a single plain component
        entry = {"kind": "tensor", "dtype": dtype, "shape": list(t.shape), "file": file}
        if self.mode == "inplace" and isinstance(t, MemoryMappedTensor):
            if _same_file(t, target):
                # The file stays (linked into the new tree): so does its id.
                entry["id"] = getattr(t.untyped_storage(), "_tbx_gen", None) or _new_id()
                self.keeps.append((target, t, store, k, entry))
                return entry
            where_now = t.filename or "anonymous shared memory"
            assert self.root is not None
            if not self.copy_existing and not where_now.startswith(self.root + os.sep):
                raise RuntimeError(
                    f"key {format_key(kpath)} is already memory-mapped at {where_now!r}; "
                    f"memmap_({self.root!r}) would leave it there. Pass copy_existing=True to "
                    "copy it into the new prefix, or call memmap_() without a prefix to keep "
                    "the files"
                )
        entry["id"] = _new_id()
        self.writes.append((target, t, store, k, entry))
        return entry

    def _jagged_leaf(
        self,
        t: Tensor,
        k: str,
        kpath: tuple[str, ...],
        directory: str | None,
        store: dict[Any, Any],
    ) -> dict[Any, Any]:
        """A jagged leaf: two writes (values, offsets) whose mappings make it again."""
        if t.device.type == "meta" and self.mode != "like":
            raise TypeError(f"key {format_key(kpath)} is on the meta device and has no data")
        values, offsets = parts(t)
        entry = _jagged_io.entry_json(k, t)
        holder: dict[str, Any] = {}
        self.jagged.append((holder, store, k))
        self.structure.add(id(entry["offsets"]))
        for name, part in (("values", values), ("offsets", offsets)):
            target = "" if directory is None else f"{directory}{os.sep}{entry[name]['file']}"
            if (
                directory is not None
                and self.mode == "inplace"
                and isinstance(part, MemoryMappedTensor)
                and _same_file(part, target)
            ):  # kept, linked into the new tree (an append to a saved leaf, a re-save)
                gen = getattr(part.untyped_storage(), "_tbx_gen", None)
                entry[name]["id"] = gen or _new_id()
                holder[name] = part
                self.keeps.append((target, part, holder, name, entry[name]))
                continue
            if directory is not None:
                entry[name]["id"] = _new_id()
            self.writes.append((target, part.contiguous(), holder, name, entry[name]))
        return entry

    # ------------------------------------------------------------ the I/O

    def _write_tree(self, num_threads: int) -> list[tuple[int, int]]:
        """Build the new tree beside the old one, then swap it in (see :mod:`._commit`)."""
        assert self.root is not None
        root = self.root
        stage = _commit.new_stage(root)
        cut = len(root)

        def staged(path: str) -> str:
            return stage + path[cut:]

        try:
            for d in self.dirs[1:]:
                os.mkdir(staged(d))
            for job in list(self.keeps):
                if not _link(job[0], staged(job[0]), job[1]):
                    self.keeps.remove(job)  # no hard links here: write the bytes instead
                    job[4]["id"] = _new_id()
                    self.writes.append(job)
            like, sparse, fsync = self.mode == "like", self.sparse, self.fsync
            structure = self.structure

            def write(
                job: tuple[str, Tensor, dict[Any, Any], str, dict[Any, Any]],
            ) -> tuple[int, int]:
                path, t = job[0], job[1]
                nbytes = t.numel() * t.element_size()
                if like and id(job[4]) not in structure:
                    return _reserve(staged(path), nbytes, sparse, fsync, job[3], path)
                return write_file(staged(path), t, nbytes, fsync=fsync, sync_dir=False)

            def write_meta(meta: tuple[str, dict[Any, Any], bool]) -> None:
                fmt.write_new_meta(staged(meta[0]), meta[1], fsync=fsync, std_json=meta[2])

            if self.checksum:
                for job in (*self.writes, *self.keeps):
                    data = None if like and id(job[4]) not in structure else job[1]
                    job[4]["sha256"] = _checksum.tensor_sha256(data, job[1])
            threads = ThreadPoolExecutor(num_threads) if num_threads > 0 else None
            with threads or contextlib.nullcontext():
                run = threads.map if threads is not None else map
                idents = list(run(write, self.writes))
                list(run(write_meta, [node[4] for node in self.nodes]))
                if fsync:  # the files' directory entries, once per directory
                    list(run(fmt.fsync_dir, [staged(d) for d in self.dirs]))
            old = _commit.commit(stage, root, lambda: _old_node_dirs(root))
        except BaseException:
            _commit.remove_stage(stage)  # the old tree is untouched
            raise
        if fsync:
            fmt.fsync_dir(os.path.dirname(root))
        if old is not None:
            _commit.dispose(old, root)
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


def _new_id() -> str:
    """A file generation id: 128 random bits, never reused (see the format spec).

    Drawn 64 at a time (one system call per 64 leaves, not one per leaf); the pool is
    emptied in a forked child, so two processes never hand out the same id.
    """
    try:
        return _IDS.pop()  # atomic under the GIL
    except IndexError:
        raw = os.urandom(16 * 64).hex()
        _IDS.extend(raw[i : i + 32] for i in range(32, len(raw), 32))
        return raw[:32]


_IDS: list[str] = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_IDS.clear)


def _same_file(t: MemoryMappedTensor, target: str) -> bool:
    """True when ``t`` maps the file now at ``target`` from its start, shared (the file
    may be longer: a file grown by ``extend_`` is mapped whole, its tail ignored).

    Compared by (device, inode), never by name: the mapping keeps its file alive, so
    its inode number cannot have been given to another file.
    """
    storage = t.untyped_storage()
    if storage.filename is None or t.storage_offset() or not t.is_contiguous():
        return False
    ident = getattr(storage, "_tbx_id", None)
    try:
        st = os.stat(target, follow_symlinks=False)
    except OSError:
        return False
    return ident == (st.st_dev, st.st_ino) and stat.S_ISREG(st.st_mode)


def _link(src: str, dst: str, t: Tensor) -> bool:
    """Hard-link a kept file into the new tree; False when links are not possible here."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        return False
    st = os.stat(dst, follow_symlinks=False)
    if getattr(t.untyped_storage(), "_tbx_id", None) != (st.st_dev, st.st_ino):
        os.unlink(dst)  # not the mapped file after all: write the bytes
        return False
    return True


def _reserve(
    path: str, nbytes: int, sparse: bool, fsync: bool, key: str, shown: str
) -> tuple[int, int]:
    """A new zero-filled file of ``nbytes``, its blocks reserved unless ``sparse``.

    Reserving (``posix_fallocate``) turns a full disk into an error now, instead of a
    SIGBUS when a row is written through the mapping later.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        if nbytes:
            if sparse or not hasattr(os, "posix_fallocate"):
                os.ftruncate(fd, nbytes)
            else:
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as err:
                    if err.errno == errno.ENOSPC:
                        raise OSError(
                            errno.ENOSPC,
                            f"no space left to reserve {nbytes} bytes for key {key!r} at "
                            f"{shown}: free space, or pass sparse=True to create sparse files "
                            "(then a full disk shows up later, as a crash when a row is written)",
                        ) from None
                    if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    os.ftruncate(fd, nbytes)  # a file system that cannot reserve
        if fsync:
            os.fsync(fd)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_dev, st.st_ino)


def _json_entry(
    v: Any, kpath: tuple[str, ...], batch_size: torch.Size
) -> tuple[dict[Any, Any], bool]:
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


def _old_node_dirs(root: str) -> list[str]:
    """Node directories of the tree now at ``root`` that its ``meta.json`` files name
    (best effort: readers that opened one of them are waited for at the swap)."""
    dirs: list[str] = []
    todo = [root]
    while todo and len(dirs) < 100_000:
        d = todo.pop()
        try:
            doc = orjson.loads(fmt.read_meta_bytes(d, os.path.join(d, fmt.META)))
            entries = doc["entries"] if doc.get("format") == fmt.FORMAT else {}
        except Exception:  # missing, damaged, foreign: no nodes known below
            continue
        for e in entries.values() if isinstance(entries, dict) else ():
            name = e.get("dir") if isinstance(e, dict) and e.get("kind") == "node" else None
            if fmt.is_plain_name(name):
                p = os.path.join(d, name)
                dirs.append(p)
                todo.append(p)
    return dirs
