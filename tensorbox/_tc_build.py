"""Class building for tensorclasses: field specs, field collection, generated code.

``TensorClass.__init_subclass__`` calls :func:`build_class`, which

1. collects the fields (annotations of the class and of its tensorclass bases,
   in dataclass order: a base's fields first, a redefinition keeps its place),
2. refuses what would break later (a field named like a container method, a
   mutable default, a required field after a defaulted one), naming the fix,
3. installs one ``property`` per field, reading the inner TensorDict's dict,
4. generates ``__init__`` as source code (as ``dataclasses`` does), so the
   signature is real (``inspect``, IDEs) and the common case, a tensor of the
   right shape, costs one type test and one shape comparison per field,
5. registers the class (``CLASS_REGISTRY``, torch pytree, DataLoader collate).

>>> import torch
>>> from tensorbox import TensorClass
>>> class P(TensorClass):
...     x: torch.Tensor
...     tag: str = "p"
>>> import inspect
>>> [(p.name, p.kind.name) for p in inspect.signature(P).parameters.values()]  # doctest: +NORMALIZE_WHITESPACE
[('x', 'POSITIONAL_OR_KEYWORD'), ('tag', 'POSITIONAL_OR_KEYWORD'),
 ('batch_size', 'KEYWORD_ONLY'), ('device', 'KEYWORD_ONLY')]
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, get_origin, overload

import numpy as np
import torch
from torch import Tensor

from ._nontensor import NonTensorData
from ._shape import as_batch_size
from ._shape_methods import FIELD_MAY_HIDE
from ._td import TensorDict
from .errors import BatchSizeError

__all__ = ["CLASS_REGISTRY", "Field", "build_class", "field", "fields"]

_T = TypeVar("_T")
MISSING: Any = dataclasses.MISSING

#: Every tensorclass created in this process, by ``"module:QualName"``. The
#: persistence layer rebuilds a saved tensorclass from here (never by import).
CLASS_REGISTRY: dict[str, type] = {}


class Field:
    """The spec of one field, as ``dataclasses.Field`` (``tensorbox.fields(cls)`` lists them)."""

    __slots__ = (
        "default",
        "default_factory",
        "init",
        "kw_only",
        "metadata",
        "name",
        "repr",
        "type",
    )

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        init: bool = True,
        repr: bool = True,
        kw_only: Any = MISSING,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.kw_only = kw_only
        self.metadata = types.MappingProxyType(dict(metadata or {}))

    @property
    def has_default(self) -> bool:
        return self.default is not MISSING or self.default_factory is not MISSING

    def _copy(self, **changes: Any) -> Field:
        out = Field.__new__(Field)
        for slot in Field.__slots__:
            setattr(out, slot, changes.get(slot, getattr(self, slot)))
        return out

    def __repr__(self) -> str:
        parts = [f"name={self.name!r}", f"type={self.type!r}"]
        if self.default is not MISSING:
            parts.append(f"default={self.default!r}")
        if self.default_factory is not MISSING:
            parts.append(f"default_factory={self.default_factory!r}")
        parts += [f"init={self.init}", f"repr={self.repr}", f"kw_only={self.kw_only}"]
        return f"Field({', '.join(parts)})"


@overload
def field(
    *,
    default: _T,
    init: bool = True,
    repr: bool = True,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = None,
) -> _T: ...
@overload
def field(
    *,
    default_factory: Callable[[], _T],
    init: bool = True,
    repr: bool = True,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = None,
) -> _T: ...
@overload
def field(
    *,
    init: bool = True,
    repr: bool = True,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = None,
) -> Any: ...
def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    kw_only: Any = MISSING,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """Declare a field's default, as ``dataclasses.field`` (which is accepted too).

    ``default_factory`` is called once per construction: use it for tensors and
    lists, which would otherwise be shared by every instance.

    >>> import torch
    >>> from tensorbox import TensorClass, field
    >>> class Run(TensorClass):
    ...     loss: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
    ...     tags: list = field(default_factory=list)
    >>> Run().tags
    []
    """
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("field() takes default or default_factory, not both")
    return Field(default, default_factory, init, repr, kw_only, metadata)


def fields(class_or_instance: Any) -> tuple[Field, ...]:
    """The fields of a tensorclass (or of an instance), in ``__init__`` order."""
    cls = class_or_instance if isinstance(class_or_instance, type) else type(class_or_instance)
    try:
        out: tuple[Field, ...] = cls.__dict__["__tc_fields__"]
        return out
    except KeyError:
        raise TypeError(f"{cls.__name__!r} is not a tensorclass") from None


# ------------------------------------------------------------- collecting


def _own_annotations(cls: type) -> dict[str, Any]:
    if sys.version_info >= (3, 14):  # pragma: no cover - lazy annotations
        import annotationlib

        return annotationlib.get_annotations(cls, format=annotationlib.Format.FORWARDREF)
    return dict(inspect.get_annotations(cls))


def _is_classvar(ann: Any) -> bool:
    if isinstance(ann, str):  # ``from __future__ import annotations``
        head = ann.replace(" ", "").split("[", 1)[0]
        return head in ("ClassVar", "typing.ClassVar", "t.ClassVar")
    return ann is ClassVar or get_origin(ann) is ClassVar


def _is_kw_only_marker(ann: Any) -> bool:
    if isinstance(ann, str):
        return ann in ("KW_ONLY", "dataclasses.KW_ONLY")
    return ann is dataclasses.KW_ONLY


def _is_initvar(ann: Any) -> bool:
    if isinstance(ann, str):
        return ann.startswith(("InitVar", "dataclasses.InitVar"))
    return ann is dataclasses.InitVar or isinstance(ann, dataclasses.InitVar)


def _own_fields(cls: type, reserved: Mapping[str, str]) -> list[Field]:
    """Fields declared in ``cls``'s own body, checked; class attributes hold the defaults."""
    out: list[Field] = []
    kw_only_from_here = False
    name = cls.__qualname__
    for fname, ann in _own_annotations(cls).items():
        if _is_classvar(ann):
            continue
        if _is_kw_only_marker(ann):
            kw_only_from_here = True
            continue
        if _is_initvar(ann):
            raise TypeError(
                f"{name}.{fname}: InitVar fields are not supported by tensorclasses; "
                "write a classmethod constructor that computes the fields instead"
            )
        if fname.startswith("__") and fname.endswith("__"):
            raise TypeError(
                f"{name}: a field cannot be named {fname!r} (dunder names are Python's)"
            )
        if fname in reserved:
            hint = (
                ", or pass shadow=True to let the field hide this convenience method"
                if fname in shadowable_names()
                else ""
            )
            raise TypeError(
                f"{name}: field {fname!r} clashes with the {reserved[fname]} "
                f"TensorClass.{fname}; a field must not hide a container member. "
                f"Rename it (for example {fname + '_'!r}){hint}"
            )
        value = cls.__dict__.get(fname, MISSING)
        if isinstance(value, Field):
            spec = value._copy()
        elif isinstance(value, dataclasses.Field):
            spec = Field(
                value.default,
                value.default_factory,
                value.init,
                value.repr,
                MISSING if value.kw_only is MISSING else value.kw_only,
                value.metadata,
            )
        elif isinstance(value, (types.FunctionType, property, classmethod, staticmethod)):
            raise TypeError(
                f"{name}: {fname!r} is annotated as a field but also defined as a "
                f"{type(value).__name__} in the class body; rename one of them"
            )
        else:
            spec = Field(default=value)
        _check_default(name, fname, spec.default)
        if spec.kw_only is MISSING:
            spec.kw_only = kw_only_from_here or None  # None: the class option decides
        spec.name = fname
        spec.type = ann
        out.append(spec)
    return out


def _check_default(cls_name: str, fname: str, default: Any) -> None:
    if default is MISSING:
        return
    if isinstance(default, (list, dict, set, Tensor, np.ndarray)) or getattr(
        type(default), "_is_tensor_collection", False
    ):
        raise ValueError(
            f"{cls_name}.{fname}: a {type(default).__name__} default would be shared by "
            f"every instance; use field(default_factory=...) instead, e.g. "
            f"field(default_factory=lambda: torch.zeros(3)) or field(default_factory=list)"
        )


def collect_fields(cls: type, kw_only: bool, reserved: Mapping[str, str]) -> tuple[Field, ...]:
    """All fields of ``cls``: the bases' (in MRO order), then its own."""
    merged: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get("__tc_fields__", ()):
            merged[f.name] = f
    own = cls.__dict__.get("__tc_own__")
    if own is None:
        own = _own_fields(cls, reserved)
        cls.__tc_own__ = own  # type: ignore[attr-defined]
    for f in own:
        merged[f.name] = f._copy(kw_only=kw_only if f.kw_only is None else f.kw_only)
    result = tuple(merged.values())
    positional = [f for f in result if f.init and not f.kw_only]
    for prev, cur in itertools.pairwise(positional):
        if prev.has_default and not cur.has_default:
            raise TypeError(
                f"{cls.__qualname__}: field {cur.name!r} has no default but comes after "
                f"{prev.name!r}, which has one; give {cur.name!r} a default, or make it "
                "keyword-only (field(kw_only=True), or the class option kw_only=True)"
            )
    for f in result:
        if not f.init and not f.has_default:
            raise TypeError(
                f"{cls.__qualname__}: field {f.name!r} has init=False and no default; "
                "give it a default or a default_factory"
            )
    return result


# ------------------------------------------------------------- values


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, Tensor) or getattr(type(value), "_is_tensor_collection", False):
        return True
    if isinstance(value, Mapping):
        return any(_holds_tensor(v) for v in value.values())
    return False


def put(cls: type, td: TensorDict, name: str, value: Any) -> None:
    """Store ``value`` as field ``name`` of ``td``: the validated, converted path.

    Tensors and nested containers are checked against the batch size here so
    the message names the class and the field; plain values (str, numbers,
    lists, dicts without tensors) become ``NonTensorData``.
    """
    bs = td._batch_size
    if isinstance(value, np.ndarray) and value.dtype != object:
        value = torch.from_numpy(value)
    if isinstance(value, Tensor) or getattr(type(value), "_is_tensor_collection", False):
        shape = value.shape
        if shape[: len(bs)] != bs:
            what = "shape" if isinstance(value, Tensor) else f"{type(value).__name__} batch_size"
            raise BatchSizeError(
                f"{cls.__name__}.{name}: {what} {tuple(shape)} does not start with the "
                f"batch_size {tuple(bs)}; every field's leading dims are the batch dims"
            )
    elif isinstance(value, Mapping) and not _holds_tensor(value):
        value = NonTensorData(dict(value))
    td.set(name, value)


# ------------------------------------------------------------- generation


def _make_property(cls_name: str, name: str) -> property:
    ntd = NonTensorData

    def get(self: Any) -> Any:
        try:
            v = self._tensordict._tensordict[name]
        except KeyError:
            raise AttributeError(
                f"{cls_name}.{name} is missing from this instance (removed by exclude/select "
                "or a partial from_tensordict)"
            ) from None
        return v.value if type(v) is ntd else v

    def set_(self: Any, value: Any) -> None:
        set_field(self, name, value)

    get.__name__ = set_.__name__ = name
    get.__qualname__ = f"{cls_name}.{name}"
    return property(get, set_)


def set_field(self: Any, name: str, value: Any) -> None:
    """Validated write of one field; a tensor that fits is stored with two checks."""
    td = self._tensordict
    if type(value) is Tensor and not td._locked:
        bs = td._batch_size
        dev = td._device
        if value.shape[: len(bs)] == bs and (dev is None or value.device == dev):
            td._tensordict[name] = value
            return
    put(type(self), td, name, value)


def _make_init(cls: type, flds: tuple[Field, ...]) -> Callable[..., Any]:
    """Source of ``__init__``: fields (positional, then keyword-only), batch_size, device."""
    g: dict[str, Any] = {
        "__tc_MISSING": MISSING,
        "__tc_as_bs": as_batch_size,
        "__tc_device": torch.device,
        "__tc_new_td": TensorDict._new_unsafe,
        "__tc_Tensor": Tensor,
        "__tc_put": put,
        "__tc_cls": cls,
        "__tc_osa": object.__setattr__,
    }
    pos: list[str] = []
    kw: list[str] = []
    body: list[str] = []
    annotations: dict[str, Any] = {}
    for f in flds:
        n = f.name
        if f.init:
            if f.default is not MISSING:
                g[f"__tc_d_{n}"] = f.default
                param = f"{n}=__tc_d_{n}"
            elif f.default_factory is not MISSING:
                g[f"__tc_f_{n}"] = f.default_factory
                param = f"{n}=__tc_MISSING"
                body.append(f"    if {n} is __tc_MISSING: {n} = __tc_f_{n}()")
            else:
                param = n
            (kw if f.kw_only else pos).append(param)
            annotations[n] = f.type
        elif f.default_factory is not MISSING:
            g[f"__tc_f_{n}"] = f.default_factory
            body.append(f"    {n} = __tc_f_{n}()")
        else:
            g[f"__tc_d_{n}"] = f.default
            body.append(f"    {n} = __tc_d_{n}")
    body += [
        "    __tc_bs = __tc_as_bs(batch_size)",
        "    __tc_dev = None if device is None else __tc_device(device)",
        "    __tc_td = __tc_new_td({}, __tc_bs, __tc_dev)",
        "    __tc_s = __tc_td._tensordict",
        "    __tc_n = len(__tc_bs)",
    ]
    for f in flds:
        n = f.name
        # The common case inline: a plain tensor whose leading dims fit.
        body.append(
            f"    if type({n}) is __tc_Tensor and {n}.shape[:__tc_n] == __tc_bs and "
            f"(__tc_dev is None or {n}.device == __tc_dev): __tc_s[{n!r}] = {n}\n"
            f"    else: __tc_put(__tc_cls, __tc_td, {n!r}, {n})"
        )
    # ``__tc_self``, not ``self``: a field may be called ``self``.
    body.append("    __tc_osa(__tc_self, '_tensordict', __tc_td)")
    if getattr(cls, "__post_init__", None) is not None:
        body.append("    __tc_self.__post_init__()")
    params = ", ".join(["__tc_self", *pos, "*", *kw, "batch_size=None", "device=None"])
    src = f"def __init__({params}):\n" + "\n".join(body) + "\n"
    ns: dict[str, Any] = {}
    exec(compile(src, f"<tensorclass {cls.__qualname__}.__init__>", "exec"), g, ns)
    init: Callable[..., Any] = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**annotations, "return": None}
    init.__doc__ = (
        f"Build a {cls.__name__} from its fields; ``batch_size`` (default ``[]``) is the "
        "leading shape every tensor field shares, ``device`` moves every tensor there."
    )
    return init


# ------------------------------------------------------------- the class


@functools.cache
def shadowable_names() -> frozenset[str]:
    """Convenience methods a field may hide with ``shadow=True``: the library never calls
    them on a tensorclass itself, so hiding one only changes what the user sees."""
    from ._entry_methods import EntryMethods
    from ._shape_methods import ShapeMethods
    from ._td_dist import DistributedMethods
    from ._td_tensor_methods import TensorMethods

    return frozenset(
        n
        for mixin in (TensorMethods, ShapeMethods, EntryMethods, DistributedMethods)
        for n in vars(mixin)
        if not n.startswith("_")
    )


def reserved_names(base: type) -> Mapping[str, str]:
    """Names a field may not take, with what they are on the base class."""
    out: dict[str, str] = {}
    for name in dir(base):
        if (name.startswith("__") and name.endswith("__")) or name in FIELD_MAY_HIDE:
            continue
        member = getattr(base, name, None)
        if isinstance(base.__dict__.get(name), property) or name in ("batch_size", "device"):
            out[name] = "property"
        elif callable(member):
            out[name] = "method"
        else:
            out[name] = "attribute"
    out["_tensordict"] = "storage slot"
    return types.MappingProxyType(out)


_REGISTERED: set[type] = set()


def build_class(cls: type, base: type, options: dict[str, Any]) -> None:
    """Turn ``cls`` (a subclass of ``base``, the TensorClass) into a working tensorclass."""
    frozen = options.get("frozen")
    kw_only = options.get("kw_only")
    if frozen is None:
        frozen = getattr(cls, "__tc_frozen__", False)
    if "__init__" in cls.__dict__ and not getattr(cls.__dict__["__init__"], "__tc_generated__", 0):
        raise TypeError(
            f"{cls.__qualname__} defines __init__; a tensorclass generates it from the fields. "
            "Put checks in __post_init__, and other ways to build one in a classmethod"
        )
    shadow = options.get("shadow")
    if shadow is None:
        shadow = getattr(cls, "__tc_shadow__", False)
    reserved = reserved_names(base)
    if shadow:
        reserved = {k: v for k, v in reserved.items() if k not in shadowable_names()}
    flds = collect_fields(cls, bool(kw_only), reserved)
    for f in flds:
        setattr(cls, f.name, _make_property(cls.__name__, f.name))
    init: Any = _make_init(cls, flds)
    init.__tc_generated__ = True
    cls.__init__ = init  # type: ignore[misc]
    cls.__tc_fields__ = flds  # type: ignore[attr-defined]
    cls.__tc_names__ = frozenset(f.name for f in flds)  # type: ignore[attr-defined]
    cls.__tc_frozen__ = bool(frozen)  # type: ignore[attr-defined]
    cls.__tc_shadow__ = bool(shadow)  # type: ignore[attr-defined]
    match = cls.__dict__.get("__match_args__")
    if match is None or match == cls.__dict__.get("__tc_match__"):
        match = tuple(f.name for f in flds if f.init and not f.kw_only)
        cls.__match_args__ = cls.__tc_match__ = match  # type: ignore[attr-defined, misc]
    register(cls)


def register(cls: type, in_registry: bool = True) -> None:
    """Add ``cls`` to ``CLASS_REGISTRY`` and make it a pytree node (once per class)."""
    if in_registry:
        CLASS_REGISTRY[f"{cls.__module__}:{cls.__qualname__}"] = cls
    if cls not in _REGISTERED:
        from ._pytree import register_collection

        _REGISTERED.add(cls)
        register_collection(cls, f"{cls.__module__}.{cls.__qualname__}")
