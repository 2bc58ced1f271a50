"""Bridges to the formats users already have: Arrow, Parquet, pandas, CSV, JSON,
safetensors, HDF5, zarr and MDS.

One module per format family; each imports its library (pyarrow, safetensors, h5py,
zarr, streaming) on first call, so importing this package loads none of them, and a
missing one raises an ``ImportError`` naming the ``tensorbox[extra]`` to install.

- :mod:`tensorbox.interop.arrow`: ``from_arrow``/``to_arrow`` and pandas;
  :mod:`tensorbox.interop.files`: Parquet (whole, or row group by row group with
  ``ParquetRowGroups``), CSV and JSON files, through Arrow.
- :mod:`tensorbox.interop.safetensors`: ``from_safetensors``/``to_safetensors``.
- :mod:`tensorbox.interop.persistent`: ``PersistentTensorDict``, a lazy container whose
  leaves live in an HDF5 file (:mod:`~tensorbox.interop.h5`) or a zarr v3 store
  (:mod:`~tensorbox.interop.zarr`).
- :mod:`tensorbox.interop.mds`: ``to_mds`` for mosaicml-streaming.
- :mod:`tensorbox.interop.schema`: ``from_schema``, zeros allocated in the storage that
  will hold them (memory, memmap, HDF5, zarr, Redis).

>>> import tensorbox.interop as interop
>>> sorted(interop.__all__)[:3]
['ParquetRowGroups', 'PersistentTensorDict', 'from_arrow']
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorbox.interop.arrow import from_arrow, from_pandas, to_arrow
    from tensorbox.interop.files import ParquetRowGroups, from_csv, from_json, from_parquet
    from tensorbox.interop.persistent import PersistentTensorDict, from_h5, from_zarr
    from tensorbox.interop.safetensors import from_safetensors, to_safetensors
    from tensorbox.interop.schema import from_schema

__all__ = [
    "ParquetRowGroups",
    "PersistentTensorDict",
    "from_arrow",
    "from_csv",
    "from_h5",
    "from_json",
    "from_pandas",
    "from_parquet",
    "from_safetensors",
    "from_schema",
    "from_zarr",
    "to_arrow",
    "to_safetensors",
]

#: Which module of this package defines each name (loaded on first use).
LAZY = {
    "ParquetRowGroups": "files",
    "from_arrow": "arrow",
    "from_csv": "files",
    "from_json": "files",
    "from_pandas": "arrow",
    "from_parquet": "files",
    "to_arrow": "arrow",
    "PersistentTensorDict": "persistent",
    "from_h5": "persistent",
    "from_zarr": "persistent",
    "from_safetensors": "safetensors",
    "from_schema": "schema",
    "to_safetensors": "safetensors",
}


def __getattr__(name: str) -> Any:
    if name in LAZY:
        value = getattr(import_module(f"{__name__}.{LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY})
