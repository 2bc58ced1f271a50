"""A ``.safetensors`` file as a layout on the storage seam, read and written by one class.

The file has no ``meta.json``: its header (checked by
:func:`tensorbox.interop.safetensors.read_header`) is the description of every node.
Dotted keys are nested (``"encoder.layer.0.weight"`` is the leaf ``weight`` of node
``encoder.layer.0``); each node is described from the header directly
(:meth:`Store.node` is overridden, as the seam allows), so the one loader, ``show`` and
``verify`` read a checkpoint as they read a saved tree. The file is mapped once,
copy-on-write: writing into a loaded tensor changes this process's copy only.

Nodes are named by their dotted prefix (``""`` is the root): the parts come from
splitting on ``.``, so no part holds one.

Writing goes through the one saver too: :meth:`SafetensorsStore.writer` is a staged
:class:`~tensorbox._storage.store.Writer` that takes the saver's nodes and leaves, joins
each tensor's key path with ``.``, and at the commit writes the header and the data
under a temporary name renamed into place (a failed save leaves the old file). The
format holds tensors only: a non-tensor or jagged entry is refused before anything is
written, and so are two keys that join to one name.

>>> import os, tempfile, torch
>>> from tensorbox import TensorDict
>>> from tensorbox.interop.safetensors import to_safetensors
>>> from tensorbox._storage.api import load_from
>>> with tempfile.TemporaryDirectory() as d:
...     f = os.path.join(d, "w.safetensors")
...     to_safetensors(TensorDict({"enc": {"w": torch.ones(2), "b": torch.zeros(1)}}), f)
...     store = SafetensorsStore(f)
...     sorted(store.node(".enc").entries), load_from(store)["enc", "w"].tolist()
(['b', 'w'], [1.0, 1.0])
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from typing import Any

import torch

from tensorbox._storage.format.spec import META
from tensorbox._storage.store import Node, NodeEntry, NodeFiles, Store, TensorEntry, Writer
from tensorbox.errors import FormatError, KeyCollisionError
from tensorbox.interop._arrays import atomic_path
from tensorbox.interop._safetensors_format import CODES, nest, read_header

__all__ = ["SafetensorsStore"]


class SafetensorsStore(Store):
    """The tensors of one ``.safetensors`` file, as a tree (see the module doc).

    ``keys``: only these dotted keys (KeyError naming the first missing one);
    ``prefix``: only the keys under this dotted prefix, with it removed;
    ``nested=False``: every dotted key a leaf of the root;
    ``mode="w"``: a file to write (:meth:`writer`), not read now (it need not exist).
    """

    foreign = "safetensors"

    def __init__(
        self,
        path: Any,
        *,
        keys: Any = None,
        prefix: str | None = None,
        nested: bool = True,
        mode: str = "r",
    ) -> None:
        self.name = os.fspath(path)
        # node prefix -> {name: ("leaf", header entry) | ("node", child prefix)}; a
        # prefix is "." + the node's dotted key ("" the root), so that a node named ""
        # (key ".x") is not the root itself
        self._nodes: dict[str, dict[str, tuple[str, Any]]] = {"": {}}
        if mode == "w":
            return
        if mode != "r":
            raise ValueError(f"{self.name}: mode={mode!r}; expected 'r' or 'w'")
        p = prefix.rstrip(".") + "." if prefix else ""
        chosen = None if keys is None else set(keys)

        def accept(key: str) -> bool:
            return (chosen is None or key in chosen) and key.startswith(p)

        entries, _meta, _start = read_header(self.name, accept if (chosen or p) else None)
        if chosen is not None:
            missing = [k for k in keys if k not in entries]
            if missing:
                raise KeyError(f"{self.name}: no tensor {missing[0]!r} in the file")
        if prefix and not entries:
            raise KeyError(f"{self.name}: no tensor under the prefix {prefix!r}")
        order = list(keys) if chosen is not None else list(entries)
        leaves = {k[len(p) :]: entries[k] for k in order}
        if nested:
            nest(list(leaves), self.name)
        for key, info in leaves.items():
            parts = key.split(".") if nested else [key]
            rel = ""
            for part in parts[:-1]:
                child = f"{rel}.{part}"
                self._nodes[rel].setdefault(part, ("node", child))
                self._nodes.setdefault(child, {})
                rel = child
            self._nodes[rel][parts[-1]] = ("leaf", info)
        self._raw = _map(self.name)

    def where(self, rel: str) -> str:
        rel = rel.removesuffix(META).rstrip("/")
        return f"{self.name} (tensors under {rel[1:]!r})" if rel else self.name

    def node(self, rel: str = "") -> Node:
        """The node at ``rel``: ``""`` the root, else ``"."`` + its dotted key (``".enc"``;
        ``"."`` a node named ``""``), as its ``NodeEntry`` paths give it."""
        table = self._nodes.get(rel)
        if table is None:
            raise FormatError(f"{self.name}: no tensors under {rel!r}")
        entries: dict[str, Any] = {}
        for name, (kind, info) in table.items():
            if kind == "node":
                entries[name] = NodeEntry(info)
                continue
            dtype, shape, begin, end = info
            key = f"{rel}.{name}"[1:]
            entries[name] = TensorEntry(dtype, shape, f"{self.name}::{key}", end - begin, begin)
        return Node(self.where(rel), 0, "TensorDict", (), None, entries, False, rel)

    # The file has no meta.json and no per-node files: node() describes each node from
    # the header, so the seam's two meta.json hooks are never reached.
    def read_meta(self, rel: str) -> bytes:
        raise FormatError(f"{self.where(rel)}: a .safetensors file has no meta.json (see node())")

    def open_node(self, rel: str) -> NodeFiles:
        raise FormatError(f"{self.where(rel)}: a .safetensors file has no node files (node())")

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        return _tensor(self._raw, e.ident, e.nbytes, e.dtype, e.shape)

    def check(self, e: TensorEntry) -> None:
        # The format records no checksum: reading every byte finds a truncated or
        # unreadable file (the header check already bounds every range).
        bytes(self._raw[e.ident : e.ident + e.nbytes].numpy().data)

    def writer(self, **options: Any) -> Writer:
        """A staged writer of a new file at this path (``metadata``: the header's
        ``__metadata__`` strings; ``fsync``: flush before the rename)."""
        return _SafetensorsWriter(self.name, options.get("metadata"), bool(options.get("fsync")))


class _SafetensorsWriter(Writer):
    """The saver's nodes and leaves as one ``.safetensors`` file (see the module doc)."""

    def __init__(self, name: str, metadata: dict[str, str] | None, fsync: bool) -> None:
        self.name, self.metadata, self.fsync = name, metadata, fsync
        # a node's path in the tree -> "." + its dotted key ("" the root: a node named ""
        # has ".", so its leaf "x" is key ".x", not "x")
        self.prefixes: dict[str, str] = {"": ""}
        self.keys: dict[str, str] = {}  # a leaf's path in the tree -> dotted key
        self.tensors: list[tuple[str, torch.Tensor]] = []
        self.seen: set[str] = set()
        self.start = 0  # of the data in the file, after the commit
        self.offsets: list[int] = []  # of each tensor in the file, after the commit
        self.mapped: torch.Tensor | None = None

    def _where(self) -> str:
        return f"to_safetensors({self.name!r})"

    def node(self, rel: str, meta: dict[str, Any], std_json: bool) -> None:
        prefix = self.prefixes[rel]
        for key, e in meta["entries"].items():
            led = f"{prefix}.{key}"
            dotted = led[1:]
            kind = e["kind"]
            if kind == "tensor":
                self.keys[f"{rel}/{e['file']}" if rel else e["file"]] = dotted
            elif kind == "node":
                self.prefixes[f"{rel}/{e['dir']}" if rel else e["dir"]] = led
            else:
                what = "a NonTensorData value" if kind == "json" else f"a {kind} entry"
                raise TypeError(
                    f"{self._where()}: entry {dotted!r} is {what}; the format holds dense "
                    "tensors only (drop it: td.exclude(...))"
                )

    def leaf(
        self,
        rel: str,
        t: torch.Tensor,
        reserve: bool = False,
        gen: str | None = None,
        key: str = "",
    ) -> int:
        dotted = self.keys[rel]
        if t.dtype not in CODES:
            raise TypeError(f"{self._where()}: entry {dotted!r} has dtype {t.dtype}")
        if dotted in self.seen:
            raise KeyCollisionError(
                f"{self._where()}: two entries are both named {dotted!r} once their keys are "
                "joined with '.'; rename one"
            )
        self.seen.add(dotted)
        data = torch.zeros(t.shape, dtype=t.dtype) if reserve else t.detach().cpu().contiguous()
        self.tensors.append((dotted, data))
        return len(self.tensors) - 1

    def commit(self, num_threads: int = 0) -> None:
        nest([k for k, _ in self.tensors], self._where())
        header: dict[str, Any] = {}
        if self.metadata:
            header["__metadata__"] = {str(k): str(v) for k, v in self.metadata.items()}
        offset = 0
        for key, t in self.tensors:
            nbytes = t.numel() * t.element_size()
            header[key] = {
                "dtype": CODES[t.dtype],
                "shape": list(t.shape),
                "data_offsets": [offset, offset + nbytes],
            }
            self.offsets.append(offset)
            offset += nbytes
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
        self.start = 8 + len(blob)
        with atomic_path(self.name) as target, open(target, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for _, t in self.tensors:
                if t.numel():
                    f.write(t.reshape(-1).view(torch.uint8).numpy().data)  # no copy
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())

    def opened(self, i: int, t: torch.Tensor) -> torch.Tensor:
        if self.mapped is None:
            self.mapped = _map(self.name)
        d = self.tensors[i][1]
        begin = self.start + self.offsets[i]
        return _tensor(self.mapped, begin, d.numel() * d.element_size(), d.dtype, d.shape)


def _tensor(
    raw: torch.Tensor, begin: int, nbytes: int, dtype: torch.dtype, shape: Any
) -> torch.Tensor:
    """The tensor at ``begin`` of the mapped file ``raw``: a view, or a copy where the
    entry is not aligned to its dtype (torch views need alignment)."""
    chunk = raw[begin : begin + nbytes]
    if begin % dtype.itemsize:
        chunk = chunk.clone()
    return chunk.view(dtype).view(shape)


def _map(name: str) -> torch.Tensor:
    """The whole file as bytes, mapped once (copy-on-write)."""
    if not os.path.getsize(name):
        return torch.empty(0, dtype=torch.uint8)
    with open(name, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return torch.frombuffer(mm, dtype=torch.uint8)
