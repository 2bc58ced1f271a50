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
from tensorbox._core.keys import NestedKey, format_key
from tensorbox._core.methods.base import C, MixinBase, batch_dims, is_container

__all__ = ["MathMethods"]


def _leaves(obj: Any) -> Iterable[tuple[NestedKey, Tensor]]:
    return ((k, v) for k, v in obj.items(True, True) if isinstance(v, Tensor))


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

    def __and__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.logical_and)
        return out

    def __or__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.logical_or)
        return out

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

    # -------------------------------------------------------------- elementwise

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

    def where(self, condition: Tensor, other: Any) -> Self:
        """``torch.where(condition, leaf, other)``; ``condition`` spans leading batch dims.

        ``other`` is a container with the same keys, a tensor or a scalar.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.tensor([1.0, 2.0]), batch_size=[2])
        >>> td.where(torch.tensor([True, False]), 0.0)["a"].tolist()
        [1.0, 0.0]
        """
        cond = _check_mask(self, condition, "where")
        if is_container(other):
            return self.apply(lambda t, o: torch.where(_expand(cond, t), t, o), other)
        return self.apply(lambda t: torch.where(_expand(cond, t), t, other))

    # ----------------------------------------------- reductions over batch dims

    def _reduce(self, name: str, dim: Any, keepdim: builtins.bool, **kw: Any) -> Self:
        fn = getattr(torch, name)
        if dim is None:
            return self.apply(lambda t: fn(t, **kw), batch_size=[])
        bs = self.batch_size
        dims = batch_dims(dim, len(bs), name)
        new = [1 if i in dims else s for i, s in enumerate(bs) if keepdim or i not in dims]
        return self.apply(lambda t: fn(t, dim=dims, keepdim=keepdim, **kw), batch_size=new)

    def sum(self, dim: Any = None, keepdim: builtins.bool = False, *, dtype: Any = None) -> Self:
        """Sum over batch dim(s) ``dim`` (removed); with ``dim=None`` each leaf to a scalar.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.ones(2, 3), batch_size=[2])
        >>> td.sum(0)["a"], td.sum().batch_size
        (tensor([2., 2., 2.]), torch.Size([]))
        """
        kw = {} if dtype is None else {"dtype": dtype}
        return self._reduce("sum", dim, keepdim, **kw)

    def mean(self, dim: Any = None, keepdim: builtins.bool = False, *, dtype: Any = None) -> Self:
        """Mean over batch dim(s) ``dim``, or of each whole leaf with ``dim=None``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([[1.0, 3.0]]), batch_size=[1, 2]).mean(1)["a"]
        tensor([2.])
        """
        kw = {} if dtype is None else {"dtype": dtype}
        return self._reduce("mean", dim, keepdim, **kw)

    def std(
        self, dim: Any = None, keepdim: builtins.bool = False, *, correction: builtins.int = 1
    ) -> Self:
        """Standard deviation over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1.0, 3.0]), batch_size=[2]).std(0)["a"]
        tensor(1.4142)
        """
        return self._reduce("std", dim, keepdim, correction=correction)

    def var(
        self, dim: Any = None, keepdim: builtins.bool = False, *, correction: builtins.int = 1
    ) -> Self:
        """Variance over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1.0, 3.0]), batch_size=[2]).var(0)["a"]
        tensor(2.)
        """
        return self._reduce("var", dim, keepdim, correction=correction)

    def amax(self, dim: Any = None, keepdim: builtins.bool = False) -> Self:
        """Maximum over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([[1, 5], [4, 2]]), batch_size=[2, 2]).amax(0)["a"].tolist()
        [4, 5]
        """
        return self._reduce("amax", dim, keepdim)

    def amin(self, dim: Any = None, keepdim: builtins.bool = False) -> Self:
        """Minimum over batch dim(s) ``dim``, or of each whole leaf.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([[1, 5], [4, 2]]), batch_size=[2, 2]).amin(-1)["a"].tolist()
        [1, 2]
        """
        return self._reduce("amin", dim, keepdim)
