"""Loading a saved tree from any store: leaves mapped lazily, nodes rebuilt as their classes.

One :class:`Loader` serves every store (:mod:`tensorbox._storage.store`). A node is
rebuilt as the class the caller asked for, or one registered by ``@tensorclass`` in
this process under the saved ``type``, through the one rule of
:func:`tensorbox._core.tree.rebuild`'s registry (nothing is imported); a class that
changed since the save is handled by :func:`_fit`. A node that cannot be rebuilt as
its saved class loads as a plain ``TensorDict`` and :func:`saved_type` tells what it
was.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> from tensorbox._storage.folder import FolderStore
>>> d = tempfile.mkdtemp()
>>> _ = TensorDict(a=torch.arange(3), batch_size=[3]).memmap(d)
>>> store = FolderStore(d)
>>> Loader(store, {}, None, False, "r").node(store.node(), None, 0)["a"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from tensorbox._core import ports as _ports
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import CLASS_REGISTRY, type_name
from tensorbox._storage import jagged_io as _jagged_io
from tensorbox._storage.format.spec import META
from tensorbox._storage.store import JaggedEntry, Node, NodeEntry, Store, TensorEntry, read_child
from tensorbox.errors import FormatError

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
    return "fallback" if cls is None or issubclass(cls, _ports.plain()) else "raise"


def field_class(parent: Any, key: str) -> type | None:
    """The tensorclass that field ``key`` of tensorclass ``parent`` is annotated with
    (``Node``, ``Node | None``, ``Optional["Node"]``), or None: how a nested node of a
    tree tensordict wrote, whose class name is not registered here, loads as the class
    the caller declared. A string annotation is matched by name against ``parent``
    itself and the classes registered from its module (nothing is evaluated)."""
    import re
    import typing

    spec = next((f for f in getattr(parent, "__tc_fields__", ()) if f.name == key), None)
    if spec is None:
        return None
    ann = spec.type
    options = typing.get_args(ann) if typing.get_origin(ann) is not None else (ann,)
    for opt in options:
        if isinstance(opt, typing.ForwardRef):
            opt = opt.__forward_arg__
        if isinstance(opt, type) and getattr(opt, "__tc_fields__", None) is not None:
            return opt
        if isinstance(opt, str):
            for name in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", opt):
                if name == parent.__name__:
                    return parent  # type: ignore[no-any-return]
                found = CLASS_REGISTRY.get(f"{parent.__module__}:{name}")
                if found is not None:
                    return found
    return None


class Loader:
    """One load: the store and the load's settings, shared by every node."""

    def __init__(
        self,
        store: Store,
        registry: dict[str, type],
        device: torch.device | None,
        non_blocking: bool,
        mode: str,
        fit: str = "fallback",
    ) -> None:
        self.store, self.registry, self.device = store, registry, device
        self.non_blocking, self.mode, self.fit = non_blocking, mode, fit
        self.strict = False  # mode="r+" given: a file we may not write raises
        self.copies: list[str] = []  # nodes loaded as copies (lazy stacks, densified)

    def node(self, node: Node, cls: type | None, depth: int) -> Any:
        out: dict[str, Any] = {}
        store, device, mode = self.store, self.device, self.mode
        tensor = store.tensor
        parent = cls if cls is not None else self.registry.get(node.type)
        for key, e in node.entries.items():
            if type(e) is TensorEntry:  # the common case first: many small leaves
                leaf = tensor(e, mode)
            elif type(e) is NodeEntry:
                child = read_child(store, node, e, depth + 1)
                hint = None
                if node.legacy and child.type not in self.registry:
                    hint = field_class(parent, key)  # a tensordict tree: the field's class
                out[key] = self.node(child, hint, depth + 1)
                continue
            elif type(e) is JaggedEntry:
                leaf = _jagged_io.build(tensor(e.values, mode), tensor(e.offsets, mode), e)
            else:
                out[key] = NonTensorData(e.value, stacked=e.stacked, meta=e.meta)  # type: ignore[union-attr]
                continue
            out[key] = (
                leaf
                if device is None
                else leaf.to(device, non_blocking=self.non_blocking, copy=True)
            )
        if node.stack_dim is not None:
            return self.stack(node, out, cls)
        # Mapped leaves live on the CPU (as tensordict says, whatever the saved device);
        # a copy lives on ``device``.
        return self.rebuild(node, out, _CPU if device is None else device, cls)

    def stack(self, node: Node, elements: dict[str, Any], cls: type | None) -> Any:
        """A tensordict lazy stack, loaded as the dense stack of its elements (tensorbox
        has no lazy stacks): a copy, so a later write does not reach the files."""
        from tensorbox._core.functional import stack
        from tensorbox.errors import BatchSizeError

        self.copies.append(node.path)
        try:
            out = stack(list(elements.values()), node.stack_dim or 0)
        except (BatchSizeError, RuntimeError, ValueError, TypeError) as err:
            raise FormatError(
                f"{node.path}/{META}: a tensordict lazy stack whose elements do not stack "
                f"densely ({err}). tensorbox has no lazy stacks: load each element on its "
                f"own (load_memmap of {node.path}/0, /1, ...), or in tensordict save "
                "td.densify(layout=torch.jagged) or a padded copy instead"
            ) from None
        if cls is not None and not isinstance(out, cls):
            return self.rebuild(node, out._tensordict, out._device, cls)
        return out

    def rebuild(
        self, node: Node, store: dict[str, Any], device: torch.device | None, cls: type | None
    ) -> Any:
        """The container ``node`` was saved from: the caller's class, a registered one, or a
        plain TensorDict that remembers the saved type name."""
        plain = _ports.plain()
        target: Any = cls
        if target is None or (issubclass(target, plain) and node.type != "TensorDict"):
            target = self.registry.get(node.type, target)
        if target is None or not getattr(target, "_is_tensor_collection", False):
            target = plain
        bs = torch.Size(node.batch_size)
        if issubclass(target, plain):
            out = target._new_unsafe(store, bs, device)
            if node.type != "TensorDict" and node.type != type_name(type(out)):
                _remember_type(out, node.type)
            return out
        # The class may have changed since the save: a field added with a default is
        # filled in by from_tensordict; a removed one is refused, or left out.
        where = f"{node.path}/{META}"
        removed = sorted(set(store) - target.__tc_names__)
        if removed and self.fit != "fallback" and node.type == type_name(target):
            if self.fit == "raise":
                one = len(removed) == 1
                raise FormatError(
                    f"{where}: the saved {node.type!r} holds {removed!r}, which "
                    f"{'is not a field' if one else 'are not fields'} of "
                    f"{target.__qualname__} any more: pass strict=False to load the tree "
                    f"without {'it' if one else 'them'}"
                )
            store = {k: v for k, v in store.items() if k not in removed}
        td = plain._new_unsafe(store, bs, device)
        try:  # checks the keys against the fields
            return target.from_tensordict(td, run_post_init=False)
        except (KeyError, TypeError, ValueError) as err:
            if target is cls or self.fit != "fallback":  # asked for: say why it does not fit
                raise FormatError(
                    f"{where}: the saved {node.type!r} does not fit {target.__qualname__}: {err}"
                ) from None
            _remember_type(td, node.type)  # found in the registry: the data still loads
            return td
