"""``TensorClass``: the base of every tensorclass (fields, ``__setattr__``, dataclass support).

Every container method comes from ``TensorCollection``, written once for both
TensorDict and tensorclasses, typed to return ``Self``. A tensorclass instance
*is* a container: its fields are entries of its own ``_tensordict`` dict (non-tensor
values as ``NonTensorData``), read and written through one property per field
(made by ``build``). This class adds what only a typed class has: the generated
``__init__`` and ``__post_init__``, ``__setattr__`` for fields, ``frozen``, the
check that only declared fields are set, and ``dataclasses`` support.

>>> import dataclasses, torch
>>> from tensorbox import TensorClass
>>> class Pair(TensorClass):
...     a: torch.Tensor
...     b: torch.Tensor
>>> p = Pair(torch.zeros(4, 2), torch.ones(4), batch_size=[4])
>>> p[1:3].a.shape, type(p.reshape(2, 2)).__name__
(torch.Size([2, 2]), 'Pair')
>>> dataclasses.replace(p, b=torch.zeros(4)).batch_size
torch.Size([4])
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self, dataclass_transform, overload

import torch

from tensorbox._core.container import TensorCollection
from tensorbox._core.getdefault import UNSET
from tensorbox._core.methods.structure import StructureMethods
from tensorbox._core.nontensor import NonTensorData
from tensorbox._tensorclass.build import build_class, check_casting, class_options, put, set_field
from tensorbox._tensorclass.fields import Field, field
from tensorbox._tensorclass.lenient import from_tensordict_lenient
from tensorbox.errors import UnknownFieldError

__all__ = ["TensorClass"]

_new = object.__new__
# Sets a slot past our __setattr__; a C call that torch.compile can trace (the slot's
# member descriptor __set__ would be faster but dynamo cannot trace it).
_osa = object.__setattr__
_OPTIONS = ("frozen", "shadow", "tensor_only", "nocast", "autocast")
_OPTION_BASES: dict[tuple[str, ...], type] = {}
_STORAGE = frozenset({"_tensordict", "_batch_size", "_device", "_locked", "_prev_lock"})
_STORAGE |= {"_lock_stack", "_writeback"}


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


class TensorClass(TensorCollection, metaclass=_Meta):
    """Base class of tensorclasses: annotate fields, get ``__init__`` and every container op.

    ``class Foo(TensorClass, frozen=True, kw_only=True)`` takes the class options of
    ``@tensorclass``. The constructor takes the fields, then keyword-only
    ``batch_size`` (default ``[]``) and ``device``.

    >>> import torch; from tensorbox import TensorClass
    >>> class Episode(TensorClass):
    ...     obs: torch.Tensor
    ...     reward: torch.Tensor
    ...     name: str = "unnamed"
    >>> ep = Episode(torch.zeros(5, 3), torch.ones(5), batch_size=[5])
    >>> type(ep[1:3]).__name__, ep[1:3].obs.shape, ep.name
    ('Episode', torch.Size([2, 3]), 'unnamed')
    """

    __slots__ = ()
    __tc_names__: ClassVar[frozenset[str]] = frozenset()
    __tc_fields__: ClassVar[tuple[Field[Any], ...]] = ()
    __tc_frozen__: ClassVar[bool] = False
    __tc_simple__: ClassVar[dict[str, Any]] = {}
    __tc_tensor_only__: ClassVar[bool] = False
    #: fields whose values become tensors (a tensor_only class's tensor fields)
    __tc_cast__: ClassVar[frozenset[str]] = frozenset()
    #: autocast: fields whose values are cast even when they are tensors
    __tc_put_only__: ClassVar[frozenset[str]] = frozenset()
    __tc_casting__: ClassVar[str | None] = None
    #: frozen or put_only fields: ``__setattr__`` takes its slow path
    __tc_guarded__: ClassVar[bool] = False
    #: tensordict's class flags: the options the class was built with
    _autocast: ClassVar[bool] = False
    _nocast: ClassVar[bool] = False
    _frozen: ClassVar[bool] = False

    if TYPE_CHECKING:
        # Seen by type checkers as keyword-only fields, so the synthesized
        # __init__ reads (fields..., *, batch_size=None, device=None).
        batch_size: _BatchSizeField = field(default=None, kw_only=True)  # type: ignore[assignment, override]
        device: _DeviceField = field(default=None, kw_only=True)  # type: ignore[assignment]

    def __init_subclass__(
        cls,
        *,
        frozen: bool | None = None,
        kw_only: bool | None = None,
        shadow: bool | None = None,
        tensor_only: bool | None = None,
        autocast: bool | None = None,
        nocast: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        values = (frozen, kw_only, shadow, tensor_only, autocast, nocast)
        build_class(cls, TensorClass, class_options(cls.__qualname__, *values))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("TensorClass is a base class: subclass it and annotate fields")

    def __class_getitem__(cls, options: str | tuple[str, ...]) -> Any:
        """``class X(TensorClass["frozen"])``: tensordict's spelling of the class options.

        ``"frozen"``, ``"shadow"``, ``"tensor_only"``, ``"autocast"`` and ``"nocast"`` set
        those options (see :func:`tensorclass` for what each does).
        """
        names = (options,) if isinstance(options, str) else options
        if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
            parent = super()
            if hasattr(parent, "__class_getitem__"):  # a Generic tensorclass: Box[str]
                return parent.__class_getitem__(options)
            raise TypeError(f"{cls.__name__}[...] takes option names (str), got {options!r}")
        unknown = [n for n in names if n not in _OPTIONS]
        if unknown:
            raise TypeError(f"TensorClass[...]: unknown options {unknown!r}; known: {_OPTIONS}")
        check_casting(
            cls.__qualname__, "tensor_only" in names, "autocast" in names, "nocast" in names
        )
        flags = tuple(sorted(n for n in names if n in _OPTIONS))
        if not flags:
            return cls
        base = _OPTION_BASES.get(flags)
        if base is None:
            base = types.new_class(
                "TensorClass",
                (cls,),
                {n: True for n in flags},
                lambda ns: ns.update({"__module__": __name__}),
            )
            _OPTION_BASES[flags] = base
        return base

    # ------------------------------------------------------------ building

    @classmethod
    def _new_unsafe(
        cls, source: dict[str, Any], batch_size: torch.Size, device: torch.device | None
    ) -> Self:
        """The contract's builder, past ``__setattr__``: no check, no ``__post_init__``."""
        self = _new(cls)
        _osa(self, "_tensordict", source)
        _osa(self, "_batch_size", batch_size)
        _osa(self, "_device", device)
        _osa(self, "_locked", False)
        return self

    @classmethod
    def from_tensordict(cls, td: Any, *, run_post_init: bool = True) -> Self:
        """Build from a TensorDict holding the fields (missing ones take their defaults).

        The tensors are shared, not copied. Unknown keys are refused. ``__post_init__``
        runs, as this brings in outside data; pass ``run_post_init=False`` to skip it.

        >>> import torch; from tensorbox import TensorClass
        >>> class Pair(TensorClass):
        ...     a: torch.Tensor
        ...     label: str = "none"
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3, 2), batch_size=[3])
        >>> p = Pair.from_tensordict(td)
        >>> p.a is td["a"], p.label
        (True, 'none')
        """
        out: Self = from_tensordict_lenient(
            cls, td, lenient=False, run_post_init=run_post_init, what="from_tensordict"
        )
        return out

    @classmethod
    def _from_tensordict(
        cls, tensordict: Any, non_tensordict: Mapping[str, Any] | None = None, safe: bool = True
    ) -> Self:
        """tensordict's private builder that torchrl calls: ``from_tensordict`` where a
        field the container lacks reads None (``tensorbox._tensorclass.lenient``)."""
        out: Self = from_tensordict_lenient(cls, tensordict, non_tensordict, safe)
        return out

    @classmethod
    def from_dict(
        cls,
        source: Mapping[str, Any],
        batch_size: Sequence[int] | int | None = None,
        *,
        device: torch.device | str | None = None,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
    ) -> Self:
        """Build from a mapping of field names to values (``__post_init__`` runs).

        ``auto_batch_size=True`` takes the longest leading shape the tensors share (at
        most ``batch_dims`` dims), as ``TensorDict.from_dict``.
        """
        if (auto_batch_size or batch_dims is not None) and batch_size is None:
            from tensorbox._core.tensordict import TensorDict

            probe = TensorDict.from_dict(source, auto_batch_size=True, batch_dims=batch_dims)
            batch_size = probe.batch_size
            source = {k: probe.get(k) for k in source}
        return cls(**source, batch_size=batch_size, device=device)

    def replace(self, *args: Any, **changes: Any) -> Self:
        """A copy with some fields changed, as ``dataclasses.replace`` (``__post_init__`` runs).

        Tensors are shared; ``batch_size`` and ``device`` are kept unless given. With one
        positional mapping or container, tensordict's form: a shallow copy updated by it.

        >>> import torch; from tensorbox import TensorClass
        >>> class Pair(TensorClass):
        ...     a: torch.Tensor
        ...     label: str = "none"
        >>> p = Pair(torch.zeros(3, 2), "x", batch_size=[3])
        >>> q = p.replace(label="y")
        >>> q.label, q.a is p.a, q.batch_size
        ('y', True, torch.Size([3]))
        """
        if args:
            return StructureMethods.replace(self, *args, **changes)
        cls = type(self)
        unknown = sorted(set(changes) - cls.__tc_names__ - {"batch_size", "device"})
        if unknown:
            raise TypeError(
                f"{cls.__name__}.replace: unknown fields {unknown!r} "
                f"(fields: {[f.name for f in cls.__tc_fields__]!r})"
            )
        for f in cls.__tc_fields__:
            if f.name in changes and not f.init:
                raise ValueError(f"{cls.__name__}.replace: field {f.name!r} has init=False")
        out: Self = dataclasses.replace(self, **changes)
        return out

    __replace__ = replace  # copy.replace (Python 3.13+)

    # ------------------------------------------------------------ attributes

    def get(self, key: Any, default: Any = UNSET) -> Any:
        """The entry at ``key`` (see ``TensorDict.get``); a non-tensor field of this class
        reads as its attribute does, the Python value, as in tensordict (``items()`` and a
        nested key into a TensorDict field give the ``NonTensorData``).

        >>> from tensorbox import tensorclass
        >>> @tensorclass
        ... class Tagged:
        ...     tag: str
        >>> Tagged(tag="a").get("tag")
        'a'
        """
        v = TensorCollection.get(self, key, default)
        if type(v) is NonTensorData and (type(key) is str or len(key) == 1):
            return v.value
        return v

    def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None:
        """The gate for ``set``/``update``/``tc[key] = v``: declared fields only."""
        cls = type(self)
        if key not in cls.__tc_names__:
            raise UnknownFieldError(
                f"{cls.__name__} has no field {key!r} "
                f"(fields: {[f.name for f in cls.__tc_fields__]!r})"
            )
        if cls.__tc_guarded__ and _guarded_write(cls, self, key, value):
            return
        set_field(self, key, value)

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if name in cls.__tc_names__:
            if cls.__tc_guarded__ and _guarded_write(cls, self, name, value):
                return
            set_field(self, name, value)
            return
        if name in _STORAGE or hasattr(type(getattr(cls, name, None)), "__set__"):
            object.__setattr__(self, name, value)  # the storage, a user property, a user slot
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

    @classmethod
    def _load_mismatch(cls, out: Any) -> str | None:
        keys = set(out._tensordict) if isinstance(out, cls) else set()
        if isinstance(out, cls) and keys <= cls.__tc_names__:  # None fields have no entry
            return None
        return f"with keys {sorted(keys)!r}, not the fields of {cls.__name__} {sorted(cls.__tc_names__)!r}"


def _guarded_write(cls: Any, obj: Any, name: str, value: Any) -> bool:
    """The rare cases of a field write, behind one flag test (``__tc_guarded__``): a
    frozen class refuses; an autocast field is cast, even from a tensor. True when the
    write is done here."""
    if cls.__tc_frozen__:
        raise dataclasses.FrozenInstanceError(
            f"cannot assign to field {name!r} of frozen {cls.__name__}; "
            f"use .replace({name}=...) for a changed copy"
        )
    if name in cls.__tc_put_only__:
        put(cls, obj, name, value)
        return True
    return False
