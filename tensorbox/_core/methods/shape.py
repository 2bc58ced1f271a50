"""The container's batch-shape methods: every op that changes or reads the batch shape.

``reshape``/``view``/``permute``/``expand``/``expand_as``/``flip``/``fliplr``/``split``/
``tensor_split``/``unbind``/``movedim``/``tile``/``rot90``... A method whose job is "the
batch dims change" belongs here. Each acts on the batch dims only (feature dims follow
along) and returns the caller's own type. The core ones are short calls into the
operation module ``_core.shapeops``; the others are built from those and from
indexing, which already carry nested containers and per-row non-tensor values along.

A shape op's result remembers where it came from: used as a context manager
(``with td.view(-1) as flat: ...``), it writes itself back into its source on exit
through the inverse op, new keys included, as tensordict's do.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.arange(6).reshape(2, 3), batch_size=[2, 3])
>>> td.transpose(0, 1).batch_size, td.movedim(0, 1).batch_size
(torch.Size([3, 2]), torch.Size([3, 2]))
>>> td.rot90()["a"].tolist(), [p.batch_size[1] for p in td.tensor_split(2, dim=1)]
([[2, 5], [1, 4], [0, 3]], [2, 1])
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Sequence
from typing import Any, Self, TypeVar

import torch
from torch import Tensor

from tensorbox._core import padding as _padding
from tensorbox._core import ports as _ports
from tensorbox._core import shapeops as _shapeops
from tensorbox._core import tree as _tree
from tensorbox._core.lazy_legacy import STATE as _LEGACY
from tensorbox._core.methods.base import C, MixinBase, batch_dim, batch_dims, is_container
from tensorbox._core.shape import shape_from_args
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox.errors import BatchSizeError, LockedError

_T = TypeVar("_T")

__all__ = ["ShapeMethods", "index_along"]


def _dim(dim: Any, ndim: int, what: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{what}: dim {dim!r} is a {type(dim).__name__}, expected an int")
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"{what}: dim {dim} is out of range for {ndim} batch dim(s) "
            f"(expected a value in [{-ndim}, {ndim - 1}])"
        )
    return dim + ndim if dim < 0 else dim


def _dims(dims: Any, ndim: int, what: str, role: str) -> tuple[int, ...]:
    seq = (dims,) if isinstance(dims, int) else tuple(dims)
    out = tuple(_dim(d, ndim, what) for d in seq)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{what}: repeated dim in {role} {dims!r}")
    return out


def _ints(values: Any, what: str, name: str) -> tuple[int, ...]:
    seq = (values,) if isinstance(values, int) else tuple(values)
    for v in seq:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{what}: {name} must be non-negative ints, got {values!r}")
    return seq


def index_along(obj: Any, dim: int, index: Any) -> Any:
    """``obj`` indexed by ``index`` on batch dim ``dim`` only."""
    return obj[(slice(None),) * dim + (index,)]


def _tensors_only(obj: Any) -> bool:
    """No non-tensor leaf: per-leaf torch ops then move every row (a per-row non-tensor
    value only moves through indexing)."""
    return all(
        isinstance(v, Tensor) or type(v.data) is UnbatchedTensor
        for _, v in _tree.iter_items(obj, True, True)
    )


class ShapeMethods(MixinBase):
    """Mixin of ``TensorCollection``: batch-shape operations (feature dims follow)."""

    __slots__ = ()

    # ------------------------------------- new shapes (views where torch's are)

    def reshape(self, *shape: Any, size: Any = None, inplace: builtins.bool = False) -> Self:
        """New batch shape, as ``Tensor.reshape`` over the batch dims (``size=`` also works).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(6, 5), batch_size=[6])
        >>> td.reshape(2, 3)["x"].shape, td.reshape(-1, 2).batch_size
        (torch.Size([2, 3, 5]), torch.Size([3, 2]))
        """
        out: Self = _shapeops.reshape(self, shape if size is None else (size,), "reshape")
        if inplace:  # tensordict's keyword: this container becomes the result
            return _take_in_place(self, out)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def view(self, *shape: Any, batch_size: Any = None) -> Self:
        """New batch shape without copying, as ``Tensor.view`` over the batch dims.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(6, 5), batch_size=[6])
        >>> td.view(3, 2)["x"].data_ptr() == td["x"].data_ptr()
        True
        """
        if len(shape) == 1 and isinstance(shape[0], torch.dtype):
            # ``view(dtype)``: each leaf reinterpreted, as Tensor.view(dtype); the last
            # dim of a leaf changes size, so ``batch_size`` may name the result's
            dtype = shape[0]
            viewed: Self = self.apply(
                lambda t: t.view(dtype),
                batch_size=self.batch_size if batch_size is None else batch_size,
            )
            return viewed
        if batch_size is not None:
            shape = (batch_size,)
        if _LEGACY[0]:  # tensordict's lazy-legacy mode (_core/lazy_legacy.py)
            lazy = _ports.legacy_view()(self, "view", shape)
            if lazy is not None:
                return lazy  # type: ignore[no-any-return]
        out: Self = _shapeops.reshape(self, shape, "view")
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Merge the batch dims ``start_dim..end_dim`` into one."""
        start_dim = 0 if start_dim is None else start_dim
        end_dim = -1 if end_dim is None else end_dim
        out: Self = _shapeops.flatten(self, start_dim, end_dim)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def unflatten(
        self, dim: int, unflattened_size: Sequence[int], *, inplace: builtins.bool = False
    ) -> Self:
        """Split batch dim ``dim`` into ``unflattened_size``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(6, 5), batch_size=[6])
        >>> td.unflatten(0, (2, 3))["x"].shape
        torch.Size([2, 3, 5])
        """
        out: Self = _shapeops.unflatten(self, dim, unflattened_size)
        if inplace:
            return _take_in_place(self, out)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def unsqueeze(self, dim: int) -> Self:
        """A new batch dim of size 1 at ``dim``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(3, 5), batch_size=[3])
        >>> td.unsqueeze(-1)["x"].shape   # -1 counts batch dims, not the leaf's dims
        torch.Size([3, 1, 5])
        """
        if _LEGACY[0]:  # tensordict's lazy-legacy mode (_core/lazy_legacy.py)
            lazy = _ports.legacy_view()(self, "unsqueeze", (dim,))
            if lazy is not None:
                return lazy  # type: ignore[no-any-return]
        out: Self = _shapeops.unsqueeze(self, dim)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def squeeze(self, dim: int | None = None) -> Self:
        """Drop batch dims of size 1 (only ``dim`` when given).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(1, 3, 1, 5), batch_size=[1, 3, 1])
        >>> td.squeeze().batch_size, td.squeeze(0).batch_size
        (torch.Size([3]), torch.Size([3, 1]))
        """
        if _LEGACY[0]:  # tensordict's lazy-legacy mode (_core/lazy_legacy.py)
            lazy = _ports.legacy_view()(self, "squeeze", (dim,))
            if lazy is not None:
                return lazy  # type: ignore[no-any-return]
        out: Self = _shapeops.squeeze(self, dim)
        out._writeback = (self, "reshape", (tuple(self._batch_size),))
        return out

    def atleast_1d(self) -> Self:
        """``self`` if it has a batch dim, else a view with batch size ``[1]``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(5), batch_size=[]).atleast_1d()["a"].shape
        torch.Size([1, 5])
        """
        return _atleast(self, 1)

    def atleast_2d(self) -> Self:
        """``self`` if it has 2+ batch dims, else a view with leading size-1 dims added.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(3), batch_size=[3]).atleast_2d().batch_size
        torch.Size([1, 3])
        """
        return _atleast(self, 2)

    def atleast_3d(self) -> Self:
        """``self`` if it has 3+ batch dims, else a view with leading size-1 dims added.

        As in tensordict, the new dims always lead (``torch.atleast_3d`` of a 2-d tensor
        appends its new dim instead).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3]).atleast_3d().batch_size
        torch.Size([1, 2, 3])
        """
        return _atleast(self, 3)

    # ------------------------------------------------------------- broadcasting

    def expand(self, *shape: Any) -> Self:
        """Broadcast the batch dims to ``shape`` without copying.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(1, 5), batch_size=[1])
        >>> td.expand(4)["x"].shape, td.expand(4)["x"].stride()
        (torch.Size([4, 5]), (0, 1))
        """
        out: Self = _shapeops.reshape(self, shape, "expand")
        return out

    def expand_as(self, other: Any) -> Self:
        """Expanded to ``other``: a container's leaves one to one (feature dims included,
        batch size then ``other``'s), or the batch to a tensor's shape.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.ones(3, 1), batch_size=[3])
        >>> td.expand_as(TensorDict(a=torch.zeros(2, 3, 4), batch_size=[2, 3]))["a"].shape
        torch.Size([2, 3, 4])
        """
        if isinstance(other, Tensor):
            return self.expand(*other.shape)
        return self.apply(lambda t, o: t.expand_as(o), other, batch_size=other.batch_size)

    def broadcast_to(self, shape: Sequence[builtins.int]) -> Self:
        """The batch broadcast to ``shape`` (as ``torch.broadcast_to``: ``expand``, no copy).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(3, 5), batch_size=[3]).broadcast_to((2, 3))["a"].shape
        torch.Size([2, 3, 5])
        """
        return self.expand(*shape)

    # ---------------------------------------------------------- reordering dims

    def permute(self, *dims: Any) -> Self:
        """Reorder the batch dims.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2, 3])
        >>> td.permute(1, 0)["x"].shape   # feature dims stay last
        torch.Size([3, 2, 5])
        """
        if _LEGACY[0]:  # tensordict's lazy-legacy mode (_core/lazy_legacy.py)
            lazy = _ports.legacy_view()(self, "permute", dims)
            if lazy is not None:
                return lazy  # type: ignore[no-any-return]
        out: Self = _shapeops.permute(self, dims)
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
        if _LEGACY[0]:  # tensordict's lazy-legacy mode (_core/lazy_legacy.py)
            lazy = _ports.legacy_view()(self, "transpose", (dim0, dim1))
            if lazy is not None:
                return lazy  # type: ignore[no-any-return]
        out: Self = _shapeops.transpose(self, dim0, dim1)
        out._writeback = (self, "transpose", (dim0, dim1))
        return out

    def swapaxes(self, axis0: builtins.int, axis1: builtins.int) -> Self:
        """Swap batch dims ``axis0`` and ``axis1`` (``transpose``; views, no copy).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2, 3, 4, 5), batch_size=[2, 3, 4])
        >>> td.swapaxes(0, -1)["a"].shape
        torch.Size([4, 3, 2, 5])
        """
        nd = len(self.batch_size)
        a, b = _dim(axis0, nd, "swapaxes"), _dim(axis1, nd, "swapaxes")
        return self.transpose(a, b)

    def movedim(self, source: Any, destination: Any) -> Self:
        """Move batch dim(s) ``source`` to position(s) ``destination`` (as ``torch.movedim``);
        the other batch dims keep their order. A view, like ``permute``.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2, 3, 4, 5), batch_size=[2, 3, 4])
        >>> td.movedim(0, -1).batch_size, td.movedim((0, 1), (2, 0)).batch_size
        (torch.Size([3, 4, 2]), torch.Size([3, 4, 2]))
        """
        nd = len(self.batch_size)
        src = _dims(source, nd, "movedim", "source")
        dst = _dims(destination, nd, "movedim", "destination")
        if len(src) != len(dst):
            raise ValueError(
                f"movedim: source {source!r} and destination {destination!r} must have "
                f"the same number of elements, got {len(src)} and {len(dst)}"
            )
        order: list[builtins.int | None] = [None] * nd
        for s, d in zip(src, dst, strict=True):
            order[d] = s
        rest = iter(i for i in range(nd) if i not in src)
        perm = [next(rest) if o is None else o for o in order]
        if perm == list(range(nd)):  # nothing moves: the container itself, as tensordict
            return self
        return self.permute(*perm)

    # ------------------------------------------------------------------- pieces

    def narrow(self, dim: int, start: int, length: int) -> Self:
        """Rows ``start:start+length`` of batch dim ``dim``, without copying.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(5), batch_size=[5])
        >>> td.narrow(0, 1, 3)["x"].tolist()
        [1, 2, 3]
        """
        out: Self = _shapeops.narrow(self, dim, start, length)
        return out

    def unbind(self, dim: int = 0) -> tuple[Self, ...]:
        """One container per index of batch dim ``dim``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(3), batch_size=[3])
        >>> [row["x"].item() for row in td.unbind(0)]
        [0, 1, 2]
        """
        out: tuple[Self, ...] = _shapeops.unbind(self, dim)
        return out

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Pieces along batch dim ``dim``, as ``Tensor.split``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(5), batch_size=[5])
        >>> [p["x"].tolist() for p in td.split(2)], [p.batch_size[0] for p in td.split([1, 4])]
        ([[0, 1], [2, 3], [4]], [1, 4])
        """
        out: tuple[Self, ...] = _shapeops.split(self, split_size, dim)
        return out

    def tensor_split(self, indices_or_sections: Any, dim: builtins.int = 0) -> tuple[Self, ...]:
        """Split along batch dim ``dim`` as ``torch.tensor_split``: an int ``n`` gives
        ``n`` near-equal parts (the first ones one longer); a sequence of indices gives
        the slices between them. The parts are views.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.arange(5), batch_size=[5])
        >>> [p["a"].tolist() for p in td.tensor_split([1, 3])]
        [[0], [1, 2], [3, 4]]
        """
        nd = len(self.batch_size)
        if nd == 0:
            raise ValueError("tensor_split needs at least 1 batch dim, got batch_size ()")
        d = _dim(dim, nd, "tensor_split")
        arg = indices_or_sections
        if isinstance(arg, Tensor):
            if arg.dtype.is_floating_point or arg.dtype.is_complex or arg.ndim > 1:
                raise TypeError(
                    "tensor_split: a tensor indices_or_sections must be a 0-d or 1-d int "
                    f"tensor, got dtype {arg.dtype} and shape {tuple(arg.shape)}"
                )
            arg = arg.tolist()
        n = self.batch_size[d]
        if isinstance(arg, int) and not isinstance(arg, bool):
            if arg <= 0:
                raise ValueError(f"tensor_split: number of sections must be > 0, got {arg}")
            small, extra = divmod(n, arg)
            sizes = [small + 1 if i < extra else small for i in range(arg)]
            starts = [sum(sizes[:i]) for i in range(arg)]
            bounds: list[tuple[builtins.int | None, builtins.int | None]] = [
                (s, s + z) for s, z in zip(starts, sizes, strict=True)
            ]
        elif isinstance(arg, Sequence) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in arg
        ):
            edges: list[builtins.int | None] = [0, *arg, None]
            bounds = list(itertools.pairwise(edges))
        else:
            raise TypeError(
                "tensor_split: indices_or_sections must be an int, a sequence of ints or an "
                f"int tensor, got {indices_or_sections!r}"
            )
        return tuple(index_along(self, d, slice(a, b)) for a, b in bounds)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        """``chunks`` pieces along batch dim ``dim``, as ``Tensor.chunk``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.arange(5), batch_size=[5])
        >>> [p["x"].tolist() for p in td.chunk(2)]
        [[0, 1, 2], [3, 4]]
        """
        out: tuple[Self, ...] = _shapeops.chunk(self, chunks, dim)
        return out

    # --------------------------------------------- reversing, rotating, rolling

    def flip(self, dims: builtins.int | Sequence[builtins.int]) -> Self:
        """Reverse the order along batch dims ``dims``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 2, 3]), batch_size=[3]).flip(0)["a"].tolist()
        [3, 2, 1]
        """
        d = batch_dims(dims, self.batch_dims, "flip")
        if _tensors_only(self):  # the fast path: one torch.flip per leaf
            return self.apply(lambda t: torch.flip(t, d))
        out: Any = self
        for dim in d:
            n = self.batch_size[dim]
            out = index_along(out, dim, torch.arange(n - 1, -1, -1))
        return out  # type: ignore[no-any-return]

    def fliplr(self) -> Self:
        """Reverse batch dim 1 (left/right); needs at least 2 batch dims (``torch.fliplr``).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.arange(4).reshape(2, 2), batch_size=[2, 2]).fliplr()["a"].tolist()
        [[1, 0], [3, 2]]
        """
        if len(self.batch_size) < 2:
            raise RuntimeError(
                f"fliplr requires at least 2 batch dims, got batch_size {tuple(self.batch_size)}"
            )
        return self.flip(1)

    def flipud(self) -> Self:
        """Reverse batch dim 0 (up/down); needs at least 1 batch dim (``torch.flipud``).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.arange(4).reshape(2, 2), batch_size=[2, 2]).flipud()["a"].tolist()
        [[2, 3], [0, 1]]
        """
        if not self.batch_size:
            raise RuntimeError("flipud requires at least 1 batch dim, got batch_size ()")
        return self.flip(0)

    def rot90(self, k: builtins.int = 1, dims: Sequence[builtins.int] = (0, 1)) -> Self:
        """Rotate by 90 degrees ``k`` times in the plane of batch dims ``dims``, from the
        first towards the second (as ``torch.rot90``; ``k % 4 == 0`` gives a copy).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.arange(4).reshape(2, 2), batch_size=[2, 2])
        >>> td.rot90()["a"].tolist(), td.rot90(-1)["a"].tolist()
        ([[1, 3], [0, 2]], [[2, 0], [3, 1]])
        """
        nd = len(self.batch_size)
        if nd < 2:
            raise RuntimeError(
                f"rot90 requires at least 2 batch dims, got batch_size {tuple(self.batch_size)}"
            )
        if len(dims) != 2:
            raise RuntimeError(f"rot90: dims must name exactly 2 batch dims, got {dims!r}")
        d0, d1 = _dims(dims, nd, "rot90", "dims")
        k %= 4
        if k == 0:
            return self.clone()  # type: ignore[attr-defined, no-any-return]
        if k == 2:
            return self.flip((d0, d1))
        flipped = self.flip(d1 if k == 1 else d0)
        return flipped.transpose(d0, d1)

    def roll(
        self,
        shifts: builtins.int | Sequence[builtins.int],
        dims: builtins.int | Sequence[builtins.int],
        *,
        inplace: builtins.bool = False,
    ) -> Self:
        """Roll along batch dims ``dims`` by ``shifts`` (as ``torch.roll``).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 2, 3]), batch_size=[3]).roll(1, 0)["a"].tolist()
        [3, 1, 2]
        """
        d = batch_dims(dims, self.batch_dims, "roll")
        s = (shifts,) if isinstance(shifts, builtins.int) else tuple(shifts)
        if len(s) != len(d):
            raise ValueError(f"roll: got {len(s)} shifts for {len(d)} dims {dims!r}")
        if _tensors_only(self):
            out: Any = self.apply(lambda t: torch.roll(t, s, d))
        else:
            out = self
            for dim, shift in zip(d, s, strict=True):
                n = self.batch_size[dim]
                out = index_along(out, dim, (torch.arange(n) - shift) % builtins.max(n, 1))
        return _take_in_place(self, out) if inplace else out

    # ------------------------------------------------------------------ growing

    def pad(
        self,
        pad_size: Sequence[builtins.int],
        value: builtins.float = 0.0,
        *,
        inplace: builtins.bool = False,
        safe: builtins.bool = True,
    ) -> Self:
        """Pad the batch dims: ``pad_size`` is ``[before0, after0, before1, after1, ...]``
        from the first batch dim on (negative sizes crop), filled with ``value``.
        ``inplace=True`` makes this container the result. ``safe`` is accepted for
        tensordict's signature: the sizes are always checked before anything changes.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.ones(2), batch_size=[2]).pad([0, 1])["a"].tolist()
        [1.0, 1.0, 0.0]
        """
        out: Self = _padding.padded(self, pad_size, value)
        return _take_in_place(self, out) if inplace else out

    def repeat(self, *repeats: Any, inplace: builtins.bool = False) -> Self:
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
        out = self.tile(repeats)
        return _take_in_place(self, out) if inplace else out

    def tile(self, dims: Any) -> Self:
        """Repeat the batch ``dims[i]`` times along each batch dim (as ``torch.tile``).

        Fewer counts than batch dims apply to the trailing batch dims; more counts add
        leading batch dims. Always a copy.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.tensor([[0, 1]]), batch_size=[1, 2])
        >>> td.tile((2, 2))["a"].tolist(), td.tile(3).batch_size
        ([[0, 1, 0, 1], [0, 1, 0, 1]], torch.Size([1, 6]))
        """
        reps = _ints(dims, "tile", "dims")
        out: Any = self
        for _ in range(len(reps) - len(self.batch_size)):
            out = out.unsqueeze(0)
        bs = tuple(out.batch_size)
        reps = (1,) * (len(bs) - len(reps)) + reps
        if all(r == 1 for r in reps):
            return out.clone()  # type: ignore[no-any-return]
        for i in range(len(bs)):
            out = out.unsqueeze(2 * i)  # a leading size-1 dim before each batch dim ...
        grown = [n for pair in zip(reps, bs, strict=True) for n in pair]
        out = out.expand(*grown)  # ... expanded to the count, then merged with its dim
        return out.reshape(*(r * s for r, s in zip(reps, bs, strict=True)))  # type: ignore[no-any-return]

    def repeat_interleave(
        self,
        repeats: builtins.int | Tensor,
        dim: builtins.int | None = None,
        *,
        output_size: builtins.int | None = None,
    ) -> Self:
        """Repeat each batch element ``repeats`` times along batch dim ``dim`` (as
        ``torch.repeat_interleave``; ``repeats`` may give one count per element).
        With ``dim=None`` the batch is flattened first.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.tensor([1, 2]), batch_size=[2])
        >>> td.repeat_interleave(2)["a"].tolist()
        [1, 1, 2, 2]
        >>> td.repeat_interleave(torch.tensor([1, 3]), dim=0)["a"].tolist()
        [1, 2, 2, 2]
        """
        src: Any = self
        if dim is None:
            src, d = self.reshape(-1), 0
        else:
            d = _dim(dim, len(self.batch_size), "repeat_interleave")
        n = src.batch_size[d]
        if isinstance(repeats, Tensor):
            if repeats.dtype.is_floating_point or repeats.dtype.is_complex:
                raise TypeError(
                    f"repeat_interleave: repeats must hold ints, got dtype {repeats.dtype}"
                )
            if repeats.ndim > 1 or repeats.numel() not in (1, n):
                raise ValueError(
                    f"repeat_interleave: repeats of shape {tuple(repeats.shape)} must be a "
                    f"single count or one count per element of batch dim {d} (size {n})"
                )
            if bool((repeats < 0).any()):
                raise ValueError(f"repeat_interleave: repeats must be >= 0, got {repeats!r}")
            device = repeats.device
        else:
            _ints(repeats, "repeat_interleave", "repeats")
            device = None
        rows = torch.arange(n, device=device)
        index = torch.repeat_interleave(rows, repeats, output_size=output_size)
        return index_along(src, d, index)  # type: ignore[no-any-return]

    # ----------------------------------------------------------- selecting rows

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
        d = batch_dim(dim, nd, "gather")
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

    # ------------------------------------------------- inferring the batch size

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

    # ------- torch functions (torch.stack, torch.cat, torch.<shape op>(td) ...)

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        return _shapeops.torch_function(func, args, kwargs or {})

    # ----------------------------------------------------------------------------
    # tensordict's compatibility names: other spellings of methods of this job, and
    # stand-ins kept so that code written for tensordict runs unchanged. New code and
    # the docs use the names above.

    swapdims = swapaxes

    moveaxis = movedim

    def ndimension(self) -> builtins.int:
        """The number of batch dims (``batch_dims``), as ``Tensor.ndimension``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2, 3, 4), batch_size=[2, 3]).ndimension()
        2
        """
        return len(self.batch_size)

    @property
    def names(self) -> None:
        """Always ``None``: tensorbox has no named batch dims (tensordict compatibility).

        Setting ``None`` is accepted; any other value raises ``TypeError``.

        >>> from tensorbox import TensorDict
        >>> print(TensorDict(batch_size=[2]).names)
        None
        """
        return None

    @names.setter
    def names(self, value: Any) -> None:
        if value is not None:
            raise TypeError(
                f"cannot set names={value!r}: tensorbox has no named batch dims (names is "
                "always None); address dims by position, e.g. td.sum(dim=0)"
            )

    @classmethod
    def maybe_dense_stack(cls, items: Sequence[Any], dim: builtins.int = 0) -> Any:
        """``torch.stack(items, dim)`` (tensordict's name; stacks here are always dense).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> TensorDict.maybe_dense_stack([td, td], 1).batch_size
        torch.Size([3, 2])
        """
        return torch.stack(list(items), dim)


def _atleast(obj: _T, n: int) -> _T:
    out: Any = obj
    for _ in range(n - len(out.batch_size)):
        out = out.unsqueeze(0)
    return out  # type: ignore[no-any-return]


def _take_in_place(self: C, result: Any) -> C:
    """``self`` becomes ``result`` (entries and batch size), keeping its nested containers'
    identities, as tensordict's ``inplace=True`` shape ops."""
    if self._locked:
        raise LockedError(f"cannot change a locked {type(self).__name__} in place; unlock_() first")

    def take(node: Any, new: Any) -> None:
        store = node._tensordict
        for k, v in new._tensordict.items():
            cur = store.get(k)
            if is_container(v) and is_container(cur):
                take(cur, v)
            else:
                store[k] = v
        node._batch_size = new._batch_size

    self._write(take, self, result)
    return self
