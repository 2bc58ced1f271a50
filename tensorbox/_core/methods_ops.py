"""The container's batch-shape operations and its elementwise operators, written once.

A shape op's result remembers where it came from: used as a context manager
(``with td.view(-1) as flat: ...``), it writes itself back into its source on exit
through the inverse op, new keys included, as tensordict's do.

Part of the container base: ``TensorCollection`` mixes this class in. Batch-shape
ops (``reshape``, ``permute``, ``unbind``...) act on the batch dims only, feature
dims follow along (``_stackcat``); comparisons and arithmetic go leaf by leaf
(``_elementwise``). Every method returns the caller's own type.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.arange(6).reshape(2, 3), batch_size=[2, 3])
>>> td.transpose(0, 1).batch_size, (td + 1 == td.apply(lambda t: t + 1)).all()
(torch.Size([3, 2]), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self, overload

import torch

from tensorbox._core import elementwise as _elementwise
from tensorbox._core import shapeops as _stackcat
from tensorbox._core.mixin_base import MixinBase
from tensorbox._core.shape import shape_from_args

__all__ = ["ShapeMethods"]


class ShapeMethods(MixinBase):
    """Mixin of ``TensorCollection``: batch-shape ops, comparison and arithmetic."""

    __slots__ = ()

    # ---------------------------------------------- batch shape (feature dims follow)

    def reshape(self, *shape: Any, size: Any = None) -> Self:
        """New batch shape, as ``Tensor.reshape`` over the batch dims (``size=`` also works).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(6, 5), batch_size=[6])
        >>> td.reshape(2, 3)["x"].shape, td.reshape(-1, 2).batch_size
        (torch.Size([2, 3, 5]), torch.Size([3, 2]))
        """
        out: Self = _stackcat.reshape(self, shape if size is None else (size,), "reshape")
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def view(self, *shape: Any) -> Self:
        """New batch shape without copying, as ``Tensor.view`` over the batch dims.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(6, 5), batch_size=[6])
        >>> td.view(3, 2)["x"].data_ptr() == td["x"].data_ptr()
        True
        """
        out: Self = _stackcat.reshape(self, shape, "view")
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def expand(self, *shape: Any) -> Self:
        """Broadcast the batch dims to ``shape`` without copying.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(1, 5), batch_size=[1])
        >>> td.expand(4)["x"].shape, td.expand(4)["x"].stride()
        (torch.Size([4, 5]), (0, 1))
        """
        out: Self = _stackcat.reshape(self, shape, "expand")
        return out

    def unsqueeze(self, dim: int) -> Self:
        """A new batch dim of size 1 at ``dim``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(3, 5), batch_size=[3])
        >>> td.unsqueeze(-1)["x"].shape   # -1 counts batch dims, not the leaf's dims
        torch.Size([3, 1, 5])
        """
        out: Self = _stackcat.unsqueeze(self, dim)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def squeeze(self, dim: int | None = None) -> Self:
        """Drop batch dims of size 1 (only ``dim`` when given).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(1, 3, 1, 5), batch_size=[1, 3, 1])
        >>> td.squeeze().batch_size, td.squeeze(0).batch_size
        (torch.Size([3]), torch.Size([3, 1]))
        """
        out: Self = _stackcat.squeeze(self, dim)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def permute(self, *dims: Any) -> Self:
        """Reorder the batch dims.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2, 3])
        >>> td.permute(1, 0)["x"].shape   # feature dims stay last
        torch.Size([3, 2, 5])
        """
        out: Self = _stackcat.permute(self, dims)
        nd = len(out._batch_size)
        order = [d % nd for d in shape_from_args(dims)]
        inverse = tuple(sorted(range(nd), key=order.__getitem__))
        out._writeback = (self, "permute", inverse)
        return out

    def transpose(self, dim0: int, dim1: int) -> Self:
        """Swap two batch dims.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2, 3])
        >>> td.transpose(0, 1).batch_size
        torch.Size([3, 2])
        """
        out: Self = _stackcat.transpose(self, dim0, dim1)
        out._writeback = (self, "transpose", (dim0, dim1))
        return out

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Merge the batch dims ``start_dim..end_dim`` into one."""
        start_dim = 0 if start_dim is None else start_dim
        end_dim = -1 if end_dim is None else end_dim
        out: Self = _stackcat.flatten(self, start_dim, end_dim)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def unflatten(self, dim: int, unflattened_size: Sequence[int]) -> Self:
        """Split batch dim ``dim`` into ``unflattened_size``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(6, 5), batch_size=[6])
        >>> td.unflatten(0, (2, 3))["x"].shape
        torch.Size([2, 3, 5])
        """
        out: Self = _stackcat.unflatten(self, dim, unflattened_size)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def narrow(self, dim: int, start: int, length: int) -> Self:
        """Rows ``start:start+length`` of batch dim ``dim``, without copying.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(5), batch_size=[5])
        >>> td.narrow(0, 1, 3)["x"].tolist()
        [1, 2, 3]
        """
        out: Self = _stackcat.narrow(self, dim, start, length)
        return out

    def unbind(self, dim: int = 0) -> tuple[Self, ...]:
        """One container per index of batch dim ``dim``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(3), batch_size=[3])
        >>> [row["x"].item() for row in td.unbind(0)]
        [0, 1, 2]
        """
        out: tuple[Self, ...] = _stackcat.unbind(self, dim)
        return out

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Pieces along batch dim ``dim``, as ``Tensor.split``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(5), batch_size=[5])
        >>> [p["x"].tolist() for p in td.split(2)], [p.batch_size[0] for p in td.split([1, 4])]
        ([[0, 1], [2, 3], [4]], [1, 4])
        """
        out: tuple[Self, ...] = _stackcat.split(self, split_size, dim)
        return out

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        """``chunks`` pieces along batch dim ``dim``, as ``Tensor.chunk``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(5), batch_size=[5])
        >>> [p["x"].tolist() for p in td.chunk(2)]
        [[0, 1, 2], [3, 4]]
        """
        out: tuple[Self, ...] = _stackcat.chunk(self, chunks, dim)
        return out

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        return _stackcat.torch_function(func, args, kwargs or {})

    # ---------------------------------------------------- comparison, arithmetic

    def __eq__(self, other: object) -> Self:  # type: ignore[override]
        out: Self = _elementwise.compare(self, other, torch.eq)
        return out

    def __ne__(self, other: object) -> Self:  # type: ignore[override]
        out: Self = _elementwise.compare(self, other, torch.ne)
        return out

    __hash__ = None  # type: ignore[assignment]

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

    def __sub__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.sub)
        return out

    def __mul__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.mul)
        return out

    def __truediv__(self, other: Any) -> Self:
        out: Self = _elementwise.binary(self, other, torch.div)
        return out

    __radd__ = __add__
    __rmul__ = __mul__
