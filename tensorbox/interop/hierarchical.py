"""``PersistentTensorDict``: a container whose leaves live in an HDF5 file or a zarr v3 store.

Nothing is read until asked: ``ptd["a"]`` reads one array, ``ptd.get_at("a", idx)``
or ``ptd[idx]`` only the rows asked for, ``ptd["group"]`` is another lazy node. Writes
into an open file (mode ``"r+"``/``"a"``/``"w"``) go to the file at once, as in
tensordict's ``PersistentTensorDict``. ``to_tensordict()`` reads the whole tree into
memory.

The batch size of every node is recorded in the file (attribute ``tensorbox_batch_size``)
by ``from_dict``/``to_h5``/``to_zarr``; a file written by another tool gets the longest
leading shape its leaves share.

A whole-container save to a path goes to a temporary name beside it and is renamed into
place once complete: a failed save leaves what was there before.

>>> import tempfile, os, torch; from tensorbox import TensorDict
>>> with tempfile.TemporaryDirectory() as d:
...     td = TensorDict({"a": torch.arange(6).view(3, 2), "b": {"c": torch.zeros(3)}}, [3])
...     ptd = td.to_h5(os.path.join(d, "x.h5"))
...     ptd.get_at("a", 1).tolist(), ptd["b"].batch_size, ptd[0:2]["b", "c"].tolist()
([2, 3], torch.Size([3]), [0.0, 0.0])
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.batchshape import BatchShaped
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tensordict import TensorDict
from tensorbox._storage.format.spec import MAX_DEPTH
from tensorbox._storage.save import Saver
from tensorbox.errors import BatchSizeError, FormatError, TensorDictKeyError
from tensorbox.interop._adapters import (
    BATCH_ATTR,
    Adapter,
    Unreadable,
    backend_for,
    recorded_batch,
    tensor_dtype,
)
from tensorbox.interop._arrays import (
    as_tensor,
    infer_batch_size,
    is_key,
    key_path,
    leaf_keys,
    numpy_of,
    read,
    read_non_tensor,
    tree_attrs,
    write,
    write_non_tensor,
    write_tree,
)
from tensorbox.interop._group_layout import GroupStore

__all__ = ["PersistentTensorDict", "as_class", "from_h5", "from_zarr"]

_NO_DEFAULT: Any = object()
_P = ParamSpec("_P")
_R = TypeVar("_R")


@overload
def _whole(method: Callable[Concatenate[TensorDict, _P], _R]) -> Callable[_P, _R]: ...


@overload  # a method whose self may be named (it takes **kwargs): its return type only
def _whole(method: Callable[..., _R]) -> Callable[..., _R]: ...


def _whole(method: Callable[..., _R]) -> Callable[..., _R]:
    """``TensorDict``'s ``method``, answered by the tree read into memory: for methods that
    read every leaf and write nothing back (a write there would not reach the file, so
    the write methods are written for the file, below). Typed and documented as the
    ``TensorDict`` method."""

    @functools.wraps(method)
    def whole(self: _WholeTreeReads, *args: Any, **kwargs: Any) -> Any:
        # by the name it has in the class (TensorDict.int is a function named "cast")
        return getattr(self.to_tensordict(), whole.__name__)(*args, **kwargs)

    return whole


class _WholeTreeReads:
    """The methods of ``TensorDict`` that read every leaf and write nothing back, one line
    each, typed and documented as ``TensorDict``'s (see :func:`_whole`). Anything else is
    an ordinary ``AttributeError``: read the tree into memory first (``to_tensordict()``).
    A class of their own, so that their names (``int``, ``bool``...) never shadow the
    builtins in the handle's own body."""

    def to_tensordict(self) -> Any:
        raise NotImplementedError

    all = _whole(TensorDict.all)
    amax = _whole(TensorDict.amax)
    amin = _whole(TensorDict.amin)
    any = _whole(TensorDict.any)
    apply = _whole(TensorDict.apply)
    bool = _whole(TensorDict.bool)
    chunk = _whole(TensorDict.chunk)
    contiguous = _whole(TensorDict.contiguous)
    cpu = _whole(TensorDict.cpu)
    cuda = _whole(TensorDict.cuda)
    double = _whole(TensorDict.double)
    exclude = _whole(TensorDict.exclude)
    filter_non_tensor_data = _whole(TensorDict.filter_non_tensor_data)
    flatten_keys = _whole(TensorDict.flatten_keys)
    float = _whole(TensorDict.float)
    half = _whole(TensorDict.half)
    int = _whole(TensorDict.int)
    long = _whole(TensorDict.long)
    mean = _whole(TensorDict.mean)
    named_apply = _whole(TensorDict.named_apply)
    numpy = _whole(TensorDict.numpy)
    select = _whole(TensorDict.select)
    split = _whole(TensorDict.split)
    state_dict = _whole(TensorDict.state_dict)
    std = _whole(TensorDict.std)
    sum = _whole(TensorDict.sum)
    to_arrow = _whole(TensorDict.to_arrow)
    to_csv = _whole(TensorDict.to_csv)
    to_dict = _whole(TensorDict.to_dict)
    to_json = _whole(TensorDict.to_json)
    to_mds = _whole(TensorDict.to_mds)
    to_module = _whole(TensorDict.to_module)
    to_namedtuple = _whole(TensorDict.to_namedtuple)
    to_pandas = _whole(TensorDict.to_pandas)
    to_parquet = _whole(TensorDict.to_parquet)
    to_safetensors = _whole(TensorDict.to_safetensors)
    to_struct_array = _whole(TensorDict.to_struct_array)
    tolist = _whole(TensorDict.tolist)
    unbind = _whole(TensorDict.unbind)
    unflatten_keys = _whole(TensorDict.unflatten_keys)
    var = _whole(TensorDict.var)


for _name, _f in list(vars(_WholeTreeReads).items()):
    if callable(_f) and hasattr(_f, "__wrapped__"):
        _f.__name__ = _f.__qualname__ = _name
        _f.__doc__ = (
            f"``TensorDict.{_name}`` of the tree read into memory (``to_tensordict()``); "
            "nothing is written to the file."
        )


class PersistentTensorDict(_WholeTreeReads, BatchShaped):
    """A lazy container over an HDF5 file (``backend="h5"``) or a zarr v3 store
    (``backend="zarr"``).

    Args:
        batch_size: the batch size; default: the one recorded in the file, else the
            longest leading shape the leaves share.
        filename: the file (HDF5) or store (zarr: a folder path or a ``zarr`` store
            object such as ``ZipStore``).
        group: an already open group of the library instead of ``filename``.
        mode: ``"r"`` (default, read-only), ``"r+"``, ``"a"`` or ``"w"``.
        backend: ``"h5"`` or ``"zarr"``.
        device: where the tensors read go.
        external_links: HDF5 only: follow links to other files (default False: such an
            entry is listed, and reading it raises naming it).
        **kwargs: for new arrays: ``h5py``'s ``create_dataset`` options or zarr's
            ``create_array`` options (``chunks`` gives the leading dims of each leaf).
    """

    def __init__(
        self,
        *,
        batch_size: Any = None,
        filename: Any = None,
        group: Any = None,
        mode: str = "r",
        backend: str = "h5",
        device: Any = None,
        external_links: bool = False,
        **kwargs: Any,
    ) -> None:
        if (filename is None) == (group is None):
            raise ValueError("PersistentTensorDict: pass filename or group (one of them)")
        if external_links and backend != "h5":
            raise ValueError(f"external_links=True: {backend} has no external links (HDF5 only)")
        options = {"external_links": external_links} if backend == "h5" else {}
        self._backend: Adapter = backend_for(backend, **options)
        self._mode = mode
        self._kwargs = kwargs
        self._device = None if device is None else torch.device(device)
        self._filename = filename
        self._path: tuple[str, ...] = ()
        if group is not None:
            self._root = group
            self._group = group
        else:
            self._root = self._backend.open(filename, mode)  # type: ignore[attr-defined]
            self._group = self._root
        # Library objects and sub-nodes by path, shared by every node of this tree (a
        # lookup in the file costs as much as a small read); cleared on structural edits.
        self._cache: dict[tuple[str, ...], Any] = {}
        self._batch_size = self._initial_batch_size(batch_size, ())

    # ------------------------------------------------------------ construction

    def _initial_batch_size(self, batch_size: Any, parent: tuple[int, ...]) -> torch.Size:
        if batch_size is not None:
            return torch.Size(batch_size)
        recorded = self._group.attrs.get(BATCH_ATTR)
        if recorded is not None:
            batch = recorded_batch(recorded, self._where())
            for shape in self._array_shapes():  # the attribute is checked, not trusted
                if tuple(shape[: len(batch)]) != batch:
                    raise FormatError(
                        f"{self._where()}: attribute {BATCH_ATTR!r} records batch size "
                        f"{list(batch)}, but an array of the group has shape {list(shape)}"
                    )
            return torch.Size(batch)
        return torch.Size(infer_batch_size(self._array_shapes(), parent))

    def _array_shapes(self) -> list[tuple[int, ...]]:
        """The shapes of this node's arrays (not its nodes, values or unreadable links)."""
        b = self._backend
        return [
            tuple(obj.shape)
            for _, obj in b.members(self._group)
            if type(obj) is not Unreadable and not b.is_group(obj) and not b.is_non_tensor(obj)
        ]

    def _child(self, name: str, obj: Any) -> PersistentTensorDict:
        child = object.__new__(type(self))
        child._backend = self._backend
        child._mode = self._mode
        child._kwargs = self._kwargs
        child._device = self._device
        child._filename = self._filename
        child._root = self._root
        child._cache = self._cache
        child._group = obj
        child._path = (*self._path, name)
        if len(child._path) > MAX_DEPTH:  # a link back to an ancestor loops forever
            raise FormatError(
                f"{child._where()}: groups nested more than {MAX_DEPTH} deep (a link to a "
                "parent group?)"
            )
        child._batch_size = child._initial_batch_size(None, tuple(self._batch_size))
        return child

    @classmethod
    def from_dict(
        cls,
        input_dict: Any,
        filename: Any,
        batch_size: Any = None,
        device: Any = None,
        backend: str = "h5",
        **kwargs: Any,
    ) -> PersistentTensorDict:
        """Write a container (or a nested dict) to a new file and open it (mode ``"r+"``).

        A path is written under a temporary name beside it, then renamed into place.
        """
        from tensorbox._core.tensordict import TensorDict

        td = input_dict
        if not getattr(type(td), "_is_tensor_collection", False):
            td = TensorDict(input_dict, batch_size=batch_size or [])
        elif batch_size is not None:
            td = td.clone(recurse=False)
            td.batch_size = batch_size
        # A save through the seam: the one saver walks and checks the tree, the layout's
        # writer stages it and writes it at once (a path: under a temporary name).
        store = GroupStore(filename, backend, mode="w")
        Saver(store, "copy", True, False, arrays=kwargs, discard=True).run(td, 0)
        if isinstance(filename, str | os.PathLike):
            return cls(filename=filename, mode="r+", backend=backend, device=device, **kwargs)
        root = store.backend.open(filename, "r+")  # type: ignore[attr-defined]
        out = cls(group=root, backend=backend, device=device, mode="r+", **kwargs)
        out._filename = filename
        return out

    @classmethod
    def from_h5(
        cls, filename: Any, mode: str = "r", batch_size: Any = None, external_links: bool = False
    ) -> Any:
        """Open an HDF5 file (read-only by default; ``external_links``: follow links to
        other files)."""
        return cls(
            filename=filename,
            mode=mode,
            batch_size=batch_size,
            backend="h5",
            external_links=external_links,
        )

    @classmethod
    def from_zarr(cls, filename: Any, mode: str = "r", batch_size: Any = None) -> Any:
        """Open a zarr v3 store (read-only by default)."""
        return cls(filename=filename, mode=mode, batch_size=batch_size, backend="zarr")

    # ------------------------------------------------------------ properties

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims every array of this node shares."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        value = torch.Size(value)
        for name, obj in self._backend.members(self._group):
            if type(obj) is Unreadable or self._backend.is_non_tensor(obj):
                continue
            shape = tuple(
                self._child(name, obj).batch_size if self._backend.is_group(obj) else obj.shape
            )
            if tuple(shape[: len(value)]) != tuple(value):
                raise BatchSizeError(
                    f"batch_size {list(value)}: entry {name!r} has leading shape {list(shape)}"
                )
        self._batch_size = value

    @property
    def device(self) -> torch.device | None:
        """Where the tensors read go (None: the CPU)."""
        return self._device

    @property
    def names(self) -> list[None]:
        """No named dims: ``None`` per batch dim."""
        return [None] * len(self._batch_size)

    @property
    def file(self) -> Any:
        """The open library object at the root (an ``h5py.File``, a ``zarr.Group``)."""
        return self._root

    @property
    def filename(self) -> Any:
        """The file or store this tree was opened from."""
        return self._filename

    def is_locked(self) -> bool:
        """True when the file is open read-only."""
        return self._mode == "r"

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    # ------------------------------------------------------------ reading

    def _node_and_name(self, path: tuple[str, ...], create: bool = False) -> tuple[Any, str]:
        node: PersistentTensorDict = self
        for part in path[:-1]:
            try:
                sub = node._get_str(part)
            except KeyError:
                if not create:
                    raise TensorDictKeyError(
                        f"key {path!r}: no entry {part!r} in {node._where()}"
                    ) from None
                node.create_nested(part)
                sub = node._get_str(part)
            if not isinstance(sub, PersistentTensorDict):
                raise TensorDictKeyError(f"key {path!r}: {part!r} is a leaf, not a node")
            node = sub
        return node, path[-1]

    def _where(self) -> str:
        base = (
            self._filename if isinstance(self._filename, str | os.PathLike) else self._backend.name
        )
        return (
            f"{os.fspath(base) if isinstance(base, os.PathLike) else base}:/{'/'.join(self._path)}"
        )

    def _member(self, name: str) -> Any:
        """The library object ``name`` of this node (``KeyError`` when missing)."""
        key = (*self._path, name)
        obj = self._cache.get(key)
        if obj is None:
            obj = self._cache[key] = self._backend.member(self._group, name)
        return obj

    def _changed(self) -> None:
        """After keys were added, removed or renamed anywhere in the tree."""
        self._cache.clear()
        self._backend.structure_changed(self._root)

    def _get_str(self, name: str, default: Any = _NO_DEFAULT) -> Any:
        try:
            obj = self._member(name)
        except KeyError:
            if default is not _NO_DEFAULT:
                return default
            raise TensorDictKeyError(f"key {name!r} not found in {self._where()}") from None
        if type(obj) is Unreadable:
            raise obj.error(name, self._where())
        if self._backend.is_group(obj):
            key = ("", *self._path, name)  # "" keeps nodes apart from arrays
            child = self._cache.get(key)
            if child is None:
                child = self._cache[key] = self._child(name, obj)
            return child
        if self._backend.is_non_tensor(obj):
            return read_non_tensor(self._backend, obj, name, self._where(), self._batch_size)
        tensor_dtype(obj.dtype, name, self._where())
        return self._to_device(as_tensor(self._backend.read_all(obj)))

    def _to_device(self, t: Tensor) -> Tensor:
        return t if self._device is None else t.to(self._device)

    def get(self, key: Any, default: Any = _NO_DEFAULT) -> Any:
        """A tensor (read now), a lazy sub-node, or a ``NonTensorData``."""
        node, name = self._node_and_name(key_path(key))
        return node._get_str(name, default)

    def _array(self, key: Any) -> tuple[PersistentTensorDict, Any]:
        node, name = self._node_and_name(key_path(key))
        try:
            obj = node._member(name)
        except KeyError:
            raise TensorDictKeyError(f"key {key!r} not found in {node._where()}") from None
        if type(obj) is Unreadable:
            raise obj.error(name, node._where())
        if self._backend.is_group(obj) or self._backend.is_non_tensor(obj):
            raise TypeError(f"key {key!r}: expected an array, found a node or non-tensor value")
        tensor_dtype(obj.dtype, name, node._where())
        return node, obj

    def get_at(self, key: Any, index: Any, default: Any = _NO_DEFAULT) -> Any:
        """Read only ``index`` of the array at ``key`` (rows, masks, coordinates...)."""
        try:
            node, arr = self._array(key)
        except KeyError:
            if default is not _NO_DEFAULT:
                return default
            raise
        return node._to_device(as_tensor(read(self._backend, arr, index)))

    def __getitem__(self, index: Any) -> Any:
        if is_key(index):
            value = self.get(index)
            return value.value if isinstance(value, NonTensorData) else value
        return self._index(index)

    def _index(self, index: Any) -> Any:
        """The rows ``index`` of every leaf, read now, as an in-memory TensorDict."""
        from tensorbox._core.tensordict import TensorDict

        probe = (
            torch.empty(self._batch_size, device="meta")[
                index if not isinstance(index, Tensor) else index.to("meta")
            ]
            if not (isinstance(index, Tensor) and index.dtype is torch.bool)
            else None
        )
        out: dict[str, Any] = {}
        b, where = self._backend, self._where()
        for name, obj in b.members(self._group):
            if type(obj) is Unreadable:
                raise obj.error(name, where)
            if b.is_group(obj):
                out[name] = self._child(name, obj)._index(index)
            elif b.is_non_tensor(obj):
                value = read_non_tensor(b, obj, name, where, None)
                out[name] = value[index] if value.stacked else value
            else:
                tensor_dtype(obj.dtype, name, where)
                out[name] = self._to_device(as_tensor(read(b, obj, index)))
        if probe is not None:
            bs = probe.shape
        else:
            bs = torch.Size([int(index.sum()), *self._batch_size[index.dim() :]])
        return TensorDict(out, batch_size=bs, device=self._device)

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Any = None,
        *,
        sort: bool = False,
    ) -> list[Any]:
        """The keys of this node (``include_nested``: nested keys as tuples too)."""
        out: list[Any] = []
        for name, obj in self._backend.members(self._group):
            if self._backend.is_group(obj):
                if not leaves_only:
                    out.append(name)
                if include_nested:
                    for k in self._child(name, obj).keys(True, leaves_only):
                        out.append((name, *(k if isinstance(k, tuple) else (k,))))
            else:
                out.append(name)
        return sorted(out, key=lambda k: k if isinstance(k, tuple) else (k,)) if sort else out

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def items(self, include_nested: bool = False, leaves_only: bool = False) -> Iterator[Any]:
        """``(key, value)`` pairs, values read as ``get`` reads them."""
        for k in self.keys(include_nested, leaves_only):
            yield k, self.get(k)

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> Iterator[Any]:
        """The values, read as ``get`` reads them."""
        for k in self.keys(include_nested, leaves_only):
            yield self.get(k)

    def __contains__(self, key: Any) -> bool:
        try:
            node, name = self._node_and_name(key_path(key))
        except KeyError:
            return False
        return self._backend.contains(node._group, name)

    def is_empty(self) -> bool:
        """True when the node has no entry."""
        return not self.keys()

    def to_tensordict(self, *, retain_none: bool | None = None) -> Any:
        """The whole tree read into memory (an ordinary ``TensorDict``)."""
        from tensorbox._core.tensordict import TensorDict

        out: dict[str, Any] = {}
        for name, obj in self._backend.members(self._group):
            if self._backend.is_group(obj):
                out[name] = self._child(name, obj).to_tensordict()
            else:
                out[name] = self._get_str(name)
        return TensorDict(out, batch_size=self._batch_size, device=self._device)

    def __eq__(self, other: Any) -> Any:
        if isinstance(other, PersistentTensorDict):
            other = other.to_tensordict()
        return self.to_tensordict() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(self.keys())
        return (
            f"PersistentTensorDict(backend={self._backend.name}, where={self._where()!r}, "
            f"batch_size={list(self._batch_size)}, fields={{{fields}}})"
        )

    # ------------------------------------------------------------ writing

    def _writable(self, what: str) -> None:
        if self._mode == "r":
            raise PermissionError(
                f"{what} on {self._where()}: the file is open read-only (mode='r'); "
                "open it with mode='r+'"
            )

    def _check_batch(self, key: str, shape: Sequence[int]) -> None:
        bs = tuple(self._batch_size)
        if tuple(shape[: len(bs)]) != bs:
            raise BatchSizeError(
                f"key {key!r}: leading shape {list(shape)} does not match the batch size "
                f"{list(bs)} of {self._where()}"
            )

    def set(self, key: Any, value: Any, *, inplace: bool = False, **kwargs: Any) -> Any:
        """Write ``value`` at ``key`` into the file now. An existing array of the same
        shape and dtype is written in place; otherwise it is replaced (with a warning
        when ``inplace=False`` asked for a new array over an existing one)."""
        self._writable("set")
        path = key_path(key)
        node, name = self._node_and_name(path, create=True)
        node._set_str(name, value, inplace)
        return self

    def _set_str(self, name: str, value: Any, inplace: bool) -> None:
        b = self._backend
        exists = b.contains(self._group, name)
        if isinstance(value, NonTensorData):
            if exists:
                b.delete(self._group, name)
            write_non_tensor(b, self._group, name, value, name)
            self._changed()
            return
        if isinstance(value, Mapping) or getattr(type(value), "_is_tensor_collection", False):
            if isinstance(value, PersistentTensorDict):
                value = value.to_tensordict()
            from tensorbox._core.tensordict import TensorDict

            if not getattr(type(value), "_is_tensor_collection", False):
                value = TensorDict(value, batch_size=self._batch_size)
            self._check_batch(name, value.batch_size)
            if exists:
                b.delete(self._group, name)
            group = b.create_group(self._group, name, tree_attrs(value))
            write_tree(b, group, value, (name,), self._kwargs)
            self._changed()
            return
        if not isinstance(value, Tensor):
            value = torch.as_tensor(value)
        self._check_batch(name, value.shape)
        data = numpy_of(value, name, b.name)
        if exists:
            obj = b.member(self._group, name)
            same = (
                not b.is_group(obj)
                and not b.is_non_tensor(obj)
                and tuple(obj.shape) == data.shape
                and np.dtype(obj.dtype) == data.dtype
            )
            if same and inplace is not False:
                b.write(obj, ..., data)
                return
            if not inplace:
                warnings.warn(
                    f"Replacing an array at {name!r} in {self._where()} (inplace=False)",
                    UserWarning,
                    stacklevel=3,
                )
            b.delete(self._group, name)
        b.create_array(self._group, name, data, self._kwargs)
        self._changed()

    def __setitem__(self, index: Any, value: Any) -> None:
        if is_key(index):
            self.set(index, value, inplace=True)
            return
        self._writable("setitem")
        for key in leaf_keys(value):
            self.set_at_(key, value.get(key), index)

    def set_at_(self, key: Any, value: Any, index: Any) -> Any:
        """Write ``value`` into ``index`` of the array at ``key``, in the file."""
        self._writable("set_at_")
        _, arr = self._array(key)
        if not isinstance(value, Tensor):
            value = torch.as_tensor(value)
        data = numpy_of(value, str(key), self._backend.name).astype(arr.dtype, copy=False)
        write(self._backend, arr, index, data)
        return self

    def fill_(self, key: Any, value: Any) -> Any:
        """Set every element of the array at ``key`` to ``value``, in the file."""
        self._writable("fill_")
        _, arr = self._array(key)
        self._backend.write(arr, ..., np.full(arr.shape, value, dtype=arr.dtype))
        return self

    def zero_(self) -> Any:
        """Set every array to zero, in the file."""
        self._writable("zero_")
        for key in self.keys(True, True):
            node, name = self._node_and_name(key_path(key))
            obj = self._backend.member(node._group, name)
            if type(obj) is not Unreadable and not self._backend.is_non_tensor(obj):
                self._backend.write(obj, ..., np.zeros(obj.shape, dtype=obj.dtype))
        return self

    def masked_fill_(self, mask: Tensor, value: Any) -> Any:
        """Fill the batch elements where ``mask`` is True, in every array."""
        self._writable("masked_fill_")
        m = mask.cpu().numpy()
        for key in self.keys(True, True):
            node, name = self._node_and_name(key_path(key))
            obj = self._backend.member(node._group, name)
            if type(obj) is Unreadable or self._backend.is_non_tensor(obj):
                continue
            data = self._backend.read_all(obj).copy()
            data[m] = value
            self._backend.write(obj, ..., data)
        return self

    def del_(self, key: Any) -> Any:
        """Remove the entry at ``key`` from the file."""
        self._writable("del_")
        node, name = self._node_and_name(key_path(key))
        if not self._backend.contains(node._group, name):
            raise TensorDictKeyError(f"key {key!r} not found in {node._where()}")
        self._backend.delete(node._group, name)
        self._changed()
        return self

    def pop(self, key: Any, default: Any = _NO_DEFAULT) -> Any:
        """Read the entry at ``key`` into memory and remove it from the file."""
        if key not in self:
            if default is _NO_DEFAULT:
                raise TensorDictKeyError(f"key {key!r} not found in {self._where()}")
            return default
        value = self.get(key)
        if isinstance(value, PersistentTensorDict):
            value = value.to_tensordict()
        self.del_(key)
        return value

    def rename_key_(self, old_key: Any, new_key: Any, safe: bool = False) -> Any:
        """Rename an entry in the file (refused when ``new_key`` exists)."""
        self._writable("rename_key_")
        old, new = key_path(old_key), key_path(new_key)
        if new in self:
            raise KeyError(f"rename_key_: key {new_key!r} already present in {self._where()}")
        src_node, src = self._node_and_name(old)
        dst_node, dst = self._node_and_name(new, create=True)
        if src_node._group is dst_node._group or src_node._path == dst_node._path:
            self._backend.move(src_node._group, src, dst)
        else:
            dst_node._set_str(dst, src_node.get(src), inplace=False)
            self._backend.delete(src_node._group, src)
        self._changed()
        return self

    def create_nested(self, key: Any) -> Any:
        """Add an empty node (group) at ``key``, with this node's batch size."""
        self._writable("create_nested")
        path = key_path(key)
        node, name = self._node_and_name(path, create=True)
        self._backend.create_group(node._group, name, {BATCH_ATTR: list(node._batch_size)})
        self._changed()
        return self

    def update(self, other: Any, **kwargs: Any) -> Any:
        """Write every leaf of ``other`` into the file (in place where the arrays match)."""
        for key in leaf_keys(other):
            self.set(key, other.get(key), inplace=True)
        return self

    # ------------------------------------------------------------ whole tree

    def auto_batch_size_(self, batch_dims: int | None = None) -> Any:
        """Set the batch size to the longest leading shape the arrays share (at most ``batch_dims`` dims)."""
        bs = infer_batch_size(self._array_shapes(), ())
        self._batch_size = torch.Size(bs[:batch_dims] if batch_dims is not None else bs)
        return self

    def memmap(self, prefix: Any = None, **kwargs: Any) -> Any:
        """Save the tree as tensorbox's memory-mapped folder (read here, then written)."""
        return self.to_tensordict().memmap(prefix, **kwargs)

    def clone(self, recurse: bool = True, *, newfile: Any = None) -> Any:
        """A copy: in memory, or in a new file/store ``newfile`` of the same backend."""
        td = self.to_tensordict()
        if newfile is None:
            return td
        return type(self).from_dict(td, newfile, backend=self._backend.name, **self._kwargs)

    def to(self, device: Any) -> Any:
        """The same file read onto ``device`` (a device), or ``to_tensordict().to(...)``."""
        if isinstance(device, str | torch.device | int):
            out = self._child_view()
            out._device = torch.device(device)
            return out
        return self.to_tensordict().to(device)

    def _child_view(self) -> PersistentTensorDict:
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        return out

    def close(self) -> None:
        """Close the file (HDF5) or the store (zarr)."""
        if not self._path:
            self._backend.close(self._root)

    def __enter__(self) -> PersistentTensorDict:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        target = self._backend.target(self._root, self._filename)
        if target is None:
            raise TypeError(
                f"{self._where()}: a PersistentTensorDict opened from a group object cannot "
                "be pickled; open it from a file name"
            )
        return {
            "backend": self._backend.name,
            "target": target,
            "mode": "r" if self._mode == "r" else "r+",
            "path": self._path,
            "batch_size": list(self._batch_size),
            "device": self._device,
            "kwargs": self._kwargs,
            "external_links": getattr(self._backend, "external_links", False),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        root = PersistentTensorDict(
            filename=state["target"],
            mode=state["mode"] if state["backend"] == "zarr" else "r",
            backend=state["backend"],
            device=state["device"],
            external_links=state.get("external_links", False),
            **state["kwargs"],
        )
        node = root
        for part in state["path"]:
            node = node._get_str(part)
        self.__dict__.update(node.__dict__)
        self._batch_size = torch.Size(state["batch_size"])


def as_class(cls: type, ptd: PersistentTensorDict) -> Any:
    """A tensorclass instance over ``ptd`` read into memory when ``cls`` is a
    tensorclass (``to_zarr`` of a tensorclass gives its class back), else ``ptd``."""
    from tensorbox._tensorclass import is_tensorclass

    if is_tensorclass(cls):
        return cls.from_tensordict(ptd.to_tensordict())  # type: ignore[attr-defined]
    return ptd


def _open(
    backend: str,
    filename: Any,
    mode: str,
    auto_batch_size: bool,
    batch_dims: int | None,
    batch_size: Any,
    **options: Any,
) -> PersistentTensorDict:
    if auto_batch_size and batch_size is not None:
        raise TypeError(
            f"from_{backend}: Conflicting batch sizes: pass batch_size or "
            "auto_batch_size=True, not both"
        )
    out = PersistentTensorDict(
        filename=filename, mode=mode, batch_size=batch_size, backend=backend, **options
    )
    if auto_batch_size:
        out.auto_batch_size_(batch_dims)
    return out


def from_h5(
    filename: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    external_links: bool = False,
) -> PersistentTensorDict:
    """Open an HDF5 file as a lazy ``PersistentTensorDict`` (read-only by default).

    An entry that cannot be read (a dangling soft link, an ``Empty`` dataset, an external
    link) is listed, and reading it raises naming the file and the key. Links to other
    files are followed only with ``external_links=True``.
    """
    return _open(
        "h5", filename, mode, auto_batch_size, batch_dims, batch_size, external_links=external_links
    )


def from_zarr(
    filename: Any,
    *,
    mode: str = "r",
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
) -> PersistentTensorDict:
    """Open a zarr v3 store (a folder path or a store object) as a lazy
    ``PersistentTensorDict`` (read-only by default)."""
    return _open("zarr", filename, mode, auto_batch_size, batch_dims, batch_size)
