"""tensordict's ``tensordict.store`` module, under tensorbox: the same names.

``from tensordict.store import TensorDictStore`` becomes
``from tensorbox.store import TensorDictStore`` (the Redis client loads when a store
connects, not on import).

>>> from tensorbox.store import LazyStackedTensorDictStore, TensorDictStore
>>> TensorDictStore.__name__
'TensorDictStore'
"""

from __future__ import annotations

from typing import Any

from tensorbox._redis import LazyStackedTensorDictStore, TensorDictStore

__all__ = ["LazyStackedTensorDictStore", "TensorDictStore"]


def __getattr__(name: str) -> Any:
    import tensorbox

    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(tensorbox, name)
