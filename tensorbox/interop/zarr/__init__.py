"""A shim: ``tensorbox.interop.zarr``, the former name of :mod:`tensorbox.interop._zarr`.

The zarr v3 adapter of ``PersistentTensorDict`` is private, and its module now says so;
imports of the old name keep working and forward every public name there. Code reaches
the adapter through ``PersistentTensorDict`` and ``from_zarr``. The shim is a package of
one file rather than ``zarr.py`` so that version control carries edits made to the old
module under its old name to the renamed one.

>>> import tensorbox.interop._zarr as new
>>> from tensorbox.interop.zarr import ZarrBackend as old
>>> old is new.ZarrBackend
True
"""

from tensorbox._face import forward

__getattr__, __dir__ = forward(__name__, "tensorbox.interop._zarr")
