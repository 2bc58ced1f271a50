"""A ``.safetensors`` file as a read-only store on the storage seam.

The file has no ``meta.json``: its header (checked by
:func:`tensorbox.interop.safetensors.read_header`) is the description of every node.
Dotted keys are nested (``"encoder.layer.0.weight"`` is the leaf ``weight`` of node
``encoder.layer.0``); each node is described from the header directly
(:meth:`Store.node` is overridden, as the seam allows), so the one loader, ``show`` and
``verify`` read a checkpoint as they read a saved tree. The file is mapped once,
copy-on-write: writing into a loaded tensor changes this process's copy only.

Nodes are named by their dotted prefix (``""`` is the root): the parts come from
splitting on ``.``, so no part holds one.

>>> import os, tempfile, torch
>>> from tensorbox import TensorDict
>>> from tensorbox.interop.safetensors import to_safetensors
>>> from tensorbox._storage.api import load_from
>>> with tempfile.TemporaryDirectory() as d:
...     f = os.path.join(d, "w.safetensors")
...     to_safetensors(TensorDict({"enc": {"w": torch.ones(2), "b": torch.zeros(1)}}), f)
...     store = SafetensorsStore(f)
...     sorted(store.node("enc").entries), load_from(store)["enc", "w"].tolist()
(['b', 'w'], [1.0, 1.0])
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import orjson
import torch

from tensorbox._storage.format.spec import META
from tensorbox._storage.store import Node, NodeEntry, NodeFiles, Store, TensorEntry
from tensorbox.errors import FormatError
from tensorbox.interop._safetensors_format import nest, read_header

__all__ = ["SafetensorsStore"]


class SafetensorsStore(Store):
    """The tensors of one ``.safetensors`` file, as a tree (see the module doc).

    ``keys``: only these dotted keys (KeyError naming the first missing one);
    ``prefix``: only the keys under this dotted prefix, with it removed;
    ``nested=False``: every dotted key a leaf of the root.
    """

    foreign = "safetensors"

    def __init__(
        self, path: Any, *, keys: Any = None, prefix: str | None = None, nested: bool = True
    ) -> None:
        self.name = os.fspath(path)
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
        # node prefix -> {name: ("leaf", header entry) | ("node", child prefix)}
        self._nodes: dict[str, dict[str, tuple[str, Any]]] = {"": {}}
        for key, info in leaves.items():
            parts = key.split(".") if nested else [key]
            rel = ""
            for part in parts[:-1]:
                child = f"{rel}.{part}" if rel else part
                self._nodes[rel].setdefault(part, ("node", child))
                self._nodes.setdefault(child, {})
                rel = child
            self._nodes[rel][parts[-1]] = ("leaf", info)
        self._raw = _map(self.name)

    def where(self, rel: str) -> str:
        rel = rel.removesuffix(META).rstrip("/")
        return f"{self.name} (tensors under {rel!r})" if rel else self.name

    def node(self, rel: str = "") -> Node:
        table = self._nodes.get(rel)
        if table is None:
            raise FormatError(f"{self.name}: no tensors under {rel!r}")
        entries: dict[str, Any] = {}
        for name, (kind, info) in table.items():
            if kind == "node":
                entries[name] = NodeEntry(info)
                continue
            dtype, shape, begin, end = info
            key = f"{rel}.{name}" if rel else name
            entries[name] = TensorEntry(dtype, shape, f"{self.name}::{key}", end - begin, begin)
        return Node(self.where(rel), 0, "TensorDict", (), None, entries, False, rel)

    def read_meta(self, rel: str) -> bytes:
        """A ``meta.json`` the node would have, for tools that print one."""
        self.node(rel)  # FormatError for a node that is not there
        entries: dict[str, Any] = {}
        for name, (kind, info) in self._nodes[rel].items():
            if kind == "node":
                entries[name] = {"kind": "node"}
            else:
                dtype, shape = info[0], info[1]
                entries[name] = {
                    "kind": "tensor",
                    "dtype": str(dtype).removeprefix("torch."),
                    "shape": list(shape),
                }
        return orjson.dumps({"type": "TensorDict", "batch_size": [], "entries": entries})

    def open_node(self, rel: str) -> NodeFiles:
        raise NotImplementedError("a .safetensors store describes its nodes itself (node())")

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        begin = e.ident
        chunk = self._raw[begin : begin + e.nbytes]
        if begin % e.dtype.itemsize:  # an unaligned entry: torch views need alignment
            chunk = chunk.clone()
        return chunk.view(e.dtype).view(e.shape)

    def check(self, e: TensorEntry) -> None:
        # The format records no checksum: reading every byte finds a truncated or
        # unreadable file (the header check already bounds every range).
        bytes(self._raw[e.ident : e.ident + e.nbytes].numpy().data)


def _map(name: str) -> torch.Tensor:
    """The whole file as bytes, mapped once (copy-on-write)."""
    if not os.path.getsize(name):
        return torch.empty(0, dtype=torch.uint8)
    with open(name, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return torch.frombuffer(mm, dtype=torch.uint8)
