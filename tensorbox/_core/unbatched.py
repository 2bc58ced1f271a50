"""``UnbatchedTensor``: a tensor a container holds without batch dims.

A container keeps an ``UnbatchedTensor`` as one value for the whole batch, as it keeps a
``NonTensorData``: its shape need not start with the batch size, and indexing, reshaping,
stacking or splitting the container passes it through unchanged (the same storage).
Reading it gives an ``UnbatchedTensor`` whose ``batch_size`` is the batch size of the
container it was read from. ``apply``, ``to`` and the casts leave it as it is, and a saved
tree cannot hold one (like other non-tensor values it is refused with the key named).

>>> import torch
>>> from tensorbox import TensorDict
>>> table = torch.arange(4.0)
>>> td = TensorDict(x=torch.zeros(3, 2), table=UnbatchedTensor(table), batch_size=[3])
>>> row = td[0]
>>> row["table"].data_ptr() == table.data_ptr(), row["table"].batch_size
(True, torch.Size([]))
>>> torch.stack([td, td])["table"].batch_size
torch.Size([2, 3])

Outside a container it is an ordinary tensor: every operation on it gives a plain tensor.

>>> UnbatchedTensor(torch.tensor([1, 2])) + 1
tensor([2, 3])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["UnbatchedTensor"]


class UnbatchedTensor(Tensor):
    """A tensor stored in a container as one value for the whole batch (see the module doc).

    ``batch_size`` is the batch size of the container it was read from (``[]`` when built,
    unless given).

    >>> UnbatchedTensor(torch.zeros(2), batch_size=[5]).batch_size
    torch.Size([5])
    """

    # Operations give plain tensors: the class only marks a value stored unbatched.
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    batch_size: torch.Size

    def __new__(cls, data: Any, batch_size: Sequence[int] | None = None) -> UnbatchedTensor:
        t = data if isinstance(data, Tensor) else torch.as_tensor(data)
        out: UnbatchedTensor = t.as_subclass(cls)
        out.batch_size = torch.Size(batch_size if batch_size is not None else ())
        return out

    def __init__(self, data: Any, batch_size: Sequence[int] | None = None) -> None:
        pass  # everything is done in __new__ (torch's Tensor.__init__ takes no arguments)

    def in_batch(self, batch_size: torch.Size) -> UnbatchedTensor:
        """The same storage, seen from a container of ``batch_size``."""
        if self.batch_size == batch_size:
            return self
        return UnbatchedTensor(self.as_subclass(Tensor), batch_size)

    def same_data(self, other: Any) -> bool:
        """True when ``other`` is an UnbatchedTensor over the same memory (shape, strides, dtype)."""
        return (
            isinstance(other, UnbatchedTensor)
            and other.data_ptr() == self.data_ptr()
            and other.dtype == self.dtype
            and other.shape == self.shape
            and other.stride() == self.stride()
            and other.device == self.device
        )

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"UnbatchedTensor({self.as_subclass(Tensor)!r})"

    def __str__(self) -> str:
        return str(self.as_subclass(Tensor))

    def __format__(self, format_spec: str) -> str:
        return format(self.as_subclass(Tensor), format_spec)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (UnbatchedTensor, (self.as_subclass(Tensor), tuple(self.batch_size)))
