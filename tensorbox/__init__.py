"""tensorbox: structured tensor data for PyTorch.

A ``TensorDict`` is a nested mapping of tensors that share leading batch dims and
behaves like one tensor; ``@tensorclass`` gives the same to your own typed classes;
``memmap``/``load_memmap`` keep either on disk as a directory tree of raw tensor files.

>>> import torch, tensorbox
>>> td = tensorbox.TensorDict({"x": torch.zeros(8, 3)}, batch_size=[8])
>>> torch.stack([td, td]).batch_size
torch.Size([2, 8])
"""

from typing import TYPE_CHECKING, Any

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
    "transport": "tensorbox.distributed",
    # format name -> the module of its ``from_<name>``/``to_<name>``
    "format.arrow": "tensorbox.interop.arrow",
    "format.pandas": "tensorbox.interop.arrow",
    "format.parquet": "tensorbox.interop.files",
    "format.csv": "tensorbox.interop.files",
    "format.json": "tensorbox.interop.files",
    "format.h5": "tensorbox.interop.persistent",
    "format.zarr": "tensorbox.interop.persistent",
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

# tensordict's submodule of the same name, loaded before the decorator is bound below so
# that ``tensorbox.tensorclass`` stays the decorator (importing a submodule later would
# rebind the package attribute to the module).
from tensorbox import tensorclass as _tensorclass_module  # noqa: F401
from tensorbox._core import pytree as _pytree  # noqa: F401  (registers TensorDict with torch's pytree and collate)
from tensorbox._core.functional import cat, stack
from tensorbox._core.getdefault import get_defaults_to_none, set_get_defaults_to_none
from tensorbox._core.jagged_pad import to_padded_tensor
from tensorbox._core.keys import NestedKey, unravel_key
from tensorbox._core.lazystack import LazyStackedTensorDict, lazy_stack
from tensorbox._core.legacy import lazy_legacy, set_lazy_legacy
from tensorbox._core.liststack import list_to_stack, set_list_to_stack
from tensorbox._core.merge import merge_tensordicts
from tensorbox._core.nontensor import (
    MetaData,
    NonTensorData,
    NonTensorStack,
    capture_non_tensor_stack,
    set_capture_non_tensor_stack,
)
from tensorbox._core.padding import pad, pad_sequence
from tensorbox._core.repr import get_printoptions, set_printoptions
from tensorbox._core.tensordict import TensorDict, TensorDictBase, is_tensor_collection
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._tensorclass import (
    TensorClass,
    field,
    fields,
    from_dataclass,
    is_tensorclass,
    tensorclass,
)
from tensorbox.errors import (
    BatchSizeError,
    FormatError,
    IncompleteTreeError,
    KeyCollisionError,
    LockedError,
    TensorboxError,
    TensorDictKeyError,
)
from tensorbox.utils import convert_ellipsis_to_idx

__version__ = "0.1.0"

__all__ = [
    "BatchLoader",
    "BatchSizeError",
    "FormatError",
    "ImageFolderData",
    "IncompleteTreeError",
    "KeyCollisionError",
    "LazyStackedTensorDict",
    "LazyStackedTensorDictStore",
    "LockedError",
    "MemoryMappedTensor",
    "MetaData",
    "NestedKey",
    "NonTensorData",
    "NonTensorStack",
    "PersistentTensorDict",
    "TensorClass",
    "TensorDict",
    "TensorDictBase",
    "TensorDictFuture",
    "TensorDictKeyError",
    "TensorDictStore",
    "TensorboxError",
    "UnbatchedTensor",
    "cat",
    "convert_ellipsis_to_idx",
    "field",
    "fields",
    "from_arrow",
    "from_csv",
    "from_dataclass",
    "from_h5",
    "from_json",
    "from_pandas",
    "from_parquet",
    "from_safetensors",
    "from_zarr",
    "get_defaults_to_none",
    "get_printoptions",
    "is_memmap_archive",
    "is_tensor_collection",
    "is_tensorclass",
    "lazy_legacy",
    "lazy_stack",
    "capture_non_tensor_stack",
    "list_to_stack",
    "merge_tensordicts",
    "pack",
    "pack_memmap",
    "pad",
    "pad_sequence",
    "set_get_defaults_to_none",
    "set_lazy_legacy",
    "set_capture_non_tensor_stack",
    "set_list_to_stack",
    "set_printoptions",
    "prefetch",
    "stack",
    "tensorclass",
    "to_arrow",
    "to_padded_tensor",
    "to_safetensors",
    "unpack",
    "unpack_memmap",
    "unravel_key",
]

# The data loaders and the augmentation buffer (and, through them, Pillow and tqdm) load
# on first use: `import tensorbox` stays as light as the containers it offers.
if TYPE_CHECKING:
    from tensorbox import buffer as buffer  # the modules too: `tensorbox.data.transforms`
    from tensorbox import data as data
    from tensorbox._core.future import TensorDictFuture
    from tensorbox._redis import LazyStackedTensorDictStore, TensorDictStore
    from tensorbox._storage.archive.convert import pack, unpack
    from tensorbox._storage.archive.tdnames import is_memmap_archive, pack_memmap, unpack_memmap
    from tensorbox._storage.remote_tree import prefetch
    from tensorbox.data import BatchLoader, ImageFolderData
    from tensorbox.interop import (
        PersistentTensorDict,
        from_arrow,
        from_csv,
        from_h5,
        from_json,
        from_pandas,
        from_parquet,
        from_safetensors,
        from_zarr,
        to_arrow,
        to_safetensors,
    )

# ``pack``/``unpack`` (folder <-> one-file archive) load the zip code on first use too.
_LAZY = {
    "BatchLoader": "data",
    "ImageFolderData": "data",
    "pack": "_storage.archive.convert",
    "unpack": "_storage.archive.convert",
    "pack_memmap": "_storage.archive.tdnames",  # tensordict's names for the three
    "unpack_memmap": "_storage.archive.tdnames",
    "is_memmap_archive": "_storage.archive.tdnames",
    "prefetch": "_storage.remote_tree",  # trees behind URLs: their rows fetched ahead
    "TensorDictStore": "_redis",  # the redis client loads on first use only
    "LazyStackedTensorDictStore": "_redis",
    # the bridges to other formats (pyarrow, h5py, zarr, safetensors load on first call)
    "PersistentTensorDict": "interop",
    "from_arrow": "interop",
    "from_csv": "interop",
    "from_h5": "interop",
    "from_json": "interop",
    "from_pandas": "interop",
    "from_parquet": "interop",
    "from_safetensors": "interop",
    "from_zarr": "interop",
    "to_arrow": "interop",
    "to_safetensors": "interop",
    "TensorDictFuture": "_core.future",  # the return_early result: loaded when first used
}
_LAZY_MODULES = ("buffer", "data")


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES or name in _LAZY:
        from importlib import import_module

        module = import_module(f"{__name__}.{_LAZY.get(name, name)}")
        value = module if name in _LAZY_MODULES else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_LAZY_MODULES})
