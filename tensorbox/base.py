"""A shim: tensordict's ``tensordict.base`` import path, forwarding to ``tensorbox``.

``from tensordict.base import TensorDictBase`` becomes
``from tensorbox.base import TensorDictBase``. Any other public name of ``tensorbox``
resolves here too.

>>> from tensorbox.base import TensorDictBase, is_tensor_collection
>>> from tensorbox import TensorDict
>>> is_tensor_collection(TensorDict()), issubclass(TensorDict, TensorDictBase)
(True, True)
"""

from __future__ import annotations

from tensorbox._core.tensordict import TensorDictBase, is_tensor_collection
from tensorbox._face import forward

__all__ = ["TensorDictBase", "is_tensor_collection"]

__getattr__, __dir__ = forward(__name__, "tensorbox")
