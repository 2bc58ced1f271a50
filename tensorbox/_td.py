"""TensorDict: a nested mapping of string keys to tensors that share leading batch dims.

Storage is one plain ``dict`` per level (``_tensordict``) plus a ``torch.Size``
batch size, an optional device and a lock flag. Key lookup is written out here
(it is the hottest path); everything else is a one-line method that calls the
module owning the job: ``_index`` (batch indexing), ``_ops`` (apply, to, clone,
traversal, repr), ``_keyops`` (select, exclude, update, flatten_keys),
``_stackcat`` (batch-shape ops, stack, cat), ``_compare`` (==, all, arithmetic),
``_persist`` (the disk), ``nn`` (model weights), ``distributed`` (through the
``_td_dist`` mixin).

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"obs": torch.zeros(4, 3), "info": {"step": torch.arange(4)}}, batch_size=[4])
>>> td["info", "step"][2].item()
2
>>> td[1:3].batch_size
torch.Size([2])
>>> td[torch.tensor([0, 3])]["obs"].shape
torch.Size([2, 3])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Self

import torch
from torch import Tensor

from . import _compare, _index, _ops, _stackcat
from ._entry_methods import EntryMethods
from ._keys import NestedKey, format_key, unravel_key
from ._nontensor import NonTensorData
from ._shape import as_batch_size, check_leaf_shape
from ._shape_methods import ShapeMethods
from ._td_dist import DistributedMethods
from ._td_tensor_methods import TensorMethods
from .errors import BatchSizeError, LockedError, TensorDictKeyError

__all__ = ["TensorDict", "is_tensor_collection"]

_Size = torch.Size
_NO_DEFAULT: Any = object()
_NO_DEVICE = _ops._NO_DEVICE
_NTD = NonTensorData


def is_tensor_collection(obj: Any) -> bool:
    """True for a TensorDict or a tensorclass instance (or either class)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "_is_tensor_collection", False)


def _is_key(index: Any) -> bool:
    if type(index) is str:
        return True
    if type(index) is tuple and index:
        return all(type(i) is str or (type(i) is tuple and _is_key(i)) for i in index)
    return False


class TensorDict(TensorMethods, ShapeMethods, EntryMethods, DistributedMethods):
    """A dict of tensors (and nested TensorDicts) sharing leading batch dims.

    Args:
        source: a mapping of keys to tensors, nested mappings, TensorDicts,
            tensorclass instances or plain Python values (kept as non-tensor data).
        batch_size: the leading dims every leaf shares (int or sequence). Default ``[]``.
        device: if given, every leaf is moved there now and on every later ``set``.
        names: not supported (dim names); must be None. Kept so that tensordict
            code passing ``names=None`` keeps working.
        lock: lock the container once built (see ``lock_()``).
        **kwargs: more entries, as in ``dict(**kwargs)``.

    >>> td = TensorDict(a=torch.zeros(2, 5), batch_size=2)
    >>> td
    TensorDict(batch_size=[2], device=None, fields={a: float32[5]})
    """

    __slots__ = ("__weakref__", "_batch_size", "_device", "_locked", "_tensordict")
    _is_tensor_collection = True

    _tensordict: dict[str, Any]
    _batch_size: torch.Size
    _device: torch.device | None
    _locked: bool

    def __init__(
        self,
        source: Mapping[str, Any] | None = None,
        batch_size: Sequence[int] | int | torch.Size | None = None,
        device: torch.device | str | int | None = None,
        *,
        names: Sequence[str] | None = None,
        lock: bool = False,
        **kwargs: Any,
    ) -> None:
        if names is not None:
            raise TypeError(
                f"names={names!r}: tensorbox has no named batch dims; drop the argument "
                "(to store an entry called 'names', pass it inside the source dict)"
            )
        self._batch_size = as_batch_size(batch_size)
        self._device = None if device is None else _ops.as_device(device)
        self._locked = False
        self._tensordict = {}
        if source is not None:
            if type(source) is dict:
                pass
            elif isinstance(source, TensorDict):
                source = source._tensordict
            elif not isinstance(source, Mapping):
                raise TypeError(
                    f"TensorDict source must be a mapping of keys to values, "
                    f"got {type(source).__name__}"
                )
            _ops.fill_entries(self, source, ())
        if kwargs:
            _ops.fill_entries(self, kwargs, ())
        if lock:
            _ops.set_locked(self, True)

    @classmethod
    def _new_unsafe(
        cls, source: dict[str, Any], batch_size: torch.Size, device: torch.device | None
    ) -> Self:
        """Build without any check: for results whose validity follows from the inputs."""
        self = object.__new__(cls)
        self._tensordict = source
        self._batch_size = batch_size
        self._device = device
        self._locked = False
        return self

    @classmethod
    def from_dict(
        cls,
        source: Mapping[str, Any],
        batch_size: Sequence[int] | int | None = None,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: torch.device | str | None = None,
    ) -> Self:
        """Build from a (nested) dict. ``auto_batch_size=True`` takes the longest common
        leading shape of all leaves (at most ``batch_dims`` dims when given).

        >>> TensorDict.from_dict({"a": torch.zeros(3, 4), "b": {"c": torch.zeros(3, 4, 5)}},
        ...                      auto_batch_size=True).batch_size
        torch.Size([3, 4])
        """
        out = cls(source, batch_size=batch_size, device=device)
        if auto_batch_size and batch_size is None:
            _ops.set_batch_size_nested(out, _ops.common_batch_size(out, batch_dims))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A nested ``dict`` of tensors (and plain values for non-tensor entries)."""
        out: dict[str, Any] = {}
        for k, v in self._tensordict.items():
            if isinstance(v, Tensor):
                out[k] = v
            elif type(v) is _NTD:
                out[k] = v.value
            else:
                out[k] = _ops._inner(v).to_dict()
        return out

    # ------------------------------------------------------------------ shape

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims shared by every leaf."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Sequence[int] | int) -> None:
        new = as_batch_size(value)
        for path, leaf in _ops.iter_shaped(self):
            check_leaf_shape(format_key(path), leaf.shape, new)
        _ops.set_batch_size_nested(self, new)

    @property
    def shape(self) -> torch.Size:
        return self._batch_size

    @property
    def batch_dims(self) -> int:
        return len(self._batch_size)

    @property
    def ndim(self) -> int:
        return len(self._batch_size)

    def dim(self) -> int:
        return len(self._batch_size)

    def numel(self) -> int:
        """Number of batch elements (the product of the batch size)."""
        return math.prod(self._batch_size)

    def size(self, dim: int | None = None) -> torch.Size | int:
        return self._batch_size if dim is None else self._batch_size[dim]

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    @property
    def device(self) -> torch.device | None:
        """The device every leaf lives on, or None when not fixed."""
        return self._device

    @property
    def is_locked(self) -> bool:
        return self._locked

    def lock_(self) -> Self:
        """Forbid adding, removing or replacing entries (in-place writes stay allowed)."""
        _ops.set_locked(self, True)
        return self

    def unlock_(self) -> Self:
        _ops.set_locked(self, False)
        return self

    # ------------------------------------------------------------ key access

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:
            try:
                v = self._tensordict[index]
            except KeyError:
                raise _ops.missing_key_error(self, (index,), 0) from None
            return v.value if type(v) is _NTD else v
        if type(index) is tuple and index and type(index[0]) is str:
            return self._get_path(index)
        return _index.getitem(self, index)

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The value at ``key``, or ``default`` (None) when it is missing.

        A malformed key (not a str or tuple of str) raises ``TensorDictKeyError``.
        """
        if type(key) is str:
            v = self._tensordict.get(key, _NO_DEFAULT)
            if v is _NO_DEFAULT:
                if default is _NO_DEFAULT:
                    raise _ops.missing_key_error(self, (key,), 0)
                return default
            return v.value if type(v) is _NTD else v
        if type(key) is not tuple:
            key = unravel_key(key)  # raises for anything but a (str subclass) key
        try:
            return self._get_path(key)
        except TensorDictKeyError:
            unravel_key(key)  # a malformed key raises, whatever the default
            if default is _NO_DEFAULT:
                raise
            return default

    def _get_path(self, path: Any) -> Any:
        """The value at a tuple key; the common all-str, all-present case is one loop."""
        node: Any = self
        try:
            for part in path:
                node = node._tensordict[part]
        except (KeyError, AttributeError, TypeError):
            flat = unravel_key(path)
            if flat != path:
                return self._get_path(flat)
            raise _ops.find_missing(self, flat) from None
        # Through a tensorclass, node._tensordict[part] was a TensorDict lookup that
        # already unwrapped non-tensor values.
        return node.value if type(node) is _NTD else node

    def __contains__(self, key: object) -> bool:
        if type(key) is str:
            return key in self._tensordict
        if _is_key(key):
            try:
                self._get_path(key)
            except TensorDictKeyError:
                return False
            return True
        raise TypeError(
            f"'in' looks up keys (str or tuple of str), got {type(key).__name__}; "
            "to search values compare with == and use .any()"
        )

    def set(self, key: NestedKey, value: Any, inplace: bool = False) -> Self:
        """Set ``key`` to ``value``; tuple keys create missing nested levels.

        ``inplace=True`` copies into the existing tensor (allowed when locked).
        """
        if type(key) is str:
            if inplace and key in self._tensordict:
                return self._copy_into(self, (key,), value)
            self._set_str(key, value, (key,))
            return self
        path = unravel_key(key)
        node = self._node_for(path) if len(path) > 1 else self
        if inplace and path[-1] in node._tensordict:
            return self._copy_into(node, path, value)
        node._set_str(path[-1], value, path)
        return self

    def _existing_parent(self, path: tuple[str, ...]) -> TensorDict:
        """The container holding ``path[-1]``; every level must exist already."""
        node: Any = self
        for part in path[:-1]:
            node = node._tensordict.get(part)
            if node is None or isinstance(node, Tensor) or type(node) is _NTD:
                raise _ops.find_missing(self, path)
            node = _ops._inner(node)
        return node

    def set_(self, key: NestedKey, value: Any) -> Self:
        """Copy ``value`` into the existing entry ``key`` (works on locked containers)."""
        path = unravel_key(key)
        node = self._existing_parent(path)
        if path[-1] not in node._tensordict:
            raise _ops.find_missing(self, path)
        return self._copy_into(node, path, value)

    def _copy_into(self, node: TensorDict, path: tuple[str, ...], value: Any) -> Self:
        current = node._tensordict[path[-1]]
        if isinstance(current, Tensor):
            try:
                _ops.copy_leaf(current, value)
            except RuntimeError as err:
                raise BatchSizeError(f"cannot copy into {format_key(path)}: {err}") from None
        elif type(current) is _NTD:
            node._tensordict[path[-1]] = node._prepare(path[-1], value, path)
        else:
            current.update_(value)
        return self

    def _node_for(self, path: tuple[str, ...]) -> TensorDict:
        """The container that holds ``path[-1]``, creating missing levels."""
        node: TensorDict = self
        for part in path[:-1]:  # the common case: every level exists and is a TensorDict
            nxt = node._tensordict.get(part)
            if type(nxt) is not TensorDict:
                break
            node = nxt
        else:
            return node
        node = self
        for i, part in enumerate(path[:-1]):
            nxt = node._tensordict.get(part)
            if nxt is None:
                if node._locked:
                    raise LockedError(
                        f"cannot create {format_key(path[: i + 1])}: the TensorDict is locked"
                    )
                nxt = TensorDict._new_unsafe({}, node._batch_size, node._device)
                node._tensordict[part] = nxt
            elif isinstance(nxt, Tensor) or type(nxt) is _NTD:
                raise TensorDictKeyError(
                    f"cannot set {format_key(path)}: {format_key(path[: i + 1])} is a leaf, "
                    "not a TensorDict"
                )
            node = _ops._inner(nxt)
        return node

    def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None:
        if self._locked:
            raise LockedError(
                f"cannot set {format_key(path)}: the TensorDict is locked "
                "(unlock_() first, or write in place with set_ / td[idx] = ...)"
            )
        self._tensordict[key] = self._prepare(key, value, path)

    # Validate a value for this level and convert it to a stored entry (see _ops).
    _prepare = _ops.prepare_entry

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            self._set_str(index, value, (index,))
        elif _is_key(index):
            self.set(index, value)
        else:
            _index.setitem_batch(self, index, value)

    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    def del_(self, key: NestedKey) -> Self:
        """Remove ``key`` (a tuple key removes a nested entry)."""
        path = unravel_key(key)
        node = self._existing_parent(path)
        store = node._tensordict
        if path[-1] not in store:
            raise _ops.find_missing(self, path)
        if node._locked:
            raise LockedError(f"cannot delete {format_key(path)}: the TensorDict is locked")
        del store[path[-1]]
        return self

    def pop(self, key: NestedKey, default: Any = _NO_DEFAULT) -> Any:
        """Remove ``key`` and return its value (or ``default`` when missing)."""
        try:
            value = self.get(key, _NO_DEFAULT)
        except TensorDictKeyError:
            if default is _NO_DEFAULT:
                raise
            return default
        self.del_(key)
        return value

    def rename_key_(self, old: NestedKey, new: NestedKey) -> Self:
        """Move the entry ``old`` to ``new``."""
        if self._locked:
            raise LockedError(f"cannot rename {old!r}: the TensorDict is locked")
        self.set(new, self.pop(old))
        return self

    def keys(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> Sequence[NestedKey] | Any:
        """Keys of this level (a live view); with ``include_nested`` or ``leaves_only``
        a list, with nested keys as tuples."""
        if not include_nested and not leaves_only:
            return self._tensordict.keys()
        return _ops.keys_list(self, include_nested, leaves_only)

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> Iterator[tuple[NestedKey, Any]]:
        """``(key, value)`` pairs; non-tensor entries give their plain value."""
        for k, v in _ops.iter_items(self, include_nested, leaves_only):
            yield k, (v.value if type(v) is _NTD else v)

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> Iterator[Any]:
        for _, v in self.items(include_nested, leaves_only):
            yield v

    def is_empty(self) -> bool:
        """True when no tensor leaf exists at any depth."""
        return not _ops.tensor_leaves(self)

    def __iter__(self) -> Iterator[Self]:
        """Iterate over the first batch dim, like a tensor (use ``keys()`` for keys)."""
        if not self._batch_size:
            raise TypeError("iteration over a TensorDict with batch_size [] (use keys())")
        return iter(self.unbind(0))

    # ---------------------------------------------------------- batch indexing

    def __getitems__(self, indices: Sequence[int] | Tensor) -> Self:
        """Batched fetch for ``torch.utils.data.DataLoader``: one gather per leaf."""
        return _index.gather_rows(self, indices)

    # ---------------------------------------------------------- tensor ops

    def apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        batch_size: Sequence[int] | None = None,
        device: Any = _NO_DEVICE,
        inplace: bool = False,
    ) -> Self:
        """``fn`` on every tensor leaf (with the matching leaves of ``others``).

        A ``None`` result drops the leaf; ``batch_size`` declares a new batch size.
        """
        return _ops.apply(self, fn, others, batch_size, device, inplace, named=False)

    def named_apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        nested_keys: bool = False,
        batch_size: Sequence[int] | None = None,
    ) -> Self:
        """Like ``apply`` but ``fn(key, leaf, *others)``; nested keys are tuples if asked."""
        return _ops.apply(
            self, fn, others, batch_size, _NO_DEVICE, False, named=True, nested_keys=nested_keys
        )

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """Move to a device and/or cast. A dtype casts floating-point leaves only,
        unless ``floating_only=False``. ``non_blocking`` is passed to each copy.

        >>> td = TensorDict(x=torch.zeros(2), y=torch.arange(2), batch_size=[2])
        >>> out = td.to(torch.float16)
        >>> out["x"].dtype, out["y"].dtype
        (torch.float16, torch.int64)
        """
        return _ops.to(self, args, kwargs)

    def cpu(self) -> Self:
        return self.to("cpu")

    def cuda(self, device: int | str | None = None) -> Self:
        return self.to(
            torch.device("cuda")
            if device is None
            else torch.device("cuda", device)
            if isinstance(device, int)
            else torch.device(device)
        )

    def clear_device_(self) -> Self:
        """Forget the fixed device (leaves stay where they are)."""
        _ops.clear_device(self)
        return self

    def pin_memory(self, num_threads: int | None = None) -> Self:
        """Copy every leaf into page-locked memory (threads for many leaves)."""
        return _ops.pin_memory(self, num_threads)

    def is_pinned(self) -> bool:
        return all(v.is_pinned() for v in _ops.tensor_leaves(self))

    def clone(self, recurse: bool = True) -> Self:
        """A copy; ``recurse=False`` copies the structure and shares the tensors."""
        return _ops.clone(self, recurse)

    def copy(self) -> Self:
        return _ops.clone(self, False)

    def contiguous(self) -> Self:
        return _ops.map_leaves(self, Tensor.contiguous)

    def detach(self) -> Self:
        return _ops.map_leaves(self, Tensor.detach)

    def detach_(self) -> Self:
        return self.apply(Tensor.detach_, inplace=True)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        return self.apply(lambda t: t.requires_grad_(requires_grad), inplace=True)

    def zero_(self) -> Self:
        return self.apply(Tensor.zero_, inplace=True)

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Fill the leaf ``key`` with ``value`` in place."""
        self[key].fill_(value)
        return self

    def share_memory_(self) -> Self:
        """Move every leaf into shared memory so worker processes see writes."""
        return self.apply(Tensor.share_memory_, inplace=True)

    def is_shared(self) -> bool:
        return all(v.is_shared() for v in _ops.tensor_leaves(self))

    def update(
        self,
        other: Mapping[str, Any] | TensorDict,
        *,
        inplace: bool = False,
        keys_to_update: Sequence[NestedKey] | None = None,
    ) -> Self:
        """Merge ``other`` in, recursing into nested containers present on both sides."""
        _ops.update(self, other, inplace, keys_to_update)
        return self

    def update_(self, other: Mapping[str, Any] | TensorDict) -> Self:
        """Copy the values of ``other`` into the existing entries, in place; every key
        of ``other`` must exist here (works on locked containers)."""
        _ops.update(self, other, True, None, strict=True)
        return self

    def copy_(self, other: Mapping[str, Any] | TensorDict) -> Self:
        return self.update_(other)

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> Self:
        """Only the given (possibly nested) keys; missing keys raise unless ``strict=False``."""
        return _ops.select(self, keys, inplace, strict)

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> Self:
        """Everything but the given (possibly nested) keys."""
        return _ops.exclude(self, keys, inplace)

    def flatten_keys(self, separator: str = ".") -> Self:
        """One level with keys joined by ``separator``: ``{"a": {"b": x}}`` -> ``{"a.b": x}``."""
        return _ops.flatten_keys(self, separator)

    def unflatten_keys(self, separator: str = ".") -> Self:
        """The inverse of ``flatten_keys``."""
        return _ops.unflatten_keys(self, separator)

    # shape ops on batch dims (feature dims follow along untouched)
    def reshape(self, *shape: Any) -> Self:
        return _stackcat.reshape(self, shape, "reshape")

    def view(self, *shape: Any) -> Self:
        return _stackcat.reshape(self, shape, "view")

    def unsqueeze(self, dim: int) -> Self:
        return _stackcat.unsqueeze(self, dim)

    def squeeze(self, dim: int | None = None) -> Self:
        return _stackcat.squeeze(self, dim)

    def permute(self, *dims: Any) -> Self:
        return _stackcat.permute(self, dims)

    def transpose(self, dim0: int, dim1: int) -> Self:
        return _stackcat.transpose(self, dim0, dim1)

    def expand(self, *shape: Any) -> Self:
        return _stackcat.reshape(self, shape, "expand")

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        return _stackcat.flatten(self, start_dim, end_dim)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        return _stackcat.unflatten(self, dim, sizes)

    def narrow(self, dim: int, start: int, length: int) -> Self:
        return _stackcat.narrow(self, dim, start, length)

    def unbind(self, dim: int = 0) -> tuple[Self, ...]:
        return _stackcat.unbind(self, dim)

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        return _stackcat.split(self, split_size, dim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        return _stackcat.chunk(self, chunks, dim)

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        return _stackcat.torch_function(func, args, kwargs or {})

    # ------------------------------------------------------- comparison, reprs

    def __eq__(self, other: object) -> Self:  # type: ignore[override]
        return _compare.compare(self, other, torch.eq)

    def __ne__(self, other: object) -> Self:  # type: ignore[override]
        return _compare.compare(self, other, torch.ne)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise RuntimeError(
            "the truth value of a TensorDict is ambiguous: use (a == b).all() or .any() "
            "to reduce a comparison, len(td.keys()) to test for keys, td.is_empty() for leaves"
        )

    def all(self, dim: int | None = None) -> bool | Self:
        """True when every element of every leaf is true (per batch element with ``dim``)."""
        return _compare.reduce_bool(self, dim, torch.all)

    def any(self, dim: int | None = None) -> bool | Self:
        return _compare.reduce_bool(self, dim, torch.any)

    def __invert__(self) -> Self:
        return self.apply(torch.logical_not)

    def __and__(self, other: Any) -> Self:
        return _compare.binary(self, other, torch.logical_and)

    def __or__(self, other: Any) -> Self:
        return _compare.binary(self, other, torch.logical_or)

    def __add__(self, other: Any) -> Self:
        return _compare.binary(self, other, torch.add)

    def __sub__(self, other: Any) -> Self:
        return _compare.binary(self, other, torch.sub)

    def __mul__(self, other: Any) -> Self:
        return _compare.binary(self, other, torch.mul)

    def __truediv__(self, other: Any) -> Self:
        return _compare.binary(self, other, torch.div)

    def __neg__(self) -> Self:
        return self.apply(torch.neg)

    __radd__ = __add__
    __rmul__ = __mul__

    def __repr__(self) -> str:
        return _ops.format_repr(self)

    # ------------------------------------------------------------ pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return _ops.reduce(self)

    # ---------------------------------------------------------- persistence

    def memmap_(
        self,
        prefix: Any = None,
        *,
        num_threads: int = 0,
        copy_existing: bool = False,
        fsync: bool = False,
    ) -> Self:
        """Write every tensor under ``prefix`` (one file each), map them back, and lock."""
        from . import _persist

        return _persist.memmap_(
            self, prefix, num_threads=num_threads, copy_existing=copy_existing, fsync=fsync
        )

    def memmap(self, prefix: Any = None, *, num_threads: int = 0, fsync: bool = False) -> Self:
        """A memory-mapped copy written under ``prefix`` (this one is unchanged)."""
        from . import _persist

        return _persist.memmap(self, prefix, num_threads=num_threads, fsync=fsync)

    save = memmap
    dumps = memmap

    def memmap_like(self, prefix: Any = None, *, num_threads: int = 0, fsync: bool = False) -> Self:
        """Files of the same structure, allocated but not filled (no data copied)."""
        from . import _persist

        return _persist.memmap_like(self, prefix, num_threads=num_threads, fsync=fsync)

    @classmethod
    def load_memmap(
        cls, prefix: Any, *, device: Any = None, non_blocking: bool = False, mode: str = "r+"
    ) -> Any:
        """Open a saved tree lazily: nothing is read until a leaf is used.

        ``mode="r"`` maps copy-on-write: writes stay in this process, never reach the files.
        """
        from . import _persist

        return _persist.load_memmap(
            cls, prefix, device=device, non_blocking=non_blocking, mode=mode
        )

    load = load_memmap

    def is_memmap(self) -> bool:
        """True when every tensor leaf is backed by a file of a saved tree."""
        from . import _persist

        return _persist.is_memmap(self)

    # ---------------------------------------------------------------- weights

    @classmethod
    def from_module(
        cls, module: torch.nn.Module, as_module: bool = False, *, non_persistent: bool = False
    ) -> Any:
        """Parameters and buffers of ``module``, nested by submodule, sharing storage."""
        from . import nn

        return nn.from_module(module, as_module=as_module, non_persistent=non_persistent)

    def to_module(
        self,
        module: torch.nn.Module,
        *,
        inplace: bool = False,
        return_swap: bool = True,
        strict: bool = True,
        chunk_bytes: int | None = None,
    ) -> Any:
        """Put these weights into ``module``; returns what was there before."""
        from . import nn

        return nn.to_module(
            self,
            module,
            inplace=inplace,
            return_swap=return_swap,
            strict=strict,
            chunk_bytes=chunk_bytes,
        )

    def state_dict(self, *, keep_vars: bool = False) -> dict[str, Tensor]:
        """A flat ``{"dotted.key": tensor}`` dict, as ``nn.Module.state_dict()``."""
        from . import nn

        return nn.state_dict(self, keep_vars=keep_vars)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, *, chunk_bytes: int | None = None
    ) -> Self:
        """Copy a dotted-key state dict into the matching leaves (in chunks)."""
        from . import nn

        nn.load_state_dict(self, state_dict, strict=strict, chunk_bytes=chunk_bytes)
        return self
