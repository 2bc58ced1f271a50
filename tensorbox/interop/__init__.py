"""Bridges to the formats users already have: Arrow, Parquet, pandas, CSV, JSON,
safetensors, HDF5, zarr and MDS.

One module per format family; each imports its library (pyarrow, safetensors, h5py,
zarr, streaming) on first call, so importing this package loads none of them, and a
missing one raises an ``ImportError`` naming the ``tensorbox[extra]`` to install.

- :mod:`tensorbox.interop.arrow`: ``from_arrow``/``to_arrow`` and pandas;
  :mod:`tensorbox.interop.tabular`: Parquet (whole, or row group by row group with
  ``ParquetRowGroups``), CSV and JSON files, through Arrow.
- :mod:`tensorbox.interop.safetensors`: ``from_safetensors``/``to_safetensors``.
- :mod:`tensorbox.interop.hierarchical`: ``PersistentTensorDict``, a lazy container whose
  leaves live in an HDF5 file or a zarr v3 store (through the private adapters
  ``_h5``/``_zarr``; ``tensorbox.interop.h5`` and ``.zarr`` are their former names).
- :mod:`tensorbox.interop.mds`: ``to_mds`` for mosaicml-streaming.
- :mod:`tensorbox.interop.schema`: ``from_schema``, zeros allocated in the storage that
  will hold them (memory, memmap, HDF5, zarr, Redis).

>>> import tensorbox.interop as interop
>>> sorted(interop.__all__)[:3]
['ParquetRowGroups', 'PersistentTensorDict', 'from_arrow']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorbox import _face

# The public names, each listed once (``tensorbox/_face.py``); all load on first use.
if TYPE_CHECKING:
    from tensorbox.interop.arrow import from_arrow as from_arrow
    from tensorbox.interop.arrow import from_pandas as from_pandas
    from tensorbox.interop.arrow import to_arrow as to_arrow
    from tensorbox.interop.hierarchical import PersistentTensorDict as PersistentTensorDict
    from tensorbox.interop.hierarchical import from_h5 as from_h5
    from tensorbox.interop.hierarchical import from_zarr as from_zarr
    from tensorbox.interop.safetensors import from_safetensors as from_safetensors
    from tensorbox.interop.safetensors import to_safetensors as to_safetensors
    from tensorbox.interop.schema import from_schema as from_schema
    from tensorbox.interop.tabular import ParquetRowGroups as ParquetRowGroups
    from tensorbox.interop.tabular import from_csv as from_csv
    from tensorbox.interop.tabular import from_json as from_json
    from tensorbox.interop.tabular import from_parquet as from_parquet

__getattr__, __dir__, __all__ = _face.attach(__name__, __file__, lazy=("tensorbox.interop",))
