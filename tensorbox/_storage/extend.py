"""``extend_``: append rows along batch dim 0, in memory or to a saved tree, crash-safe.

In memory the result is ``torch.cat([td, rows], 0)``, moved into ``td`` (its nested
nodes keep their identity). On a tree-backed container (saved with ``memmap``/
``memmap_``, or opened with ``load_memmap(mode="r+")``), under its store's writer lock,
through the store's live-tree methods only (:class:`~tensorbox._storage.store.Store`,
``in_place``; a store without them refuses, naming itself):

1. the tree's committed state is read from the store (another process may have
   extended it since this container was mapped: rows go after the stored size), and
   every leaf of ``rows`` is checked against it, before anything is written;
2. each leaf's new rows are written by the store after its committed bytes
   (:meth:`~tensorbox._storage.store.Store.append`; a folder's: ``pwrite`` into a file
   grown by a factor, :mod:`tensorbox._storage.fileappend`). Committed bytes are never
   touched, and a full disk is an ``OSError`` there (never a SIGBUS through a mapping);
3. the new batch size is committed with the tree: the in-place save of
   :mod:`tensorbox._storage.save` through the store's writer (a folder's: a new
   ``meta.json`` per node beside hard links of the same files, swapped in by
   :mod:`tensorbox._storage.commit`). A ``kill -9`` before the swap leaves the old
   size (the files' tails are ignored, as the format allows); after it, the new one;
4. the container is rebound to the new generation: its leaves hold the longer data.
   Views taken before, and readers that loaded before, keep the rows they had.

Each leaf kind (dense, jagged) plugs in through two tables: :data:`LAYOUTS` gives an
in-memory leaf's signature (what must match between the container and ``rows``),
:data:`DISK_KINDS` gives, per on-disk entry type, its signature, whether a leaf
maps its file(s), and its append step.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"x": torch.arange(2), "info": {"y": torch.zeros(2, 3)}}, [2])
>>> saved = td.memmap(tempfile.mkdtemp() + "/tree")
>>> _ = saved.extend_(TensorDict({"x": torch.tensor([7]), "info": {"y": torch.ones(1, 3)}}, [1]))
>>> saved["x"].tolist(), saved.batch_size, saved["info"].batch_size
([0, 1, 7], torch.Size([3]), torch.Size([3]))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from tensorbox._core import jagged as _jagged
from tensorbox._core.backing import TREES
from tensorbox._core.encoding import check_json_value
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll, type_name
from tensorbox._storage import backed as _backed
from tensorbox._storage.fileappend import GROW_FLOOR, grow_capacity
from tensorbox._storage.format.spec import META, SUFFIX
from tensorbox._storage.jagged_io import check_offsets
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.save import Saver
from tensorbox._storage.store import (
    JaggedEntry,
    JsonEntry,
    Node,
    NodeEntry,
    Store,
    TensorEntry,
    read_child,
)
from tensorbox.errors import BatchSizeError, TensorDictKeyError
from tensorbox.progress import advance

__all__ = [
    "DISK_KINDS",
    "GROW_FLOOR",
    "LAYOUTS",
    "DiskKind",
    "Sig",
    "extend_",
    "grow_capacity",
]


# ---------------------------------------------------------------- leaf kinds


class Sig(NamedTuple):
    """What must match between a leaf of a container and the same leaf of ``rows``."""

    layout: Any  # torch.strided, or another layout (a jagged leaf, later)
    dtype: torch.dtype
    features: tuple[int, ...]  # the shape after batch dim 0


def _dense_sig(t: Tensor) -> Sig:
    return Sig(torch.strided, t.dtype, tuple(t.shape[1:]))


def _dense_entry_sig(e: TensorEntry) -> Sig:
    return Sig(torch.strided, e.dtype, tuple(e.shape[1:]))


def _dense_maps(store: Store, e: TensorEntry, t: Tensor) -> bool | None:
    """Whether ``t`` holds ``e``'s data in ``store`` (None: ``t`` is no leaf of it)."""
    return store.holds(e, t)


def _append_dense(
    store: Store, e: TensorEntry, rows: Tensor, fsync: bool, where: str, current: Tensor | None
) -> Tensor:
    """``rows`` written after the committed rows of ``e`` by its store; the longer leaf."""
    return store.append(e, rows, fsync, where, current)


#: Per in-memory layout (``t.layout``): the leaf's signature.
LAYOUTS: dict[Any, Callable[[Tensor], Sig]] = {torch.strided: _dense_sig}


class DiskKind(NamedTuple):
    """How ``extend_`` handles one type of on-disk leaf entry."""

    sig: Callable[[Any], Sig]  # the entry's signature
    #: does a leaf hold its entry's data in the store, ``(store, entry, leaf)`` (None: it
    #: is no leaf of the store)
    maps: Callable[[Store, Any, Tensor], bool | None]
    #: write the rows after the committed ones, return the longer leaf, as loaded:
    #: ``(store, entry, rows leaf, fsync, "key ...", the leaf it replaces)``
    append: Callable[[Store, Any, Tensor, bool, str, Tensor | None], Tensor]


# A jagged leaf is two dense files: values ``[length, *feature]`` and offsets
# ``[rows + 1]``. Appending rows appends to each, so both reuse the dense append (and
# its amortised growth and mapping reuse); the offsets of the new rows continue the
# committed ones.


def _jagged_sig(t: Tensor) -> Sig:
    return Sig(torch.jagged, t.dtype, tuple(_jagged.parts(t)[0].shape[1:]))


def _jagged_entry_sig(e: JaggedEntry) -> Sig:
    return Sig(torch.jagged, e.values.dtype, tuple(e.values.shape[1:]))


def _jagged_maps(store: Store, e: JaggedEntry, t: Tensor) -> bool | None:
    if not _jagged.is_jagged(t):
        return None
    values, offsets = _jagged.parts(t)
    v, o = store.holds(e.values, values), store.holds(e.offsets, offsets)
    return None if v is None or o is None else v and o


def _append_jagged(
    store: Store, e: JaggedEntry, rows: Tensor, fsync: bool, where: str, current: Tensor | None
) -> Tensor:
    like = torch.empty((0, *e.values.shape[1:]), dtype=e.values.dtype)
    add_values, add_offsets = _jagged._as_parts(rows, where, 1, like)  # checked: same sig
    base, odt = e.values.shape[0], e.offsets.dtype
    if odt is torch.int32 and base + add_values.shape[0] > 2**31 - 1:
        raise BatchSizeError(
            f"extend_: {where} has int32 offsets, which cannot pass {2**31 - 1} values; "
            "save it again with int64 offsets to grow it further"
        )
    tail = _jagged.shifted_offsets(add_offsets, base, odt)
    cur = _jagged.parts(current) if current is not None and _jagged.is_jagged(current) else None
    values = store.append(e.values, add_values.contiguous(), fsync, where, cur and cur[0])
    offsets = store.append(e.offsets, tail, fsync, where, cur and cur[1])
    # The shortest and longest rows (to_padded_tensor pads to them): the new rows'
    # combined with what the current leaf knows, else read from the offsets once.
    seqlens = None
    if add_offsets.shape[0] > 1:
        lo, hi = (int(x) for x in torch.aminmax(add_offsets.diff()))
        known = getattr(current, "_metadata_cache", None) or {}
        if e.offsets.shape[0] == 1:
            seqlens = (lo, hi)
        elif "min_seqlen" in known and "max_seqlen" in known:
            old_lo, old_hi = current._min_seqlen, current._max_seqlen  # type: ignore[union-attr]
            seqlens = (min(lo, int(old_lo)), max(hi, int(old_hi)))
    return _jagged.from_parts(values, offsets, seqlens)


def _sha256s(e: Any) -> bool:
    """Whether the save recorded checksums for the file(s) of entry ``e``."""
    return any(
        f.sha256 is not None for f in ((e.values, e.offsets) if type(e) is JaggedEntry else (e,))
    )


LAYOUTS[torch.jagged] = _jagged_sig

DISK_KINDS: dict[type, DiskKind] = {
    TensorEntry: DiskKind(_dense_entry_sig, _dense_maps, _append_dense),
    JaggedEntry: DiskKind(_jagged_entry_sig, _jagged_maps, _append_jagged),
}


def _sig(t: Tensor, where: str, whose: str) -> Sig:
    fn = LAYOUTS.get(t.layout)
    if fn is None or (t.layout is torch.strided and t.is_nested):
        raise TypeError(
            f"extend_: {where} is a {t.layout} tensor in {whose}; extend_ appends rows of "
            "dense tensors"
        )
    return fn(t)


# ---------------------------------------------------------------- checks


class Spec(NamedTuple):
    """The schema of one node: type name (None: not checked), batch size, entries
    (a leaf's ``(Sig, source)``, ``None`` for a non-tensor value, or a nested Spec),
    and the node read from disk (for a saved tree)."""

    type: str | None
    batch: tuple[int, ...]
    entries: dict[str, Any]
    node: Node | None = None


def _spec_of(td: Any, path: tuple[str, ...] = ()) -> Spec:
    entries: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            entries[k] = (_sig(v, f"key {format_key((*path, k))}", "the container"), v)
        elif is_coll(v):
            entries[k] = _spec_of(v, (*path, k))
        else:
            entries[k] = None
    return Spec(type_name(type(td)), tuple(td._batch_size), entries)


def _kind(v: Any) -> str:
    """What a value of ``rows`` is, for an error message."""
    if isinstance(v, Tensor):
        return "a tensor"
    return "a nested node" if is_coll(v) else "a non-tensor value"


def check_rows(want: Spec, rows: Any, path: tuple[str, ...] = ()) -> None:
    """Raise, naming the key, unless ``rows`` fits ``want`` in all but batch dim 0."""
    at = f" at key {format_key(path)}" if path else ""
    if want.type is not None and type_name(type(rows)) != want.type:
        raise TypeError(
            f"extend_: rows{at} are a {type_name(type(rows))}, the container{at} a "
            f"{want.type}: build the rows with the container's class"
        )
    bs = tuple(rows._batch_size)
    if len(bs) != len(want.batch) or bs[1:] != want.batch[1:]:
        shown = ("n", *want.batch[1:])
        raise BatchSizeError(
            f"extend_: rows{at} have batch_size {bs}, expected ({', '.join(map(str, shown))}) "
            f"like the container's {want.batch}: only batch dim 0 may differ"
        )
    store = rows._tensordict
    missing = [k for k in want.entries if k not in store]
    if missing:
        raise TensorDictKeyError(
            f"extend_: rows lack key {format_key((*path, missing[0]))}, which the container "
            "has: rows must have the same keys"
        )
    extra = [k for k in store if k not in want.entries]
    if extra:
        raise TensorDictKeyError(
            f"extend_: rows have key {format_key((*path, extra[0]))}, which the container "
            "has not: rows must have the same keys (add it to the container first)"
        )
    for k, have in want.entries.items():
        v, kpath = store[k], (*path, k)
        where = f"key {format_key(kpath)}"
        if isinstance(have, Spec):
            if not is_coll(v):
                raise TypeError(
                    f"extend_: {where} is a nested node in the container but {_kind(v)} in rows"
                )
            check_rows(have, v, kpath)
        elif have is None:
            if isinstance(v, Tensor) or is_coll(v):
                raise TypeError(
                    f"extend_: {where} is a non-tensor value in the container but {_kind(v)} "
                    "in rows"
                )
        else:
            if not isinstance(v, Tensor):
                raise TypeError(
                    f"extend_: {where} is a tensor in the container but {_kind(v)} in rows"
                )
            _check_leaf(have[0], _sig(v, where, "rows"), where)


def _check_leaf(have: Sig, got: Sig, where: str) -> None:
    if got.layout != have.layout:
        raise TypeError(
            f"extend_: {where} is a {got.layout} tensor in rows, a {have.layout} one in the "
            "container"
        )
    if got.dtype != have.dtype:
        raise TypeError(
            f"extend_: {where} has dtype {got.dtype} in rows, {have.dtype} in the container: "
            f"cast that leaf of the rows to {have.dtype} first"
        )
    if got.features != have.features:
        raise BatchSizeError(
            f"extend_: {where} has rows of shape {got.features} in rows, {have.features} in "
            "the container: the shape after batch dim 0 must match"
        )


# ---------------------------------------------------------------- the entry point


def extend_(td: Any, rows: Any, *, fsync: bool = False) -> Any:
    """Append ``rows`` to ``td`` along batch dim 0 (see the module doc); returns ``td``."""
    if not is_coll(rows):
        raise TypeError(
            f"extend_: rows is a {type(rows).__name__}, expected a {type(td).__name__} with "
            "the same keys, dtypes and shapes after batch dim 0"
        )
    if not td._batch_size:
        raise BatchSizeError(
            "extend_ appends along batch dim 0, but the container has batch_size (): give it "
            "a batch dim first (td.unsqueeze(0), or build it with batch_size=[n])"
        )
    rec = TREES.get(id(td)) if TREES else None
    if rec is not None and rec.node() is td:
        if rec.rel:
            raise ValueError(
                f"extend_: this container is the node {rec.dir!r} of the tree at "
                f"{rec.root_path!r}; rows are appended to a whole tree: call extend_ on its "
                "root (TensorDict.load_memmap(root))"
            )
        _extend_tree(td, rec.store.live("extend_"), rows, fsync)
    else:
        _refuse_read_only(td)
        check_rows(_spec_of(td), rows)
        _adopt(td, torch.cat([td, rows], 0))  # type: ignore[list-item]  # containers route torch.cat
    # An append loop's bar (a Progress counting rows, opened by the caller) moves on.
    advance(int(rows._batch_size[0]), files=0, unit="rows")
    return td


def _refuse_read_only(td: Any, what: str = "extend_", doing: str = "append rows") -> None:
    """A container mapping a tree read-only (``mode="r"``, archives, a URL) cannot grow
    it: ``what`` (``extend_``, ``make_memmap``...) refuses, naming the tree."""
    for t in _leaves(td):
        leaf = getattr(t, "_tbx_leaf", None)  # a leaf behind a URL (lazy or fetched)
        if leaf is not None:
            raise RuntimeError(
                f"{what}: this container was opened from {leaf.store.src.url!r}, which is "
                f"read-only; save a changed copy with memmap(url, archive=True) to {doing}"
            )
        ro = (
            getattr(t.untyped_storage(), "_tbx_ro", None) if type(t) is MemoryMappedTensor else None
        )
        if ro is None:
            continue
        if ro.endswith(SUFFIX) and os.path.isfile(os.path.join(os.path.dirname(ro), META)):
            raise RuntimeError(
                f"{what}: this container maps its tree read-only (load_memmap(..., mode='r'): "
                f"{ro!r} never changes); open the tree with mode='r+' to {doing}"
            )
        from tensorbox._storage.remote.cache import default_cache

        if os.path.dirname(ro) == os.path.abspath(default_cache().directory):
            raise RuntimeError(
                f"{what}: this container maps a tree behind a URL (its copy in the local "
                f"cache, {ro!r}), which is read-only; save a changed copy with "
                f"memmap(url, archive=True) to {doing}"
            )
        raise RuntimeError(
            f"{what}: this container was opened from the archive {ro!r}, which is "
            f"read-only; unpack it (python -m tensorbox unpack FILE DIR) and open the folder "
            f"to {doing}"
        )


def _leaves(td: Any) -> list[Tensor]:
    out, todo = [], [td]
    while todo:
        node = todo.pop()
        for v in node._tensordict.values():
            if isinstance(v, Tensor):
                out.append(v)
            elif is_coll(v):
                todo.append(v)
    return out


def _adopt(td: Any, new: Any) -> None:
    """Move ``new``'s entries and batch sizes into ``td``, keeping its nested nodes."""
    store = td._tensordict
    for k, v in new._tensordict.items():
        cur = store.get(k)
        if is_coll(v) and is_coll(cur) and cur is not v:
            _adopt(cur, v)
        else:
            store[k] = v
    td._batch_size = new._batch_size


# ---------------------------------------------------------------- saved trees


def _disk_spec(node: Node, store: Store, path: tuple[str, ...] = ()) -> Spec:
    entries: dict[str, Any] = {}
    for k, e in node.entries.items():
        if type(e) is NodeEntry:
            child = read_child(store, node, e, len(path) + 1)
            entries[k] = _disk_spec(child, store, (*path, k))
        elif type(e) is JsonEntry:
            entries[k] = None
        else:
            kind = DISK_KINDS.get(type(e))
            if kind is None:
                raise TypeError(
                    f"extend_: key {format_key((*path, k))} is a {type(e).__name__} on disk "
                    f"({node.path}), which extend_ cannot grow"
                )
            entries[k] = (kind.sig(e), e)
    return Spec(None if node.legacy else node.type, node.batch_size, entries, node)


def _check_files(disk: Spec, store: Store) -> None:
    """Before anything is written: every leaf has a file of its own (a symlink inside the
    tree, or two entries naming one file, would have one leaf's rows overwrite the
    other's), and each jagged leaf's committed offsets are whole (FormatError naming the
    file: appending after damaged offsets would commit rows that cannot be read)."""
    owners: dict[tuple[int, int], str] = {}
    todo: list[tuple[Spec, tuple[str, ...]]] = [(disk, ())]
    while todo:
        spec, path = todo.pop()
        for k, have in spec.entries.items():
            if isinstance(have, Spec):
                todo.append((have, (*path, k)))
                continue
            if have is None:
                continue
            e = have[1]
            where = format_key((*path, k))
            files = (e.values, e.offsets) if type(e) is JaggedEntry else (e,)
            for f in files:
                other = owners.setdefault(f.ident, where)
                if other != where or (type(e) is JaggedEntry and e.values.ident == e.offsets.ident):
                    raise RuntimeError(
                        f"extend_: key {where} and key {other} are one file ({f.path}: a "
                        "symlink, a hard link, or two entries naming it); rows appended to one "
                        "would overwrite the other's. Save the tree again (td.memmap(path)) to "
                        "give each leaf a file of its own, then extend_"
                    )
            if type(e) is JaggedEntry:
                o = e.offsets
                check_offsets(store.tensor(o, "r"), e.values.shape[0], o.path)


def _check_same_tree(td: Any, disk: Spec, tree: Store, path: tuple[str, ...] = ()) -> None:
    """``td`` maps the tree on disk (the same keys, the same files): else the tree was
    saved again since ``td`` was loaded, and its rows would be lost."""
    store = td._tensordict
    for k in [*store, *(k for k in disk.entries if k not in store)]:
        v, have = store.get(k), disk.entries.get(k, False)
        problem = None
        if have is False:
            problem = "the container has a key the tree has not"
        elif k not in store:
            problem = "the tree has a key the container has not"
        elif isinstance(have, Spec):
            if is_coll(v):
                _check_same_tree(v, have, tree, (*path, k))
                continue
            problem = "it is a nested node in the tree"
        elif have is None:
            if isinstance(v, Tensor) or is_coll(v):
                problem = "it is a non-tensor value in the tree"
        elif not isinstance(v, Tensor):
            problem = "it is a tensor in the tree"
        else:
            maps = DISK_KINDS[type(have[1])].maps(tree, have[1], v)
            if maps is None:
                raise RuntimeError(
                    f"extend_: key {format_key((*path, k))} holds a tensor that is not saved "
                    f"in the tree at {tree.name!r} yet: call memmap_() to save it, then extend_"
                )
            if not maps:
                problem = "the container does not map the tree's file"
        if problem is not None:
            raise RuntimeError(
                f"extend_: the tree at {tree.name!r} was saved again since this container was "
                f"loaded or saved (key {format_key((*path, k))}: {problem}); load it again "
                "(load_memmap) and extend that"
            )


class _ExtendedTree:
    """The new tree: per node, its container type, new store, batch size, saved type."""

    def __init__(self, fsync: bool) -> None:
        self.fsync = fsync
        self.appends: list[tuple[Any, Tensor, dict[str, Any], str, str, Any]] = []
        self.types: dict[int, str] = {}
        self.checksum = False

    def node(self, td: Any, disk: Spec, rows: Any, path: tuple[str, ...]) -> Any:
        n, k = disk.batch[0], rows._batch_size[0]
        store: dict[str, Any] = {}
        assert disk.node is not None
        node = disk.node
        for key, have in disk.entries.items():
            kpath = (*path, key)
            v = rows._tensordict[key]
            if isinstance(have, Spec):
                store[key] = self.node(td._tensordict[key], have, v, kpath)
            elif have is None:
                e = node.entries[key]
                assert type(e) is JsonEntry
                old = NonTensorData(e.value, stacked=e.stacked, meta=e.meta)
                new = NonTensorData.cat([old, v], 0, [disk.batch, rows._batch_size])
                check_json_value(
                    new.data.tolist() if new.stacked else new.data, f"key {format_key(kpath)}"
                )
                store[key] = new
            else:
                e = have[1]
                self.checksum |= _sha256s(e)
                store[key] = None  # filled by the append
                where = f"key {format_key(kpath)}"
                self.appends.append((e, v, store, key, where, td._tensordict.get(key)))
        bs = torch.Size((n + k, *disk.batch[1:]))
        out = type(td)._new_unsafe(store, bs, td._device)
        if disk.type is not None and disk.type != type_name(type(td)):
            self.types[id(out)] = disk.type  # a tree loaded without its class keeps its type
        return out

    def write(self, tree: Store) -> None:
        for e, v, store, key, where, current in self.appends:
            store[key] = DISK_KINDS[type(e)].append(tree, e, v, self.fsync, where, current)


def _extend_tree(td: Any, store: Store, rows: Any, fsync: bool) -> None:
    """Append ``rows`` to the live tree in ``store`` that ``td`` is the root of."""
    with store.writing():
        top = store.node()
        disk = _disk_spec(top, store)
        if not disk.batch:
            raise BatchSizeError(
                f"extend_: the tree at {store.name!r} has batch_size () on disk: no batch dim 0"
            )
        _check_same_tree(td, disk, store)
        check_rows(disk, rows)
        _check_files(disk, store)
        if not rows._batch_size[0]:
            return  # checked: nothing to write, nothing to commit
        plan = _ExtendedTree(fsync)
        grown = plan.node(td, disk, rows, ())  # every value checked: nothing written yet
        plan.write(store)
        saver = Saver(
            store, "inplace", False, fsync, checksum=plan.checksum,
            layout=store.layout(),  # a tree in tensordict's layout stays in it
        )  # fmt: skip
        saver.types = plan.types
        _backed.run(saver, grown, 0, held=True)
        # Rebound under the lock: another thread's append to ``td`` waits for it.
        _backed.unregister(grown)
        _adopt(td, grown)
        _backed.register(td, store, saver.gen)  # the new generation, locks kept
