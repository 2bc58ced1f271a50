"""One saver for every store: walk a container, plan its nodes and files, write them staged.

:class:`Saver` turns a ``TensorDict`` or tensorclass instance into one ``meta.json``
object per node and one file per tensor (two per jagged leaf), every value checked
before anything is written; then a store's staged :class:`~tensorbox._storage.store.Writer`
writes them and publishes the whole tree at once, and the saver rebuilds the container
from what was written (the leaves as a load gives them: mapped where the store maps).

Modes: ``"inplace"`` (``memmap_``: the container itself becomes the saved one; a file
already mapped at its place is kept, linked into the new tree), ``"copy"``
(``memmap``: a new container; a leaf already mapped at its place, or in shared memory
without a prefix, is kept as the same object, as tensordict does), ``"like"`` (``memmap_like``: zeros of the same
structure). With no store, leaves move to anonymous shared memory.

>>> import torch
>>> from tensorbox import TensorDict
>>> from tensorbox._storage.memory import MemoryStore
>>> store = MemoryStore()
>>> out = Saver(store, "copy", True, False).run(TensorDict(a=torch.arange(2), batch_size=[2]), 0)
>>> out["a"].tolist(), sorted(store.files)
([0, 1], ['a.memmap', 'meta.json'])
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor

from tensorbox._core.encoding import DTYPES, check_json_value, dtype_name
from tensorbox._core.jagged import NJT, from_parts, parts
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll, type_name
from tensorbox._storage import checksum as _checksum
from tensorbox._storage import jagged_io as _jagged_io
from tensorbox._storage.format.legacy import (
    check_legacy_key,
    legacy_node_meta,
    legacy_value_meta,
)
from tensorbox._storage.format.names import encode_key, legacy_name
from tensorbox._storage.format.spec import MAX_DEPTH, SUFFIX, node_meta
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, _shared_memory, shared_copy
from tensorbox._storage.store import Store, Writer
from tensorbox.progress import LARGE_BYTES, Progress

__all__ = ["Saver", "new_id"]

_DTYPE_NAMES = {dt: name for name, dt in DTYPES.items()}
_CPU = torch.device("cpu")

# A planned file: (path in the tree, tensor, the store dict it goes back into, its key
# there, its meta.json entry: "id" set here, "sha256" when asked)
_Job = tuple[str, Tensor, dict[Any, Any], str, dict[Any, Any]]


class Saver:
    """One save into ``store`` (None: anonymous shared memory).

    :meth:`~tensorbox._storage.store.Store.linkable` tells whether a mapped leaf already
    is the file at ``rel`` of the tree, which an in-place save then keeps.
    """

    def __init__(
        self,
        store: Store | None,
        mode: str,
        copy_existing: bool,
        fsync: bool,
        sparse: bool = False,
        checksum: bool = False,
        layout: str = "tensorbox",
        **options: Any,
    ) -> None:
        self.store = store
        self.root: str | None = None if store is None else store.name
        self.mode = mode
        self.copy_existing = copy_existing
        self.fsync = fsync
        self.sparse = sparse
        self.checksum = checksum
        self.options = options  # for the store's writer (compression=...)
        # "tensordict": the nodes and names of tensordict's own layout (format/legacy.py),
        # which tensordict's load_memmap reads; its non-tensor values are sub-nodes
        if layout not in ("tensorbox", "tensordict"):
            raise ValueError(f"format={layout!r}: expected 'tensorbox' or 'tensordict'")
        self.legacy = layout == "tensordict"
        self.values: list[tuple[str, dict[str, Any]]] = []  # (node path, meta): legacy only
        self.types: dict[int, str] = {}  # type names to write, by id(node), over the classes'
        self.gen: tuple[int, int] | None = None  # the tree's generation after the save
        # A bar for the writes (tensorbox.progress): True, False, or None: shown when
        # stderr is a terminal and the save is large
        self.progress: bool | None = None
        # The saved container's device becomes the CPU, where its leaves are mapped (as
        # tensordict's memmap does); a write-through commit keeps the one the user set.
        self.place = True
        self.writes: list[_Job] = []
        self.keeps: list[_Job] = []  # already mapped there
        self.dirs: list[str] = []  # node paths in the tree, parents first
        # jagged leaves: (holder of the two mapped files, store, key); offsets entries
        # (by id) written with their data even by memmap_like (they are structure)
        self.jagged: list[tuple[dict[str, Any], dict[Any, Any], str]] = []
        self.structure: set[int] = set()
        # entries (by id) of one zero broadcast (make_memmap's new entry): a sparse file of
        # zeros, as memmap_like's, not bytes written
        self.zeros: set[int] = set()
        # (container, its new store, parent store, key in parent, meta.json plan): post-order
        self.nodes: list[tuple[Any, dict[Any, Any], dict[Any, Any] | None, str | None, Any]] = []

    def run(self, obj: Any, num_threads: int) -> Any:
        """Save ``obj`` (the caller holds the store's writer lock); the saved container."""
        if self.store is None:
            self._walk(obj, None, (), None, None)
            for _, t, store, key, entry in self.writes:
                store[key] = (
                    _shared_memory(tuple(t.shape), t.dtype)
                    if self.mode == "like" and id(entry) not in self.structure
                    else shared_copy(t)  # a copy even of a memory-mapped leaf
                )
        else:
            self._walk(obj, "", (), None, None)  # every value checked: no I/O yet
            self._write(num_threads)
        for holder, store, key in self.jagged:  # both files mapped: the leaf again
            store[key] = from_parts(holder["values"], holder["offsets"])
        return self._build()

    def _write(self, num_threads: int) -> None:
        assert self.store is not None
        options = dict(self.options)
        if self.mode == "like":
            options["sparse"] = self.sparse
        elif self.zeros:
            options["sparse"] = True  # the only files made as zeros in this save
        writer: Writer = self.store.writer(fsync=self.fsync, **options)
        try:
            metas = {m[0]: m for *_, m in self.nodes}
            for d in self.dirs:
                _, meta, std_json = metas[d]
                writer.node(d, meta, std_json)
            for d, meta in self.values:
                writer.node(d, meta, True)
            for job in list(self.keeps):
                if not writer.link(job[0], job[1]):
                    self.keeps.remove(job)  # no hard links here: write the bytes instead
                    job[4]["id"] = new_id()
                    self.writes.append(job)
            like, structure, zero = self.mode == "like", self.structure, self.zeros

            def blank(e: dict[Any, Any]) -> bool:  # a file of zeros, made without writing
                return (like and id(e) not in structure) or id(e) in zero

            if self.checksum:
                for job in (*self.writes, *self.keeps):
                    sha = _checksum.tensor_sha256(None if blank(job[4]) else job[1], job[1])
                    job[4]["sha256"] = sha
            legacy = self.legacy  # tensordict's layout records no ids: none to check
            index = [
                writer.leaf(p, t, blank(e), None if legacy else e.get("id"), k)
                for p, t, _, k, e in self.writes
            ]
        except BaseException:
            writer.abort()
            raise
        total = sum(t.numel() * t.element_size() for _, t, *_ in self.writes)
        # Small saves (every write-through commit, every append) open nothing: a bar and a
        # summary line are for the saves a person waits for.
        watch = self.progress or (self.progress is None and total >= LARGE_BYTES)
        with Progress("save", total, progress=self.progress) if watch else nullcontext():
            writer.commit(num_threads)
        for (_, t, store, key, _), i in zip(self.writes, index, strict=True):
            store[key] = writer.opened(i, t)
        for _, t, _, _, entry in self.keeps:
            t.untyped_storage()._tbx_gen = None if self.legacy else entry["id"]  # type: ignore[attr-defined]

    # ------------------------------------------------------------ the walk

    def _walk(
        self,
        obj: Any,
        directory: str | None,
        path: tuple[str, ...],
        parent: dict[Any, Any] | None,
        key: Any,
    ) -> None:
        if len(path) > MAX_DEPTH:
            raise ValueError(
                f"key {format_key(path)} is a node nested {len(path)} deep; a saved tree nests "
                f"at most {MAX_DEPTH} deep (loading refuses deeper trees): flatten it"
            )
        td = obj
        if directory is not None:
            self.dirs.append(directory)
        store = td._tensordict if self.mode == "inplace" else {}
        entries: dict[str, Any] = {}
        std_json = False
        version = 2  # 3 where a node holds a jagged entry, 4 a MetaData (the format spec)
        legacy = self.legacy and directory is not None
        names: set[str] = set()  # legacy: the node's file names so far
        for k, v in td._tensordict.items():
            kpath = (*path, k)
            if self.mode != "inplace":
                store[k] = v  # a placeholder that keeps the key order; replaced below
            if legacy:
                self._legacy_entry(k, v, kpath, names)
            if type(v) is NJT:
                entries[k] = self._jagged_leaf(v, k, kpath, directory, store)
                version = max(version, 3)
            elif isinstance(v, Tensor):
                entries[k] = self._leaf(v, k, kpath, directory, store)
            elif is_coll(v):
                name = legacy_name(k) if legacy else encode_key(k, node=True)
                entries[k] = {"kind": "node", "dir": name}
                sub = None if directory is None else (f"{directory}/{name}" if directory else name)
                self._walk(v, sub, kpath, store, k)
            else:
                entry, needs_std = _json_entry(v, kpath, td.batch_size)
                std_json |= needs_std
                if "meta" in entry:
                    version = 4
                entries[k] = entry
                if legacy:  # tensordict keeps a value in a sub-node of its own
                    sub = f"{directory}/{legacy_name(k)}" if directory else legacy_name(k)
                    self.values.append((sub, legacy_value_meta(entry)))
        meta: Any = None
        if legacy:
            meta = (directory, legacy_node_meta(td.batch_size, entries), std_json)
        elif directory is not None:
            name = self.types.get(id(obj)) or type_name(type(obj))
            meta = (
                directory,
                node_meta(name, td.batch_size, td.device, entries, version),
                std_json,
            )
        self.nodes.append((obj, store, parent, key, meta))

    def _legacy_entry(self, k: str, v: Any, kpath: tuple[str, ...], names: set[str]) -> None:
        """Check that tensordict's layout can hold entry ``k``; note its file name."""
        where = f"key {format_key(kpath)}"
        if type(v) is NJT:
            raise TypeError(
                f"format='tensordict': {where} is a jagged tensor, which this layout does "
                "not store; pad it (to_padded_tensor) or save with tensorbox's format"
            )
        names.add(check_legacy_key(k, SUFFIX if isinstance(v, Tensor) else "", names, where))

    def _linkable(self, rel: str, t: Tensor) -> bool:
        return self.store is not None and self.store.linkable(rel, t)

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
            dtype = dtype_name(t.dtype, f"key {format_key(kpath)}")  # raises
        if t.layout is not torch.strided or t.is_nested:
            where = f"key {format_key(kpath)}"
            raise TypeError(f"{where} is a {t.layout} tensor; only dense tensors can be saved")
        if t.device.type == "meta" and self.mode != "like":
            where = f"key {format_key(kpath)}"
            raise TypeError(f"{where} is on the meta device and has no data to save")
        if directory is None:
            # Shared memory already: kept, not copied (as tensordict, whose ``memmap()``
            # of a saved container gives the same leaves); ``memmap_()`` keeps files too.
            if not (
                isinstance(t, MemoryMappedTensor)
                and (self.mode == "inplace" or (self.mode == "copy" and t.filename is None))
            ):
                self.writes.append(("", t, store, k, {}))
            return {}
        file = (legacy_name(k) if self.legacy else encode_key(k)) + SUFFIX
        target = f"{directory}/{file}" if directory else file  # a single plain component
        entry = {"kind": "tensor", "dtype": dtype, "shape": list(t.shape), "file": file}
        if isinstance(t, MemoryMappedTensor) and self.mode != "like" and self._linkable(target, t):
            # The file stays (linked into the new tree): so do its id and the leaf
            # (``memmap(path)`` again gives the same leaves, as tensordict's).
            entry["id"] = getattr(t.untyped_storage(), "_tbx_gen", None) or new_id()
            self.keeps.append((target, t, store, k, entry))
            return entry
        where_now = (
            t.filename if isinstance(t, MemoryMappedTensor) and self.mode == "inplace" else None
        )
        if where_now is not None:  # shared memory is copied into the files, as tensordict
            assert self.root is not None
            # a view (rows of a mapped leaf, ``td[i]``) is written like any tensor
            whole = t.is_contiguous() and t.untyped_storage().nbytes() == t.numel() * t.itemsize
            if whole and not self.copy_existing and not where_now.startswith(self.root + os.sep):
                raise RuntimeError(
                    f"key {format_key(kpath)} is already memory-mapped at {where_now!r}; "
                    f"memmap_({self.root!r}) would leave it there. Pass copy_existing=True to "
                    "copy it into the new prefix, or call memmap_() without a prefix to keep "
                    "the files"
                )
        entry["id"] = new_id()
        if self.mode != "like" and _broadcast_zero(t):
            self.zeros.add(id(entry))
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
            file = entry[name]["file"]
            target = "" if directory is None else (f"{directory}/{file}" if directory else file)
            if (
                directory is not None
                and self.mode != "like"
                and isinstance(part, MemoryMappedTensor)
                and self._linkable(target, part)
            ):  # kept, linked into the new tree (an append to a saved leaf, a re-save)
                gen = getattr(part.untyped_storage(), "_tbx_gen", None)
                entry[name]["id"] = gen or new_id()
                holder[name] = part
                self.keeps.append((target, part, holder, name, entry[name]))
                continue
            if directory is not None:
                entry[name]["id"] = new_id()
            self.writes.append((target, part.contiguous(), holder, name, entry[name]))
        return entry

    def _build(self) -> Any:
        """New containers from the planned stores (copy/like); the same object in place."""
        result = None
        for obj, store, parent, key, _ in self.nodes:
            td = obj
            if self.mode == "inplace":
                if self.place:
                    td._device = _CPU
                result = obj
                continue
            result = type(td)._new_unsafe(store, td.batch_size, _CPU)
            if parent is not None:
                parent[key] = result
        return result


def _broadcast_zero(t: Tensor) -> bool:
    """Whether ``t`` is one zero broadcast to its shape (``torch.zeros(()).expand(shape)``,
    the new entry of ``make_memmap``): its file is then made sparse (no byte written),
    as a ``memmap_like`` file is, and reads the same zeros."""
    if t.numel() < 2 or any(t.stride()) or t.device.type != "cpu":
        return False
    return not bool(t.as_strided((1,), (1,)).view(torch.uint8).any())


def new_id() -> str:
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
        return {"kind": "json", "value": value, "stacked": True}, check_json_value(value, where)
    entry = {"kind": "json", "value": v.data}
    if v.meta:  # loads back as a MetaData, not a NonTensorData (format version 4)
        entry["meta"] = True
    return entry, check_json_value(v.data, where)
