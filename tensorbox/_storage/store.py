"""The storage seam: what a place that holds saved trees must do, and the one reader over it.

A *store* holds one saved tree: a folder (:mod:`tensorbox._storage.folder`), a zip
archive (:mod:`tensorbox._storage.archive.store`), a dict of bytes
(:mod:`tensorbox._storage.memory`, for the tests). Nodes are named by their path in
the tree, ``"/"``-joined plain names (``""`` is the root). A store answers three
questions about a node and its files, and writes a new tree through a staged
:class:`Writer`:

- :meth:`Store.read_meta`: the bytes of a node's ``meta.json``
  (:func:`~tensorbox._storage.format.parse.parse_node` turns them into a description);
- :meth:`Store.open_node` then :meth:`NodeFiles.leaf`: resolve a file the description
  names: it exists, stays inside the tree, holds at least the tensor's bytes; nothing
  of it is read yet;
- :meth:`Store.tensor`: the tensor of a resolved file: a mapping where the store can
  map, else the bytes read;
- :meth:`Store.check`: read every byte of a file and compare the recorded checksums.

Everything above that is written once, here and in :mod:`tensorbox._storage.load`:
:meth:`Store.node` (parse, resolve), :func:`read_child` (a child checked against its parent),
:func:`iter_nodes`, :func:`verify`, and one loader that builds containers.

A backend whose nodes are not ``meta.json`` files (an HDF5 group, a zarr group)
overrides :meth:`Store.node` to describe a node itself; a live, per-key store (Redis)
does not hold saved trees and sits on the container's backing hook instead
(``docs/design.md``).

>>> import torch
>>> from tensorbox._storage.memory import MemoryStore
>>> store = MemoryStore({"meta.json": b'{"format": "tensorbox", "version": 1, '
...     b'"type": "TensorDict", "batch_size": [2], "device": null, "entries": '
...     b'{"x": {"kind": "tensor", "dtype": "int16", "shape": [2], "file": "x.memmap"}}}',
...     "x.memmap": torch.tensor([7, 8], dtype=torch.int16).numpy().tobytes()})
>>> node = store.node()
>>> store.tensor(node.entries["x"], "r").tolist()
[7, 8]
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import torch

from tensorbox._core.encoding import stacked_array
from tensorbox._storage.format.legacy import parse_legacy
from tensorbox._storage.format.parse import (
    ChildSpec,
    JaggedSpec,
    JsonEntry,
    LeafSpec,
    NodeDoc,
    is_legacy,
    parse_doc,
    parse_json,
)
from tensorbox._storage.format.spec import MAX_DEPTH, META
from tensorbox.errors import FormatError

__all__ = [
    "JaggedEntry",
    "JsonEntry",
    "ListedFiles",
    "Node",
    "NodeEntry",
    "NodeFiles",
    "Store",
    "TensorEntry",
    "Writer",
    "check_entry",
    "count",
    "iter_nodes",
    "read_child",
    "verify",
]


class TensorEntry(NamedTuple):
    """A tensor file, resolved by its store (nothing of it read yet)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    path: str  # the file as the store shows it (a path, FILE::entry, a URL): for messages
    nbytes: int  # of the tensor (the file may be longer)
    ident: Any  # the store's handle: (st_dev, st_ino) of a folder's file, an archive entry
    gen: str | None = None  # the file generation id (version 2), None in version 1 trees
    sha256: str | None = None  # of the tensor's bytes, when the save recorded it


class JaggedEntry(NamedTuple):
    """A ``jagged`` entry's two files (shapes ``[length, *feature]`` and ``[rows + 1]``),
    their contents not read yet (the offsets are checked when the leaf is built)."""

    values: TensorEntry
    offsets: TensorEntry


class NodeEntry(NamedTuple):
    path: str  # the sub-node's path in the tree ("/"-joined)


Entry = TensorEntry | JaggedEntry | NodeEntry | JsonEntry


class Node(NamedTuple):
    """One node of a tree: its description, every file it names resolved."""

    path: str  # the node as the store shows it (a directory, FILE::DIR...): for messages
    version: int  # the tensorbox format version, or tensordict's (0, 1) when legacy
    type: str
    batch_size: tuple[int, ...]
    device: str | None
    entries: dict[str, Entry]
    legacy: bool
    rel: str = ""  # the node's path in the tree
    stack_dim: int | None = None  # a tensordict lazy stack: its "0".."n-1" stacked on it


class NodeFiles(abc.ABC):
    """The files of one node, while it is being resolved (a folder keeps the directory
    open: one path walk per node, not per leaf)."""

    @abc.abstractmethod
    def leaf(self, spec: LeafSpec, where: str, key: str = "") -> TensorEntry:
        """The file ``spec`` names, checked; FormatError naming it when missing, outside
        the tree, not a regular file or shorter than ``spec.nbytes``."""

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """Whether the node holds ``name`` (a file or a sub-directory)."""

    @abc.abstractmethod
    def child(self, name: str, where: str) -> str:
        """The path of sub-node ``name``; FormatError unless it is one."""

    def close(self) -> None:  # noqa: B027 - most stores hold nothing per node
        """Release what :meth:`Store.open_node` took."""


class ListedFiles(NodeFiles):
    """The files of a node of a store that lists every file with its size (an archive's
    central directory, a dict of bytes, an object store's listing): ``sizes`` maps each
    ``"/"``-joined name of the tree to its size in bytes; ``show`` names one in messages."""

    def __init__(self, sizes: Any, rel: str, show: Any, exact: bool = False) -> None:
        self.sizes, self.show, self.exact = sizes, show, exact  # exact: no longer either
        self.pre = f"{rel}/" if rel else ""

    def leaf(self, spec: LeafSpec, where: str, key: str = "") -> TensorEntry:
        name = self.pre + (spec.file if type(spec.file) is str else spec.file[0])
        size = self.sizes.get(name)
        if size is None:
            raise FormatError(f"{self.show(name)} is missing ({where}: entry {key!r})")
        if size < spec.nbytes or (self.exact and size != spec.nbytes):
            raise FormatError(
                f"{self.show(name)} is {size} bytes, but {str(spec.dtype).removeprefix('torch.')} "
                f"of shape {list(spec.shape)} needs {spec.nbytes}: the entry is truncated "
                f"{'(or longer: damaged) ' if self.exact else ''}or belongs to another tree"
            )
        return TensorEntry(
            spec.dtype, spec.shape, self.show(name), spec.nbytes, name, spec.gen, spec.sha256
        )

    def exists(self, name: str) -> bool:
        return self.pre + name in self.sizes or f"{self.pre}{name}/{META}" in self.sizes

    def child(self, name: str, where: str) -> str:
        sub = self.pre + name
        if f"{sub}/{META}" not in self.sizes:
            raise FormatError(f"{self.show(sub + '/' + META)} is missing ({where})")
        return sub


class Store(abc.ABC):
    """One saved tree, wherever it lives (see the module doc)."""

    #: The tree as users name it (a path, ``FILE``, a URL): for messages.
    name: str
    #: Whether the store records a checksum of every file itself (an archive's CRC-32s),
    #: so :meth:`check` verifies bytes even where the save recorded no SHA-256.
    checksummed = False
    #: The format of a store that is not a saved tree (``"safetensors"``), for ``show``.
    foreign: str | None = None

    @abc.abstractmethod
    def where(self, rel: str) -> str:
        """How the file or node ``rel`` of the tree is shown in messages."""

    @abc.abstractmethod
    def read_meta(self, rel: str) -> bytes:
        """The ``meta.json`` bytes of node ``rel``: FileNotFoundError when there is no
        tree there, IncompleteTreeError when the node has no ``meta.json``."""

    @abc.abstractmethod
    def open_node(self, rel: str) -> NodeFiles:
        """The files of node ``rel``, for resolving its description."""

    @abc.abstractmethod
    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        """The tensor of ``e``: mapped (``mode`` ``"r+"`` shared, ``"r"``
        copy-on-write) where the store can, else read."""

    @abc.abstractmethod
    def check(self, e: TensorEntry) -> None:
        """Read every byte of ``e``; FormatError naming it when a recorded checksum
        (the store's own, ``sha256``) differs."""

    def node(self, rel: str = "") -> Node:
        """The checked node ``rel``: its ``meta.json`` parsed, its files resolved."""
        meta = f"{rel}/{META}" if rel else META
        where = self.where(meta)
        raw = self.read_meta(rel)
        files = self.open_node(rel)
        try:
            doc = parse_json(raw, where)
            if is_legacy(doc):  # a tree written by tensordict: its names depend on the files
                desc = parse_legacy(doc, where, files.exists)
            else:
                desc = parse_doc(doc, where)
            return self._resolve(rel, desc, files, where)
        finally:
            files.close()

    def _resolve(self, rel: str, doc: NodeDoc, files: NodeFiles, where: str) -> Node:
        if doc.inner is not None:  # a tensordict tensorclass: its tensors are a sub-node
            inner = self.node(files.child(doc.inner, f"{where}: {doc.inner!r}"))
            entries: dict[str, Entry] = {**inner.entries, **doc.entries}  # type: ignore[dict-item]
            return Node(
                self.where(rel), 0, doc.type, inner.batch_size, inner.device, entries, True, rel
            )
        if doc.stack_dim is not None:  # a tensordict lazy stack: its elements' nodes
            return self._stack(rel, doc, files, where)
        entries = {}
        for key, s in doc.entries.items():
            if type(s) is LeafSpec:
                entries[key] = files.leaf(s, where, key)
            elif type(s) is ChildSpec:
                sub = files.child(
                    s.dir if type(s.dir) is str else s.dir[0], f"{where}: entry {key!r}"
                )
                entries[key] = (
                    NodeEntry(sub)
                    if s.json is None
                    else self._json_node(sub, s.json, doc.batch_size, f"{where}: entry {key!r}")
                )
            elif type(s) is JaggedSpec:
                entries[key] = JaggedEntry(
                    files.leaf(s.values, where), files.leaf(s.offsets, where)
                )
            else:
                entries[key] = s  # type: ignore[assignment]
        return Node(
            self.where(rel),
            doc.version,
            doc.type,
            doc.batch_size,
            doc.device,
            entries,
            doc.legacy,
            rel,
        )

    def _stack(self, rel: str, doc: NodeDoc, files: NodeFiles, where: str) -> Node:
        """A tensordict lazy stack: its elements, whose batch sizes must agree; the
        stack's batch size has their count at ``stack_dim`` (the load stacks them)."""
        entries: dict[str, Entry] = {}
        batch: tuple[int, ...] | None = None
        for key, s in doc.entries.items():
            assert type(s) is ChildSpec and type(s.dir) is str
            sub = files.child(s.dir, f"{where}: element {key!r}")
            element = self.node(sub)
            if batch is not None and element.batch_size != batch:
                raise FormatError(
                    f"{where}: the lazy stack's elements have batch sizes {list(batch)} and "
                    f"{list(element.batch_size)} (element {key!r}); tensorbox stacks them "
                    "densely: load each element on its own, or densify it in tensordict"
                )
            batch = element.batch_size
            entries[key] = NodeEntry(sub)
        assert batch is not None and doc.stack_dim is not None
        if not 0 <= doc.stack_dim <= len(batch):
            raise FormatError(
                f"{where}: stack_dim {doc.stack_dim} is outside its elements' "
                f"{len(batch)} batch dims"
            )
        full = (*batch[: doc.stack_dim], len(entries), *batch[doc.stack_dim :])
        return Node(self.where(rel), doc.version, doc.type, full, doc.device, entries, True, rel,
                    doc.stack_dim)  # fmt: skip

    def _json_node(self, rel: str, kind: str, batch: tuple[int, ...], where: str) -> JsonEntry:
        """A tensordict ``NonTensorData``/``NonTensorStack`` node: its value."""
        meta = self.where(f"{rel}/{META}")
        value = parse_json(self.read_meta(rel), meta)
        if type(value) is not dict or "data" not in value:
            raise FormatError(f"{meta}: expected an object with a 'data' field")
        if kind != "stack":  # "value", "meta"
            return JsonEntry(value["data"], False, kind == "meta")
        if value.get("stack_dim", 0) != 0:
            raise FormatError(f"{meta}: only stacks along dim 0 are supported")
        return JsonEntry(stacked_array(value["data"], batch, where), True)

    def writer(self, **options: Any) -> Writer:
        """A staged writer of a new tree that replaces this one at :meth:`Writer.commit`."""
        raise ValueError(f"{self.name} is read-only: save to a folder or an archive instead")

    def linkable(self, rel: str, t: torch.Tensor) -> bool:
        """Whether a save may keep the file the mapped leaf ``t`` already is, as ``rel`` of
        the new tree (:meth:`Writer.link`; a folder hard-links it); False: written."""
        return False

    def writing(self) -> AbstractContextManager[Any]:
        """The writer lock a save here holds, so that writers of one tree take turns (a
        folder's and an archive's: :func:`tensorbox._storage.commit.writing`); a store
        whose writer stages in memory needs none."""
        return contextlib.nullcontext()

    # ------------------------------------------------------------ live trees
    #
    # A store that commits in place (``in_place = True``) keeps a saved tree live: the
    # container a save or a ``load_memmap(mode="r+")`` returns stays tied to it, and
    # write-through, ``extend_`` and ``make_memmap`` change the tree where it is, each
    # change committed whole by the store's writer (:meth:`writer` with the Saver's
    # ``"inplace"`` mode) under :meth:`writing`. The engine (``backed``, ``writethrough``,
    # ``extend``, ``make_entry``) speaks only to the methods below; a folder implements
    # them with its staging directory and ``RENAME_EXCHANGE``, a transactional store
    # (LMDB, a database) would with its transactions. Every other store refuses them,
    # naming itself and what it lacks (:meth:`live`).

    #: Whether a saved tree here takes changes in place (the methods below work).
    in_place = False

    def live(self, what: str) -> Store:
        """This store, for the live-tree operation ``what``; ValueError naming the store
        when it cannot change a saved tree in place."""
        if not self.in_place:
            raise self._not_live(what)
        return self

    def _not_live(self, what: str) -> ValueError:
        return ValueError(
            f"{what}: {self.name!r} ({type(self).__name__}) cannot change a saved tree in "
            "place: it has no in-place commit (write-through, extend_ and make_memmap need "
            "one, as a folder has). Save a changed copy instead (memmap), or work on a "
            "folder tree"
        )

    def generation(self) -> Any:
        """What identifies the tree here now (None: no tree): a write-through made on a
        container that loaded another generation is refused, not lost."""
        raise self._not_live("a live tree's generation")

    def layout(self) -> str:
        """The layout of the tree here (``"tensorbox"``, or ``"tensordict"``: tensordict's
        own), which a commit of a live tree keeps."""
        return "tensorbox"

    def holds(self, e: TensorEntry, t: torch.Tensor) -> bool | None:
        """Whether the leaf ``t`` holds the data of ``e`` here (writes to it reach ``e``);
        None when ``t`` is no tensor of this store at all (not saved yet)."""
        raise self._not_live("extend_")

    def append(
        self, e: TensorEntry, rows: torch.Tensor, fsync: bool, where: str, current: Any
    ) -> torch.Tensor:
        """Write ``rows`` after the committed rows of ``e`` (never touching those), and
        return the longer leaf, as a load of the grown tree gives it (``current``: the
        leaf it replaces, which the store may reuse; ``where`` names it in errors). The
        new rows count once the caller commits the grown tree's ``meta.json``."""
        raise self._not_live("extend_")

    def subtree(self, rel: str) -> Store:
        """Node ``rel`` as a tree of its own (a node whose root container is gone is
        written as one)."""
        raise self._not_live("a write to a node of a saved tree")

    def entry_file(self, rel: str) -> str | None:
        """The local file that holds (or will hold) the leaf ``rel``, for
        ``make_memmap_from_storage``; None when the store keeps no files."""
        return None


class Writer(abc.ABC):
    """A new tree, staged: nothing is visible at the store's place until :meth:`commit`,
    which publishes the whole tree at once (or raises, leaving the old one)."""

    @abc.abstractmethod
    def node(self, rel: str, meta: dict[str, Any], std_json: bool) -> None:
        """Node ``rel`` with its ``meta.json`` object (parents come before children)."""

    @abc.abstractmethod
    def leaf(
        self,
        rel: str,
        t: torch.Tensor,
        reserve: bool = False,
        gen: str | None = None,
        key: str = "",
    ) -> int:
        """File ``rel`` holding the bytes of ``t`` (``reserve``: zeros of its size; ``gen``:
        its generation id; ``key``: its key, for messages); returns its index for
        :meth:`opened`."""

    def link(self, rel: str, t: torch.Tensor) -> bool:
        """Keep the file ``t`` maps (already at ``rel``) in the new tree; False when the
        store cannot, and the caller writes it with :meth:`leaf`."""
        return False

    @abc.abstractmethod
    def commit(self, num_threads: int = 0) -> None:
        """Write everything staged and publish it; on failure nothing is published."""

    def abort(self) -> None:  # noqa: B027 - a writer that stages in memory drops nothing
        """Drop what was staged (a failure before :meth:`commit`); the old tree stays."""

    @abc.abstractmethod
    def opened(self, i: int, t: torch.Tensor) -> torch.Tensor:
        """After the commit: leaf ``i`` (written from ``t``) read back as a load gives it."""


def read_child(store: Store, parent: Node, e: NodeEntry, depth: int) -> Node:
    """The sub-node ``e`` of ``parent``, checked against it; ``depth`` is its level."""
    if depth > MAX_DEPTH:
        raise FormatError(f"{store.where(e.path)}: nodes are nested more than {MAX_DEPTH} deep")
    child = store.node(e.path)
    if parent.stack_dim is not None:  # an element of a lazy stack: checked by _stack
        return child
    if child.batch_size[: len(parent.batch_size)] != parent.batch_size:
        raise FormatError(
            f"{store.where(e.path + '/' + META)}: batch_size {list(child.batch_size)} does not "
            f"start with its parent's {list(parent.batch_size)}"
        )
    return child


def iter_nodes(
    store: Store, rel: str = "", top: Node | None = None
) -> Iterator[tuple[tuple[str, ...], Node]]:
    """Every node below ``rel`` (whose node is ``top`` when already read), parents
    first, checked."""
    todo: list[tuple[tuple[str, ...], Node]] = [((), top or store.node(rel))]
    while todo:
        keys, node = todo.pop()
        yield keys, node
        for k, e in reversed(node.entries.items()):
            if type(e) is NodeEntry:
                todo.append(((*keys, k), read_child(store, node, e, len(keys) + 1)))


def count(e: Any) -> tuple[int, int]:
    """``(tensors, bytes)`` of entry ``e`` (0, 0 for nodes and values)."""
    if type(e) is TensorEntry:
        return 1, e.nbytes
    if type(e) is JaggedEntry:
        return 1, e.values.nbytes + e.offsets.nbytes
    return 0, 0


def check_entry(store: Store, e: Any) -> None:
    """Read every byte of the file(s) of entry ``e`` (nodes and values: nothing),
    comparing the recorded checksums, and a jagged leaf's offsets."""
    if type(e) is TensorEntry:
        store.check(e)
    elif type(e) is JaggedEntry:
        from tensorbox._storage import jagged_io

        store.check(e.values)
        store.check(e.offsets)
        jagged_io.build(store.tensor(e.values, "r"), store.tensor(e.offsets, "r"), e)


def verify(store: Store, rel: str = "", top: Node | None = None) -> tuple[int, int, int]:
    """Check every node below ``rel`` and read every byte of every file
    (:func:`check_entry`); returns (nodes, tensors, bytes)."""
    nodes = tensors = total = 0
    for _, node in iter_nodes(store, rel, top):
        nodes += 1
        for e in node.entries.values():
            n, b = count(e)
            tensors, total = tensors + n, total + b
            check_entry(store, e)
    return nodes, tensors, total
