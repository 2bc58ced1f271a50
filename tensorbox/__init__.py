"""tensorbox: structured tensor data for PyTorch.

A ``TensorDict`` is a nested mapping of tensors that share leading batch dims and
behaves like one tensor; ``@tensorclass`` gives the same to your own typed classes;
``memmap``/``load_memmap`` keep either on disk as a directory tree of raw tensor files.

>>> import torch, tensorbox
>>> td = tensorbox.TensorDict({"x": torch.zeros(8, 3)}, batch_size=[8])
>>> torch.stack([td, td]).batch_size
torch.Size([2, 8])
"""

from typing import TYPE_CHECKING

# ruff: noqa: E402  (the ports are bound first, before the imports below can run the core)
# The composition root: every port of the core (``tensorbox/_core/ports.py``) bound to
# the module, or ``module:attribute``, that meets it, imported on first use. Bound
# first, before anything of the core can run.
from tensorbox._core import ports as _ports

_PORTS = {
    # the classes the core builds but cannot import (each sits above the container)
    "plain": "tensorbox._core.tensordict:TensorDict",
    "legacy_view": "tensorbox._core.lazyshape:legacy_op",
    "subview": "tensorbox._core.subview:SubTensorDict",
    "lazystack": "tensorbox._core.lazystack:LazyStackedTensorDict",
    # storage: saving and opening trees, writes to saved trees, pickled file references
    "persistence": "tensorbox._storage.api",
    "backing": "tensorbox._storage.writethrough",
    "reserve": "tensorbox._storage.reserve:reserve_leaf",
    "file_refs": "tensorbox._storage.fileref",
    "live": "tensorbox._redis:TensorDictStore",
    "weights": "tensorbox.weights",
    "distributed": "tensorbox.distributed",
    # format name -> the module of its ``from_<name>``/``to_<name>``
    "format.arrow": "tensorbox.interop.arrow",
    "format.pandas": "tensorbox.interop.arrow",
    "format.parquet": "tensorbox.interop.tabular",
    "format.csv": "tensorbox.interop.tabular",
    "format.json": "tensorbox.interop.tabular",
    "format.h5": "tensorbox.interop.hierarchical",
    "format.zarr": "tensorbox.interop.hierarchical",
    "format.safetensors": "tensorbox.interop.safetensors",
    "format.mds": "tensorbox.interop.mds",
    "format.schema": "tensorbox.interop.schema",
    "format.struct_array": "tensorbox.interop.structs",
    "format.namedtuple": "tensorbox.interop.structs",
    "format.dataclass": "tensorbox.interop.structs",
    "format.any": "tensorbox.interop.structs",
    "format.pytree": "tensorbox.interop.pytrees",
}
_ports.bind(_PORTS)

from tensorbox import _face
from tensorbox._core import pytree as _pytree  # noqa: F401  (registers TensorDict with torch's pytree and collate)

__version__ = "0.1.0"

# The public names, each listed once: type checkers read these lines, and ``_face.attach``
# reads them at runtime to build ``__all__`` and ``__getattr__`` (``tensorbox/_face.py``).
if TYPE_CHECKING:
    from tensorbox import buffer as buffer
    from tensorbox import data as data
    from tensorbox._core.functional import cat as cat
    from tensorbox._core.functional import stack as stack
    from tensorbox._core.future import TensorDictFuture as TensorDictFuture
    from tensorbox._core.getdefault import get_defaults_to_none as get_defaults_to_none
    from tensorbox._core.getdefault import set_get_defaults_to_none as set_get_defaults_to_none
    from tensorbox._core.jagged_pad import to_padded_tensor as to_padded_tensor
    from tensorbox._core.lazy_legacy import lazy_legacy as lazy_legacy
    from tensorbox._core.lazy_legacy import set_lazy_legacy as set_lazy_legacy
    from tensorbox._core.lazystack import LazyStackedTensorDict as LazyStackedTensorDict
    from tensorbox._core.lazystack import lazy_stack as lazy_stack
    from tensorbox._core.liststack import list_to_stack as list_to_stack
    from tensorbox._core.liststack import set_list_to_stack as set_list_to_stack
    from tensorbox._core.merge import merge_tensordicts as merge_tensordicts
    from tensorbox._core.nestedkey import NestedKey as NestedKey
    from tensorbox._core.nestedkey import unravel_key as unravel_key
    from tensorbox._core.nontensor import MetaData as MetaData
    from tensorbox._core.nontensor import NonTensorData as NonTensorData
    from tensorbox._core.nontensor import NonTensorStack as NonTensorStack
    from tensorbox._core.nontensor import capture_non_tensor_stack as capture_non_tensor_stack
    from tensorbox._core.nontensor import (
        set_capture_non_tensor_stack as set_capture_non_tensor_stack,
    )
    from tensorbox._core.padding import pad as pad
    from tensorbox._core.padding import pad_sequence as pad_sequence
    from tensorbox._core.repr import get_printoptions as get_printoptions
    from tensorbox._core.repr import set_printoptions as set_printoptions
    from tensorbox._core.tensordict import TensorDict as TensorDict
    from tensorbox._core.tensordict import TensorDictBase as TensorDictBase
    from tensorbox._core.tensordict import is_tensor_collection as is_tensor_collection
    from tensorbox._core.unbatched import UnbatchedTensor as UnbatchedTensor
    from tensorbox._redis import LazyStackedTensorDictStore as LazyStackedTensorDictStore
    from tensorbox._redis import TensorDictStore as TensorDictStore
    from tensorbox._storage.archive.convert import pack as pack
    from tensorbox._storage.archive.convert import unpack as unpack
    from tensorbox._storage.archive.tdnames import is_memmap_archive as is_memmap_archive
    from tensorbox._storage.archive.tdnames import pack_memmap as pack_memmap
    from tensorbox._storage.archive.tdnames import unpack_memmap as unpack_memmap
    from tensorbox._storage.memmap_tensor import MemoryMappedTensor as MemoryMappedTensor
    from tensorbox._storage.remote_tree import prefetch as prefetch
    from tensorbox._tensorclass import TensorClass as TensorClass
    from tensorbox._tensorclass import field as field
    from tensorbox._tensorclass import fields as fields
    from tensorbox._tensorclass import from_dataclass as from_dataclass
    from tensorbox._tensorclass import is_tensorclass as is_tensorclass
    from tensorbox._tensorclass import tensorclass as tensorclass
    from tensorbox.data import BatchLoader as BatchLoader
    from tensorbox.data import ImageFolderData as ImageFolderData
    from tensorbox.errors import BatchSizeError as BatchSizeError
    from tensorbox.errors import FormatError as FormatError
    from tensorbox.errors import IncompleteTreeError as IncompleteTreeError
    from tensorbox.errors import KeyCollisionError as KeyCollisionError
    from tensorbox.errors import LockedError as LockedError
    from tensorbox.errors import TensorboxError as TensorboxError
    from tensorbox.errors import TensorDictKeyError as TensorDictKeyError
    from tensorbox.interop import PersistentTensorDict as PersistentTensorDict
    from tensorbox.interop import from_arrow as from_arrow
    from tensorbox.interop import from_csv as from_csv
    from tensorbox.interop import from_h5 as from_h5
    from tensorbox.interop import from_json as from_json
    from tensorbox.interop import from_pandas as from_pandas
    from tensorbox.interop import from_parquet as from_parquet
    from tensorbox.interop import from_safetensors as from_safetensors
    from tensorbox.interop import from_zarr as from_zarr
    from tensorbox.interop import to_arrow as to_arrow
    from tensorbox.interop import to_safetensors as to_safetensors
    from tensorbox.utils import convert_ellipsis_to_idx as convert_ellipsis_to_idx

# What loads on first use, by module: the data loaders and the augmentation buffer (and,
# through them, Pillow and tqdm), the redis client, the bridges (pyarrow, h5py, zarr,
# safetensors), the zip code of ``pack``/``unpack``, the remote trees and the
# ``return_early`` future. ``import tensorbox`` stays as light as the containers it offers.
__getattr__, __dir__, __all__ = _face.attach(
    __name__,
    __file__,
    lazy=(
        "tensorbox.data",
        "tensorbox.buffer",
        "tensorbox._redis",
        "tensorbox.interop",
        "tensorbox._storage.archive",
        "tensorbox._storage.remote_tree",
        "tensorbox._core.future",
    ),
)
