"""The container's math: comparisons, arithmetic operators, elementwise functions and
reductions over batch dims.

A method whose job is arithmetic or math on the leaves' values (an operator, a
``torch`` elementwise function, a reduction) belongs here. Part of the container base
(``TensorCollection`` mixes this class in). Operators go leaf by leaf through the
operation module ``_core.elementwise`` or ``apply``; each returns the caller's type.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.tensor([1.0, 4.0]), batch_size=[2])
>>> (td + 1 == td.apply(lambda t: t + 1)).all(), (td ** 2)["a"].tolist(), td.sqrt().sum()["a"]
(True, [1.0, 16.0], tensor(3.))
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from typing import Any, Self, overload

import torch
from torch import Tensor

from tensorbox._core import elementwise as _elementwise
from tensorbox._core import reduce as _red
from tensorbox._core.methods.base import C, MixinBase, is_container
from tensorbox._core.nestedkey import NestedKey, format_key

__all__ = ["MathMethods"]


def _leaves(obj: Any) -> Iterable[tuple[NestedKey, Tensor]]:
    return ((k, v) for k, v in obj.items(True, True) if isinstance(v, Tensor))


def _expand(mask: Tensor, leaf: Tensor) -> Tensor:
    """``mask`` (leading dims of ``leaf``) with trailing dims appended, expanded to ``leaf``."""
    return mask.reshape(*mask.shape, *(1,) * (leaf.ndim - mask.ndim)).expand(leaf.shape)


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


def _check_mask(obj: Any, mask: Tensor, what: str) -> Tensor:
    mask = torch.as_tensor(mask)
    for k, v in _leaves(obj):
        if v.shape[: mask.ndim] != mask.shape:
            raise ValueError(
                f"{what}: mask of shape {tuple(mask.shape)} does not lead the shape "
                f"{tuple(v.shape)} of key {format_key(k)}"
            )
    return mask


def _logical(op: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    """``op`` taking a Python scalar too (``td | False``): torch's logical ops want tensors."""

    def run(t: Tensor, other: Any) -> Tensor:
        return op(
            t, other if isinstance(other, Tensor) else torch.as_tensor(other, device=t.device)
        )

    return run


def _binary(self: C, other: Any, op: Callable[[Tensor, Any], Tensor]) -> C:
    if is_container(other):
        return self.apply(op, other)
    return self.apply(lambda t: op(t, other))


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


class MathMethods(MixinBase):
    """Mixin of ``TensorCollection``: comparison, arithmetic, elementwise math, reductions."""

    __slots__ = ()

    # --------------------------------------------------------------- comparison

    def __eq__(self, other: object) -> Self:  # type: ignore[override]
        out: Self = _elementwise.compare(self, other, torch.eq)
        return out

    def __ne__(self, other: object) -> Self:  # type: ignore[override]
        out: Self = _elementwise.compare(self, other, torch.ne)
        return out

    __hash__ = None  # type: ignore[assignment]

    __lt__ = _compare(torch.lt, "<")

    __le__ = _compare(torch.le, "<=")

    __gt__ = _compare(torch.gt, ">")

    __ge__ = _compare(torch.ge, ">=")

    def __bool__(self) -> bool:
        raise RuntimeError(
            f"the truth value of a {type(self).__name__} is ambiguous: use (a == b).all() or "
            ".any() to reduce a comparison, len(td.keys()) to test for keys, td.is_empty() "
            "for leaves"
        )

    @overload
    def all(self, dim: None = None) -> bool: ...

    @overload
    def all(self, dim: int) -> Self: ...

    def all(self, dim: int | None = None) -> bool | Self:
        """True when every element of every leaf is true (per batch element with ``dim``).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.tensor([True, False]), b=torch.ones(2, 3), batch_size=[2])
        >>> td.all(), td.any(), td.all(dim=0)["a"].item()
        (False, True, False)
        """
        out: bool | Self = _elementwise.reduce_bool(self, dim, torch.all)
        return out

    @overload
    def any(self, dim: None = None) -> bool: ...

    @overload
    def any(self, dim: int) -> Self: ...

    def any(self, dim: int | None = None) -> bool | Self:
        """True when some element of some leaf is true (per batch element with ``dim``).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.tensor([[True], [False]]), batch_size=[2, 1])
        >>> td.any(), td.any(dim=1)["a"].tolist()
        (True, [True, False])
        """
        out: bool | Self = _elementwise.reduce_bool(self, dim, torch.any)
        return out

    # ----------------------------------------------------- arithmetic and logic

    def __invert__(self) -> Self:
        return self.apply(torch.logical_not)

    def __neg__(self) -> Self:
        return self.apply(torch.neg)

    def __abs__(self) -> Self:
        return self.apply(torch.abs)

    def __and__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, _logical(torch.logical_and))
        return out

    def __or__(self, other: Any) -> Self:
        out: Self = _elementwise.logical(self, other, _logical(torch.logical_or), "|")
        return out

    def __xor__(self, other: Any) -> Self:
        out: Self = _elementwise.logical(self, other, _logical(torch.logical_xor), "^")
        return out

    # the logical ops are symmetric: ``True ^ td`` is ``td ^ True``
    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    def __add__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.add)
        return out

    __radd__ = __add__

    def __sub__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.sub)
        return out

    def __rsub__(self, other: Any) -> Self:
        return self.apply(lambda t: other - t)

    def __mul__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.mul)
        return out

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.div)
        return out

    def __rtruediv__(self, other: Any) -> Self:
        return self.apply(lambda t: other / t)

    def __pow__(self, other: Any) -> Self:
        return _binary(self, other, torch.pow)

    # tensordict's method spellings of the operators (``td.add(1)`` is ``td + 1``)

    def add(self, other: Any, *, alpha: Any = None) -> Self:
        """``self + alpha * other`` leaf by leaf (``torch.add``); ``other`` a number, a
        tensor or a container with the same keys.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.ones(2)).add(1, alpha=2)["a"].tolist()
        [3.0, 3.0]
        """
        if alpha is None:
            plain: Self = self + other
            return plain
        out: Self = _elementwise.binary(self, other, lambda a, b: torch.add(a, b, alpha=alpha))
        return out

    def sub(self, other: Any, *, alpha: Any = None) -> Self:
        """``self - alpha * other`` leaf by leaf (``torch.sub``)."""
        if alpha is None:
            plain: Self = self - other
            return plain
        out: Self = _elementwise.binary(self, other, lambda a, b: torch.sub(a, b, alpha=alpha))
        return out

    def mul(self, other: Any) -> Self:
        """``self * other`` leaf by leaf (``torch.mul``)."""
        out: Self = self * other
        return out

    def div(self, other: Any) -> Self:
        """``self / other`` leaf by leaf (``torch.div``)."""
        out: Self = self / other
        return out

    def pow(self, other: Any) -> Self:
        """``self ** other`` leaf by leaf (``torch.pow``)."""
        out: Self = self**other
        return out

    # -------------------------------------------------------------- elementwise

    abs = _unary(torch.abs, "abs")

    exp = _unary(torch.exp, "exp")

    log = _unary(torch.log, "log")

    sqrt = _unary(torch.sqrt, "sqrt")

    sigmoid = _unary(torch.sigmoid, "sigmoid")

    # tests of each element: bool leaves of the same shapes

    isnan = _unary(torch.isnan, "isnan")

    isinf = _unary(torch.isinf, "isinf")

    isfinite = _unary(torch.isfinite, "isfinite")

    isposinf = _unary(torch.isposinf, "isposinf")

    isneginf = _unary(torch.isneginf, "isneginf")

    isreal = _unary(torch.isreal, "isreal")

    def clamp(self, min: Any = None, max: Any = None) -> Self:
        """``torch.clamp(leaf, min, max)`` for every tensor leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([-2.0, 0.5, 3.0]), batch_size=[3]).clamp(0, 1)["a"].tolist()
        [0.0, 0.5, 1.0]
        """
        return self.apply(lambda t: torch.clamp(t, min, max))

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
        if is_container(other):
            result = _where_pair(self, cond, other, pad)
        else:
            result = self.apply(lambda t: torch.where(_expand(cond, t), t, other))
        if out is None:
            return result
        out.update(result)
        return out  # type: ignore[no-any-return]

    # ----------------------------------------------- reductions over batch dims

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
