"""An HDF5 file or a zarr v3 store as a read-only layout on the storage seam.

A node is a group, a leaf an array, the batch size the group attribute
``tensorbox_batch_size`` (``to_h5``/``to_zarr`` write it). A group written by another
tool, with no such attribute, takes its parent's batch size (``[]`` at the root): the
loaded tree is always valid, and ``auto_batch_size_()`` or ``from_h5`` finds a larger
one where the arrays share it. Non-tensor entries are tensordict's marked values (per-row
ones as a stack). Each node is described from its group directly (:meth:`Store.node` is
overridden, as the seam allows), so the one loader, :func:`~tensorbox._storage.store.verify`
and :func:`~tensorbox._storage.store.iter_nodes` read these files as they read a saved tree.

Leaves are lazy where the bytes allow: a contiguous, unfiltered HDF5 dataset in the
machine's byte order is a view of the file mapped once (copy-on-write: writing into it
changes this process's copy only); any other array (chunked, compressed, big-endian,
zarr) is read when its node is loaded. An entry that cannot be read (a dangling link, an
external link not followed, an ``Empty`` dataset, an array with no tensor form) raises
when its node is described, naming the file and the key.

>>> import os, tempfile, torch
>>> from tensorbox import TensorDict
>>> from tensorbox._storage.persist import load_from
>>> from tensorbox._storage.store import verify
>>> with tempfile.TemporaryDirectory() as d:
...     f = os.path.join(d, "x.h5")
...     TensorDict({"a": torch.arange(4), "g": {"b": torch.ones(4, 2)}}, [4]).to_h5(f).close()
...     store = GroupStore(f)
...     td = load_from(store)
...     store.close()
...     td.batch_size, td["g", "b"].shape, verify(GroupStore(f))
(torch.Size([4]), torch.Size([4, 2]), (2, 2, 64))
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np
import torch

from tensorbox._core.encoding import stacked_array
from tensorbox._core.nontensor import NonTensorData
from tensorbox._storage.format.parse import JsonEntry
from tensorbox._storage.store import Node, NodeEntry, NodeFiles, Store, TensorEntry, Writer
from tensorbox.errors import FormatError
from tensorbox.interop._adapters import (
    BATCH_ATTR,
    Unreadable,
    backend_for,
    recorded_batch,
    tensor_dtype,
)
from tensorbox.interop._arrays import (
    as_tensor,
    atomic_path,
    numpy_of,
    read_non_tensor,
    write_non_tensor,
)

__all__ = ["GroupStore"]

#: The format each backend is shown as by ``show``.
_FORMATS = {"h5": "HDF5", "zarr": "zarr"}


class GroupStore(Store):
    """The groups and arrays of an HDF5 file (``backend="h5"``) or a zarr v3 store
    (``backend="zarr"``), read-only (see the module doc). ``external_links``: HDF5 only,
    follow links to other files."""

    def __init__(
        self,
        path: Any,
        backend: str = "h5",
        *,
        external_links: bool = False,
        mode: str = "r",
    ) -> None:
        self.target = path
        self.name = os.fspath(path) if isinstance(path, str | os.PathLike) else repr(path)
        options = {"external_links": external_links} if backend == "h5" else {}
        self.backend = backend_for(backend, **options)
        self.foreign = _FORMATS[backend]
        self._batches: dict[str, tuple[int, ...]] = {}
        self._arrays: dict[str, Any] = {}  # a leaf's path -> the library's array
        self._raw: torch.Tensor | None = None  # the HDF5 file, mapped on first lazy leaf
        if mode == "w":  # a file to write (writer()): not opened now
            return
        if mode != "r":
            raise ValueError(f"{self.name}: mode={mode!r}; expected 'r' or 'w'")
        self.root = self.backend.open(path, "r")  # type: ignore[attr-defined]

    def close(self) -> None:
        """Close the file (HDF5) or the store (zarr); mapped leaves stay readable."""
        self.backend.close(self.root)

    def where(self, rel: str) -> str:
        return f"{self.name}:/{rel}"

    def _group(self, rel: str) -> Any:
        group = self.root
        for i, part in enumerate(rel.split("/") if rel else ()):
            try:
                group = self.backend.member(group, part)
            except KeyError:
                raise FormatError(f"{self.where(rel)}: no group {part!r}") from None
            if type(group) is Unreadable:
                raise group.error(part, self.where("/".join(rel.split("/")[:i])))
            if not self.backend.is_group(group):
                raise FormatError(f"{self.where(rel)}: {part!r} is an array, not a group")
        return group

    def _batch(self, rel: str, group: Any) -> tuple[int, ...]:
        """The node's recorded batch size, else its parent's (``()`` at the root)."""
        batch = self._batches.get(rel)
        if batch is None:
            recorded = group.attrs.get(BATCH_ATTR)
            if recorded is not None:
                batch = recorded_batch(recorded, self.where(rel))
            elif rel:
                parent = rel.rpartition("/")[0]
                batch = self._batch(parent, self._group(parent))
            else:
                batch = ()
            self._batches[rel] = batch
        return batch

    def node(self, rel: str = "") -> Node:
        b, where = self.backend, self.where(rel)
        group = self._group(rel)
        batch = self._batch(rel, group)
        entries: dict[str, Any] = {}
        for name, obj in b.members(group):
            path = f"{rel}/{name}" if rel else name
            if type(obj) is Unreadable:
                raise obj.error(name, where)
            if b.is_group(obj):
                entries[name] = NodeEntry(path)
            elif b.is_non_tensor(obj):
                value = read_non_tensor(b, obj, name, where, None)
                if value.stacked and tuple(value.data.shape) != batch:
                    raise FormatError(
                        f"{where}: entry {name!r} holds values of shape "
                        f"{list(value.data.shape)}, not the batch size {list(batch)}"
                    )
                data = value.data  # h5py reads text as bytes: the tree holds it as str
                entries[name] = JsonEntry(
                    data.decode() if isinstance(data, bytes) else data, value.stacked
                )
            else:
                dtype = tensor_dtype(obj.dtype, name, where)
                shape = tuple(int(s) for s in obj.shape)
                if shape[: len(batch)] != batch:
                    raise FormatError(
                        f"{where}: entry {name!r} has shape {list(shape)}, which does not "
                        f"start with the batch size {list(batch)}"
                    )
                t = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
                self._arrays[path] = obj
                nbytes = int(np.prod(shape)) * dtype.itemsize
                entries[name] = TensorEntry(t, shape, self.where(path), nbytes, path)
        return Node(where, 0, "TensorDict", batch, None, entries, False, rel)

    # The layout has no meta.json and no per-node files: node() describes each node from
    # its group, so the seam's two meta.json hooks are never reached.
    def read_meta(self, rel: str) -> bytes:
        raise FormatError(f"{self.where(rel)}: an {self.foreign} file has no meta.json (node())")

    def open_node(self, rel: str) -> NodeFiles:
        raise FormatError(f"{self.where(rel)}: an {self.foreign} file has no node files (node())")

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        arr = self._arrays[e.ident]
        offset = self.backend.file_offset(arr, self.root)
        if offset is not None and e.nbytes and not offset % e.dtype.itemsize:
            if self._raw is None:
                with open(self.name, "rb") as f:
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                self._raw = torch.frombuffer(mm, dtype=torch.uint8)
            return self._raw[offset : offset + e.nbytes].view(e.dtype).view(e.shape)
        return as_tensor(self.backend.read_all(arr))

    def writer(self, **options: Any) -> Writer:
        """A staged writer of a new file or store here (see :class:`_GroupWriter`)."""
        return _GroupWriter(self, options.get("arrays") or {}, bool(options.get("discard")))

    def check(self, e: TensorEntry) -> None:
        # The library checks what the file records (HDF5's fletcher32, zarr's codecs) as
        # it reads every byte.
        self.backend.read_all(self._arrays[e.ident])


class _GroupWriter(Writer):
    """The saver's nodes and leaves as groups and arrays: staged in memory, written at the
    commit to a temporary name beside a path and renamed into place (a failed save leaves
    what was there), or straight into a store object. ``arrays``: the library's options
    for every new array (``compression=``, ``chunks=``...); ``discard``: the caller drops
    the saved copy, so :meth:`opened` gives the source tensor back instead of a read."""

    def __init__(self, store: GroupStore, arrays: dict[str, Any], discard: bool) -> None:
        self.store, self.arrays, self.discard = store, arrays, discard
        self.metas: dict[str, dict[str, Any]] = {}  # node path -> its meta, parents first
        self.paths: dict[str, tuple[str, ...]] = {"": ()}  # saver's path -> key path
        self.data: dict[str, np.ndarray] = {}  # a leaf's file in the tree -> its values
        self.names: list[str] = []
        self.read: GroupStore | None = None

    def node(self, rel: str, meta: dict[str, Any], std_json: bool) -> None:
        self.metas[rel] = meta
        for key, e in meta["entries"].items():
            path = (*self.paths[rel], key)
            if not key or "/" in key or key in (".", ".."):
                # the library reads "/" as a path (a key "a/b" would come back as a
                # nested a -> b) and "", ".", ".." as the group itself or its parent
                raise ValueError(
                    f"{self.store.where('/'.join(path[:-1]))}: key {'.'.join(path)!r} cannot "
                    f"name a member of an {self.store.foreign} file (empty, '.', '..' or holding '/'); "
                    "rename it, or save with memmap()"
                )
            if e["kind"] == "jagged":
                raise TypeError(
                    f"entry {'.'.join(path)!r} is a jagged tensor, which {self.store.foreign} "
                    "does not store; pad it (to_padded_tensor) or save with memmap()"
                )
            if e["kind"] in ("tensor", "node"):
                name = e["file"] if e["kind"] == "tensor" else e["dir"]
                self.paths[f"{rel}/{name}" if rel else name] = path

    def leaf(
        self,
        rel: str,
        t: torch.Tensor,
        reserve: bool = False,
        gen: str | None = None,
        key: str = "",
    ) -> int:
        data = numpy_of(t, ".".join(self.paths[rel]), self.store.backend.name)  # no bfloat16
        self.data[rel] = np.zeros_like(data) if reserve else data
        self.names.append(rel)
        return len(self.names) - 1

    def commit(self, num_threads: int = 0) -> None:
        target = self.store.target
        if isinstance(target, str | os.PathLike):
            with atomic_path(os.fspath(target)) as tmp:
                self._write(tmp)
        else:
            self._write(target)

    def _write(self, target: Any) -> None:
        b = self.store.backend
        root = b.open(target, "w", {BATCH_ATTR: self.metas[""]["batch_size"]})  # type: ignore[attr-defined]
        try:
            groups = {"": root}
            for rel, meta in self.metas.items():
                group = groups[rel]
                for key, e in meta["entries"].items():
                    name = e.get("file") or e.get("dir")
                    sub = f"{rel}/{name}" if rel else name
                    if e["kind"] == "tensor":
                        b.create_array(group, key, self.data[sub], self.arrays)
                    elif e["kind"] == "node":
                        attrs = {BATCH_ATTR: self.metas[sub]["batch_size"]}
                        groups[sub] = b.create_group(group, key, attrs)
                    else:  # a value: one, or one per batch element
                        value = NonTensorData(
                            stacked_array(e["value"], tuple(meta["batch_size"]), key)
                            if e.get("stacked")
                            else e["value"],
                            stacked=bool(e.get("stacked")),
                        )
                        write_non_tensor(b, group, key, value, key)
        finally:
            b.written(root)

    def opened(self, i: int, t: torch.Tensor) -> torch.Tensor:
        if self.discard:
            return t
        if self.read is None:
            self.read = GroupStore(self.store.target, self.store.backend.name)
        path = self.paths[self.names[i]]
        e = self.read.node("/".join(path[:-1])).entries[path[-1]]
        assert type(e) is TensorEntry
        return self.read.tensor(e, "r")
