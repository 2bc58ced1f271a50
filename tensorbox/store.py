"""A shim: tensordict's ``tensordict.store`` import path, forwarding to ``tensorbox``.

``from tensordict.store import TensorDictStore`` becomes
``from tensorbox.store import TensorDictStore`` (the Redis client loads when a store
connects, not on import).
Any other public name of ``tensorbox`` resolves here too.

>>> from tensorbox.store import LazyStackedTensorDictStore, TensorDictStore
>>> TensorDictStore.__name__
'TensorDictStore'
"""

from __future__ import annotations

from tensorbox._face import forward
from tensorbox._redis import LazyStackedTensorDictStore, TensorDictStore

__all__ = ["LazyStackedTensorDictStore", "TensorDictStore"]

__getattr__, __dir__ = forward(__name__, "tensorbox")
