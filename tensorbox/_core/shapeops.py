"""Batch-shape ops (reshape, permute, ...), unbind/split/chunk, stack/cat, torch functions.

Each batch-shape op is written once, as a function on "a tensor whose leading dims
are the batch dims", and applied by ``_map`` to every tensor leaf and to every
nested container (whose methods have the same names and meaning, and whose
``shape`` is its batch size), and to stacked non-tensor values through
``NonTensorData.map_batch``. New batch sizes are computed by running the same op
on a stride-0 stand-in tensor shaped like the batch, so errors and edge cases
are torch's own.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2, 3])
>>> td.permute(1, 0)["x"].shape, td.reshape(-1)["x"].shape
(torch.Size([3, 2, 5]), torch.Size([6, 5]))
>>> [p.batch_size for p in td.split([1, 2], dim=1)]
[torch.Size([2, 1]), torch.Size([2, 2])]
>>> torch.cat([td, td], dim=1).batch_size
torch.Size([2, 6])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from tensorbox._core import jagged as _jagged
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.reduce import LOSS_FUNCTIONS, REDUCTIONS
from tensorbox._core.shape import check_dim, shape_from_args
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox.errors import BatchDimError, BatchSizeError, TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection
    from tensorbox._core.methods.base import C

__all__ = [
    "cat",
    "chunk",
    "flatten",
    "narrow",
    "permute",
    "reshape",
    "split",
    "squeeze",
    "stack",
    "torch_function",
    "transpose",
    "unbind",
    "unflatten",
    "unsqueeze",
]

_Size = torch.Size
_NTD = NonTensorData
_NJT = _jagged.NJT


def _stand_in(bs: torch.Size) -> Tensor:
    """A tensor shaped like the batch that costs no memory (every stride is 0)."""
    return torch.empty(()).expand(bs)


def _map(td: C, fn: Callable[[Any], Any], new_bs: torch.Size, op: str = "") -> C:
    if op and len(td._batch_size) == 1:
        _jagged.refuse_shape_op(td, op)
    out = {k: (v.map_batch(fn) if type(v) is _NTD else fn(v)) for k, v in td._tensordict.items()}
    res = td._new_unsafe(out, new_bs, td._device)
    if td._locked:  # a view of a locked container is locked too, as in tensordict
        res._locked = True
    return res


def _feat(x: Any, bd: int) -> tuple[int, ...]:
    return tuple(x.shape[bd:])


def reshape(td: C, args: tuple[Any, ...], how: str) -> C:
    """``reshape``, ``view`` or ``expand`` (named by ``how``) of the batch dims."""
    shape = shape_from_args(args)
    bd = len(td._batch_size)
    try:
        new_bs = getattr(_stand_in(td._batch_size), how)(shape).shape
    except RuntimeError as err:
        raise BatchSizeError(
            f"cannot {how} batch_size {tuple(td._batch_size)} to {shape}: {err}"
        ) from None
    # one tuple, not *args: torch's expand() of a 0-d value takes no empty argument list
    out = _map(td, lambda x: getattr(x, how)((*new_bs, *_feat(x, bd))), new_bs, how)
    return _per_element(out) if how == "expand" and len(new_bs) > bd else out


def unsqueeze(td: C, dim: int) -> C:
    bs = td._batch_size
    d = check_dim(dim, len(bs) + 1)
    out = _map(td, lambda x: x.unsqueeze(d), _Size((*bs[:d], 1, *bs[d:])), "unsqueeze")
    return _per_element(out)


def _per_element(td: C) -> C:
    """``td`` (new, from ``expand`` or ``unsqueeze`` adding batch dims) with each shared
    non-tensor value held once per element, as tensordict's ``NonTensorStack`` (a
    ``MetaData`` stays one value, as tensordict's)."""
    store = td._tensordict
    for k, v in store.items():
        if type(v) is _NTD and not (v.stacked or v.meta) and type(v.data) is not UnbatchedTensor:
            store[k] = _NTD(v.full(td._batch_size), stacked=True, device=v.device)
    return td


def squeeze(td: C, dim: int | None) -> C:
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

    return _map(td, fn, new_bs, "squeeze")


def permute(td: C, args: tuple[Any, ...]) -> C:
    dims = shape_from_args(args)
    bd = len(td._batch_size)
    if len(dims) != bd:
        raise BatchDimError(f"permute needs {bd} dims (one per batch dim), got {dims}")
    dims = tuple(check_dim(d, bd) for d in dims)
    if sorted(dims) != list(range(bd)):
        raise BatchDimError(f"permute dims {dims} are not a permutation of range({bd})")
    bs = td._batch_size
    return _map(
        td, lambda x: x.permute(*dims, *range(bd, x.ndim)), _Size(bs[d] for d in dims), "permute"
    )


def transpose(td: C, dim0: int, dim1: int) -> C:
    bd = len(td._batch_size)
    a, b = check_dim(dim0, bd), check_dim(dim1, bd)
    bs = list(td._batch_size)
    bs[a], bs[b] = bs[b], bs[a]
    return _map(td, lambda x: x.transpose(a, b), _Size(bs), "transpose")


def flatten(td: C, start: int, end: int) -> C:
    bd = len(td._batch_size)
    if bd == 0:  # as torch: flattening a 0-d tensor gives one dim of size 1
        check_dim(start, 1), check_dim(end, 1)
        return _map(td, lambda x: x.unsqueeze(0), _Size((1,)), "flatten")
    s, e = check_dim(start, bd), check_dim(end, bd)
    if s > e:
        raise IndexError(f"flatten: start_dim {start} comes after end_dim {end}")
    bs = td._batch_size
    new_bs = _Size((*bs[:s], math.prod(bs[s : e + 1]), *bs[e + 1 :]))
    return _map(td, lambda x: x.flatten(s, e), new_bs, "flatten")


def unflatten(td: C, dim: int, sizes: Sequence[int]) -> C:
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    try:
        inner = _stand_in(_Size([bs[d]])).unflatten(0, tuple(sizes)).shape  # type: ignore[no-untyped-call]
    except RuntimeError as err:
        raise BatchSizeError(
            f"cannot unflatten batch dim {d} of size {bs[d]} into {tuple(sizes)}: {err}"
        ) from None
    new_bs = _Size((*bs[:d], *inner, *bs[d + 1 :]))
    return _map(td, lambda x: x.unflatten(d, inner), new_bs, "unflatten")


def narrow(td: C, dim: int, start: int, length: int) -> C:
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    new_bs = _stand_in(bs).narrow(d, start, length).shape  # torch's checks and errors
    return _map(td, lambda x: _narrow(x, d, start, length), new_bs)


def _narrow(x: Any, d: int, start: int, length: int) -> Any:
    if type(x) is _NJT:  # rows start..start+length (checked by the caller): a view
        s = start + x.shape[0] if start < 0 else start
        return _jagged.select_rows(x, slice(s, s + length))
    return x.narrow(d, start, length)


def _rows(td: C, parts: dict[str, Sequence[Any]], sizes: Sequence[torch.Size]) -> tuple[Any, ...]:
    """Containers ``i = 0..len(sizes)-1`` made of ``parts[k][i]``."""
    new = td._new_unsafe
    dev = td._device
    keys = list(parts)
    return tuple(
        new(dict(zip(keys, row)), bs, dev)
        for row, bs in zip(zip(*parts.values()) if keys else [()] * len(sizes), sizes)
    )


def unbind(td: C, dim: int) -> tuple[C, ...]:
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    n = bs[d]
    parts: dict[str, Sequence[Any]] = {}
    for k, v in td._tensordict.items():
        if type(v) is _NTD:
            parts[k] = v.unbind(d, n)
        else:
            parts[k] = v.unbind(d)
    return _rows(td, parts, [_Size((*bs[:d], *bs[d + 1 :]))] * n)


def split(td: C, split_size: int | Sequence[int], dim: int) -> tuple[C, ...]:
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    if not isinstance(split_size, int):
        split_size = list(split_size)
    try:
        shapes = [p.shape for p in _stand_in(bs).split(split_size, d)]  # type: ignore[no-untyped-call]
    except RuntimeError as err:
        raise BatchDimError(f"cannot split batch dim {d} of size {bs[d]}: {err}") from None
    return _split_at(td, d, [s[d] for s in shapes], shapes)


def chunk(td: C, chunks: int, dim: int) -> tuple[C, ...]:
    bs = td._batch_size
    d = check_dim(dim, len(bs))
    if chunks <= 0:
        raise ValueError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    shapes = [p.shape for p in _stand_in(bs).chunk(chunks, d)]
    return _split_at(td, d, [s[d] for s in shapes], shapes)


def _split_at(td: C, d: int, sizes: list[int], shapes: list[torch.Size]) -> tuple[C, ...]:
    parts: dict[str, Sequence[Any]] = {}
    for k, v in td._tensordict.items():
        if type(v) is _NTD:
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            parts[k] = [
                v.map_batch(lambda t, s=s, n=n: t.narrow(d, s, n))  # type: ignore[misc]
                for s, n in zip(starts, sizes)
            ]
        elif type(v) is _NJT:  # consecutive rows: views of the values
            parts[k] = _jagged.split_rows(v, sizes)
        else:
            parts[k] = v.split(sizes, d)
    return _rows(td, parts, shapes)


# ----------------------------------------------------------- stack and cat


def _keys_differ(items: Sequence[TensorCollection], i: int, what: str) -> TensorDictKeyError:
    keys = items[0]._tensordict.keys()
    other = items[i]._tensordict.keys()
    missing = sorted(set(keys) - set(other))
    extra = sorted(set(other) - set(keys))
    return TensorDictKeyError(
        f"{what}: element {i} has different keys than element 0 "
        f"(missing {missing!r}, unexpected {extra!r})"
    )


def _gather(items: list[TensorCollection], what: str) -> list[tuple[str, Any, list[Any]]]:
    """``(key, first entry, entries of every item)`` per key, checking the key sets."""
    stores = [it._tensordict for it in items]
    first = stores[0]
    n = len(first)
    for i, s in enumerate(stores):
        if len(s) != n:
            raise _keys_differ(items, i, what)
    try:
        return [(k, v, [s[k] for s in stores]) for k, v in first.items()]
    except KeyError:
        bad = next(i for i, s in enumerate(stores) if s.keys() != first.keys())
        raise _keys_differ(items, bad, what) from None


def _check_same_class(items: Sequence[Any], i: int, what: str) -> None:
    """Items of different classes, one of them a tensorclass, do not join (TypeError, as
    torch's dispatch in tensordict): the result could only be one of the two classes."""
    a, b = type(items[0]), type(items[i])
    if hasattr(a, "__dataclass_fields__") or hasattr(b, "__dataclass_fields__"):
        raise TypeError(
            f"{what}: element {i} is a {b.__name__} and element 0 a {a.__name__}; "
            f"{what} joins containers of one class (convert with to_tensordict() first)"
        )


def _nonempty(items: Sequence[Any], what: str) -> list[Any]:
    items = list(items)
    if not items:
        raise ValueError(f"{what} expects a non-empty sequence of TensorDicts")
    return items


def _check_joinable(
    items: list[Any], what: str, fits: Callable[[Any], bool], expected: str
) -> None:
    """The items of a join (``stack``, ``cat``) are of the first one's class (see
    :func:`_check_same_class`) and of batch sizes that ``fits`` accepts; else a
    BatchSizeError naming the element and ``expected`` (formatted with the first's batch
    size ``bs``, on error only)."""
    ft = type(items[0])
    bs = items[0]._batch_size
    for i, it in enumerate(items):
        if type(it) is not ft:
            _check_same_class(items, i, what)
        obs = it._batch_size
        if obs is not bs and not fits(obs):
            raise BatchSizeError(
                f"{what}: element {i} has batch_size {tuple(obs)}, " + expected.format(bs=tuple(bs))
            )


def stack(items: Sequence[Any], dim: int = 0) -> Any:
    items = _nonempty(items, "stack")
    first = items[0]
    bs = first._batch_size
    d = check_dim(dim, len(bs) + 1)
    expected = "element 0 has {bs}; stacked TensorDicts must share a batch size"
    _check_joinable(items, "stack", lambda obs: obs == bs, expected)
    out: dict[str, Any] = {}
    tstack = torch.stack
    for k, v, vals in _gather(items, "stack"):
        if isinstance(v, Tensor):
            try:
                out[k] = tstack(vals, d)
            except (RuntimeError, TypeError) as err:
                if any(type(x) is _NJT for x in vals):
                    raise BatchDimError(
                        f"stack: key {k!r} is a jagged nested tensor: a container holding one "
                        "has exactly one batch dim, so it cannot be stacked; join rows with "
                        "torch.cat, or pad it first with torch.nested.to_padded_tensor"
                    ) from None
                raise BatchSizeError(f"stack: cannot stack key {k!r}: {err}") from None
        elif type(v) is _NTD:
            out[k] = NonTensorData.stack(
                [x if type(x) is _NTD else NonTensorData(x) for x in vals], d, bs
            )
        else:
            try:
                out[k] = stack(vals, d)
            except (BatchSizeError, TensorDictKeyError) as err:
                raise type(err)(f"under {k!r}: {err}") from None
            except AttributeError:
                raise BatchSizeError(
                    f"stack: key {k!r} holds a {type(v).__name__} in element 0 but not in "
                    "every element"
                ) from None
    return first._new_unsafe(out, _Size((*bs[:d], len(items), *bs[d:])), first._device)


def cat(items: Sequence[Any], dim: int = 0) -> Any:
    def fits(obs: Any) -> bool:
        return len(obs) == len(bs) and obs[:d] == bs[:d] and obs[d + 1 :] == bs[d + 1 :]

    items = _nonempty(items, "cat")
    first = items[0]
    bs = first._batch_size
    d = check_dim(dim, len(bs))
    _check_joinable(items, "cat", fits, f"incompatible with {{bs}} along dim {d}")
    out: dict[str, Any] = {}
    for k, v, vals in _gather(items, "cat"):
        if isinstance(v, Tensor):
            try:
                out[k] = torch.cat(vals, d)
            except (RuntimeError, TypeError) as err:
                if any(type(x) is _NJT for x in vals):  # torch does not cat them on dim 0
                    out[k] = _jagged.cat_rows(vals, k)
                    continue
                raise BatchSizeError(f"cat: cannot concatenate key {k!r}: {err}") from None
        elif type(v) is _NTD:
            vals = [x if type(x) is _NTD else NonTensorData(x) for x in vals]
            out[k] = NonTensorData.cat(vals, d, [it._batch_size for it in items])
        else:
            out[k] = cat(vals, d)
    total = sum(it._batch_size[d] for it in items)
    return first._new_unsafe(out, _Size((*bs[:d], total, *bs[d + 1 :])), first._device)


# ---------------------------------------------------------- torch functions


def torch_function(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Route ``torch.stack(tds)``, ``torch.cat(tds)`` and friends to the functions here."""
    impl = _TORCH_FUNCTIONS.get(func)
    if impl is None:
        return NotImplemented
    return impl(*args, **kwargs)


def _into(out: Any, result: Any) -> Any:
    """``torch.cat(..., out=td)``: the result written into ``out``'s tensors, in place."""
    if out is None:
        return result
    if out.batch_size != result.batch_size:
        raise BatchSizeError(
            f"out= has batch_size {tuple(out.batch_size)}, the result has "
            f"{tuple(result.batch_size)}; pass an out of the result's batch size"
        )
    out.update(result, inplace=True)
    return out


def _like(x: Any, fn: Callable[..., Tensor], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    """``torch.zeros_like(td, ...)`` and friends; a ``device=`` is the result's device too."""
    out = x.apply(lambda t: fn(t, *args, **kw))
    if kw.get("device") is not None:
        out._device = torch.device(kw["device"])
    return out


def _grad(outputs: Any, inputs: Any, grad_outputs: Any = None, **kw: Any) -> Any:
    """``torch.autograd.grad`` over containers: leaves matched by key; the gradients come
    back as a container shaped like ``inputs`` (a tuple when ``inputs`` is not one)."""

    def one(obj: Any) -> Any:  # torch passes (td,) for a tensor-like td
        if isinstance(obj, (tuple, list)) and len(obj) == 1 and hasattr(obj[0], "_tensordict"):
            return obj[0]
        return obj

    outputs, inputs, grad_outputs = one(outputs), one(inputs), one(grad_outputs)

    def leaves(obj: Any, keys: list[Any]) -> Any:
        if obj is None or not hasattr(obj, "_tensordict"):
            return obj
        return [obj.get(k) for k in keys]

    if not hasattr(inputs, "_tensordict"):
        keys = [k for k, _ in _leaves(outputs)]
        return torch.autograd.grad(leaves(outputs, keys), inputs, leaves(grad_outputs, keys), **kw)
    pairs = list(_leaves(inputs))
    keys = [k for k, _ in pairs]
    grads = torch.autograd.grad(
        leaves(outputs, keys), [t for _, t in pairs], leaves(grad_outputs, keys), **kw
    )
    by_id = {id(t): g for (_, t), g in zip(pairs, grads, strict=True)}
    return inputs.apply(lambda t: by_id[id(t)])


def _leaves(td: Any, prefix: tuple[str, ...] = ()) -> Any:
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            yield (*prefix, k), v
        elif type(v) is not NonTensorData:
            yield from _leaves(v, (*prefix, k))


def _stack_fn(tensors: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
    return _into(out, stack(tensors, dim))


def _cat_fn(tensors: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
    return _into(out, cat(tensors, dim))


def _concatenate_fn(tensors: Sequence[Any], axis: int = 0, *, out: Any = None) -> Any:
    return _into(out, cat(tensors, axis))


def _method(name: str) -> Callable[..., Any]:
    def call(x: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(x, name)(*args, **kwargs)

    return call


#: ``torch.<name>(container, ...)`` answered by the container's method of that name.
_BY_METHOD = (
    "swapaxes",
    "swapdims",
    "movedim",
    "moveaxis",
    "rot90",
    "fliplr",
    "flipud",
    "tile",
    "broadcast_to",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "repeat_interleave",
    "tensor_split",
    "masked_select",
)

_TORCH_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    torch.stack: _stack_fn,
    torch.cat: _cat_fn,
    torch.concat: _cat_fn,
    torch.concatenate: _concatenate_fn,
    torch.unbind: lambda x, dim=0: x.unbind(dim),
    torch.split: lambda x, split_size_or_sections, dim=0: x.split(split_size_or_sections, dim),
    torch.chunk: lambda x, chunks, dim=0: x.chunk(chunks, dim),
    torch.narrow: lambda x, dim, start, length: x.narrow(dim, start, length),
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
    torch.where: lambda condition, input, other, *, out=None: (
        input.where(condition, other, out=out)
        if hasattr(input, "batch_size")
        else other.where(~torch.as_tensor(condition), input, out=out)
    ),
    torch.zeros_like: lambda x, **kw: _like(x, torch.zeros_like, (), kw),
    torch.ones_like: lambda x, **kw: _like(x, torch.ones_like, (), kw),
    torch.empty_like: lambda x, **kw: _like(x, torch.empty_like, (), kw),
    torch.full_like: lambda x, fill_value, **kw: _like(x, torch.full_like, (fill_value,), kw),
    torch.autograd.grad: lambda outputs, inputs, *a, **kw: _grad(outputs, inputs, *a, **kw),
    torch.gather: lambda x, dim, index, *, sparse_grad=False, out=None: x.gather(dim, index, out),
    torch.flip: lambda x, dims: x.flip(dims),
    torch.roll: lambda x, shifts, dims: x.roll(shifts, dims),
    **{getattr(torch, name): _method(name) for name in (*_BY_METHOD, *REDUCTIONS)},
    **LOSS_FUNCTIONS,
    torch.logsumexp: lambda x, dim=None, keepdim=False, *, out=None: x.logsumexp(
        dim, keepdim, out=out
    ),
    torch.softmax: lambda x, dim, dtype=None: x.softmax(dim, dtype),
    torch.log_softmax: lambda x, dim, dtype=None: x.log_softmax(dim, dtype),
}
