"""A shim: ``tensorbox.interop.h5``, the former name of :mod:`tensorbox.interop._h5`.

The HDF5 adapter of ``PersistentTensorDict`` is private, and its module now says so;
imports of the old name keep working and forward every public name there. Code reaches
the adapter through ``PersistentTensorDict`` and ``from_h5``. The shim is a package of
one file rather than ``h5.py`` so that version control carries edits made to the old
module under its old name to the renamed one.

>>> import tensorbox.interop._h5 as new
>>> from tensorbox.interop.h5 import H5Backend as old
>>> old is new.H5Backend
True
"""

from tensorbox._face import forward

__getattr__, __dir__ = forward(__name__, "tensorbox.interop._h5")
