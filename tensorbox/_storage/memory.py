"""An in-memory store: a tree as a dict of file names to bytes (for tests and examples).

It proves the seam: the format's checks run against it with no file system, and the
one saver writes to it. Its tensors are copies (``bytes`` cannot be mapped).

>>> import torch
>>> from tensorbox import TensorDict
>>> from tensorbox._storage.api import save_to, load_from
>>> store = MemoryStore()
>>> _ = save_to(TensorDict(a=torch.arange(3), n={"b": torch.ones(3)}, batch_size=[3]), store)
>>> sorted(store.files)
['a.memmap', 'meta.json', 'n/b.memmap', 'n/meta.json']
>>> load_from(store)["n", "b"].tolist()
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from tensorbox._core.chunks import byte_chunks
from tensorbox._storage.format.metafile import meta_bytes
from tensorbox._storage.format.spec import META
from tensorbox._storage.store import ListedFiles, NodeFiles, Store, TensorEntry, Writer
from tensorbox.errors import FormatError, IncompleteTreeError

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """A tree held as ``{"/"-joined file name: bytes}``; ``name`` shows it in messages."""

    def __init__(self, files: dict[str, bytes] | None = None, name: str = "memory") -> None:
        self.files: dict[str, bytes] = dict(files or {})
        self.name = name

    def where(self, rel: str) -> str:
        return f"{self.name}::{rel}"

    def read_meta(self, rel: str) -> bytes:
        name = f"{rel}/{META}" if rel else META
        if name not in self.files:
            if not self.files:
                raise FileNotFoundError(f"no saved tree in {self.name}: it is empty")
            raise IncompleteTreeError(f"{self.where(name)} is missing: not a saved tree")
        return self.files[name]

    def open_node(self, rel: str) -> NodeFiles:
        return ListedFiles({name: len(data) for name, data in self.files.items()}, rel, self.where)

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        out = torch.empty(e.shape, dtype=e.dtype)
        if e.nbytes:
            out.view(-1).view(torch.uint8).numpy()[:] = memoryview(self.files[e.ident])[: e.nbytes]
        return out

    def check(self, e: TensorEntry) -> None:
        raw = self.files[e.ident][: e.nbytes]
        if e.sha256 is not None and hashlib.sha256(raw).hexdigest() != e.sha256:
            raise FormatError(f"{e.path}: the bytes do not match the recorded SHA-256")

    def writer(self, **options: Any) -> Writer:
        return _MemoryWriter(self)


class _MemoryWriter(Writer):
    """Staged in a new dict; the commit replaces the store's files at once."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.files: dict[str, bytes] = {}
        self.names: list[str] = []
        self.metas: list[tuple[str, dict[str, Any], bool]] = []

    def node(self, rel: str, meta: dict[str, Any], std_json: bool) -> None:
        self.metas.append((rel, meta, std_json))  # written at commit: ids may change till then

    def leaf(
        self,
        rel: str,
        t: torch.Tensor,
        reserve: bool = False,
        gen: str | None = None,
        key: str = "",
    ) -> int:
        nbytes = t.numel() * t.element_size()
        self.files[rel] = bytes(nbytes) if reserve else b"".join(bytes(c) for c in byte_chunks(t))
        self.names.append(rel)
        return len(self.names) - 1

    def commit(self, num_threads: int = 0) -> None:
        for rel, meta, std_json in self.metas:
            self.files[f"{rel}/{META}" if rel else META] = meta_bytes(meta, std_json)
        self.store.files = self.files

    def opened(self, i: int, t: torch.Tensor) -> torch.Tensor:
        name = self.names[i]
        nbytes = t.numel() * t.element_size()
        entry = TensorEntry(t.dtype, tuple(t.shape), name, nbytes, name)
        return self.store.tensor(entry, "r+")  # shared where a subclass can share
