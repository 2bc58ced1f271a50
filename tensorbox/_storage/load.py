"""Loading a saved folder tree: leaves mapped lazily, nodes rebuilt as their classes.

The loading half of :mod:`tensorbox._storage.persist` (which holds ``load_memmap`` and the
saver); archives (:mod:`tensorbox._storage.archive.store`) rebuild their nodes with the same
:class:`_Loader`. A node is rebuilt as the class the caller asked for, or one
registered by ``@tensorclass`` in this process under the saved ``type``; a class that
changed since the save is handled by :func:`_fit`. A node that cannot be rebuilt as its
saved class loads as a ``TensorDict`` and :func:`saved_type` tells what it was.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> d = tempfile.mkdtemp()
>>> _ = TensorDict(a=torch.arange(3), batch_size=[3]).memmap(d)
>>> node = fmt.read_node(d)
>>> _Loader(d, {}, None, False, "r").node(node, None, 0)["a"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tensordict import TensorDict, is_tensor_collection
from tensorbox._core.tree import type_name
from tensorbox._storage import jagged_io as _jagged_io
from tensorbox._storage.format import spec as fmt
from tensorbox._storage.memmap_tensor import map_file

__all__ = ["saved_type"]

_CPU = torch.device("cpu")


def saved_type(obj: Any) -> str | None:
    """The ``type`` a loaded node was saved with, when it could not be rebuilt as that class."""
    entry = _saved_types.get(id(obj))
    return entry[0] if entry is not None and entry[1]() is obj else None


_saved_types: dict[int, tuple[str, Any]] = {}


def _remember_type(obj: Any, name: str) -> None:
    # TensorDict is unhashable (== is elementwise), so key by id with a weakref guard.
    key = id(obj)
    _saved_types[key] = (name, weakref.ref(obj, lambda _, key=key: _saved_types.pop(key, None)))  # type: ignore[misc]


def _fit(cls: type | None, strict: bool) -> str:
    """What a load does with a saved tensorclass node that no longer fits its class:
    ``"drop"`` its removed fields (strict=False), ``"raise"`` (a tensorclass was asked
    for: its nested classes must fit too), or ``"fallback"`` to a TensorDict that
    remembers the saved type (a TensorDict was asked for: the data still loads)."""
    if not strict:
        return "drop"
    return "fallback" if cls is None or issubclass(cls, TensorDict) else "raise"


class _Loader:
    """One load: the tree's settings, shared by every node."""

    def __init__(
        self,
        root: str,
        registry: dict[str, type],
        device: torch.device | None,
        non_blocking: bool,
        mode: str,
        fit: str = "fallback",
    ) -> None:
        self.root, self.registry, self.device = root, registry, device
        self.non_blocking, self.mode, self.fit = non_blocking, mode, fit
        self.strict = False  # mode="r+" given: a file we may not write raises

    def node(self, node: fmt.Node, cls: type | None, depth: int) -> Any:
        store: dict[str, Any] = {}
        device = self.device
        tensor_entry, mode = fmt.TensorEntry, self.mode
        for key, e in node.entries.items():
            if type(e) is tensor_entry:
                try:  # the common case inline: a tree of many small leaves spends its time here
                    leaf: Tensor = map_file(
                        e.path, e.dtype, e.shape, mode, e.nbytes, e.ident, e.gen
                    )
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
            elif type(e) is _jagged_io.JaggedEntry:
                leaf = _jagged_io.build(self.leaf(e.values), self.leaf(e.offsets), e)
                store[key] = (
                    leaf
                    if device is None
                    else leaf.to(device, non_blocking=self.non_blocking, copy=True)
                )
            else:
                store[key] = NonTensorData(e.value, stacked=e.stacked)  # type: ignore[union-attr]
        # Mapped leaves live on the CPU; a copy lives on ``device``.
        want = device if device is not None else (None if node.device is None else _CPU)
        return self.rebuild(node, store, want, cls)

    def leaf(self, e: fmt.TensorEntry) -> Tensor:
        """A leaf that could not be mapped with ``mode``: read-only files map copy-on-write."""
        if self.mode == "r":
            return map_file(e.path, e.dtype, e.shape, "r", e.nbytes, e.ident, e.gen)
        try:
            return map_file(e.path, e.dtype, e.shape, "r+", e.nbytes, e.ident, e.gen)
        except PermissionError:
            if self.strict:  # mode="r+" asked for writes to reach the file: they could not
                raise
            # mode=None: a tree we may read but not write maps copy-on-write
            return map_file(e.path, e.dtype, e.shape, "r", e.nbytes, e.ident, e.gen)

    def rebuild(
        self, node: fmt.Node, store: dict[str, Any], device: torch.device | None, cls: type | None
    ) -> Any:
        """The container ``node`` was saved from: the caller's class, a registered one, or a
        TensorDict that remembers the saved type name."""
        target: Any = cls
        if target is None or (issubclass(target, TensorDict) and node.type != "TensorDict"):
            target = self.registry.get(node.type, target)
        if target is None or not is_tensor_collection(target):
            target = TensorDict
        bs = torch.Size(node.batch_size)
        if issubclass(target, TensorDict):
            out = target._new_unsafe(store, bs, device)
            if node.type != "TensorDict" and node.type != type_name(type(out)):
                _remember_type(out, node.type)
            return out
        # The class may have changed since the save: a field added with a default is
        # filled in by from_tensordict; a removed one is refused, or left out.
        where = os.path.join(node.path, fmt.META)
        removed = sorted(set(store) - target.__tc_names__)
        if removed and self.fit != "fallback" and node.type == type_name(target):
            if self.fit == "raise":
                one = len(removed) == 1
                raise fmt.FormatError(
                    f"{where}: the saved {node.type!r} holds {removed!r}, which "
                    f"{'is not a field' if one else 'are not fields'} of "
                    f"{target.__qualname__} any more: pass strict=False to load the tree "
                    f"without {'it' if one else 'them'}"
                )
            store = {k: v for k, v in store.items() if k not in removed}
        td = TensorDict._new_unsafe(store, bs, device)
        try:  # checks the keys against the fields
            return target.from_tensordict(td, run_post_init=False)
        except (KeyError, TypeError, ValueError) as err:
            if target is cls or self.fit != "fallback":  # asked for: say why it does not fit
                raise fmt.FormatError(
                    f"{where}: the saved {node.type!r} does not fit {target.__qualname__}: {err}"
                ) from None
            _remember_type(td, node.type)  # found in the registry: the data still loads
            return td
