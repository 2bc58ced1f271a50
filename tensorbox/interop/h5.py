"""A shim: ``tensorbox.interop.h5``, the former name of :mod:`tensorbox.interop._h5`.

The HDF5 adapter of ``PersistentTensorDict`` is private, and its module now says so;
code reaches it through ``PersistentTensorDict`` and ``from_h5``. Old imports
keep working: every public name is forwarded (:func:`tensorbox._face.forward`).

>>> from tensorbox.interop.h5 import H5Backend
>>> H5Backend.__module__
'tensorbox.interop._h5'
"""

from tensorbox._face import forward

__getattr__, __dir__ = forward(__name__, "tensorbox.interop._h5")
