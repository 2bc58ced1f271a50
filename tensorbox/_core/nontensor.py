"""Non-tensor values carried beside the tensors of a container.

A ``NonTensorData`` holds one Python value shared by every batch element (a
string, a number, a list...). Stacking containers whose values differ gives a
*stacked* ``NonTensorData``: a numpy object array with one value per batch
element over the stacked dims, so indexing keeps working.

>>> import numpy as np
>>> NonTensorData("a").data
'a'
>>> s = NonTensorData.stack([NonTensorData("a"), NonTensorData("b")], 0, ())
>>> s.stacked, s.tolist()
(True, ['a', 'b'])
>>> s[1].data
'b'
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from tensorbox._core.unbatched import UnbatchedTensor

__all__ = ["NonTensorData", "cpu_index", "read"]


class NonTensorData:
    """A non-tensor value inside a container.

    ``stacked=False``: ``data`` is one value shared by the whole batch.
    ``stacked=True``: ``data`` is a numpy object array whose shape is exactly the
    batch size of the container holding it (one value per batch element).

    ``batch_size`` and ``device`` are tensordict's arguments: the batch the value is
    declared for (``batch_size`` and ``tolist()`` report it) and a device it goes with.
    A container holding the value uses its own batch size and device instead, as
    tensordict does; shape ops and indexing keep a shared value as it is.

    >>> d = NonTensorData("a", batch_size=[2])
    >>> d.batch_size, d.tolist(), d.value
    (torch.Size([2]), ['a', 'a'], 'a')
    """

    __slots__ = ("_batch_size", "data", "device", "stacked")

    def __init__(
        self,
        data: Any,
        *,
        batch_size: Sequence[int] | int | None = None,
        device: Any = None,
        stacked: bool = False,
    ) -> None:
        self.data = data
        self.stacked = stacked
        self.device = None if device is None else torch.device(device)
        self._batch_size = None if batch_size is None else _batch_arg(batch_size)
        if stacked and self._batch_size is not None and self._batch_size != data.shape:
            raise ValueError(
                f"NonTensorData: batch_size {tuple(self._batch_size)} does not match the "
                f"stacked values' shape {data.shape}; leave batch_size out for a stack"
            )

    @property
    def batch_size(self) -> torch.Size:
        """The declared batch size (a stack's shape; ``torch.Size([])`` when not given)."""
        if self.stacked:
            return torch.Size(self.data.shape)
        return self._batch_size if self._batch_size is not None else torch.Size()

    @property
    def value(self) -> Any:
        """What ``td[key]`` returns: the value, or a (nested) list for a stack."""
        return self.data.tolist() if self.stacked else self.data

    def tolist(self) -> Any:
        """The value per batch element as nested lists (just the value when unbatched).

        >>> NonTensorData(0, batch_size=[2, 1]).tolist(), NonTensorData(0).tolist()
        ([[0], [0]], 0)
        """
        if not self.stacked and self._batch_size:
            return _filled(self.data, tuple(self._batch_size)).tolist()
        return self.value

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> NonTensorData:
        """Apply a batch-shape op given as a function on tensors (indexing, permute...).

        The op runs on a tensor of element numbers shaped like the batch, and the
        values are gathered with its result, so every op has torch's semantics.
        """
        if not self.stacked:
            return self
        ix = fn(torch.arange(self.data.size).reshape(self.data.shape))
        out = self.data.reshape(-1)[ix.numpy()]
        if not isinstance(out, np.ndarray) or out.ndim == 0:
            return NonTensorData(out.item() if isinstance(out, np.ndarray) else out)
        return per_row(out)

    def __getitem__(self, idx: Any) -> NonTensorData:
        if not self.stacked:
            return self
        idx = cpu_index(idx)  # the element numbers live on the CPU
        return self.map_batch(lambda t: t[idx])

    def unbind(self, dim: int, n: int) -> list[NonTensorData]:
        """The ``n`` slices along batch dim ``dim`` (``n`` is that dim's size)."""
        if not self.stacked:
            return [self] * n
        out = []
        for x in np.moveaxis(self.data, dim, 0):
            if isinstance(x, np.ndarray) and x.ndim:
                out.append(per_row(x))
            else:  # a 1-D array iterates over its objects
                out.append(NonTensorData(x.item() if isinstance(x, np.ndarray) else x))
        return out

    def full(self, batch_size: Sequence[int]) -> np.ndarray:
        """An object array shaped like ``batch_size`` holding one value per element."""
        if self.stacked:
            stacked: np.ndarray = self.data
            return stacked
        return _filled(self.data, tuple(batch_size))

    @staticmethod
    def stack(items: Sequence[NonTensorData], dim: int, batch_size: Sequence[int]) -> NonTensorData:
        """Identical shared values stay one value; anything else becomes a stack.

        ``batch_size`` is the common batch size of the stacked containers.
        """
        if _all_same(items):
            return items[0]
        if type(items[0].data) is UnbatchedTensor:
            return _one_unbatched(items, "stack")
        return per_row(np.stack([it.full(batch_size) for it in items], axis=dim))

    @staticmethod
    def cat(
        items: Sequence[NonTensorData], dim: int, batch_sizes: Sequence[Sequence[int]]
    ) -> NonTensorData:
        """Concatenate along batch dim ``dim``; ``batch_sizes`` are the inputs' batch sizes."""
        if _all_same(items):
            return items[0]
        if type(items[0].data) is UnbatchedTensor:
            return _one_unbatched(items, "cat")
        parts = [it.full(bs) for it, bs in zip(items, batch_sizes)]
        return per_row(np.concatenate(parts, axis=dim))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NonTensorData):
            return NotImplemented
        if self.stacked != other.stacked:
            return False
        if self.stacked:
            same: bool = self.data.shape == other.data.shape and self.tolist() == other.tolist()
            return same
        return _same(self.data, other.data)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = "" if self._batch_size is None else f", batch_size={list(self._batch_size)}"
        return f"NonTensorData({self.value!r}{extra})"


def read(v: NonTensorData, batch_size: torch.Size) -> Any:
    """What reading entry ``v`` of a container of ``batch_size`` gives: the value, or an
    UnbatchedTensor that reports that batch size."""
    data = v.data
    if type(data) is UnbatchedTensor:
        return data.in_batch(batch_size)
    return v.value


def _one_unbatched(items: Sequence[NonTensorData], what: str) -> NonTensorData:
    """Joining containers keeps one UnbatchedTensor: the first, with a warning when the
    others hold different memory (their values are dropped)."""
    first: UnbatchedTensor = items[0].data
    if not all(first.same_data(it.data) for it in items[1:]):
        warnings.warn(
            f"{what}: the UnbatchedTensor entries have different data storage; the result "
            "keeps the first one's",
            UserWarning,
            stacklevel=4,
        )
    return items[0]


def per_row(values: np.ndarray) -> NonTensorData:
    """Values shaped like the batch, kept per row, or as one value when every row holds
    the same one: the rule for non-tensor values after any index, stack, cat or row write.

    >>> import numpy as np
    >>> per_row(np.array(["a", "a"], dtype=object)).value, per_row(np.array(["a", "b"], dtype=object)).value
    ('a', ['a', 'b'])
    """
    flat = values.reshape(-1)
    if flat.size:
        first = flat[0]
        if all(_same(v, first) for v in flat[1:]):
            return NonTensorData(first)
    return NonTensorData(values, stacked=True)


def cpu_index(index: Any) -> Any:
    """``index`` with every tensor in it moved to the CPU."""
    if isinstance(index, torch.Tensor):
        return index.cpu()
    if isinstance(index, tuple):
        return tuple(cpu_index(i) for i in index)
    return index


def _batch_arg(batch_size: Sequence[int] | int) -> torch.Size:
    dims = (batch_size,) if isinstance(batch_size, int) else tuple(batch_size)
    try:
        out = torch.Size(operator.index(d) for d in dims)
    except TypeError:
        raise TypeError(
            f"NonTensorData: batch_size {batch_size!r} is not a sequence of ints"
        ) from None
    if any(d < 0 for d in out):
        raise ValueError(f"NonTensorData: batch_size {tuple(out)} has a negative dim")
    return out


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _all_same(items: Sequence[NonTensorData]) -> bool:
    first = items[0]
    return not first.stacked and all(
        (not it.stacked) and _same(it.data, first.data) for it in items[1:]
    )


def _filled(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.empty(shape, dtype=object)
    arr.fill(value)  # for an object array: the same object everywhere, never broadcast
    return arr
