"""Tensor-like methods shared by ``TensorDict`` and ``TensorClass``.

Casts, elementwise math, comparisons, reductions over batch dimensions, batch-dim
``repeat``/``flip``/``roll``/``gather`` and a few mapping helpers, with tensordict's
names and semantics. Each is written with public methods that both containers
have (``apply``, ``batch_size``, ``items``, ``get``/``set``...), so each returns
the caller's own type.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.tensor([1.0, 4.0]), b=torch.tensor([2, 3]), batch_size=[2])
>>> td.sqrt()["a"], td.float()["b"].dtype, td.sum()["b"]
(tensor([1., 2.]), torch.float32, tensor(5))
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self, cast

import torch
from torch import Tensor

from tensorbox._core import reduce as _red
from tensorbox._core.keys import NestedKey, format_key, unravel_key
from tensorbox._core.methods_shape import index_along
from tensorbox._core.mixin_base import C, MixinBase
from tensorbox.errors import BatchSizeError, LockedError

_MISSING: Any = object()  # "absent", returned by get() as a marker (not "argument not given")

__all__ = ["TensorMethods"]


def _is_coll(v: Any) -> bool:
    return getattr(type(v), "_is_tensor_collection", False) or hasattr(v, "_tensordict")


def _tensors_only(obj: Any) -> bool:
    """No non-tensor leaf: per-leaf torch ops then move every row (a per-row non-tensor
    value only moves through indexing)."""
    return all(isinstance(v, Tensor) for _, v in obj.items(True, True))


def _leaves(obj: Any) -> Iterable[tuple[NestedKey, Tensor]]:
    return ((k, v) for k, v in obj.items(True, True) if isinstance(v, Tensor))


def _batch_dim(dim: int, ndim: int, what: str) -> int:
    d = dim + ndim if dim < 0 else dim
    if not 0 <= d < ndim:
        raise IndexError(f"{what}: dim {dim} is out of range for {ndim} batch dimension(s)")
    return d


def _batch_dims(dims: int | Sequence[int], ndim: int, what: str) -> tuple[int, ...]:
    seq = (dims,) if isinstance(dims, int) else tuple(dims)
    return tuple(_batch_dim(d, ndim, what) for d in seq)


def _expand(mask: Tensor, leaf: Tensor) -> Tensor:
    """``mask`` (leading dims of ``leaf``) with trailing dims appended, expanded to ``leaf``."""
    return mask.reshape(*mask.shape, *(1,) * (leaf.ndim - mask.ndim)).expand(leaf.shape)


def _check_mask(obj: Any, mask: Tensor, what: str) -> Tensor:
    mask = torch.as_tensor(mask)
    for k, v in _leaves(obj):
        if v.shape[: mask.ndim] != mask.shape:
            raise ValueError(
                f"{what}: mask of shape {tuple(mask.shape)} does not lead the shape "
                f"{tuple(v.shape)} of key {format_key(k)}"
            )
    return mask


def _take_in_place(self: C, result: Any) -> C:
    """``self`` becomes ``result`` (entries and batch size), keeping its nested containers'
    identities, as tensordict's ``inplace=True`` shape ops."""
    if self._locked:
        raise LockedError(f"cannot change a locked {type(self).__name__} in place; unlock_() first")

    def take(node: Any, new: Any) -> None:
        store = node._tensordict
        for k, v in new._tensordict.items():
            cur = store.get(k)
            if _is_coll(v) and _is_coll(cur):
                take(cur, v)
            else:
                store[k] = v
        node._batch_size = new._batch_size

    self._write(take, self, result)
    return self


def _where_pad(pad: Any, key: NestedKey, like: Tensor) -> Tensor:
    if pad is None:
        raise KeyError(
            f"where: key {format_key(key)} not found in both containers and no pad value "
            "provided; pass pad= to fill the missing side"
        )
    return torch.full_like(like, pad)


def _where_pair(self: Any, cond: Tensor, other: Any, pad: Any) -> Any:
    """``where`` against a container: keys held by one side only take ``pad``."""
    mine = dict(_leaves(self))
    theirs = dict(_leaves(other))
    out = self.empty(recurse=True) if mine else other.empty(recurse=True)
    for key in [*mine, *(k for k in theirs if k not in mine)]:
        a: Any = mine.get(key)
        b: Any = theirs.get(key)
        if a is None:
            a = _where_pad(pad, key, b)
        elif b is None:
            b = _where_pad(pad, key, a)
        out.set(key, torch.where(_expand(cond, a), a, b))
    return out


def _binary(self: C, other: Any, op: Callable[[Tensor, Any], Tensor]) -> C:
    if _is_coll(other):
        return self.apply(op, other)
    return self.apply(lambda t: op(t, other))


def _cast(dtype: torch.dtype, name: str) -> Callable[[Any], Any]:
    def cast(self: Any) -> Any:
        return self.apply(lambda t: t.to(dtype))

    cast.__doc__ = f"""Every tensor leaf cast to ``{dtype}`` (``to(dtype)`` casts floats only).

    >>> from tensorbox import TensorDict
    >>> TensorDict(a=torch.tensor([1.5]), batch_size=[1]).{name}()["a"].dtype
    {dtype}
    """
    return cast


def _unary(fn: Callable[[Tensor], Tensor], name: str) -> Callable[[Any], Any]:
    def unary(self: Any) -> Any:
        return self.apply(fn)

    unary.__doc__ = f"""``torch.{name}`` of every tensor leaf.

    >>> from tensorbox import TensorDict
    >>> td = TensorDict(a=torch.tensor([0.5, 2.0]), batch_size=[2])
    >>> torch.equal(td.{name}()["a"], torch.{name}(td["a"]))
    True
    """
    return unary


def _compare(op: Callable[[Tensor, Any], Tensor], sym: str) -> Callable[[Any, Any], Any]:
    def compare(self: Any, other: Any) -> Any:
        return _binary(self, other, op)

    compare.__doc__ = f"``leaf {sym} other`` per leaf: a container of bool tensors."
    return compare


class TensorMethods(MixinBase):
    """Mixin of ``TensorDict`` and ``TensorClass``: tensor-like methods, leaf by leaf."""

    __slots__ = ()

    # ------------------------------------------------------------------ casts

    float = _cast(torch.float32, "float")
    double = _cast(torch.float64, "double")
    half = _cast(torch.float16, "half")
    bfloat16 = _cast(torch.bfloat16, "bfloat16")
    int = _cast(torch.int32, "int")
    long = _cast(torch.int64, "long")
    bool = _cast(torch.bool, "bool")

    # ------------------------------------------------------------ elementwise

    abs = _unary(torch.abs, "abs")
    exp = _unary(torch.exp, "exp")
    log = _unary(torch.log, "log")
    sqrt = _unary(torch.sqrt, "sqrt")
    sigmoid = _unary(torch.sigmoid, "sigmoid")

    def clamp(self, min: Any = None, max: Any = None) -> Self:
        """``torch.clamp(leaf, min, max)`` for every tensor leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([-2.0, 0.5, 3.0]), batch_size=[3]).clamp(0, 1)["a"].tolist()
        [0.0, 0.5, 1.0]
        """
        return self.apply(lambda t: torch.clamp(t, min, max))

    def __pow__(self, other: Any) -> Self:
        return _binary(self, other, torch.pow)

    __lt__ = _compare(torch.lt, "<")
    __le__ = _compare(torch.le, "<=")
    __gt__ = _compare(torch.gt, ">")
    __ge__ = _compare(torch.ge, ">=")

    def __rsub__(self, other: Any) -> Self:
        return self.apply(lambda t: other - t)

    def __rtruediv__(self, other: Any) -> Self:
        return self.apply(lambda t: other / t)

    def masked_fill(self, mask: Tensor, value: Any) -> Self:
        """Leaves with ``value`` where ``mask`` (over leading batch dims) is true.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2, 3), batch_size=[2])
        >>> td.masked_fill(torch.tensor([True, False]), 1.0)["a"].sum().item()
        3.0
        """
        mask = _check_mask(self, mask, "masked_fill")
        return self.apply(lambda t: t.masked_fill(_expand(mask, t), value))

    def masked_fill_(self, mask: Tensor, value: Any) -> Self:
        """In-place ``masked_fill``: writes into the existing tensors.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> td.masked_fill_(torch.tensor([True, False, True]), 2.0)["a"].tolist()
        [2.0, 0.0, 2.0]
        """
        mask = _check_mask(self, mask, "masked_fill_")
        return self.apply(lambda t: t.masked_fill_(_expand(mask, t), value), inplace=True)

    def masked_select(self, mask: Tensor) -> Self:
        """The batch elements where ``mask`` (shaped like the whole batch) is true, as one
        batch dim: ``self[mask]``.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.arange(6).reshape(2, 3), batch_size=[2, 3])
        >>> td.masked_select(td["a"] % 2 == 0)["a"].tolist()
        [0, 2, 4]
        """
        mask = torch.as_tensor(mask)
        if mask.dtype != torch.bool or mask.shape != self.batch_size:
            raise ValueError(
                f"masked_select: mask must be a bool tensor shaped like batch_size "
                f"{tuple(self.batch_size)}, got dtype {mask.dtype} and shape {tuple(mask.shape)}"
            )
        return self[mask]  # type: ignore[index, no-any-return]

    def where(self, condition: Tensor, other: Any, *, out: Any = None, pad: Any = None) -> Self:
        """``torch.where(condition, leaf, other)``; ``condition`` spans leading batch dims.

        ``other`` is a container with the same keys, a tensor or a scalar. ``pad`` stands
        in for a key that only one side holds (without it, such a key is a ``KeyError``);
        ``out`` receives the result and is returned.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.tensor([1.0, 2.0]), batch_size=[2])
        >>> td.where(torch.tensor([True, False]), 0.0)["a"].tolist()
        [1.0, 0.0]
        >>> td.where(torch.tensor([True, False]), td.empty(), pad=-1)["a"].tolist()
        [1.0, -1.0]
        """
        cond = _check_mask(self, condition, "where")
        result: Self
        if _is_coll(other):
            result = _where_pair(self, cond, other, pad)
        else:
            result = self.apply(lambda t: torch.where(_expand(cond, t), t, other))
        if out is None:
            return result
        out.update(result)
        return out  # type: ignore[no-any-return]

    # ---------------------------------------------------------- constructors

    def empty(self, recurse: builtins.bool = False) -> Self:
        """A container with this batch size and device but no entries (``recurse=True``
        keeps the nested levels, emptied, as tensordict).

        >>> from tensorbox import TensorDict
        >>> e = TensorDict(a=torch.zeros(2), batch_size=[2]).empty()
        >>> list(e.keys()), e.batch_size
        ([], torch.Size([2]))
        """
        if recurse:
            return self.apply(lambda t: None, filter_empty=False)
        return self.exclude(*self.keys())

    @classmethod
    def fromkeys(cls, keys: Iterable[str], value: Any = 0) -> Self:
        """A container (batch size ``[]``) with ``value`` as a tensor at every key.

        >>> from tensorbox import TensorDict
        >>> TensorDict.fromkeys(["a", "b"], 1.0)["b"]
        tensor(1.)
        """
        return cls.from_dict({k: torch.as_tensor(value) for k in keys})

    @classmethod
    def maybe_dense_stack(cls, items: Sequence[Any], dim: builtins.int = 0) -> Any:
        """``torch.stack(items, dim)`` (tensordict's name; stacks here are always dense).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> TensorDict.maybe_dense_stack([td, td], 1).batch_size
        torch.Size([3, 2])
        """
        return torch.stack(list(items), dim)

    # ------------------------------------------------------------ reductions

    # Reductions (tensordict's semantics, see _core/reduce.py): ``dim`` is batch dim(s),
    # None (each leaf to one value) or "feature" (the dims after the batch dims);
    # ``reduce=True`` gives one tensor over every leaf.

    def sum(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        dtype: Any = None,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """Sum over batch dim(s) ``dim`` (removed); with ``dim=None`` each leaf to a scalar.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.ones(2, 3), batch_size=[2])
        >>> td.sum(0)["a"], td.sum().batch_size, td.sum(dim="feature")["a"].tolist()
        (tensor([2., 2., 2.]), torch.Size([]), [3.0, 3.0])
        >>> td.sum(reduce=True)
        tensor(6.)
        """
        return _red.reduction(self, "sum", dim, keepdim, reduce, dtype=dtype)

    def nansum(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        dtype: Any = None,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """``sum`` treating NaN as zero.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1.0, float("nan")]), batch_size=[2]).nansum(0)["a"]
        tensor(1.)
        """
        return _red.reduction(self, "nansum", dim, keepdim, reduce, dtype=dtype)

    def prod(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        dtype: Any = None,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """Product over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([2.0, 3.0]), batch_size=[2]).prod(0)["a"]
        tensor(6.)
        """
        return _red.reduction(self, "prod", dim, keepdim, reduce, dtype=dtype)

    def mean(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        dtype: Any = None,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """Mean over batch dim(s) ``dim``, or of each whole leaf with ``dim=None``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([[1.0, 3.0]]), batch_size=[1, 2]).mean(1)["a"]
        tensor([2.])
        """
        return _red.reduction(self, "mean", dim, keepdim, reduce, dtype=dtype)

    def nanmean(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        dtype: Any = None,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """``mean`` ignoring NaN values.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1.0, float("nan")]), batch_size=[2]).nanmean(0)["a"]
        tensor(1.)
        """
        return _red.reduction(self, "nanmean", dim, keepdim, reduce, dtype=dtype)

    def std(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        correction: builtins.int = 1,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """Standard deviation over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1.0, 3.0]), batch_size=[2]).std(0)["a"]
        tensor(1.4142)
        """
        return _red.reduction(self, "std", dim, keepdim, reduce, correction=correction)

    def var(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        correction: builtins.int = 1,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """Variance over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1.0, 3.0]), batch_size=[2]).var(0)["a"]
        tensor(2.)
        """
        return _red.reduction(self, "var", dim, keepdim, reduce, correction=correction)

    def quantile(
        self,
        q: Any,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        interpolation: str = "linear",
        reduce: builtins.bool | None = None,
    ) -> Any:
        """The ``q``-quantile over batch dim ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1.0, 2.0, 9.0]), batch_size=[3]).quantile(0.5, 0)["a"]
        tensor(2.)
        """
        return _red.reduction(
            self, "quantile", dim, keepdim, reduce, q=q, interpolation=interpolation
        )

    def amax(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """Maximum over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([[1, 5], [4, 2]]), batch_size=[2, 2]).amax(0)["a"].tolist()
        [4, 5]
        """
        return _red.reduction(self, "amax", dim, keepdim, reduce)

    def amin(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        reduce: builtins.bool | None = None,
    ) -> Any:
        """Minimum over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([[1, 5], [4, 2]]), batch_size=[2, 2]).amin(-1)["a"].tolist()
        [1, 2]
        """
        return _red.reduction(self, "amin", dim, keepdim, reduce)

    def max(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        reduce: builtins.bool | None = None,
        return_indices: builtins.bool = True,
    ) -> Any:
        """Maximum of each leaf; with a batch ``dim``, ``torch.return_types.max`` of two
        containers (``values``, ``indices``), as ``torch.max`` (values only with
        ``return_indices=False``).

        >>> from tensorbox import TensorDict
        >>> r = TensorDict(a=torch.tensor([1.0, 5.0, 2.0]), batch_size=[3]).max(0)
        >>> r.values["a"].item(), r.indices["a"].item()
        (5.0, 1)
        """
        return _red.extreme(self, "max", dim, keepdim, reduce, return_indices)

    def min(
        self,
        dim: Any = None,
        keepdim: builtins.bool = False,
        *,
        reduce: builtins.bool | None = None,
        return_indices: builtins.bool = True,
    ) -> Any:
        """Minimum of each leaf; with a batch ``dim``, ``torch.return_types.min`` of two
        containers (``values``, ``indices``), as ``torch.min``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([3.0, 1.0]), batch_size=[2]).min()["a"]
        tensor(1.)
        """
        return _red.extreme(self, "min", dim, keepdim, reduce, return_indices)

    def cummax(
        self,
        dim: builtins.int,
        *,
        reduce: builtins.bool | None = None,
        return_indices: builtins.bool = True,
    ) -> Any:
        """Cumulative maximum along batch dim ``dim``: ``torch.return_types.cummax`` of two
        containers (values only with ``return_indices=False``).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 3, 2]), batch_size=[3]).cummax(0).values["a"].tolist()
        [1, 3, 3]
        """
        return _red.cumulative(self, "cummax", dim, reduce, return_indices)

    def cummin(
        self,
        dim: builtins.int,
        *,
        reduce: builtins.bool | None = None,
        return_indices: builtins.bool = True,
    ) -> Any:
        """Cumulative minimum along batch dim ``dim`` (see ``cummax``).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([3, 1, 2]), batch_size=[3]).cummin(0).values["a"].tolist()
        [3, 1, 1]
        """
        return _red.cumulative(self, "cummin", dim, reduce, return_indices)

    def logsumexp(
        self, dim: Any = None, keepdim: builtins.bool = False, *, out: Any = None
    ) -> Self:
        """``torch.logsumexp`` over batch dim(s) ``dim`` (every batch dim when None),
        written into ``out`` when given.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3]).logsumexp(1)["a"].shape
        torch.Size([2])
        """
        out_: Self = _red.logsumexp(self, dim, keepdim, out)
        return out_

    def softmax(self, dim: builtins.int, dtype: torch.dtype | None = None) -> Self:
        """``torch.softmax`` along batch dim ``dim`` of every leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2), batch_size=[2]).softmax(0)["a"].tolist()
        [0.5, 0.5]
        """
        out: Self = _red.softmax(self, "softmax", dim, dtype)
        return out

    def log_softmax(self, dim: builtins.int, dtype: torch.dtype | None = None) -> Self:
        """``torch.log_softmax`` along batch dim ``dim`` of every leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2), batch_size=[2]).log_softmax(0)["a"].exp().tolist()
        [0.5, 0.5]
        """
        out: Self = _red.softmax(self, "log_softmax", dim, dtype)
        return out

    # ----------------------------------------------------------------- shape

    # Built on indexing and the containers' own shape ops, so nested containers
    # (whatever their batch size) and per-row non-tensor values move with the rows.

    def repeat(self, *repeats: Any) -> Self:
        """Tile the batch dims ``repeats`` times each (one count per batch dim).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 2]), batch_size=[2]).repeat(2)["a"].tolist()
        [1, 2, 1, 2]
        """
        if len(repeats) == 1 and not isinstance(repeats[0], builtins.int):
            repeats = tuple(repeats[0])
        bs = self.batch_size
        if len(repeats) != len(bs):
            raise ValueError(f"repeat: got {len(repeats)} counts for batch_size {tuple(bs)}")
        return self.tile(repeats)  # type: ignore[attr-defined, no-any-return]

    def flip(self, dims: builtins.int | Sequence[builtins.int]) -> Self:
        """Reverse the order along batch dims ``dims``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 2, 3]), batch_size=[3]).flip(0)["a"].tolist()
        [3, 2, 1]
        """
        d = _batch_dims(dims, self.batch_dims, "flip")
        if _tensors_only(self):  # the fast path: one torch.flip per leaf
            return self.apply(lambda t: torch.flip(t, d))
        out: Any = self
        for dim in d:
            n = self.batch_size[dim]
            out = index_along(out, dim, torch.arange(n - 1, -1, -1))
        return out  # type: ignore[no-any-return]

    def roll(
        self,
        shifts: builtins.int | Sequence[builtins.int],
        dims: builtins.int | Sequence[builtins.int],
    ) -> Self:
        """Roll along batch dims ``dims`` by ``shifts`` (as ``torch.roll``).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 2, 3]), batch_size=[3]).roll(1, 0)["a"].tolist()
        [3, 1, 2]
        """
        d = _batch_dims(dims, self.batch_dims, "roll")
        s = (shifts,) if isinstance(shifts, builtins.int) else tuple(shifts)
        if len(s) != len(d):
            raise ValueError(f"roll: got {len(s)} shifts for {len(d)} dims {dims!r}")
        if _tensors_only(self):
            return self.apply(lambda t: torch.roll(t, s, d))
        out: Any = self
        for dim, shift in zip(d, s, strict=True):
            n = self.batch_size[dim]
            out = index_along(out, dim, (torch.arange(n) - shift) % builtins.max(n, 1))
        return out  # type: ignore[no-any-return]

    def gather(
        self, dim: builtins.int, index: Tensor, out: Any = None, *, inplace: builtins.bool = False
    ) -> Self:
        """``torch.gather`` along batch dim ``dim``; ``index`` spans the batch dims.
        With ``out``, the result is written into that container's tensors and it is returned;
        ``inplace=True`` makes this container the result (its entries and batch size).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.tensor([[1, 2], [3, 4]]), batch_size=[2, 2])
        >>> td.gather(1, torch.tensor([[1, 1], [0, 1]]))["a"].tolist()
        [[2, 2], [3, 4]]
        """
        nd = self.batch_dims
        d = _batch_dim(dim, nd, "gather")
        if inplace and out is not None:
            raise ValueError("gather: out= and inplace=True are mutually exclusive; pass one")
        if index.ndim != nd:
            err = NotImplementedError if inplace else ValueError
            raise err(f"gather: index.ndim is {index.ndim}, expected {nd} (the batch dims)")
        bs = self.batch_size
        if any(index.shape[i] > bs[i] for i in range(nd) if i != d):
            raise ValueError(
                f"gather: index of shape {tuple(index.shape)} is larger than batch_size "
                f"{tuple(bs)} outside dim {d}"
            )
        grids = [
            index
            if i == d
            else torch.arange(index.shape[i], device=index.device)
            .reshape([-1 if j == i else 1 for j in range(nd)])
            .expand(index.shape)
            for i in range(nd)
        ]
        result: Any = self[tuple(grids)]  # type: ignore[index]
        if inplace:
            return _take_in_place(self, result)
        if out is None:
            return result  # type: ignore[no-any-return]
        if out.batch_size != result.batch_size:
            raise BatchSizeError(
                f"gather: out= has batch_size {tuple(out.batch_size)}, the result has "
                f"{tuple(result.batch_size)}"
            )
        out.update(result, inplace=True)
        return out  # type: ignore[no-any-return]

    # ------------------------------------------------------- mapping helpers

    def setdefault(self, key: NestedKey, default: Any) -> Any:
        """The entry at ``key``; when missing, set it to ``default`` first.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(batch_size=[2])
        >>> td.setdefault("a", torch.zeros(2)).tolist(), td.setdefault("a", torch.ones(2)).tolist()
        ([0.0, 0.0], [0.0, 0.0])
        """
        if self.get(key, _MISSING) is _MISSING:
            self.set(key, default)
        return self.get(key)

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """Shape of the entry at ``key`` (a nested container's batch size; ``batch_size`` for
        a non-tensor).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2, 5), batch_size=[2]).get_item_shape("a")
        torch.Size([2, 5])
        """
        v = self._get_or_raise(key)
        return v.shape if hasattr(v, "shape") else self.batch_size

    def entry_class(self, key: NestedKey) -> type:
        """Class of the entry at ``key``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2), batch_size=[2]).entry_class("a")
        <class 'torch.Tensor'>
        """
        return type(self._get_or_raise(key))

    def _get_or_raise(self, key: NestedKey) -> Any:
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise KeyError(f"key {format_key(key)} not found")
        return v

    def auto_batch_size_(self, batch_dims: builtins.int | None = None) -> Self:
        """Set the batch size to the longest leading shape the leaves share (at most
        ``batch_dims`` dims), nested levels too.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2, 3), b=torch.zeros(2, 4)).auto_batch_size_().batch_size
        torch.Size([2])
        """
        from tensorbox._core import tree as _tree

        td = self
        # On an unlocked saved tree the new batch size is saved at once.
        self._write(
            lambda: _tree.set_batch_size_nested(td, _tree.common_batch_size(td, batch_dims))
        )
        return self

    def filter_non_tensor_data(self) -> Self:
        """A copy without the non-tensor entries.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), tag="x", batch_size=[2])
        >>> list(td.filter_non_tensor_data().keys())
        ['a']
        """
        drop = [k for k, v in self.items(True, True) if not isinstance(v, Tensor)]
        return self.exclude(*drop)

    def numpy(self) -> dict[str, Any]:
        """Nested dict of NumPy arrays (``Tensor.numpy``: shares memory; CPU, no grad).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.ones(2), b={"c": torch.zeros(1)}).numpy()["b"]["c"]
        array([0.], dtype=float32)
        """
        out: dict[str, Any] = {}
        for k, v in self.items():
            if isinstance(v, Tensor) or _is_coll(v):
                out[cast(str, k)] = v.numpy()  # top-level keys: always str
            elif v is not None:
                out[cast(str, k)] = v
        return out

    def tolist(self, *, convert_tensors: builtins.bool = False) -> Any:
        """Nested lists (one level per batch dim) of per-element ``to_dict()`` dicts.

        With ``convert_tensors`` the tensors become Python lists too.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 2]), batch_size=[2]).tolist(convert_tensors=True)
        [{'a': 1}, {'a': 2}]
        """
        if self.batch_dims:
            return [x.tolist(convert_tensors=convert_tensors) for x in self.unbind(0)]  # type: ignore[attr-defined]
        d = self.to_dict()  # type: ignore[attr-defined]
        return _tolist(d) if convert_tensors else d

    def data_ptr(self, *, storage: builtins.bool = False) -> Self:
        """Same structure, batch size ``[]``: each leaf's ``data_ptr()`` as an int64 tensor
        (with ``storage``, the address of the leaf's whole storage).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(4), batch_size=[4])
        >>> td.data_ptr()["a"].item() == td["a"].data_ptr()
        True
        """
        if storage:
            return self.apply(lambda t: torch.tensor(t.untyped_storage().data_ptr()), batch_size=[])
        return self.apply(lambda t: torch.tensor(t.data_ptr()), batch_size=[])

    @property
    def sorted_keys(self) -> list[str]:
        """The top-level keys, sorted.

        >>> from tensorbox import TensorDict
        >>> TensorDict(b=torch.zeros(1), a=torch.zeros(1)).sorted_keys
        ['a', 'b']
        """
        return sorted(self.keys())

    def split_keys(
        self,
        *key_sets: Iterable[NestedKey] | Mapping[NestedKey, NestedKey],
        inplace: builtins.bool = False,
        default: Any = _MISSING,
        strict: builtins.bool = True,
    ) -> tuple[Self, ...]:
        """One container per key set, then one with the remaining keys.

        A key set given as a mapping renames: ``{old: new}``. ``strict`` (default)
        refuses a missing key; with ``strict=False`` a missing key is skipped, or set to
        ``default`` when one is given. ``inplace`` removes the keys from this container,
        which is then the last result. Nested containers left empty are dropped.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b={"c": torch.zeros(2)}, d=torch.ones(2), batch_size=[2])
        >>> parts = td.split_keys(["a"], {("b", "c"): "c"})
        >>> [sorted(p.keys()) for p in parts]
        [['a'], ['c'], ['d']]
        """
        sets = [dict(ks) if isinstance(ks, Mapping) else {k: k for k in ks} for ks in key_sets]
        have = set(self.keys(True))
        taken: list[NestedKey] = []
        out = []
        for ks in sets:
            present = [k for k in ks if _as_key(k) in have]
            missing = [k for k in ks if _as_key(k) not in have]
            if missing and strict:
                raise KeyError(
                    f"split_keys: key {format_key(unravel_key(missing[0]))} not found "
                    "(pass strict=False to skip missing keys)"
                )
            part = self.select(*present)  # type: ignore[attr-defined]
            renamed = [src for src in present if _as_key(ks[src]) != _as_key(src)]
            for src in renamed:
                part.rename_key_(src, ks[src])
            _drop_emptied(part, renamed)
            if default is not _MISSING and default is not None:
                for k in missing:
                    part.set(ks[k], default)
            taken.extend(present)
            out.append(part)
        if inplace:
            self.exclude(*taken, inplace=True)
            rest: Any = self
        else:
            rest = self.exclude(*taken)
        _drop_emptied(rest, taken)
        return (*out, rest)


def _as_key(key: NestedKey) -> NestedKey:
    path = unravel_key(key)
    return path[0] if len(path) == 1 else path


def _drop_emptied(obj: Any, removed: Iterable[NestedKey]) -> None:
    """Remove the nested containers that the removal of ``removed`` left empty."""
    parents = sorted(
        {unravel_key(k)[:i] for k in removed for i in range(1, len(unravel_key(k)))},
        key=len,
        reverse=True,
    )
    for path in parents:
        node = obj.get(path, None)
        if _is_coll(node) and not list(node.keys()) and hasattr(obj, "del_"):
            obj.del_(path)


def _tolist(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _tolist(v) for k, v in d.items()}
    return d.tolist() if isinstance(d, Tensor) else d
