"""A shim: tensordict's ``tensordict.tensorclass`` import path, forwarding to ``tensorbox``.

``from tensordict.tensorclass import NonTensorData`` becomes
``from tensorbox.tensorclass import NonTensorData``; any other public name of
``tensorbox`` resolves here too. The attribute ``tensorbox.tensorclass`` stays the
decorator, as ``tensordict.tensorclass`` does: the package face imports this module
before it binds the name (``tensorbox/_face.py``).

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
from tensorbox._face import forward
from tensorbox._tensorclass import TensorClass, is_tensorclass, tensorclass

__all__ = ["NonTensorData", "TensorClass", "is_tensorclass", "tensorclass"]

__getattr__, __dir__ = forward(__name__, "tensorbox")
