"""tensordict's ``tensordict.tensorclass`` module, under tensorbox: the same names.

``from tensordict.tensorclass import NonTensorData`` becomes
``from tensorbox.tensorclass import NonTensorData``. (The package imports this module
first, so ``tensorbox.tensorclass`` stays the decorator, as ``tensordict.tensorclass``
does; this module therefore names its exports instead of forwarding to the package.)

>>> import torch
>>> from tensorbox.tensorclass import NonTensorData, is_tensorclass, tensorclass
>>> @tensorclass
... class Pair:
...     x: torch.Tensor
>>> is_tensorclass(Pair), NonTensorData("a").data
(True, 'a')
"""

from __future__ import annotations

from tensorbox._core.nontensor import NonTensorData
from tensorbox._tensorclass import TensorClass, is_tensorclass, tensorclass

__all__ = ["NonTensorData", "TensorClass", "is_tensorclass", "tensorclass"]
