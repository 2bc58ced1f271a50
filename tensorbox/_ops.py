"""Operations over a container's entries: apply, to, key-structure ops, batch-shape ops.

Every function takes a ``TensorDict`` (tensorclass methods pass their inner
one) and returns a new container built without re-validation wherever the
result's validity follows from the inputs, which keeps per-call overhead near
a plain dict comprehension over the leaves.

Batch-shape ops share one mechanism (``_map``): a function written for a tensor
whose leading dims are the batch dims is applied to every tensor leaf and to
every nested container (whose methods have the same names and meaning), and to
stacked non-tensor values through ``NonTensorData.map_batch``.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2, 3])
>>> td.permute(1, 0)["x"].shape, td.reshape(-1)["x"].shape
(torch.Size([3, 2, 5]), torch.Size([6, 5]))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ._keys import NestedKey, format_key, unravel_key
from ._nontensor import NonTensorData
from ._shape import as_batch_size, check_dim, check_leaf_shape, shape_from_args
from .errors import BatchSizeError, KeyCollisionError, LockedError, TensorDictKeyError

if TYPE_CHECKING:
    from ._td import TensorDict

_Size = torch.Size


def _is_coll(v: Any) -> bool:
    return getattr(type(v), "_is_tensor_collection", False)


def _inner(v: Any) -> TensorDict:
    """The TensorDict that stores a collection's entries (itself, or a tensorclass's)."""
    from ._td import TensorDict

    return v if isinstance(v, TensorDict) else v._tensordict


def _store(v: Any) -> Mapping[str, Any]:
    """The key -> entry mapping of a collection or a plain mapping."""
    if _is_coll(v):
        return _inner(v)._tensordict
    if isinstance(v, Mapping):
        return v
    raise TypeError(f"expected a TensorDict, a tensorclass or a mapping, got {type(v).__name__}")


def _rewrap(like: Any, td: TensorDict) -> Any:
    """``td`` as the same kind of collection as ``like``."""
    from ._td import TensorDict

    return td if isinstance(like, TensorDict) else type(like)._from_tensordict(td)


# ---------------------------------------------------------------- traversal


def iter_items(
    td: TensorDict, include_nested: bool, leaves_only: bool, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[NestedKey, Any]]:
    """``(key, stored entry)``; keys are str at the top level and tuples below it."""
    for k, v in td._tensordict.items():
        key: NestedKey = (*prefix, k) if prefix else k
        node = _is_coll(v)
        if not (leaves_only and node):
            yield key, v
        if include_nested and node:
            yield from iter_items(_inner(v), True, leaves_only, (*prefix, k))


def iter_shaped(
    td: TensorDict, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Tensor]]:
    """Every tensor leaf at any depth with its key path."""
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            yield (*prefix, k), v
        elif _is_coll(v):
            yield from iter_shaped(_inner(v), (*prefix, k))


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
        elif type(v) is NonTensorData and v.stacked and v.data.shape != tuple(new):
            raise BatchSizeError(
                f"key {k!r} holds one value per batch element for {v.data.shape}; "
                f"cannot change batch_size to {tuple(new)}"
            )
    td._batch_size = new


def common_batch_size(td: TensorDict, batch_dims: int | None) -> torch.Size:
    """Longest leading shape shared by every leaf (nested levels get theirs first)."""
    shapes: list[Sequence[int]] = []
    for v in td._tensordict.values():
        if isinstance(v, Tensor):
            shapes.append(v.shape)
        elif _is_coll(v):
            inner = _inner(v)
            inner._batch_size = common_batch_size(inner, None)
            shapes.append(inner._batch_size)
    if not shapes:
        return td._batch_size
    out: list[int] = []
    for dims in zip(*shapes):
        if any(d != dims[0] for d in dims) or (batch_dims is not None and len(out) >= batch_dims):
            break
        out.append(dims[0])
    return _Size(out)


# ---------------------------------------------------------------- indexing


def batch_after_index(td: TensorDict, out: dict[str, Any], index: Any) -> torch.Size:
    """The batch size of ``td[index]``, read off one indexed entry when there is one."""
    bd = len(td._batch_size)
    for k, v in td._tensordict.items():
        if type(v) is not NonTensorData:
            r = out[k]
            return r.shape[: r.ndim - (v.ndim - bd)]
    for v in out.values():
        if v.stacked:
            return _Size(v.data.shape)
    # No entry tells us: index a stride-0 stand-in that costs no memory.
    return torch.empty(()).expand(td._batch_size)[_cpu_index(index)].shape


def _cpu_index(index: Any) -> Any:
    if isinstance(index, Tensor):
        return index.cpu()
    if isinstance(index, tuple):
        return tuple(_cpu_index(i) for i in index)
    return index


def gather_rows(td: TensorDict, indices: Sequence[int] | Tensor) -> TensorDict:
    """``td[indices]`` for a 1-D list of row numbers, as one ``index_select`` per leaf."""
    bs = td._batch_size
    if not bs:
        raise IndexError("cannot index a TensorDict with batch_size [] (no batch dims)")
    idx = indices if isinstance(indices, Tensor) else torch.as_tensor(indices, dtype=torch.long)
    if idx.ndim != 1 or idx.dtype not in (torch.int64, torch.int32):
        return td[idx]
    if idx.device.type == "cpu" and idx.numel() and bool((idx < 0).any()):
        idx = torch.where(idx < 0, idx + bs[0], idx)
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            out[k] = torch.index_select(v, 0, idx if idx.device == v.device else idx.to(v.device))
        elif type(v) is NonTensorData:
            out[k] = v[idx]
        else:
            out[k] = v.__getitems__(idx)
    return td._new_unsafe(out, _Size((idx.shape[0], *bs[1:])), td._device)


def setitem_batch(td: TensorDict, index: Any, value: Any) -> None:
    """``td[index] = value``: write in place into the selected rows of every leaf."""
    from ._shape import normalize_index

    if isinstance(index, list):
        index = torch.tensor(index)
    index = normalize_index(index, len(td._batch_size))
    if _is_coll(value) or isinstance(value, Mapping):
        for k, v in _store(value).items():
            cur = td._tensordict.get(k)
            if cur is None:
                raise TensorDictKeyError(
                    f"cannot write key {k!r} into selected rows: the destination has no such "
                    f"key (existing keys: {sorted(td._tensordict)!r})"
                )
            _write_rows(td, k, cur, index, v)
        return
    for k, cur in td._tensordict.items():
        if type(cur) is not NonTensorData:
            _write_rows(td, k, cur, index, value)


def _write_rows(td: TensorDict, key: str, cur: Any, index: Any, value: Any) -> None:
    if isinstance(cur, Tensor):
        if type(value) is NonTensorData:
            raise TypeError(
                f"cannot write the non-tensor value {value.value!r} into tensor {key!r}"
            )
        try:
            cur[index] = value
        except RuntimeError as err:
            raise BatchSizeError(f"cannot write into key {key!r}: {err}") from None
    elif type(cur) is NonTensorData:
        new = value if type(value) is NonTensorData else NonTensorData(value)
        if not cur.stacked and not new.stacked and cur == new:
            return
        full = cur.full(td._batch_size).copy()
        pos = torch.arange(full.size).reshape(full.shape)[index].numpy()
        flat = full.reshape(-1)
        vals = new.full(pos.shape)
        for p, val in zip(pos.reshape(-1), vals.reshape(-1)):
            flat[p] = val
        td._tensordict[key] = NonTensorData(full, stacked=True)
    else:
        cur[index] = value


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
    from ._td import _NO_DEFAULT

    bs = td._batch_size if batch_size is None else as_batch_size(batch_size)
    dev = (
        td._device if device is _NO_DEFAULT else (None if device is None else torch.device(device))
    )
    stores = [_store(o) for o in others]
    out: dict[str, Any] = {}
    nbd = len(bs)
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
            if r.shape[:nbd] != bs:
                check_leaf_shape(f"{format_key((*prefix, k))} (result of fn)", r.shape, bs)
            out[k] = r
        elif type(v) is NonTensorData:
            out[k] = v
        else:
            inner = _inner(v)
            sub_bs = inner._batch_size if batch_size is None else bs
            r = apply(inner, fn, ovs, sub_bs, device, inplace, named, nested_keys, (*prefix, k))
            out[k] = _rewrap(v, r)
    if inplace:
        for k, r in out.items():
            if td._tensordict.get(k) is not r:
                if td._locked:
                    raise LockedError(
                        f"apply(inplace=True) would replace {k!r} of a locked TensorDict"
                    )
                td._tensordict[k] = r
        td._batch_size = bs
        td._device = dev
        return td
    return td._new_unsafe(out, bs, dev)


def to(td: TensorDict, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TensorDict:
    floating_only = kwargs.pop("floating_only", True)
    device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
    if dtype is None and (device is None or device == td._device):
        return td
    cast = dtype
    if device is None:

        def fn(t: Tensor) -> Tensor:
            return t.to(cast) if (t.is_floating_point() or not floating_only) else t
    elif dtype is None:

        def fn(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)
    else:

        def fn(t: Tensor) -> Tensor:
            if t.is_floating_point() or not floating_only:
                return t.to(device, cast, non_blocking=non_blocking)
            return t.to(device, non_blocking=non_blocking)

    out = apply(td, fn, (), None, td._device if device is None else device, False, False)
    if non_blocking and device is not None and device.type == "cpu" and torch.cuda.is_available():
        # A device-to-host copy with non_blocking returns before the bytes land.
        torch.cuda.synchronize()
    return out


def pin_memory(td: TensorDict, num_threads: int | None) -> TensorDict:
    if not torch.cuda.is_available() and not _has_accelerator():
        raise RuntimeError(
            "pin_memory() needs an accelerator (CUDA or another torch accelerator) and none "
            "is available; skip pinning on CPU-only machines"
        )

    def pin(t: Tensor) -> Tensor:
        return t if t.is_pinned() else t.pin_memory()

    if num_threads and num_threads > 1:
        leaves = [t for _, t in iter_shaped(td)]
        with ThreadPoolExecutor(num_threads) as pool:
            pinned = dict(zip(map(id, leaves), pool.map(pin, leaves)))
        return apply(td, lambda t: pinned[id(t)], (), None, td._device, False, False)
    return apply(td, pin, (), None, td._device, False, False)


def _has_accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    return bool(acc and acc.is_available())


def clone(td: TensorDict, recurse: bool) -> TensorDict:
    if recurse:
        return apply(td, Tensor.clone, (), None, td._device, False, False)
    out = {
        k: (_rewrap(v, clone(_inner(v), False)) if _is_coll(v) else v)
        for k, v in td._tensordict.items()
    }
    return td._new_unsafe(out, td._batch_size, td._device)


# ----------------------------------------------------------- key structure


def update(td: TensorDict, other: Any, inplace: bool, keys: Sequence[NestedKey] | None) -> None:
    if keys is not None:
        for key in keys:
            path = unravel_key(key)
            node: Any = other
            for part in path:
                node = _store(node)[part]
            if inplace and path in td:
                td.set_(path, _raw(node))
            else:
                td.set(path, _raw(node))
        return
    for k, v in _store(other).items():
        cur = td._tensordict.get(k)
        if cur is not None and _is_coll(cur) and (_is_coll(v) or isinstance(v, Mapping)):
            update(_inner(cur), v, inplace, None)
        elif inplace and isinstance(cur, Tensor):
            cur.copy_(v)
        else:
            td._set_str(k, v, (k,))


def _raw(v: Any) -> Any:
    return v.value if type(v) is NonTensorData else v


def _lookup(td: TensorDict, path: tuple[str, ...]) -> tuple[bool, Any, list[Any]]:
    """(found, stored entry, the containers along the way)."""
    node: Any = td
    chain = []
    for part in path:
        if not _is_coll(node):
            return False, None, chain
        chain.append(node)
        store = _inner(node)._tensordict
        if part not in store:
            return False, None, chain
        node = store[part]
    return True, node, chain


def select(td: TensorDict, keys: Sequence[NestedKey], inplace: bool, strict: bool) -> TensorDict:
    out = td._new_unsafe({}, td._batch_size, td._device)
    for key in keys:
        path = unravel_key(key)
        found, entry, chain = _lookup(td, path)
        if not found:
            if strict:
                raise td._missing(path, len(chain) - 1 if chain else 0)
            continue
        dest = out
        for part, src in zip(path[:-1], chain[1:]):
            nxt = dest._tensordict.get(part)
            if nxt is None:
                nxt = type(out)._new_unsafe({}, src.batch_size, _inner(src)._device)
                dest._tensordict[part] = nxt
            dest = _inner(nxt)
        dest._tensordict[path[-1]] = entry
    if inplace:
        if td._locked:
            raise LockedError("select(inplace=True) on a locked TensorDict")
        td._tensordict = out._tensordict
        return td
    return out


def exclude(td: TensorDict, keys: Sequence[NestedKey], inplace: bool) -> TensorDict:
    out = td if inplace else clone(td, False)
    if inplace and td._locked:
        raise LockedError("exclude(inplace=True) on a locked TensorDict")
    for key in keys:
        path = unravel_key(key)
        found, _, chain = _lookup(out, path)
        if found:
            del _inner(chain[-1])._tensordict[path[-1]]
    return out


def flatten_keys(td: TensorDict, sep: str) -> TensorDict:
    out: dict[str, Any] = {}

    def walk(node: TensorDict, prefix: str) -> None:
        for k, v in node._tensordict.items():
            name = f"{prefix}{sep}{k}" if prefix else k
            if _is_coll(v):
                walk(_inner(v), name)
                continue
            if name in out:
                raise KeyCollisionError(
                    f"flatten_keys: two entries become {name!r} with separator {sep!r}"
                )
            out[name] = v

    walk(td, "")
    return td._new_unsafe(out, td._batch_size, td._device)


def unflatten_keys(td: TensorDict, sep: str) -> TensorDict:
    out = td._new_unsafe({}, td._batch_size, td._device)
    for k, v in td._tensordict.items():
        if _is_coll(v):
            v = _rewrap(v, unflatten_keys(_inner(v), sep))
        path = tuple(k.split(sep))
        dest = out
        for i, part in enumerate(path[:-1]):
            nxt = dest._tensordict.get(part)
            if nxt is None:
                nxt = td._new_unsafe({}, td._batch_size, td._device)
                dest._tensordict[part] = nxt
            elif not _is_coll(nxt):
                raise KeyCollisionError(
                    f"unflatten_keys: {k!r} needs {sep.join(path[: i + 1])!r} to be a "
                    "TensorDict but it is a leaf"
                )
            dest = _inner(nxt)
        last = path[-1]
        if last in dest._tensordict:
            prev = dest._tensordict[last]
            if _is_coll(prev) and _is_coll(v):
                for kk, vv in _inner(v)._tensordict.items():
                    if kk in _inner(prev)._tensordict:
                        raise KeyCollisionError(f"unflatten_keys: {k!r} collides on {kk!r}")
                    _inner(prev)._tensordict[kk] = vv
                continue
            raise KeyCollisionError(f"unflatten_keys: {k!r} collides with an existing entry")
        dest._tensordict[last] = v
    return out


# -------------------------------------------------------------- batch shape


def _map(td: TensorDict, fn: Callable[[Any], Any], new_bs: torch.Size) -> TensorDict:
    out = {
        k: (v.map_batch(fn) if type(v) is NonTensorData else fn(v))
        for k, v in td._tensordict.items()
    }
    return td._new_unsafe(out, new_bs, td._device)


def _feat(x: Any, bd: int) -> tuple[int, ...]:
    return tuple(x.shape[bd:])


def reshape(td: TensorDict, args: tuple[Any, ...], how: str) -> TensorDict:
    shape = shape_from_args(args)
    bd = td.batch_dims
    try:
        new_bs = torch.empty(()).expand(td._batch_size).reshape(shape).shape
    except RuntimeError as err:
        raise BatchSizeError(
            f"cannot {how} batch_size {tuple(td._batch_size)} to {shape}: {err}"
        ) from None
    return _map(td, lambda x: getattr(x, how)(*new_bs, *_feat(x, bd)), new_bs)


def unsqueeze(td: TensorDict, dim: int) -> TensorDict:
    bd = td.batch_dims
    d = check_dim(dim, bd + 1)
    bs = td._batch_size
    return _map(td, lambda x: x.unsqueeze(d), _Size((*bs[:d], 1, *bs[d:])))


def squeeze(td: TensorDict, dim: int | None) -> TensorDict:
    bs = td._batch_size
    dims = [i for i, s in enumerate(bs) if s == 1] if dim is None else [check_dim(dim, len(bs))]
    dims = [d for d in dims if bs[d] == 1]
    if not dims:
        return td
    new_bs = _Size(s for i, s in enumerate(bs) if i not in dims)

    def fn(x: Any) -> Any:
        for d in reversed(dims):
            x = x.squeeze(d)
        return x

    return _map(td, fn, new_bs)


def permute(td: TensorDict, args: tuple[Any, ...]) -> TensorDict:
    dims = shape_from_args(args)
    bd = td.batch_dims
    if len(dims) != bd:
        raise IndexError(f"permute needs {bd} dims (one per batch dim), got {dims}")
    dims = tuple(check_dim(d, bd) for d in dims)
    if sorted(dims) != list(range(bd)):
        raise IndexError(f"permute dims {dims} are not a permutation of range({bd})")
    bs = td._batch_size
    return _map(td, lambda x: x.permute(*dims, *range(bd, x.ndim)), _Size(bs[d] for d in dims))


def transpose(td: TensorDict, dim0: int, dim1: int) -> TensorDict:
    bd = td.batch_dims
    a, b = check_dim(dim0, bd), check_dim(dim1, bd)
    bs = list(td._batch_size)
    bs[a], bs[b] = bs[b], bs[a]
    return _map(td, lambda x: x.transpose(a, b), _Size(bs))


def expand(td: TensorDict, args: tuple[Any, ...]) -> TensorDict:
    shape = shape_from_args(args)
    bd = td.batch_dims
    try:
        new_bs = torch.empty(()).expand(td._batch_size).expand(shape).shape
    except RuntimeError as err:
        raise BatchSizeError(
            f"cannot expand batch_size {tuple(td._batch_size)} to {shape}: {err}"
        ) from None
    return _map(td, lambda x: x.expand(*new_bs, *_feat(x, bd)), new_bs)


def flatten(td: TensorDict, start: int, end: int) -> TensorDict:
    bd = td.batch_dims
    if bd == 0:
        return td
    s, e = check_dim(start, bd), check_dim(end, bd)
    if s > e:
        raise IndexError(f"flatten: start_dim {start} comes after end_dim {end}")
    bs = td._batch_size
    new_bs = _Size((*bs[:s], math.prod(bs[s : e + 1]), *bs[e + 1 :]))
    return _map(td, lambda x: x.flatten(s, e), new_bs)


def unflatten(td: TensorDict, dim: int, sizes: Sequence[int]) -> TensorDict:
    bd = td.batch_dims
    d = check_dim(dim, bd)
    bs = td._batch_size
    try:
        inner = torch.empty(()).expand(bs[d]).unflatten(0, tuple(sizes)).shape
    except RuntimeError as err:
        raise BatchSizeError(
            f"cannot unflatten batch dim {d} of size {bs[d]} into {tuple(sizes)}: {err}"
        ) from None
    new_bs = _Size((*bs[:d], *inner, *bs[d + 1 :]))
    return _map(td, lambda x: x.unflatten(d, inner), new_bs)


def unbind(td: TensorDict, dim: int) -> tuple[TensorDict, ...]:
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    n = bs[d]
    new_bs = _Size((*bs[:d], *bs[d + 1 :]))
    parts: dict[str, Sequence[Any]] = {}
    for k, v in td._tensordict.items():
        if type(v) is NonTensorData:
            parts[k] = [v.map_batch(lambda t, i=i: t.select(d, i)) for i in range(n)]
        else:
            parts[k] = v.unbind(d)
    new = td._new_unsafe
    dev = td._device
    return tuple(new({k: p[i] for k, p in parts.items()}, new_bs, dev) for i in range(n))


def split(td: TensorDict, split_size: int | Sequence[int], dim: int) -> tuple[TensorDict, ...]:
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    n = bs[d]
    if isinstance(split_size, int):
        if split_size <= 0:
            raise ValueError(f"split_size must be positive, got {split_size}")
        sizes = [min(split_size, n - i) for i in range(0, n, split_size)] or [0]
    else:
        sizes = list(split_size)
        if sum(sizes) != n:
            raise ValueError(f"split sizes {sizes} do not add up to the size {n} of batch dim {d}")
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    out = []
    for s, size in zip(starts, sizes):
        new_bs = _Size((*bs[:d], size, *bs[d + 1 :]))
        out.append(_map(td, lambda x, s=s, size=size: x.narrow(d, s, size), new_bs))
    return tuple(out)


def chunk(td: TensorDict, chunks: int, dim: int) -> tuple[TensorDict, ...]:
    if chunks <= 0:
        raise ValueError(f"chunks must be positive, got {chunks}")
    n = td._batch_size[check_dim(dim, td.batch_dims)]
    return split(td, max(1, -(-n // chunks)), dim)


# ----------------------------------------------------------- stack and cat


def _check_same_keys(items: Sequence[TensorDict], what: str) -> None:
    keys = items[0]._tensordict.keys()
    for i, it in enumerate(items[1:], 1):
        other = it._tensordict.keys()
        if other != keys:
            missing = sorted(set(keys) - set(other))
            extra = sorted(set(other) - set(keys))
            raise TensorDictKeyError(
                f"{what}: element {i} has different keys than element 0 "
                f"(missing {missing!r}, unexpected {extra!r})"
            )


def stack(items: Sequence[Any], dim: int = 0) -> Any:
    items = list(items)
    if not items:
        raise ValueError("stack expects a non-empty sequence of TensorDicts")
    first = items[0]
    if not isinstance(first, _td_type()):
        return _rewrap(first, stack([_inner(x) for x in items], dim))
    bs = first._batch_size
    d = check_dim(dim, len(bs) + 1)
    for i, it in enumerate(items[1:], 1):
        it = _inner(it)
        items[i] = it
        if it._batch_size != bs:
            raise BatchSizeError(
                f"stack: element {i} has batch_size {tuple(it._batch_size)}, element 0 has "
                f"{tuple(bs)}; stacked TensorDicts must share a batch size"
            )
    _check_same_keys(items, "stack")
    out: dict[str, Any] = {}
    for k, v in first._tensordict.items():
        vals = [it._tensordict[k] for it in items]
        if isinstance(v, Tensor):
            try:
                out[k] = torch.stack(vals, d)
            except RuntimeError as err:
                raise BatchSizeError(f"stack: cannot stack key {k!r}: {err}") from None
        elif type(v) is NonTensorData:
            out[k] = NonTensorData.stack(vals, d, bs)
        else:
            out[k] = stack(vals, d)
    return first._new_unsafe(out, _Size((*bs[:d], len(items), *bs[d:])), first._device)


def cat(items: Sequence[Any], dim: int = 0) -> Any:
    items = list(items)
    if not items:
        raise ValueError("cat expects a non-empty sequence of TensorDicts")
    first = items[0]
    if not isinstance(first, _td_type()):
        return _rewrap(first, cat([_inner(x) for x in items], dim))
    items = [_inner(x) for x in items]
    bs = first._batch_size
    d = check_dim(dim, len(bs))
    for i, it in enumerate(items[1:], 1):
        obs = it._batch_size
        if len(obs) != len(bs) or obs[:d] != bs[:d] or obs[d + 1 :] != bs[d + 1 :]:
            raise BatchSizeError(
                f"cat: element {i} has batch_size {tuple(obs)}, incompatible with "
                f"{tuple(bs)} along dim {d}"
            )
    _check_same_keys(items, "cat")
    out: dict[str, Any] = {}
    for k, v in first._tensordict.items():
        vals = [it._tensordict[k] for it in items]
        if isinstance(v, Tensor):
            try:
                out[k] = torch.cat(vals, d)
            except RuntimeError as err:
                raise BatchSizeError(f"cat: cannot concatenate key {k!r}: {err}") from None
        elif type(v) is NonTensorData:
            out[k] = NonTensorData.cat(vals, d, [it._batch_size for it in items])
        else:
            out[k] = cat(vals, d)
    total = sum(it._batch_size[d] for it in items)
    return first._new_unsafe(out, _Size((*bs[:d], total, *bs[d + 1 :])), first._device)


def _td_type() -> type:
    from ._td import TensorDict

    return TensorDict


def _first_arg(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    return args[0] if args else kwargs.pop(name)


def torch_function(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Route ``torch.stack(tds)``, ``torch.cat(tds)`` and friends to the functions here."""
    impl = _TORCH_FUNCTIONS.get(func)
    if impl is None:
        return NotImplemented
    return impl(*args, **kwargs)


_TORCH_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    torch.stack: lambda tensors, dim=0, out=None: stack(tensors, dim),
    torch.cat: lambda tensors, dim=0, out=None: cat(tensors, dim),
    torch.concat: lambda tensors, dim=0, out=None: cat(tensors, dim),
    torch.concatenate: lambda tensors, axis=0, out=None: cat(tensors, axis),
    torch.unbind: lambda x, dim=0: x.unbind(dim),
    torch.split: lambda x, split_size_or_sections, dim=0: x.split(split_size_or_sections, dim),
    torch.chunk: lambda x, chunks, dim=0: x.chunk(chunks, dim),
    torch.squeeze: lambda x, dim=None: x.squeeze(dim),
    torch.unsqueeze: lambda x, dim: x.unsqueeze(dim),
    torch.permute: lambda x, dims: x.permute(*dims),
    torch.reshape: lambda x, shape: x.reshape(*shape),
    torch.flatten: lambda x, start_dim=0, end_dim=-1: x.flatten(start_dim, end_dim),
    torch.unflatten: lambda x, dim, sizes: x.unflatten(dim, sizes),
    torch.transpose: lambda x, dim0, dim1: x.transpose(dim0, dim1),
    torch.clone: lambda x, memory_format=None: x.clone(),
    torch.eq: lambda x, other: x == other,
    torch.ne: lambda x, other: x != other,
}


# ------------------------------------------------------ comparison, reprs


def compare(td: TensorDict, other: Any, op: Callable[..., Tensor]) -> Any:
    if _is_coll(other) or isinstance(other, Mapping):
        ostore = _store(other)
        if ostore.keys() != td._tensordict.keys():
            missing = sorted(set(td._tensordict) - set(ostore))
            extra = sorted(set(ostore) - set(td._tensordict))
            raise TensorDictKeyError(
                f"cannot compare TensorDicts with different keys (missing {missing!r}, "
                f"unexpected {extra!r})"
            )
        out: dict[str, Any] = {}
        for k, v in td._tensordict.items():
            o = ostore[k]
            if isinstance(v, Tensor):
                out[k] = op(v, o)
            elif type(v) is NonTensorData:
                out[k] = _compare_nontensor(td, v, o, op)
            else:
                out[k] = compare(_inner(v), o, op)
        return td._new_unsafe(out, td._batch_size, td._device)
    if not isinstance(other, (Tensor, int, float, bool, complex, np.ndarray, np.generic)):
        return NotImplemented
    res = {
        k: (op(v, other) if isinstance(v, Tensor) else compare(_inner(v), other, op))
        for k, v in td._tensordict.items()
        if type(v) is not NonTensorData
    }
    return td._new_unsafe(res, td._batch_size, td._device)


def _compare_nontensor(td: TensorDict, v: NonTensorData, o: Any, op: Any) -> Tensor:
    o = o if type(o) is NonTensorData else NonTensorData(o)
    bs = td._batch_size
    a, b = v.full(bs), o.full(bs)
    eq = np.array([x == y for x, y in zip(a.reshape(-1), b.reshape(-1))], dtype=bool).reshape(
        tuple(bs)
    )
    res = torch.from_numpy(eq)
    return res if op is torch.eq else ~res


def reduce_bool(td: TensorDict, dim: int | None, fn: Callable[..., Tensor]) -> Any:
    if dim is None:
        leaves = [t for _, t in iter_shaped(td)]
        if fn is torch.all:
            return all(bool(t.all()) for t in leaves)
        return any(bool(t.any()) for t in leaves)
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    new_bs = _Size((*bs[:d], *bs[d + 1 :]))
    return apply(td, lambda t: fn(t, dim=d), (), new_bs, td._device, False, False)


def binary(td: TensorDict, other: Any, op: Callable[..., Tensor]) -> Any:
    if _is_coll(other) or isinstance(other, Mapping):
        return apply(td, op, (other,), None, td._device, False, False)
    return apply(td, lambda t: op(t, other), (), None, td._device, False, False)


def _describe(v: Any, bd: int) -> str:
    if isinstance(v, Tensor):
        dt = str(v.dtype).removeprefix("torch.")
        return f"{dt}{list(v.shape[bd:])}"
    if type(v) is NonTensorData:
        r = repr(v.value)
        return r if len(r) <= 40 else r[:37] + "..."
    if _is_coll(v) and type(v) is _td_type() and v.ndim == bd:
        return _fields(v)
    return repr(v)


def _fields(td: TensorDict) -> str:
    bd = td.batch_dims
    return "{" + ", ".join(f"{k}: {_describe(v, bd)}" for k, v in td._tensordict.items()) + "}"


def format_repr(td: TensorDict, name: str | None = None) -> str:
    name = name or type(td).__name__
    head = f"{name}(batch_size={list(td._batch_size)}, device={td._device}"
    if td._locked:
        head += ", locked=True"
    line = f"{head}, fields={_fields(td)})"
    if len(line) <= 120:
        return line
    bd = td.batch_dims
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
        k: (v if isinstance(v, Tensor | NonTensorData) or _is_coll(v) else restore(v))
        for k, v in entries.items()
    }
    td = cls._new_unsafe(store, _Size(bs), device)
    td._locked = locked
    return td
