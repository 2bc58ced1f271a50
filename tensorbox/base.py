"""tensordict's ``tensordict.base`` module, under tensorbox: the same names.

``from tensordict.base import TensorDictBase`` becomes
``from tensorbox.base import TensorDictBase``. Any other public name of ``tensorbox``
resolves here too.

>>> from tensorbox.base import TensorDictBase, is_tensor_collection
>>> from tensorbox import TensorDict
>>> is_tensor_collection(TensorDict()), issubclass(TensorDict, TensorDictBase)
(True, True)
"""

from __future__ import annotations

from typing import Any

from tensorbox._core.tensordict import TensorDictBase, is_tensor_collection

__all__ = ["TensorDictBase", "is_tensor_collection"]


def __getattr__(name: str) -> Any:
    import tensorbox

    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(tensorbox, name)
