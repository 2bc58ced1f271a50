"""A shim: ``tensorbox.interop.files``, the former name of :mod:`tensorbox.interop.tabular`.

The module of the Parquet, CSV and JSON bridges is named for its job now. Old imports
keep working: every public name is forwarded (:func:`tensorbox._face.forward`).

>>> from tensorbox.interop.files import from_parquet
>>> from_parquet.__module__
'tensorbox.interop.tabular'
"""

from tensorbox._face import forward

__getattr__, __dir__ = forward(__name__, "tensorbox.interop.tabular")
