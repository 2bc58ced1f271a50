"""The private contract every container honours, and the walks over it.

A container (``TensorDict``, or a tensorclass instance) is four slots, declared
once on ``TensorCollection``:

* ``_tensordict``: a plain ``dict`` of key -> entry, where an entry is a
  ``Tensor``, a ``NonTensorData`` or another container;
* ``_batch_size``: a ``torch.Size``; ``_device``: a ``torch.device`` or None;
  ``_locked``: a bool;

plus one constructor, ``type(x)._new_unsafe(storage, batch_size, device)``,
which builds one of the caller's type around a dict without any check (no
``__post_init__`` either). That is the whole contract: every operation module
(``_index``, ``_apply``, ``_keyops``, ``_stackcat``, ``_elementwise``...) is a set of
functions over it, so each capability is written once and returns the caller's
own type, and none of them imports a class module at load time.

This module also holds the one sentinel (``KEEP``), the walks every operation
shares, and the one rule for naming a container's type in a saved or sent tree
and for rebuilding it (persistence and distributed both use it).

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"x": torch.zeros(2, 3), "n": {"y": torch.ones(2)}}, batch_size=[2])
>>> keys_list(td, True, True)
['x', ('n', 'y')]
>>> type_name(type(td))
'TensorDict'
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import torch
from torch import Tensor

from tensorbox._core import ports as _ports
from tensorbox._core.nestedkey import NestedKey, format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox.errors import BatchSizeError, TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection
    from tensorbox._core.methods.base import MixinBase

__all__ = [
    "CLASS_REGISTRY",
    "KEEP",
    "as_device",
    "clear_device",
    "common_batch_size",
    "find_missing",
    "is_coll",
    "iter_items",
    "iter_shaped",
    "keys_list",
    "missing_key_error",
    "new_plain",
    "raw",
    "rebuild",
    "set_batch_size_nested",
    "set_locked",
    "store_of",
    "tensor_leaves",
    "type_name",
]

_Size = torch.Size
_NTD = NonTensorData

#: "Argument not given": keep the container's own value (its device, for ``apply``/``to``).
KEEP: Any = object()

#: Every tensorclass created in this process, by ``"module:QualName"``. Saved and sent
#: trees are rebuilt from here (or from the class the caller passes), never by import.
CLASS_REGISTRY: dict[str, type] = {}


def is_coll(v: Any) -> TypeGuard[TensorCollection]:
    """True for a container (TensorDict or tensorclass instance)."""
    return getattr(type(v), "_is_tensor_collection", False)


def raw(v: Any) -> Any:
    """A stored entry as the user sees it (non-tensor data unwrapped)."""
    return v.value if type(v) is _NTD else v


def store_of(v: Any) -> Mapping[str, Any]:
    """The key -> entry mapping of a container or of a plain mapping."""
    if is_coll(v):
        out: Mapping[str, Any] = v._tensordict
        return out
    if isinstance(v, Mapping):
        return v
    raise TypeError(f"expected a TensorDict, a tensorclass or a mapping, got {type(v).__name__}")


def new_plain(store: dict[str, Any], batch_size: torch.Size, device: Any) -> Any:
    """A plain TensorDict around ``store`` (no checks)."""
    # New nested levels (a dict value, a missing level of a tuple key) are always plain
    # TensorDicts, whatever the type of the container they are created in.
    return _ports.plain()._new_unsafe(store, batch_size, device)


def as_device(device: Any) -> torch.device:
    """``torch.device(device)``, with a bare ``"cuda"`` pinned to the current CUDA device,
    so that the container's device compares equal to its leaves' (``cuda:0``)."""
    dev = device if type(device) is torch.device else torch.device(device)
    if dev.index is None and dev.type == "cuda" and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


# ---------------------------------------------------------------- traversal


def iter_items(
    td: TensorCollection, include_nested: bool, leaves_only: bool, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[NestedKey, Any]]:
    """``(key, stored entry)``; keys are str at the top level and tuples below it."""
    for k, v in td._tensordict.items():
        key: NestedKey = (*prefix, k) if prefix else k
        node = not isinstance(v, Tensor) and type(v) is not _NTD
        if not (leaves_only and node):
            yield key, v
        if include_nested and node:
            yield from iter_items(v, True, leaves_only, (*prefix, k))


def keys_list(
    td: TensorCollection, include_nested: bool, leaves_only: bool, prefix: tuple[str, ...] = ()
) -> list[NestedKey]:
    """``keys(include_nested, leaves_only)`` as a list, without generator overhead."""
    out: list[NestedKey] = []
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor) or type(v) is _NTD:
            out.append((*prefix, k) if prefix else k)
            continue
        if not leaves_only:
            out.append((*prefix, k) if prefix else k)
        if include_nested:
            out.extend(keys_list(v, True, leaves_only, (*prefix, k)))
    return out


def iter_shaped(
    td: TensorCollection, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Tensor]]:
    """Every tensor leaf at any depth with its key path."""
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            yield (*prefix, k), v
        elif type(v) is not _NTD:
            yield from iter_shaped(v, (*prefix, k))


def tensor_leaves(td: MixinBase, out: list[Tensor] | None = None) -> list[Tensor]:
    """Every tensor leaf at any depth, in key order (no key paths: the fast variant)."""
    if out is None:
        out = []
    for v in td._tensordict.values():
        if isinstance(v, Tensor):
            out.append(v)
        elif type(v) is not _NTD:
            tensor_leaves(v, out)
    return out


def set_locked(td: MixinBase, flag: bool) -> None:
    td._locked = flag
    for v in td._tensordict.values():
        if is_coll(v):
            set_locked(v, flag)


def clear_device(td: MixinBase) -> None:
    td._device = None
    for v in td._tensordict.values():
        if is_coll(v):
            clear_device(v)


def set_batch_size_nested(td: MixinBase, new: torch.Size) -> None:
    """Set ``td``'s batch size; nested containers that no longer fit follow it."""
    for k, v in td._tensordict.items():
        if is_coll(v) and v._batch_size[: len(new)] != new:
            try:
                v.batch_size = new
            except BatchSizeError as err:
                raise BatchSizeError(f"under {k!r}: {err}") from None
        elif type(v) is _NTD and v.stacked and v.data.shape != tuple(new):
            raise BatchSizeError(
                f"key {k!r} holds one value per batch element for batch_size "
                f"{v.data.shape}; cannot change batch_size to {tuple(new)}"
            )
    td._batch_size = new


def common_batch_size(td: MixinBase, batch_dims: int | None) -> torch.Size:
    """Longest leading shape shared by every leaf (nested levels get theirs first).

    An empty nested container says nothing about the batch size: it takes its
    parent's once that is known.
    """
    shapes: list[Sequence[int]] = []
    empty: list[TensorCollection] = []
    for v in td._tensordict.values():
        if isinstance(v, Tensor):
            # A jagged leaf's second dim is its ragged one: only its rows are a batch dim.
            shapes.append(v.shape[:1] if v.is_nested else v.shape)
        elif type(v) is _NTD:
            if v.stacked:
                shapes.append(v.data.shape)
        else:
            v._batch_size = common_batch_size(v, batch_dims)
            if v._tensordict:
                shapes.append(v._batch_size)
            else:
                empty.append(v)
    if not shapes:
        return td._batch_size
    out: list[int] = []
    for dims in zip(*shapes):
        if any(d != dims[0] for d in dims) or (batch_dims is not None and len(out) >= batch_dims):
            break
        out.append(dims[0])
    bs = _Size(out)
    for inner in empty:
        inner._batch_size = bs
    return bs


# ---------------------------------------------------------------- key errors


def missing_key_error(td: MixinBase, path: tuple[str, ...], depth: int) -> TensorDictKeyError:
    """A KeyError naming the missing key and the deepest level that exists."""
    node: Any = td
    for part in path[:depth]:
        node = node._tensordict[part]
    where = "" if depth == 0 else f" under {format_key(path[:depth])}"
    if isinstance(node, Tensor) or type(node) is _NTD:
        return TensorDictKeyError(
            f"key {format_key(path)} not found: {format_key(path[:depth])} is a leaf, "
            "not a TensorDict"
        )
    return TensorDictKeyError(
        f"key {format_key(path)} not found: no {path[depth]!r}{where}; "
        f"existing keys there: {sorted(node._tensordict)!r}"
    )


def find_missing(td: MixinBase, path: tuple[str, ...]) -> TensorDictKeyError:
    """The error for a path known to be missing: locate the first level that lacks it."""
    node: Any = td
    for depth, part in enumerate(path):
        if isinstance(node, Tensor) or type(node) is _NTD:
            return missing_key_error(td, path, depth)
        store = node._tensordict
        if part not in store:
            return missing_key_error(td, path, depth)
        node = store[part]
    return missing_key_error(td, path, len(path) - 1)


# ------------------------------------------------------- saved and sent types


def type_name(cls: type) -> str:
    """How a container's type is written in a saved or sent tree: ``"TensorDict"`` for a
    plain TensorDict, ``"module:QualName"`` for anything else."""
    return "TensorDict" if cls is _ports.plain() else f"{cls.__module__}:{cls.__qualname__}"


def rebuild(
    name: str,
    store: dict[str, Any],
    batch_size: torch.Size,
    device: torch.device | None,
    requested: type | None = None,
) -> Any:
    """The container a saved or sent node describes, built around ``store``.

    The class is ``requested`` when given, else the tensorclass registered under
    ``name`` in this process, else a plain TensorDict: nothing is ever imported.
    A tensorclass target checks the keys against its fields (the class may have
    changed since the tree was written) and raises ``TypeError`` naming the
    difference; ``__post_init__`` does not run.
    """
    plain = _ports.plain()
    target: Any = requested if requested is not None else CLASS_REGISTRY.get(name)
    if target is None or issubclass(target, plain):
        return (target or plain)._new_unsafe(store, batch_size, device)
    return target.from_tensordict(plain._new_unsafe(store, batch_size, device), run_post_init=False)
