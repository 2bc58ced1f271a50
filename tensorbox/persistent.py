"""tensordict's ``tensordict.persistent`` module, under tensorbox: the same names.

``from tensordict.persistent import PersistentTensorDict`` becomes
``from tensorbox.persistent import PersistentTensorDict`` (h5py and zarr load when a
file is opened, not on import).

>>> from tensorbox.persistent import PersistentTensorDict
>>> PersistentTensorDict.__name__
'PersistentTensorDict'
"""

from __future__ import annotations

from typing import Any

from tensorbox.interop.persistent import PersistentTensorDict

__all__ = ["PersistentTensorDict"]


def __getattr__(name: str) -> Any:
    import tensorbox

    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(tensorbox, name)
