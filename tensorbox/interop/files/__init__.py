"""A shim: ``tensorbox.interop.files``, the former name of :mod:`tensorbox.interop.tabular`.

The module of the Parquet, CSV and JSON bridges is named for its job now; imports of the
old name keep working and forward every public name there. The shim is a package of one
file rather than ``files.py`` so that version control carries edits made to the old
module under its old name to the renamed one.

>>> import tensorbox.interop.tabular as new
>>> from tensorbox.interop.files import from_parquet as old
>>> old is new.from_parquet
True
"""

from tensorbox._face import forward

__getattr__, __dir__ = forward(__name__, "tensorbox.interop.tabular")
