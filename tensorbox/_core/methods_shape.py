"""Batch-shape methods shared by ``TensorDict`` and ``TensorClass``, with tensordict's names.

``swapaxes``/``swapdims``, ``movedim``/``moveaxis``, ``rot90``, ``fliplr``/``flipud``,
``tile``, ``broadcast_to``, ``atleast_1d/2d/3d``, ``repeat_interleave``,
``tensor_split``, ``ndimension`` and the ``names`` stand-in. Each acts on the batch
dims only (feature dims follow untouched) and is built from the public shape ops
both containers have (``transpose``, ``permute``, ``unsqueeze``, ``expand``,
``reshape``, indexing...). Those already carry nested containers and per-row
non-tensor values along, so every method here does too, and returns the caller's
own type.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.arange(6).reshape(2, 3), batch_size=[2, 3])
>>> td.movedim(0, 1).batch_size, td.rot90()["a"].tolist()
(torch.Size([3, 2]), [[2, 5], [1, 4], [0, 3]])
>>> [p.batch_size[1] for p in td.tensor_split(2, dim=1)]
[2, 1]
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

import torch
from torch import Tensor

from tensorbox._core.mixin_base import MixinBase

_T = TypeVar("_T")

__all__ = ["FIELD_MAY_HIDE", "TORCH_FUNCTIONS", "ShapeMethods", "index_along"]

# Attributes of the container mixins (``names`` here, ``depth`` in _entry_methods, ``data``
# in _methods_leaves) that a tensorclass field may take without shadow=True: the library
# never reads them on a container, and all are common field names (a depth map, a list of
# names, the payload of a record; tensordict's own saving guide names a field ``data``).
FIELD_MAY_HIDE = frozenset({"data", "depth", "names"})


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


class ShapeMethods(MixinBase):
    """Mixin of ``TensorDict`` and ``TensorClass``: batch-shape methods, tensordict's names."""

    __slots__ = ()

    # --------------------------------------------------------------- queries

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

    # ------------------------------------------------------ moving dims about

    def swapaxes(self, axis0: builtins.int, axis1: builtins.int) -> Self:
        """Swap batch dims ``axis0`` and ``axis1`` (``transpose``; views, no copy).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2, 3, 4, 5), batch_size=[2, 3, 4])
        >>> td.swapaxes(0, -1)["a"].shape
        torch.Size([4, 3, 2, 5])
        """
        nd = len(self.batch_size)
        a, b = _dim(axis0, nd, "swapaxes"), _dim(axis1, nd, "swapaxes")
        return self.transpose(a, b)  # type: ignore[attr-defined, no-any-return]

    swapdims = swapaxes

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
        return self.permute(*perm)  # type: ignore[attr-defined, no-any-return]

    moveaxis = movedim

    # ------------------------------------------------------------ flipping

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
            return self.flip((d0, d1))  # type: ignore[attr-defined, no-any-return]
        flipped = self.flip(d1 if k == 1 else d0)  # type: ignore[attr-defined]
        return flipped.transpose(d0, d1)  # type: ignore[no-any-return]

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
        return self.flip(1)  # type: ignore[attr-defined, no-any-return]

    def flipud(self) -> Self:
        """Reverse batch dim 0 (up/down); needs at least 1 batch dim (``torch.flipud``).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.arange(4).reshape(2, 2), batch_size=[2, 2]).flipud()["a"].tolist()
        [[2, 3], [0, 1]]
        """
        if not self.batch_size:
            raise RuntimeError("flipud requires at least 1 batch dim, got batch_size ()")
        return self.flip(0)  # type: ignore[attr-defined, no-any-return]

    # ------------------------------------------------------------- growing

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

    def broadcast_to(self, shape: Sequence[builtins.int]) -> Self:
        """The batch broadcast to ``shape`` (as ``torch.broadcast_to``: ``expand``, no copy).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(3, 5), batch_size=[3]).broadcast_to((2, 3))["a"].shape
        torch.Size([2, 3, 5])
        """
        return self.expand(*shape)  # type: ignore[attr-defined, no-any-return]

    def expand_as(self, other: Any) -> Self:
        """Expanded to ``other``: a container's leaves one to one (feature dims included,
        batch size then ``other``'s), or the batch to a tensor's shape.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.ones(3, 1), batch_size=[3])
        >>> td.expand_as(TensorDict(a=torch.zeros(2, 3, 4), batch_size=[2, 3]))["a"].shape
        torch.Size([2, 3, 4])
        """
        if isinstance(other, Tensor):
            return self.expand(*other.shape)  # type: ignore[attr-defined, no-any-return]
        return self.apply(lambda t, o: t.expand_as(o), other, batch_size=other.batch_size)

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
            src, d = self.reshape(-1), 0  # type: ignore[attr-defined]
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

    # ------------------------------------------------------------- splitting

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


def _atleast(obj: _T, n: int) -> _T:
    out: Any = obj
    for _ in range(n - len(out.batch_size)):
        out = out.unsqueeze(0)
    return out  # type: ignore[no-any-return]


def _method(name: str) -> Callable[..., Any]:
    def call(x: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(x, name)(*args, **kwargs)

    return call


# ``torch.<name>(container, ...)`` for the methods above (and TensorMethods.masked_select),
# for the containers' ``__torch_function__`` tables.
TORCH_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    getattr(torch, name): _method(name)
    for name in (
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
}
