"""A shim: tensordict's ``tensordict.tensordict`` import path, forwarding to ``tensorbox``.

Code that imports from tensordict's submodules switches by the package name only:
``from tensordict.tensordict import TensorDict`` becomes
``from tensorbox.tensordict import TensorDict``. Any other public name of ``tensorbox``
resolves here too.

>>> from tensorbox.tensordict import TensorDict, TensorDictBase
>>> isinstance(TensorDict(), TensorDictBase)
True
"""

from __future__ import annotations

from tensorbox._core.tensordict import TensorDict, TensorDictBase, is_tensor_collection
from tensorbox._face import forward

__all__ = ["TensorDict", "TensorDictBase", "is_tensor_collection"]

__getattr__, __dir__ = forward(__name__, "tensorbox")
