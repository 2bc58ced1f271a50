"""``TensorClass``: the base class of every tensorclass, holding the container methods.

An instance holds one slot, ``_tensordict``, the ``TensorDict`` that stores
every field (non-tensor values as ``NonTensorData``). Each container method is
written out here, typed to return ``Self``: it calls the TensorDict method and
wraps the result with ``_from_tensordict``, which allocates the object and sets
the slot, nothing else (no validation, no ``__post_init__``). Fields are
properties made per class by ``_tc_build``.

>>> import torch
>>> from tensorbox import TensorClass
>>> class Pair(TensorClass):
...     a: torch.Tensor
...     b: torch.Tensor
>>> p = Pair(torch.zeros(4, 2), torch.ones(4), batch_size=[4])
>>> p[1:3].a.shape, type(p.reshape(2, 2)).__name__
(torch.Size([2, 2]), 'Pair')
>>> torch.stack([p, p]).batch_size
torch.Size([2, 4])
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self, dataclass_transform, overload

import torch
from torch import Tensor

from ._entry_methods import EntryMethods
from ._keys import NestedKey
from ._nontensor import NonTensorData
from ._shape_methods import ShapeMethods
from ._tc_build import MISSING, Field, build_class, field, set_field
from ._td import TensorDict
from ._td_dist import DistributedMethods
from ._td_tensor_methods import TensorMethods
from .errors import TensorDictKeyError

__all__ = ["TensorClass"]

_new = object.__new__
# Sets the slot past our __setattr__; a C call that torch.compile can trace (the slot's
# member descriptor __set__ would be faster but dynamo cannot trace it).
_osa = object.__setattr__
_new_td = TensorDict._new_unsafe
_KEEP: Any = object()  # "argument not given", so the core applies its own default
_Index = int | slice | Tensor | Sequence[Any] | tuple[Any, ...] | None


class _BatchSizeField:
    """Typing only: ``batch_size`` is a keyword of ``__init__`` and reads as ``torch.Size``."""

    @overload
    def __get__(self, obj: None, owner: Any) -> _BatchSizeField: ...
    @overload
    def __get__(self, obj: object, owner: Any) -> torch.Size: ...
    def __get__(self, obj: Any, owner: Any) -> Any:
        raise NotImplementedError

    def __set__(self, obj: Any, value: Sequence[int] | int | torch.Size | None) -> None:
        raise NotImplementedError


class _DeviceField:
    """Typing only: ``device`` is a keyword of ``__init__`` and reads as a device or None."""

    @overload
    def __get__(self, obj: None, owner: Any) -> _DeviceField: ...
    @overload
    def __get__(self, obj: object, owner: Any) -> torch.device | None: ...
    def __get__(self, obj: Any, owner: Any) -> Any:
        raise NotImplementedError

    def __set__(self, obj: Any, value: torch.device | str | int | None) -> None:
        raise NotImplementedError


if TYPE_CHECKING:
    # For type checkers only, TensorClass has a dataclass_transform metaclass (PEP 681):
    # that makes every subclass dataclass-like, and it is the one form under which the
    # base's own keyword-only fields (batch_size, device) join every subclass's __init__
    # while the base counts as neither frozen nor non-frozen (so frozen=True subclasses
    # type-check). At runtime the metaclass is plain ``type``: no metaclass cost.

    @dataclass_transform(field_specifiers=(field, dataclasses.field, Field, dataclasses.Field))
    class _Meta(type):
        pass

else:
    _Meta = type


class TensorClass(TensorMethods, ShapeMethods, EntryMethods, DistributedMethods, metaclass=_Meta):
    """Base class of tensorclasses: annotate fields, get ``__init__`` and every container op.

    ``class Foo(TensorClass, frozen=True, kw_only=True)`` takes the class options of
    ``@tensorclass``. The constructor takes the fields, then keyword-only
    ``batch_size`` (default ``[]``) and ``device``.
    """

    __slots__ = ("__weakref__", "_tensordict")
    _is_tensor_collection: ClassVar[bool] = True
    __tc_names__: ClassVar[frozenset[str]] = frozenset()
    __tc_fields__: ClassVar[tuple[Field, ...]] = ()
    __tc_frozen__: ClassVar[bool] = False

    if TYPE_CHECKING:
        # Seen by type checkers as keyword-only fields, so the synthesized
        # __init__ reads (fields..., *, batch_size=None, device=None).
        batch_size: _BatchSizeField = field(default=None, kw_only=True)  # type: ignore[assignment]
        device: _DeviceField = field(default=None, kw_only=True)  # type: ignore[assignment]
        _tensordict: TensorDict = field(init=False)
    else:

        @property
        def batch_size(self) -> torch.Size:
            """The leading dims shared by every tensor field."""
            return self._tensordict._batch_size

        @batch_size.setter
        def batch_size(self, value: Sequence[int] | int) -> None:
            self._tensordict.batch_size = value

        @property
        def device(self) -> torch.device | None:
            """The device every tensor field lives on, or None when not fixed."""
            return self._tensordict._device

    def __init_subclass__(
        cls,
        *,
        frozen: bool | None = None,
        kw_only: bool | None = None,
        shadow: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        build_class(cls, TensorClass, {"frozen": frozen, "kw_only": kw_only, "shadow": shadow})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("TensorClass is a base class: subclass it and annotate fields")

    # ------------------------------------------------------------ building

    @classmethod
    def _from_tensordict(cls, td: TensorDict) -> Self:
        """Wrap ``td`` without any check and without running ``__post_init__``."""
        self = _new(cls)
        _osa(self, "_tensordict", td)
        return self

    @classmethod
    def from_tensordict(cls, td: TensorDict, *, run_post_init: bool = True) -> Self:
        """Build from a TensorDict holding the fields (missing ones take their defaults).

        The tensors are shared, not copied. Unknown keys are refused. ``__post_init__``
        runs, as this brings in outside data; pass ``run_post_init=False`` to skip it.
        """
        if not isinstance(td, TensorDict):
            raise TypeError(f"{cls.__name__}.from_tensordict expects a TensorDict, got {td!r}")
        extra = sorted(set(td.keys()) - cls.__tc_names__)
        if extra:
            raise TensorDictKeyError(
                f"{cls.__name__}.from_tensordict: keys {extra!r} are not fields of "
                f"{cls.__name__} (fields: {[f.name for f in cls.__tc_fields__]!r})"
            )
        out = cls._from_tensordict(TensorDict._new_unsafe({}, td.batch_size, td.device))
        for f in cls.__tc_fields__:
            if f.name in td._tensordict:
                value = td._tensordict[f.name]
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                raise TensorDictKeyError(
                    f"{cls.__name__}.from_tensordict: required field {f.name!r} is missing "
                    f"(keys: {sorted(td.keys())!r})"
                )
            set_field(out, f.name, value)
        if run_post_init and hasattr(out, "__post_init__"):
            out.__post_init__()
        return out

    def to_tensordict(self) -> TensorDict:
        """The fields as a plain TensorDict (nested tensorclasses too); tensors are shared."""
        return _to_td(self._tensordict)

    @classmethod
    def from_dict(
        cls,
        source: Mapping[str, Any],
        batch_size: Sequence[int] | int | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> Self:
        """Build from a mapping of field names to values (``__post_init__`` runs)."""
        return cls(**source, batch_size=batch_size, device=device)

    def to_dict(self) -> dict[str, Any]:
        """A nested ``dict`` of the fields (tensors shared, plain values as they are)."""
        return self._tensordict.to_dict()

    def replace(self, *args: Any, **changes: Any) -> Self:
        """A copy with some fields changed, as ``dataclasses.replace`` (``__post_init__`` runs).

        Tensors are shared; ``batch_size`` and ``device`` are kept unless given. With one
        positional mapping or container, tensordict's form: a shallow copy updated by it.
        """
        if args:
            return EntryMethods.replace(self, *args, **changes)
        cls = type(self)
        kwargs: dict[str, Any] = {"batch_size": self.batch_size, "device": self.device}
        for f in cls.__tc_fields__:
            if f.name in changes:
                if not f.init:
                    raise ValueError(f"{cls.__name__}.replace: field {f.name!r} has init=False")
                kwargs[f.name] = changes.pop(f.name)
            elif f.init:
                kwargs[f.name] = getattr(self, f.name)
        for k in ("batch_size", "device"):
            if k in changes:
                kwargs[k] = changes.pop(k)
        if changes:
            raise TypeError(f"{cls.__name__}.replace: unknown fields {sorted(changes)!r}")
        return cls(**kwargs)

    __replace__ = replace  # copy.replace (Python 3.13+)

    # ------------------------------------------------------------ attributes

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if name in cls.__tc_names__:
            if cls.__tc_frozen__:
                raise dataclasses.FrozenInstanceError(
                    f"cannot assign to field {name!r} of frozen {cls.__name__}; "
                    f"use .replace({name}=...) for a changed copy"
                )
            set_field(self, name, value)
            return
        if hasattr(type(getattr(cls, name, None)), "__set__"):  # a user property, a slot
            object.__setattr__(self, name, value)
            return
        raise AttributeError(
            f"{cls.__name__} has no field {name!r}; its fields are "
            f"{[f.name for f in cls.__tc_fields__]!r}. Declare it in the class "
            f"(e.g. {name}: torch.Tensor) to store it"
        )

    def __delattr__(self, name: str) -> None:
        cls = type(self)
        if name in cls.__tc_names__:
            raise AttributeError(
                f"cannot delete field {name!r} of {cls.__name__}; assign None instead"
            )
        object.__delattr__(self, name)

    @property
    def shape(self) -> torch.Size:
        return self._tensordict._batch_size

    @property
    def batch_dims(self) -> int:
        return len(self._tensordict._batch_size)

    @property
    def ndim(self) -> int:
        return len(self._tensordict._batch_size)

    def dim(self) -> int:
        return len(self._tensordict._batch_size)

    def numel(self) -> int:
        """Number of batch elements."""
        return self._tensordict.numel()

    @overload
    def size(self, dim: None = None) -> torch.Size: ...
    @overload
    def size(self, dim: int) -> int: ...
    def size(self, dim: int | None = None) -> torch.Size | int:
        bs = self._tensordict._batch_size
        return bs if dim is None else bs[dim]

    def __len__(self) -> int:
        return len(self._tensordict)

    @property
    def is_locked(self) -> bool:
        return self._tensordict.is_locked

    def lock_(self) -> Self:
        """Forbid replacing fields (in-place writes to the tensors stay allowed)."""
        self._tensordict.lock_()
        return self

    def unlock_(self) -> Self:
        self._tensordict.unlock_()
        return self

    # ------------------------------------------------------------ keys

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The value at ``key`` (a field name or a path into a nested field), or ``default``."""
        return self._tensordict.get(key, default)

    def set(self, key: NestedKey, value: Any) -> Self:
        """Set a field (``key`` a name) or a nested entry (``key`` a tuple path)."""
        self[key] = value
        return self

    def keys(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> Sequence[NestedKey] | Any:
        return self._tensordict.keys(include_nested, leaves_only)

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> Iterator[tuple[NestedKey, Any]]:
        return self._tensordict.items(include_nested, leaves_only)

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> Iterator[Any]:
        return self._tensordict.values(include_nested, leaves_only)

    def __contains__(self, key: object) -> bool:
        return key in self._tensordict

    def is_empty(self) -> bool:
        return self._tensordict.is_empty()

    # ------------------------------------------------------------ indexing

    @overload
    def __getitem__(self, index: str) -> Any: ...
    @overload
    def __getitem__(self, index: _Index) -> Self: ...
    def __getitem__(self, index: Any) -> Any:
        if type(index) is int:
            # The hottest path (one sample of a dataset): one dict comprehension, two
            # allocations, no validation (tensor indexing cannot change feature dims).
            td = self._tensordict
            bs = td._batch_size
            if bs and -bs[0] <= index < bs[0]:
                out = _new(type(self))
                store = {k: v[index] for k, v in td._tensordict.items()}
                _osa(out, "_tensordict", _new_td(store, bs[1:], td._device))
                return out
        elif type(index) is str or (type(index) is tuple and index and type(index[0]) is str):
            return self._tensordict[index]
        out = _new(type(self))
        _osa(out, "_tensordict", self._tensordict[index])
        return out

    def __setitem__(self, index: Any, value: Any) -> None:
        """``tc[rows] = other`` writes into the selected rows in place; ``tc["f"] = v`` sets f."""
        if type(index) is str or (type(index) is tuple and index and type(index[0]) is str):
            name = index if type(index) is str else index[0]
            if name not in type(self).__tc_names__:
                raise TensorDictKeyError(
                    f"{type(self).__name__} has no field {name!r} "
                    f"(fields: {[f.name for f in type(self).__tc_fields__]!r})"
                )
            if type(index) is str or len(index) == 1:
                setattr(self, name, value)
            else:
                self._tensordict.set(index, value)
            return
        self._tensordict[index] = value

    def __getitems__(self, indices: Sequence[int] | Tensor) -> Self:
        """Batched fetch for ``DataLoader``: one gather per tensor field."""
        return self._from_tensordict(self._tensordict.__getitems__(indices))

    def __iter__(self) -> Iterator[Self]:
        """Iterate over the first batch dim."""
        return iter(self.unbind(0))

    # ------------------------------------------------------------ tensor ops

    def apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        batch_size: Sequence[int] | None = None,
        device: Any = _KEEP,
        inplace: bool = False,
    ) -> Self:
        """``fn`` on every tensor (with the matching tensors of ``others``); see TensorDict.apply.

        ``device`` (when given) is the device of the result; by default it is this one's.
        """
        td = self._tensordict
        kw = {} if device is _KEEP else {"device": device}
        out = td.apply(fn, *others, batch_size=batch_size, inplace=inplace, **kw)
        return self if out is td else self._from_tensordict(out)

    def named_apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        nested_keys: bool = False,
        batch_size: Sequence[int] | None = None,
    ) -> Self:
        return self._from_tensordict(
            self._tensordict.named_apply(
                fn, *others, nested_keys=nested_keys, batch_size=batch_size
            )
        )

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """Move to a device and/or cast (a dtype casts floating-point tensors only)."""
        td = self._tensordict
        out = td.to(*args, **kwargs)
        return self if out is td else self._from_tensordict(out)

    def cpu(self) -> Self:
        return self.to("cpu")

    def cuda(self, device: int | str | None = None) -> Self:
        return self._from_tensordict(self._tensordict.cuda(device))

    def clear_device_(self) -> Self:
        self._tensordict.clear_device_()
        return self

    def pin_memory(self, num_threads: int | None = None) -> Self:
        return self._from_tensordict(self._tensordict.pin_memory(num_threads))

    def is_pinned(self) -> bool:
        return self._tensordict.is_pinned()

    def clone(self, recurse: bool = True) -> Self:
        """A copy; ``recurse=False`` copies the structure and shares the tensors."""
        return self._from_tensordict(self._tensordict.clone(recurse))

    def copy(self) -> Self:
        return self._from_tensordict(self._tensordict.clone(False))

    def __copy__(self) -> Self:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self._from_tensordict(copy.deepcopy(self._tensordict, memo))

    def contiguous(self) -> Self:
        return self._from_tensordict(self._tensordict.contiguous())

    def detach(self) -> Self:
        return self._from_tensordict(self._tensordict.detach())

    def detach_(self) -> Self:
        self._tensordict.detach_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        self._tensordict.requires_grad_(requires_grad)
        return self

    def zero_(self) -> Self:
        self._tensordict.zero_()
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        self._tensordict.fill_(key, value)
        return self

    def share_memory_(self) -> Self:
        self._tensordict.share_memory_()
        return self

    def is_shared(self) -> bool:
        return self._tensordict.is_shared()

    def update(
        self,
        other: Mapping[str, Any] | TensorDict | TensorClass,
        *,
        inplace: bool = False,
        keys_to_update: Sequence[NestedKey] | None = None,
    ) -> Self:
        """Set the fields found in ``other`` (unknown keys are refused)."""
        self._check_keys(other, "update")
        src = other._tensordict if isinstance(other, TensorClass) else other
        self._tensordict.update(src, inplace=inplace, keys_to_update=keys_to_update)
        return self

    def update_(self, other: Mapping[str, Any] | TensorDict | TensorClass) -> Self:
        """Copy the values of ``other`` into the existing tensors, in place."""
        self._check_keys(other, "update_")
        self._tensordict.update_(other._tensordict if isinstance(other, TensorClass) else other)
        return self

    def copy_(self, other: Mapping[str, Any] | TensorDict | TensorClass) -> Self:
        return self.update_(other)

    def _check_keys(self, other: Any, what: str) -> None:
        names = type(self).__tc_names__
        keys = other._tensordict.keys() if _is_coll(other) else other.keys()
        extra = [k for k in keys if k not in names]
        if extra:
            raise TensorDictKeyError(
                f"{type(self).__name__}.{what}: {extra!r} are not fields "
                f"(fields: {[f.name for f in type(self).__tc_fields__]!r})"
            )

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> Self:
        """Only the given fields; reading a dropped field then raises ``AttributeError``."""
        td = self._tensordict.select(*keys, inplace=inplace, strict=strict)
        return self if inplace else self._from_tensordict(td)

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> Self:
        td = self._tensordict.exclude(*keys, inplace=inplace)
        return self if inplace else self._from_tensordict(td)

    # ------------------------------------------------------------ batch shape

    def reshape(self, *shape: Any) -> Self:
        return self._from_tensordict(self._tensordict.reshape(*shape))

    def view(self, *shape: Any) -> Self:
        return self._from_tensordict(self._tensordict.view(*shape))

    def unsqueeze(self, dim: int) -> Self:
        return self._from_tensordict(self._tensordict.unsqueeze(dim))

    def squeeze(self, dim: int | None = None) -> Self:
        return self._from_tensordict(self._tensordict.squeeze(dim))

    def permute(self, *dims: Any) -> Self:
        return self._from_tensordict(self._tensordict.permute(*dims))

    def transpose(self, dim0: int, dim1: int) -> Self:
        return self._from_tensordict(self._tensordict.transpose(dim0, dim1))

    def expand(self, *shape: Any) -> Self:
        return self._from_tensordict(self._tensordict.expand(*shape))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        return self._from_tensordict(self._tensordict.flatten(start_dim, end_dim))

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        return self._from_tensordict(self._tensordict.unflatten(dim, sizes))

    def unbind(self, dim: int = 0) -> tuple[Self, ...]:
        wrap = self._from_tensordict
        return tuple([wrap(td) for td in self._tensordict.unbind(dim)])

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        wrap = self._from_tensordict
        return tuple([wrap(td) for td in self._tensordict.split(split_size, dim)])

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        wrap = self._from_tensordict
        return tuple([wrap(td) for td in self._tensordict.chunk(chunks, dim)])

    def narrow(self, dim: int, start: int, length: int) -> Self:
        return self._from_tensordict(self._tensordict.narrow(dim, start, length))

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        # torch.stack/cat of tensorclasses: the core rewraps with type(first)._from_tensordict.
        return TensorDict.__torch_function__(func, types, args, kwargs)

    # ------------------------------------------------------------ comparison, math

    def __eq__(self, other: object) -> Self:  # type: ignore[override]
        return self._binary(other, TensorDict.__eq__)

    def __ne__(self, other: object) -> Self:  # type: ignore[override]
        return self._binary(other, TensorDict.__ne__)

    __hash__ = None  # type: ignore[assignment]

    def _binary(self, other: Any, op: Callable[..., Any]) -> Self:
        other = other._tensordict if _is_coll(other) else other
        out = op(self._tensordict, other)
        # NotImplemented passes through, so Python tries the reflected operation.
        return out if out is NotImplemented else self._from_tensordict(out)

    def __bool__(self) -> bool:
        raise RuntimeError(
            f"the truth value of a {type(self).__name__} is ambiguous: use (a == b).all() "
            "or .any() to reduce a comparison"
        )

    @overload
    def all(self, dim: None = None) -> bool: ...
    @overload
    def all(self, dim: int) -> Self: ...
    def all(self, dim: int | None = None) -> bool | Self:
        """True when every element of every tensor field is true (per element with ``dim``)."""
        out: Any = self._tensordict.all(dim)
        return out if dim is None else self._from_tensordict(out)

    @overload
    def any(self, dim: None = None) -> bool: ...
    @overload
    def any(self, dim: int) -> Self: ...
    def any(self, dim: int | None = None) -> bool | Self:
        out: Any = self._tensordict.any(dim)
        return out if dim is None else self._from_tensordict(out)

    def __invert__(self) -> Self:
        return self._from_tensordict(self._tensordict.__invert__())

    def __neg__(self) -> Self:
        return self._from_tensordict(self._tensordict.__neg__())

    def __and__(self, other: Any) -> Self:
        return self._binary(other, TensorDict.__and__)

    def __or__(self, other: Any) -> Self:
        return self._binary(other, TensorDict.__or__)

    def __add__(self, other: Any) -> Self:
        return self._binary(other, TensorDict.__add__)

    def __sub__(self, other: Any) -> Self:
        return self._binary(other, TensorDict.__sub__)

    def __mul__(self, other: Any) -> Self:
        return self._binary(other, TensorDict.__mul__)

    def __truediv__(self, other: Any) -> Self:
        return self._binary(other, TensorDict.__truediv__)

    __radd__ = __add__
    __rmul__ = __mul__

    def __repr__(self) -> str:
        return _format(self)

    # ------------------------------------------------------------ pickling

    def __reduce__(self) -> tuple[Any, ...]:
        # The TensorDict pickles memory-mapped tensors by file reference.
        return (_rebuild, (type(self), self._tensordict))

    # ------------------------------------------------------------ persistence

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

        out: Self = _persist.memmap_(
            self, prefix, num_threads=num_threads, copy_existing=copy_existing, fsync=fsync
        )
        return out

    def memmap(self, prefix: Any = None, *, num_threads: int = 0, fsync: bool = False) -> Self:
        """A memory-mapped copy written under ``prefix`` (this one is unchanged)."""
        from . import _persist

        out: Self = _persist.memmap(self, prefix, num_threads=num_threads, fsync=fsync)
        return out

    def save(self, prefix: Any = None, *, num_threads: int = 0, fsync: bool = False) -> Self:
        """Same as ``memmap``: write under ``prefix``, return the memory-mapped copy."""
        return self.memmap(prefix, num_threads=num_threads, fsync=fsync)

    def memmap_like(self, prefix: Any = None, *, num_threads: int = 0, fsync: bool = False) -> Self:
        """Files of the same structure, allocated but not filled (no data copied)."""
        from . import _persist

        out: Self = _persist.memmap_like(self, prefix, num_threads=num_threads, fsync=fsync)
        return out

    @classmethod
    def load_memmap(
        cls, prefix: Any, *, device: Any = None, non_blocking: bool = False, mode: str = "r+"
    ) -> Self:
        """Open a tree saved from this class, lazily (nothing read until a tensor is used).

        ``mode="r"`` maps copy-on-write: writes stay in this process, never reach the files.
        """
        from . import _persist

        out: Any = _persist.load_memmap(
            cls, prefix, device=device, non_blocking=non_blocking, mode=mode
        )
        keys = set(out._tensordict._tensordict) if isinstance(out, cls) else set()
        if not isinstance(out, cls) or keys != cls.__tc_names__:
            raise TypeError(
                f"{cls.__name__}.load_memmap({str(prefix)!r}): the saved tree holds "
                f"{_persist.saved_type(out) or type(out).__name__} with keys {sorted(keys)!r}, "
                f"not the fields of {cls.__name__} {sorted(cls.__tc_names__)!r}"
            )
        return out

    @classmethod
    def load(cls, prefix: Any, *, device: Any = None, non_blocking: bool = False) -> Self:
        """Same as ``load_memmap``."""
        return cls.load_memmap(prefix, device=device, non_blocking=non_blocking)

    def is_memmap(self) -> bool:
        from . import _persist

        return bool(_persist.is_memmap(self))


def _is_coll(v: Any) -> bool:
    return getattr(type(v), "_is_tensor_collection", False)


def _rebuild(cls: type[TensorClass], td: TensorDict) -> TensorClass:
    return cls._from_tensordict(td)


def _to_td(td: TensorDict) -> TensorDict:
    store = {
        k: (_to_td(v if isinstance(v, TensorDict) else v._tensordict) if _is_coll(v) else v)
        for k, v in td._tensordict.items()
    }
    return TensorDict._new_unsafe(store, td._batch_size, td._device)


def _describe(v: Any, bd: int) -> str:
    if isinstance(v, Tensor):
        return f"{str(v.dtype).removeprefix('torch.')}{list(v.shape[bd:])}"
    if type(v) is NonTensorData:
        r = repr(v.value)
        return r if len(r) <= 60 else r[:57] + "..."
    return repr(v)


def _format(tc: TensorClass) -> str:
    """``Name(field=float32[3], tag='x', batch_size=[4], device=None)``: tensors show
    dtype and feature dims (the dims after the batch dims), as the TensorDict repr."""
    td = tc._tensordict
    bd = len(td._batch_size)
    store = td._tensordict
    parts = [
        f"{f.name}={_describe(store[f.name], bd)}"
        for f in type(tc).__tc_fields__
        if f.repr and f.name in store
    ]
    tail = f"batch_size={list(td._batch_size)}, device={td._device}"
    if td._locked:
        tail += ", locked=True"
    line = f"{type(tc).__name__}({', '.join([*parts, tail])})"
    if len(line) <= 120:
        return line
    body = "".join(f"    {p.replace(chr(10), chr(10) + '    ')},\n" for p in [*parts, tail])
    return f"{type(tc).__name__}(\n{body})"
