"""Argument checks shared by MemoryMappedTensor's constructors, and their errors.

The constructors take a shape the ways torch and tensordict do: as ints, as one
sequence, or as ``shape=``.

>>> shape_from("zeros", (2, 3)), shape_from("zeros", ((2, 3),)), shape_from("zeros", (), [4])
((2, 3), (2, 3), (4,))
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tensorbox._core.shape import index_dims
from tensorbox.errors import TensorboxError

__all__ = ["MemmapDeviceError", "MemmapFileExistsError", "check_device", "like_input", "shape_from"]


class MemmapFileExistsError(TensorboxError, FileExistsError, RuntimeError):
    """The file a new memory-mapped tensor should go to exists and ``existsok`` is False.

    Also a ``RuntimeError``: tensordict raises that type for the same mistake.
    """


class MemmapDeviceError(TensorboxError, ValueError, RuntimeError):
    """A memory-mapped tensor was asked for on a device other than the CPU.

    Both a ``ValueError`` and a ``RuntimeError``, the types tensordict raises for it.
    """


def _is_dim(x: Any) -> bool:
    """Whether ``x`` is one dim (an int, a numpy int, a 0-d tensor), not a sequence of them."""
    if isinstance(x, Tensor):
        return x.dim() == 0
    return hasattr(type(x), "__index__")


def shape_from(method: str, args: tuple[Any, ...], shape: Any = None) -> tuple[int, ...]:
    """The shape given to ``method`` as ints (``2, 3``), one sequence, or ``shape=``."""
    if args and shape is not None:
        raise TypeError(
            f"MemoryMappedTensor.{method}() got a shape twice: {args!r} and shape={shape!r}; "
            "pass one of them"
        )
    if not args:
        if shape is None:
            raise TypeError(
                f"MemoryMappedTensor.{method}() needs a shape: {method}(2, 3), "
                f"{method}((2, 3)) or {method}(shape=(2, 3))"
            )
        args = (shape,)
    dims: Any = args
    if len(args) == 1 and not _is_dim(args[0]):
        dims = args[0]
        if isinstance(dims, Tensor) and dims.dim() > 1:
            raise TypeError(
                f"MemoryMappedTensor.{method}(): a {dims.dim()}-d tensor of shapes describes "
                "a nested tensor, which memory-mapped tensors do not support; pass one shape"
            )
    not_ints = f"MemoryMappedTensor.{method}(): shape {{given!r}} is not a sequence of ints; "
    return index_dims(
        dims, not_ints + "pass it as 2, 3 or (2, 3)", "shape {dims!r} has a negative dim"
    )


def check_device(method: str, device: Any) -> None:
    if device is None:
        return
    dev = torch.device(device)
    if dev.type != "cpu":
        raise MemmapDeviceError(
            f"MemoryMappedTensor.{method}(device={device!r}): a memory-mapped tensor lives in "
            "CPU memory (its storage is a file or shared memory); pass device='cpu' or leave "
            f"it out, and copy the result to the device with .to({str(dev)!r})"
        )


def like_input(method: str, input: Any) -> Tensor:
    if not isinstance(input, Tensor):
        raise TypeError(
            f"MemoryMappedTensor.{method}() takes a tensor to copy the shape and dtype of, "
            f"got {type(input).__name__}"
        )
    if input.is_nested:
        raise TypeError(f"MemoryMappedTensor.{method}(): nested tensors are not supported")
    return input
