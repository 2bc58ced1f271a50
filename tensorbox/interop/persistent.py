"""A shim: ``tensorbox.interop.persistent``, the former name of ``interop.hierarchical``.

The module of ``PersistentTensorDict`` (a lazy container over an HDF5 file or a zarr v3
store, the hierarchical formats) is named for its job now, apart from the storage
layer's ``persist`` names; imports of the old name keep working and forward every public
name there. tensordict's own path, ``tensorbox.persistent``, is a shim of its own.

>>> import tensorbox.interop.hierarchical as new
>>> from tensorbox.interop.persistent import PersistentTensorDict as old
>>> old is new.PersistentTensorDict
True
"""

from tensorbox._face import forward

__getattr__, __dir__ = forward(__name__, "tensorbox.interop.hierarchical")
