"""Operations over a container's entries: traversal, apply, to, key-structure ops, repr.

Every function takes a ``TensorDict`` (tensorclass methods pass their inner one)
and returns a new container built with ``_new_unsafe`` wherever the result's
validity follows from the inputs, which keeps per-call overhead near a plain
dict comprehension over the leaves. Batch indexing lives in ``_index``,
batch-shape ops and stack/cat in ``_stackcat``, comparisons in ``_compare``;
their public functions are re-exported here so ``_ops.<name>`` keeps working.

A stored entry is one of: a ``Tensor``; a ``NonTensorData``; or a collection (a
``TensorDict``, whose ``_tensordict`` is a ``dict``, or a tensorclass instance,
whose ``_tensordict`` is the ``TensorDict`` holding its fields).

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"x": torch.zeros(2, 3), "n": {"y": torch.ones(2)}}, batch_size=[2])
>>> keys_list(td, True, True)
['x', ('n', 'y')]
>>> td.apply(lambda t: t + 1)["n", "y"].tolist()
[2.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ._keys import NestedKey, check_str_key, format_key
from ._nontensor import NonTensorData
from ._shape import as_batch_size, check_leaf_shape, leads_with
from .errors import BatchSizeError, LockedError, TensorDictKeyError

if TYPE_CHECKING:
    from ._td import TensorDict

_Size = torch.Size
_NTD = NonTensorData
_NO_DEVICE: Any = object()  # "keep each container's own device"


def _is_coll(v: Any) -> bool:
    return getattr(type(v), "_is_tensor_collection", False)


def _inner(v: Any) -> TensorDict:
    """The TensorDict that stores a collection's entries (itself, or a tensorclass's).

    A TensorDict's ``_tensordict`` is a plain dict; a tensorclass's is a TensorDict.
    Testing that avoids importing ``_td`` here (this runs in every hot loop).
    """
    inner = v._tensordict
    return v if type(inner) is dict else inner


def _store(v: Any) -> Mapping[str, Any]:
    """The key -> entry mapping of a collection or a plain mapping."""
    if _is_coll(v):
        return _inner(v)._tensordict
    if isinstance(v, Mapping):
        return v
    raise TypeError(f"expected a TensorDict, a tensorclass or a mapping, got {type(v).__name__}")


def _rewrap(like: Any, td: TensorDict) -> Any:
    """``td`` as the same kind of collection as ``like``."""
    return td if type(like._tensordict) is dict else type(like)._from_tensordict(td)


def _raw(v: Any) -> Any:
    return v.value if type(v) is _NTD else v


# ---------------------------------------------------------------- traversal


def iter_items(
    td: TensorDict, include_nested: bool, leaves_only: bool, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[NestedKey, Any]]:
    """``(key, stored entry)``; keys are str at the top level and tuples below it."""
    for k, v in td._tensordict.items():
        key: NestedKey = (*prefix, k) if prefix else k
        node = not isinstance(v, Tensor) and type(v) is not _NTD
        if not (leaves_only and node):
            yield key, v
        if include_nested and node:
            yield from iter_items(_inner(v), True, leaves_only, (*prefix, k))


def keys_list(
    td: TensorDict, include_nested: bool, leaves_only: bool, prefix: tuple[str, ...] = ()
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
            out.extend(keys_list(_inner(v), True, leaves_only, (*prefix, k)))
    return out


def iter_shaped(
    td: TensorDict, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Tensor]]:
    """Every tensor leaf at any depth with its key path."""
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            yield (*prefix, k), v
        elif type(v) is not _NTD:
            yield from iter_shaped(_inner(v), (*prefix, k))


def tensor_leaves(td: TensorDict, out: list[Tensor] | None = None) -> list[Tensor]:
    """Every tensor leaf at any depth, in key order (no key paths: the fast variant)."""
    if out is None:
        out = []
    for v in td._tensordict.values():
        if isinstance(v, Tensor):
            out.append(v)
        elif type(v) is not _NTD:
            tensor_leaves(_inner(v), out)
    return out


def set_locked(td: TensorDict, flag: bool) -> None:
    td._locked = flag
    for v in td._tensordict.values():
        if _is_coll(v):
            set_locked(_inner(v), flag)


def clear_device(td: TensorDict) -> None:
    td._device = None
    for v in td._tensordict.values():
        if _is_coll(v):
            clear_device(_inner(v))


def set_batch_size_nested(td: TensorDict, new: torch.Size) -> None:
    """Set ``td``'s batch size; nested containers that no longer fit follow it."""
    for k, v in td._tensordict.items():
        if _is_coll(v) and v.batch_size[: len(new)] != new:
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


def common_batch_size(td: TensorDict, batch_dims: int | None) -> torch.Size:
    """Longest leading shape shared by every leaf (nested levels get theirs first).

    An empty nested container says nothing about the batch size: it takes its
    parent's once that is known.
    """
    shapes: list[Sequence[int]] = []
    empty: list[TensorDict] = []
    for v in td._tensordict.values():
        if isinstance(v, Tensor):
            shapes.append(v.shape)
        elif type(v) is _NTD:
            if v.stacked:
                shapes.append(v.data.shape)
        else:
            inner = _inner(v)
            inner._batch_size = common_batch_size(inner, None)
            if inner._tensordict:
                shapes.append(inner._batch_size)
            else:
                empty.append(inner)
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


def as_device(device: Any) -> torch.device:
    """``torch.device(device)``, with a bare ``"cuda"`` pinned to the current CUDA device,
    so that the container's device compares equal to its leaves' (``cuda:0``)."""
    dev = device if type(device) is torch.device else torch.device(device)
    if dev.index is None and dev.type == "cuda" and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def missing_key_error(td: TensorDict, path: tuple[str, ...], depth: int) -> TensorDictKeyError:
    """A KeyError naming the missing key and the deepest level that exists."""
    node: Any = td
    for part in path[:depth]:
        node = _inner(node)._tensordict[part]
    where = "" if depth == 0 else f" under {format_key(path[:depth])}"
    if isinstance(node, Tensor) or type(node) is _NTD:
        return TensorDictKeyError(
            f"key {format_key(path)} not found: {format_key(path[:depth])} is a leaf, "
            "not a TensorDict"
        )
    store = _inner(node)._tensordict
    return TensorDictKeyError(
        f"key {format_key(path)} not found: no {path[depth]!r}{where}; "
        f"existing keys there: {sorted(store)!r}"
    )


def find_missing(td: TensorDict, path: tuple[str, ...]) -> TensorDictKeyError:
    """The error for a path known to be missing: locate the first level that lacks it."""
    node: Any = td
    for depth, part in enumerate(path):
        if isinstance(node, Tensor) or type(node) is _NTD:
            return missing_key_error(td, path, depth)
        store = _inner(node)._tensordict
        if part not in store:
            return missing_key_error(td, path, depth)
        node = store[part]
    return missing_key_error(td, path, len(path) - 1)


# ------------------------------------------------------------ entering data


def fill_entries(td: TensorDict, source: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
    """Validate and store every entry of ``source`` into ``td`` (the constructor's loop).

    The common case is inlined: str keys, tensors and plain dicts; anything else
    goes through ``prepare_entry``. With one batch dim, comparing ``shape[0]``
    avoids slicing a ``torch.Size``, which costs as much as the rest of the check.
    """
    bs = td._batch_size
    dev = td._device
    store = td._tensordict
    nbd = len(bs)
    b0 = bs[0] if nbd == 1 else None
    for key, value in source.items():
        if type(key) is not str:
            key = check_str_key(key, prefix)
        if isinstance(value, Tensor):
            shape = value.shape
            if nbd and ((shape[0] != b0) if (b0 is not None and shape) else (shape[:nbd] != bs)):
                check_leaf_shape(format_key((*prefix, key)), shape, bs)
            if dev is not None and value.device != dev:
                value = value.to(dev)
            store[key] = value
        elif type(value) is dict:
            sub = td._new_unsafe({}, bs, dev)
            fill_entries(sub, value, (*prefix, key))
            store[key] = sub
        else:
            store[key] = prepare_entry(td, key, value, (*prefix, key))


def prepare_entry(td: TensorDict, key: str, value: Any, path: tuple[str, ...]) -> Any:
    """Validate ``value`` for a level of ``td`` and convert it to a stored entry.

    Tensors must start with the batch size and move to ``td``'s device; mappings
    become nested TensorDicts; numpy arrays become tensors; other Python values
    become ``NonTensorData``. (``TensorDict._prepare`` is this function.)
    """
    bs = td._batch_size
    dev = td._device
    if isinstance(value, Tensor):
        shape = value.shape
        if not leads_with(shape, bs):
            check_leaf_shape(format_key(path), shape, bs)
        if dev is not None and value.device != dev:
            value = value.to(dev)
        return value
    if _is_coll(value):
        if value.batch_size[: len(bs)] != bs:
            raise BatchSizeError(
                f"key {format_key(path)} holds a {type(value).__name__} with batch_size "
                f"{tuple(value.batch_size)}, which does not start with batch_size {tuple(bs)}"
            )
        if dev is not None and value.device != dev:
            value = value.to(dev)
        return value
    if isinstance(value, Mapping):
        sub = td._new_unsafe({}, bs, dev)
        fill_entries(sub, value, path)
        return sub
    if type(value) is _NTD:
        if value.stacked and tuple(value.data.shape) != tuple(bs):
            raise BatchSizeError(
                f"key {format_key(path)} holds stacked values for batch_size "
                f"{tuple(value.data.shape)} but batch_size is {tuple(bs)}"
            )
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return prepare_entry(td, key, torch.from_numpy(value), path)
    return NonTensorData(value)


def copy_leaf(dst: Tensor, src: Any) -> None:
    """``dst.copy_(src)`` for in-place writes (``set_``, ``update_``, ``set(inplace=True)``).

    A large copy (over ``tensorbox.nn.DEFAULT_CHUNK_BYTES``) goes in slices through
    ``tensorbox.nn.copy_chunked``, so converting dtypes or filling a memory-mapped
    leaf never materializes a whole second tensor. Small copies, broadcasting copies
    and copies autograd must record take the plain ``copy_``.
    """
    if not isinstance(src, Tensor):
        src = torch.as_tensor(src)
    if (
        dst.nbytes > _CHUNK_BYTES
        and src.shape == dst.shape
        and not (dst.requires_grad or src.requires_grad)
    ):
        from .nn import copy_chunked  # nn imports _td: import when first needed

        copy_chunked(dst, src)
    else:
        dst.copy_(src)


_CHUNK_BYTES = 32 << 20  # the default chunk of tensorbox.nn.copy_chunked


# -------------------------------------------------------------------- apply


def apply(
    td: TensorDict,
    fn: Callable[..., Any],
    others: Sequence[Any],
    batch_size: Any,
    device: Any,
    inplace: bool,
    named: bool,
    nested_keys: bool = False,
    prefix: tuple[str, ...] = (),
) -> Any:
    """``fn`` on every tensor leaf (with the matching entries of ``others``).

    A ``None`` result drops the leaf (and a nested container left empty by that);
    results must keep the batch size (or ``batch_size``, when given).
    ``device`` is ``_NO_DEVICE`` to keep each container's device.
    """
    if not others and not named and not inplace and batch_size is None and not prefix:
        return _apply_simple(td, fn, device)
    bs = td._batch_size if batch_size is None else as_batch_size(batch_size)
    dev = td._device if device is _NO_DEVICE else (None if device is None else as_device(device))
    stores = [_store(o) for o in others]
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        try:
            ovs = [s[k] for s in stores]
        except KeyError:
            raise TensorDictKeyError(
                f"apply: key {format_key((*prefix, k))} is missing from one of the other inputs"
            ) from None
        if isinstance(v, Tensor):
            if named:
                key: Any = (*prefix, k) if (nested_keys and prefix) else k
                r = fn(key, v, *ovs)
            else:
                r = fn(v, *ovs)
            if r is None:
                continue
            if not leads_with(r.shape, bs):
                check_leaf_shape(f"{format_key((*prefix, k))} (result of fn)", r.shape, bs)
            out[k] = r
        elif type(v) is _NTD:
            if v.stacked and batch_size is not None and v.data.shape != tuple(bs):
                raise BatchSizeError(
                    f"apply: key {format_key((*prefix, k))} holds one value per batch element "
                    f"for batch_size {v.data.shape}; cannot change it to {tuple(bs)}"
                )
            out[k] = v
        else:
            inner = _inner(v)
            sub_bs = None if batch_size is None else bs
            r = apply(inner, fn, ovs, sub_bs, device, inplace, named, nested_keys, (*prefix, k))
            if r is inner:
                out[k] = v
            elif r._tensordict or not inner._tensordict:
                out[k] = _rewrap(v, r)
    if inplace:
        store = td._tensordict
        for k, r in out.items():
            if store.get(k) is not r:
                if td._locked:
                    raise LockedError(
                        f"apply(inplace=True) would replace {format_key((*prefix, k))} of a "
                        "locked TensorDict (make fn write in place, or unlock_() first)"
                    )
                store[k] = r
        for k in [k for k in store if k not in out]:
            if td._locked:
                raise LockedError(f"apply(inplace=True) would drop {k!r} of a locked TensorDict")
            del store[k]
        td._batch_size = bs
        td._device = dev
        return td
    return td._new_unsafe(out, bs, dev)


def _apply_simple(td: TensorDict, fn: Callable[[Tensor], Any], device: Any) -> TensorDict:
    """``apply(fn)`` with no others, names, new batch size or in-place: the common case."""
    bs = td._batch_size
    nbd = len(bs)
    b0 = bs[0] if nbd == 1 else None
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            r = fn(v)
            if r is None:
                continue
            shape = r.shape  # the check of leads_with(), inlined for the common cases
            if nbd and ((shape[0] != b0) if (b0 is not None and shape) else (shape[:nbd] != bs)):
                check_leaf_shape(f"{k!r} (result of fn)", shape, bs)
            out[k] = r
        elif type(v) is _NTD:
            out[k] = v
        else:
            inner = _inner(v)
            try:
                r = _apply_simple(inner, fn, device)
            except BatchSizeError as err:
                raise BatchSizeError(f"under {k!r}: {err}") from None
            if r._tensordict or not inner._tensordict:
                out[k] = _rewrap(v, r)
    dev = td._device if device is _NO_DEVICE else (None if device is None else as_device(device))
    return td._new_unsafe(out, bs, dev)


def map_leaves(td: TensorDict, fn: Callable[[Tensor], Tensor], device: Any = _NO_DEVICE) -> Any:
    """``fn`` on every tensor leaf when ``fn`` cannot change the shape (to, clone, detach)."""
    out = {
        k: (
            fn(v)
            if isinstance(v, Tensor)
            else v
            if type(v) is _NTD
            else _rewrap(v, map_leaves(_inner(v), fn, device))
        )
        for k, v in td._tensordict.items()
    }
    return td._new_unsafe(out, td._batch_size, td._device if device is _NO_DEVICE else device)


def to(td: TensorDict, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TensorDict:
    floating_only = kwargs.pop("floating_only", True)
    if len(args) == 1 and not kwargs and type(args[0]) is torch.dtype:
        return _cast(td, args[0], floating_only)  # the common case, without parsing
    device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    if memory_format is not None:
        raise TypeError("to(memory_format=...) is not supported: use apply(lambda t: t.to(...))")
    if device is not None:
        device = as_device(device)
    if dtype is None and (device is None or device == td._device):
        return td
    if device is None:
        return _cast(td, dtype, floating_only)
    cast = dtype
    if dtype is None:

        def fn(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

    else:

        def fn(t: Tensor) -> Tensor:
            if not floating_only or t.is_floating_point():
                return t.to(device, cast, non_blocking=non_blocking)
            return t.to(device, non_blocking=non_blocking)

    out = map_leaves(td, fn, device)
    if non_blocking and device is not None and device.type == "cpu" and torch.cuda.is_available():
        # A device-to-host copy with non_blocking returns before the bytes land.
        torch.cuda.synchronize()
    return out


def _cast(td: TensorDict, dtype: torch.dtype, floating_only: bool) -> TensorDict:
    """``to(dtype)``: floating-point leaves only, unless ``floating_only`` is False."""
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            out[k] = v.to(dtype) if (not floating_only or v.is_floating_point()) else v
        elif type(v) is _NTD:
            out[k] = v
        else:
            out[k] = _rewrap(v, _cast(_inner(v), dtype, floating_only))
    return td._new_unsafe(out, td._batch_size, td._device)


def pin_memory(td: TensorDict, num_threads: int | None) -> TensorDict:
    if not torch.cuda.is_available() and not _has_accelerator():
        raise RuntimeError(
            "pin_memory() needs an accelerator (CUDA or another torch accelerator) and none "
            "is available; skip pinning on CPU-only machines"
        )

    def pin(t: Tensor) -> Tensor:
        return t if t.is_pinned() else t.pin_memory()

    if num_threads and num_threads > 1:
        leaves = tensor_leaves(td)
        with ThreadPoolExecutor(num_threads) as pool:
            pinned = dict(zip(map(id, leaves), pool.map(pin, leaves)))
        return map_leaves(td, lambda t: pinned[id(t)])
    return map_leaves(td, pin)


def _has_accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    return bool(acc and acc.is_available())


def clone(td: TensorDict, recurse: bool) -> TensorDict:
    if recurse:
        return map_leaves(td, Tensor.clone)
    out = {
        k: (v if isinstance(v, Tensor) or type(v) is _NTD else _rewrap(v, clone(_inner(v), False)))
        for k, v in td._tensordict.items()
    }
    return td._new_unsafe(out, td._batch_size, td._device)


# ----------------------------------------------------------------- repr


def _describe(v: Any, bd: int) -> str:
    if isinstance(v, Tensor):
        dt = str(v.dtype).removeprefix("torch.")
        return f"{dt}{list(v.shape[bd:])}"
    if type(v) is _NTD:
        r = repr(v.value)
        return r if len(r) <= 40 else r[:37] + "..."
    if type(v._tensordict) is dict:
        # A nested TensorDict shows its extra batch dims in front: "[4]{...}".
        extra = list(v._batch_size[bd:])
        return (str(extra) if extra else "") + _fields(v)
    return repr(v)


def _fields(td: TensorDict) -> str:
    bd = len(td._batch_size)
    return "{" + ", ".join(f"{k}: {_describe(v, bd)}" for k, v in td._tensordict.items()) + "}"


def format_repr(td: TensorDict, name: str | None = None) -> str:
    """``TensorDict(batch_size=[4], device=None, fields={obs: float32[3], ...})``.

    One line when it fits in 120 characters, else one top-level entry per line.
    """
    name = name or type(td).__name__
    head = f"{name}(batch_size={list(td._batch_size)}, device={td._device}"
    if td._locked:
        head += ", locked=True"
    line = f"{head}, fields={_fields(td)})"
    if len(line) <= 120:
        return line
    bd = len(td._batch_size)
    body = ",\n".join(f"    {k}: {_describe(v, bd)}" for k, v in td._tensordict.items())
    return f"{head}, fields={{\n{body}}})"


# ----------------------------------------------------------------- pickling


def reduce(td: TensorDict) -> tuple[Any, ...]:
    """Pickle tensors that live in a file by reference to that file (see _memmap_tensor)."""
    try:
        from ._memmap_tensor import shareable
    except ImportError:  # pragma: no cover - during bootstrap only

        def shareable(t: Tensor) -> Any:
            return t

    entries = {k: (shareable(v) if isinstance(v, Tensor) else v) for k, v in td._tensordict.items()}
    return (_rebuild, (type(td), entries, tuple(td._batch_size), td._device, td._locked))


def _rebuild(
    cls: type, entries: dict[str, Any], bs: tuple[int, ...], device: Any, locked: bool
) -> Any:
    try:
        from ._memmap_tensor import restore
    except ImportError:  # pragma: no cover

        def restore(x: Any) -> Any:
            return x

    store = {
        k: (v if isinstance(v, Tensor | _NTD) or _is_coll(v) else restore(v))
        for k, v in entries.items()
    }
    td = cls._new_unsafe(store, _Size(bs), device)
    td._locked = locked
    return td


# Re-exports: the public functions of the split-out modules, reachable as _ops.<name>.
from ._compare import binary, compare, reduce_bool  # noqa: E402
from ._index import batch_after_index, gather_rows, getitem, setitem_batch  # noqa: E402
from ._keyops import exclude, flatten_keys, select, unflatten_keys, update  # noqa: E402
from ._stackcat import (  # noqa: E402
    cat,
    chunk,
    flatten,
    narrow,
    permute,
    reshape,
    split,
    squeeze,
    stack,
    torch_function,
    transpose,
    unbind,
    unflatten,
    unsqueeze,
)

__all__ = [
    "apply",
    "as_device",
    "batch_after_index",
    "binary",
    "cat",
    "chunk",
    "clear_device",
    "clone",
    "copy_leaf",
    "common_batch_size",
    "compare",
    "exclude",
    "fill_entries",
    "find_missing",
    "flatten",
    "flatten_keys",
    "format_repr",
    "gather_rows",
    "getitem",
    "iter_items",
    "iter_shaped",
    "keys_list",
    "map_leaves",
    "missing_key_error",
    "narrow",
    "permute",
    "pin_memory",
    "prepare_entry",
    "reduce",
    "reduce_bool",
    "reshape",
    "select",
    "set_batch_size_nested",
    "set_locked",
    "setitem_batch",
    "split",
    "squeeze",
    "stack",
    "tensor_leaves",
    "to",
    "torch_function",
    "transpose",
    "unbind",
    "unflatten",
    "unflatten_keys",
    "unsqueeze",
    "update",
]
