"""A shim: ``tensorbox.interop.zarr``, the former name of :mod:`tensorbox.interop._zarr`.

The zarr v3 adapter of ``PersistentTensorDict`` is private, and its module now says
so; code reaches it through ``PersistentTensorDict`` and ``from_zarr``. Old imports
keep working: every public name is forwarded (:func:`tensorbox._face.forward`).

>>> from tensorbox.interop.zarr import ZarrBackend
>>> ZarrBackend.__module__
'tensorbox.interop._zarr'
"""

from tensorbox._face import forward

__getattr__, __dir__ = forward(__name__, "tensorbox.interop._zarr")
