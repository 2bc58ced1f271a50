"""tensorbox: structured tensor data for PyTorch.

A ``TensorDict`` is a nested mapping of tensors that share leading batch dims and
behaves like one tensor; ``@tensorclass`` gives the same to your own typed classes;
``memmap``/``load_memmap`` keep either on disk as a directory tree of raw tensor files.

>>> import torch, tensorbox
>>> td = tensorbox.TensorDict({"x": torch.zeros(8, 3)}, batch_size=[8])
>>> torch.stack([td, td]).batch_size
torch.Size([2, 8])
"""

from . import _pytree  # noqa: F401  (registers TensorDict with torch's pytree and collate)
from ._keys import NestedKey
from ._memmap_tensor import MemoryMappedTensor
from ._nontensor import NonTensorData
from ._tensorclass import TensorClass, field, fields, is_tensorclass, tensorclass
from ._tensordict import TensorDict, is_tensor_collection
from .data import BatchLoader, ImageFolderData
from .errors import (
    BatchSizeError,
    FormatError,
    IncompleteTreeError,
    KeyCollisionError,
    LockedError,
    TensorboxError,
    TensorDictKeyError,
)

__version__ = "0.1.0"

__all__ = [
    "BatchLoader",
    "BatchSizeError",
    "FormatError",
    "ImageFolderData",
    "IncompleteTreeError",
    "KeyCollisionError",
    "LockedError",
    "MemoryMappedTensor",
    "NestedKey",
    "NonTensorData",
    "TensorClass",
    "TensorDict",
    "TensorDictKeyError",
    "TensorboxError",
    "field",
    "fields",
    "is_tensor_collection",
    "is_tensorclass",
    "tensorclass",
]
