"""A shim: tensordict's ``tensordict.persistent`` import path, forwarding to ``tensorbox``.

``from tensordict.persistent import PersistentTensorDict`` becomes
``from tensorbox.persistent import PersistentTensorDict`` (h5py and zarr load when a
file is opened, not on import).
Any other public name of ``tensorbox`` resolves here too.

>>> from tensorbox.persistent import PersistentTensorDict
>>> PersistentTensorDict.__name__
'PersistentTensorDict'
"""

from __future__ import annotations

from tensorbox._face import forward
from tensorbox.interop.hierarchical import PersistentTensorDict

__all__ = ["PersistentTensorDict"]

__getattr__, __dir__ = forward(__name__, "tensorbox")
