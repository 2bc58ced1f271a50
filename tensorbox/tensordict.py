"""tensordict's ``tensordict.tensordict`` module, under tensorbox: the same names.

Code that imports from tensordict's submodules switches by the package name only:
``from tensordict.tensordict import TensorDict`` becomes
``from tensorbox.tensordict import TensorDict``. Any other public name of ``tensorbox``
resolves here too.

>>> from tensorbox.tensordict import TensorDict, TensorDictBase
>>> isinstance(TensorDict(), TensorDictBase)
True
"""

from __future__ import annotations

from typing import Any

from tensorbox._core.tensordict import TensorDict, TensorDictBase, is_tensor_collection

__all__ = ["TensorDict", "TensorDictBase", "is_tensor_collection"]


def __getattr__(name: str) -> Any:
    # the rest of the package's public names (LazyStackedTensorDict, stack...), on demand
    import tensorbox

    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(tensorbox, name)
