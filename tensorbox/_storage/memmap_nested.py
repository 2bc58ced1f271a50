"""Memory-mapped nested tensors (torch's strided layout), as tensordict makes them.

A nested tensor of elements of different shapes is described by a 2-d tensor of
shapes, one row per element (``torch.tensor([[2, 3], [2, 4]])``). Its values lie one
element after the other in one flat buffer: a file or shared memory holding
``shapes.prod(-1).sum()`` values, viewed with ``torch._nested_view_from_buffer``.
``MemoryMappedTensor.empty/zeros/ones/from_filename/from_handler/from_storage`` take
such a 2-d tensor as their shape, and ``from_tensor`` takes a strided nested tensor.

>>> shapes = torch.tensor([[1, 2], [2, 1]])
>>> flat = torch.arange(4.0)
>>> [t.tolist() for t in view(flat, shapes).unbind()]
[[[0.0, 1.0]], [[2.0], [3.0]]]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["flat_numel", "flat_values", "shapes_arg", "view"]


def shapes_arg(args: tuple[Any, ...], shape: Any = None) -> Tensor | None:
    """The 2-d tensor of shapes when a constructor was given one (as its only size
    argument or as ``shape=``), else None (an ordinary shape, checked by ``shape_from``)."""
    if args and shape is not None:
        return None  # given twice: shape_from says so
    cand = shape if shape is not None else (args[0] if len(args) == 1 else None)
    if isinstance(cand, Tensor) and cand.dim() == 2:
        if cand.is_floating_point() or cand.is_complex() or bool((cand < 0).any()):
            raise ValueError(
                f"a nested tensor's shapes must be non-negative ints, one row per element; "
                f"got {cand.tolist()}"
            )
        return cand.to(device="cpu", dtype=torch.int64)
    return None


def flat_numel(shapes: Tensor) -> int:
    """How many values the elements of ``shapes`` hold together."""
    return int(shapes.prod(-1).sum())


def view(flat: Tensor, shapes: Tensor) -> Tensor:
    """The nested tensor of ``shapes`` over the 1-d ``flat`` (sharing its storage)."""
    strides, offsets = torch._nested_compute_contiguous_strides_offsets(shapes)
    return torch._nested_view_from_buffer(flat, shapes, strides, offsets)


def flat_values(t: Tensor) -> tuple[Tensor, Tensor]:
    """The values of the nested tensor ``t`` one element after the other, and its shapes.

    A jagged nested tensor is refused: its layout is not this buffer plus shapes.
    """
    if t.layout != torch.strided:
        raise TypeError(
            "MemoryMappedTensor.from_tensor(): a nested tensor with the torch.jagged layout "
            "cannot be memory-mapped; convert it with torch.nested.nested_tensor("
            "list(t.unbind()), layout=torch.strided)"
        )
    shapes = t._nested_tensor_size()
    parts = [e.reshape(-1) for e in t.detach().unbind()]
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=t.dtype)
    return flat.cpu(), shapes
