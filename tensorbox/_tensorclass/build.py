"""Class building for tensorclasses: generated ``__init__``, field properties, registration.

``TensorClass.__init_subclass__`` calls :func:`build_class`, which

1. collects and checks the fields (``fields.collect_fields``),
2. installs one ``property`` per field, reading the container's entry dict,
3. generates ``__init__`` as source code (as ``dataclasses`` does), so the
   signature is real (``inspect``, IDEs) and the common case, a tensor of the
   right shape, costs one type test and one shape comparison per field,
4. sets ``__dataclass_fields__`` so ``dataclasses.fields``/``replace``/``asdict`` work,
5. registers the class (``CLASS_REGISTRY``, torch pytree, DataLoader collate).

>>> import torch
>>> from tensorbox import TensorClass
>>> class P(TensorClass):
...     x: torch.Tensor
...     tag: str = "p"
>>> import inspect
>>> [(p.name, p.kind.name) for p in inspect.signature(P).parameters.values()]  # doctest: +NORMALIZE_WHITESPACE
[('x', 'POSITIONAL_OR_KEYWORD'), ('tag', 'POSITIONAL_OR_KEYWORD'),
 ('batch_size', 'KEYWORD_ONLY'), ('device', 'KEYWORD_ONLY'), ('names', 'KEYWORD_ONLY')]
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from tensorbox._core import liststack as _liststack
from tensorbox._core.backing import OPEN as _OPEN
from tensorbox._core.container import TensorCollection
from tensorbox._core.jagged import shape_error
from tensorbox._core.nontensor import NonTensorData, read, wrap
from tensorbox._core.shape import as_batch_size
from tensorbox._core.tree import CLASS_REGISTRY
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox._tensorclass.casting import autocast_value, nocast_value, set_casting
from tensorbox._tensorclass.fields import (
    MISSING,
    Field,
    collect_fields,
    reserved_names,
    shadowable_names,
)
from tensorbox._tensorclass.simple import check_simple, simple_spec
from tensorbox._tensorclass.tensor_only import as_tensor, tensor_fields, wrapper_fields
from tensorbox.errors import BatchSizeError, LockedError

__all__ = ["build_class", "check_casting", "class_options", "register", "set_field"]


# ------------------------------------------------------------- values


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, Tensor) or getattr(type(value), "_is_tensor_collection", False):
        return True
    if isinstance(value, Mapping):
        return any(_holds_tensor(v) for v in value.values())
    return False


def put(cls: type, obj: Any, name: str, value: Any) -> None:
    """Store ``value`` as field ``name`` of ``obj``: the validated, converted path.

    Tensors and nested containers are checked against the batch size here so
    the message names the class and the field; plain values (str, numbers,
    lists, dicts without tensors) become ``NonTensorData``.
    """
    if value is None:  # no entry: keys()/items() skip it, the property reads None
        if obj._locked and name in obj._tensordict:
            raise LockedError(f"cannot set {cls.__name__}.{name} to None: it is locked")
        obj._write(obj._tensordict.pop, name, None)  # on a saved tree, committed at once
        return
    bs = obj._batch_size
    casting = cls.__tc_casting__  # type: ignore[attr-defined]
    if casting == "nocast":
        value = nocast_value(value)
    elif casting == "autocast":
        value = autocast_value(cls, obj, name, value)
    spec = cls.__tc_simple__.get(name) if casting is None else None  # type: ignore[attr-defined]
    if spec is not None:
        value = check_simple(cls, name, value, spec, bs)
    if name in cls.__tc_cast__:  # type: ignore[attr-defined]
        value = as_tensor(value)
    if isinstance(value, np.ndarray) and value.dtype != object:
        value = torch.from_numpy(value)
    if type(value) is list and _liststack.STATE[0]:  # set_list_to_stack(True): rows
        value = _liststack.from_list(value, bs, (name,))
    if type(value) is UnbatchedTensor:  # one value for the whole batch: no shape to check
        TensorCollection._set_str(obj, name, value, (name,))
        return
    if isinstance(value, Tensor) or getattr(type(value), "_is_tensor_collection", False):
        try:
            shape = value.shape
        except RuntimeError as err:  # a strided nested tensor has no shape
            raise shape_error(value, (name,), err) from None
        if shape[: len(bs)] != bs:
            what = "shape" if isinstance(value, Tensor) else f"{type(value).__name__} batch_size"
            raise BatchSizeError(
                f"{cls.__name__}.{name}: {what} {tuple(shape)} does not start with the "
                f"batch_size {tuple(bs)}; every field's leading dims are the batch dims"
            )
    elif isinstance(value, Mapping) and not _holds_tensor(value):
        value = NonTensorData(value)  # kept as given (the same object), as any other value
    elif not isinstance(value, (Mapping, NonTensorData)) and not _tensor_annotation(
        cls.__dataclass_fields__[name].type  # type: ignore[attr-defined]
    ):
        # A field keeps the Python value it is given (``n: int = 3`` reads 3), unless it
        # is annotated as a tensor: then numbers become tensors, as in a TensorDict.
        value = NonTensorData(value)
    TensorCollection._set_str(obj, name, value, (name,))  # the lock check, and conversion


def _tensor_annotation(ann: Any) -> bool:
    if isinstance(ann, str):
        return ann.replace(" ", "") in ("torch.Tensor", "Tensor")
    return ann is Tensor


# ------------------------------------------------------------- generation


def _make_property(cls_name: str, name: str, wrapped: bool = False) -> property:
    ntd = NonTensorData

    def get(self: Any) -> Any:
        # A field without an entry (set to None, or dropped by select/exclude) reads None,
        # as in tensordict, where None fields are not entries either.
        v = self._tensordict.get(name)
        return read(v, self._batch_size, self, name) if type(v) is ntd else v

    if wrapped:  # a tensor_only field annotated NonTensorData reads as the wrapper

        def get(self: Any) -> Any:
            v = self._tensordict.get(name)
            return wrap(v, self._batch_size) if type(v) is ntd else v

    def set_(self: Any, value: Any) -> None:
        set_field(self, name, value)

    get.__name__ = set_.__name__ = name
    get.__qualname__ = f"{cls_name}.{name}"
    return property(get, set_)


def set_field(self: Any, name: str, value: Any) -> None:
    """Validated write of one field; a tensor that fits is stored with two checks."""
    if type(value) is Tensor and not self._locked and not _OPEN:  # _OPEN: saved trees unlocked
        bs = self._batch_size
        dev = self._device
        try:
            fits = value.shape[: len(bs)] == bs and (dev is None or value.device == dev)
        except RuntimeError:  # no shape (a strided nested tensor): put() says so
            fits = False
        if fits:
            self._tensordict[name] = value
            return
    put(type(self), self, name, value)


def _init_failed(cls: type, self: Any, values: dict[str, Any], err: RuntimeError) -> None:
    """A field of ``__init__``'s fast path had no shape: name it (``put`` raises)."""
    for name, value in values.items():
        if isinstance(value, Tensor) and value.is_nested:
            put(cls, self, name, value)
    raise err


def _no_names(names: Any) -> None:
    raise TypeError(f"names={names!r}: tensorbox has no named batch dims; drop the argument")


def _make_init(
    cls: type, flds: tuple[Field[Any], ...], custom_setattr: bool = False
) -> Callable[..., Any]:
    """Source of ``__init__``: fields (positional, then keyword-only), batch_size, device.

    A class with its own ``__setattr__`` gets every field through it, as a dataclass does.
    """
    g: dict[str, Any] = {
        "__tc_MISSING": MISSING,
        "__tc_as_bs": as_batch_size,
        "__tc_device": torch.device,
        "__tc_Tensor": Tensor,
        "__tc_put": put,
        "__tc_cls": cls,
        "__tc_osa": object.__setattr__,
        "__tc_no_names": _no_names,
        "__tc_init_failed": _init_failed,
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
    # tensordict's signature ends with names=None (no named dims here: refused unless None),
    # unless a field takes that name.
    has_names = any(f.name == "names" for f in flds)
    if not has_names:
        body.append("    if names is not None: __tc_no_names(names)")
    body += [
        "    __tc_bs = __tc_as_bs(batch_size)",
        "    __tc_dev = None if device is None else __tc_device(device)",
        "    __tc_s = {}",
        "    __tc_osa(__tc_self, '_tensordict', __tc_s)",
        "    __tc_osa(__tc_self, '_batch_size', __tc_bs)",
        "    __tc_osa(__tc_self, '_device', __tc_dev)",
        "    __tc_osa(__tc_self, '_locked', False)",
        "    __tc_n = len(__tc_bs)",
    ]
    put_only: frozenset[str] = getattr(cls, "__tc_put_only__", frozenset())
    fast: list[str] = []  # the fields' stores, under one try (no cost unless raised)
    for f in flds:
        n = f.name
        if custom_setattr:
            fast.append(f"__tc_self.{n} = {n}")
            continue
        if n in put_only:  # autocast to a non-tensor type: even a tensor is cast
            fast.append(f"__tc_put(__tc_cls, __tc_self, {n!r}, {n})")
            continue
        # The common case inline: a plain tensor whose leading dims fit.
        fast.append(
            f"if type({n}) is __tc_Tensor and {n}.shape[:__tc_n] == __tc_bs and "
            f"(__tc_dev is None or {n}.device == __tc_dev): __tc_s[{n!r}] = {n}\n"
            f"else: __tc_put(__tc_cls, __tc_self, {n!r}, {n})"
        )
    if fast:
        names = ", ".join(f"{f.name!r}: {f.name}" for f in flds)
        body.append("    try:")
        body += ["        " + line.replace("\n", "\n        ") for line in fast]
        body.append("    except RuntimeError as __tc_err:")
        body.append(f"        __tc_init_failed(__tc_cls, __tc_self, {{{names}}}, __tc_err)")
    # ``__tc_self``, not ``self``: a field may be called ``self``.
    if getattr(cls, "__post_init__", None) is not None:
        body.append("    __tc_self.__post_init__()")
    if cls.__dict__.get("_frozen"):  # as in tensordict, a frozen instance is locked
        body.append("    __tc_self.lock_()")
    tail = ["batch_size=None", "device=None"] + ([] if has_names else ["names=None"])
    params = ", ".join(["__tc_self", *pos, "*", *kw, *tail])
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
    tensor_only = options.get("tensor_only")
    if tensor_only is None:
        tensor_only = getattr(cls, "__tc_tensor_only__", False)
    reserved = reserved_names(base)
    if shadow:
        reserved = {k: v for k, v in reserved.items() if k not in shadowable_names()}
    flds = collect_fields(cls, bool(kw_only), reserved)
    set_casting(cls, flds, options)
    wrapped = wrapper_fields(cls, flds) if tensor_only else frozenset()
    for f in flds:
        setattr(cls, f.name, _make_property(cls.__name__, f.name, f.name in wrapped))
    custom_setattr = cls.__setattr__ is not base.__setattr__ and not frozen
    cls._frozen = bool(frozen)  # type: ignore[attr-defined]
    init: Any = _make_init(cls, flds, custom_setattr)
    init.__tc_generated__ = True
    cls.__init__ = init  # type: ignore[misc]
    cls.__tc_fields__ = flds  # type: ignore[attr-defined]
    cls.__dataclass_fields__ = _dataclass_fields(flds)  # type: ignore[attr-defined]
    cls.__dataclass_params__ = _dataclass_params(bool(frozen))  # type: ignore[attr-defined]
    cls.__tc_names__ = frozenset(f.name for f in flds)  # type: ignore[attr-defined]
    # tensordict's spelling of the same set (its ClassVars left out), read by code written for it
    cls.__expected_keys__ = cls.__tc_names__  # type: ignore[attr-defined]
    cls.__tc_simple__ = {  # type: ignore[attr-defined]
        f.name: spec for f in flds if (spec := simple_spec(f)) is not None
    }
    cls.__tc_frozen__ = bool(frozen)  # type: ignore[attr-defined]
    cls.__tc_guarded__ = bool(frozen) or bool(cls.__tc_put_only__)  # type: ignore[attr-defined]
    if frozen and "__hash__" not in cls.__dict__:
        cls.__hash__ = object.__hash__  # type: ignore[assignment]  # frozen: usable as a key
    cls.__tc_shadow__ = bool(shadow)  # type: ignore[attr-defined]
    cls.__tc_tensor_only__ = bool(tensor_only)  # type: ignore[attr-defined]
    cls.__tc_cast__ = tensor_fields(cls, flds) if tensor_only else frozenset()  # type: ignore[attr-defined]
    match = cls.__dict__.get("__match_args__")
    if match is None or match == cls.__dict__.get("__tc_match__"):
        match = tuple(f.name for f in flds if f.init and not f.kw_only)
        cls.__match_args__ = cls.__tc_match__ = match  # type: ignore[attr-defined, misc]
    register(cls)


def check_casting(name: str, tensor_only: Any, autocast: Any, nocast: Any) -> None:
    """``tensor_only`` fixes how values are stored: it excludes tensordict's casting switches."""
    if tensor_only and (autocast or nocast):
        which = "autocast" if autocast else "nocast"
        raise TypeError(
            f"{name}: tensor_only=True cannot be combined with {which}=True (a tensor_only "
            "class converts every value of a tensor field to a tensor)"
        )


def class_options(
    name: str,
    frozen: Any,
    kw_only: Any,
    shadow: Any,
    tensor_only: Any,
    autocast: Any,
    nocast: Any,
) -> dict[str, Any]:
    """A tensorclass's options as :func:`build_class` and ``__init_subclass__`` take them,
    the same from ``@tensorclass(...)`` and ``class C(TensorClass, ...)``; checked first
    (:func:`check_casting`, whose error names ``name``)."""
    check_casting(name, tensor_only, autocast, nocast)
    values = (frozen, kw_only, shadow, tensor_only, autocast, nocast)
    return dict(zip(("frozen", "kw_only", "shadow", "tensor_only", "autocast", "nocast"), values))


def _dataclass_fields(flds: tuple[Field[Any], ...]) -> dict[str, Field[Any]]:
    """``__dataclass_fields__``: the user's fields, then ``batch_size`` and ``device`` as
    init-only pseudo-fields with a default. ``dataclasses.fields``/``asdict`` skip those
    (they list ``_FIELD`` entries only), while ``dataclasses.replace`` passes each one's
    current value on, so a replaced copy keeps its batch size and device."""
    out = {f.name: f for f in flds}
    for name in ("batch_size", "device"):
        # field() is typed as its default's type, not as the Field it returns
        pseudo = cast("dataclasses.Field[Any]", dataclasses.field(default=None, kw_only=True))
        pseudo.name = name
        pseudo.type = Any
        pseudo._field_type = dataclasses._FIELD_INITVAR  # type: ignore[attr-defined]
        out[name] = pseudo
    return out


def _dataclass_params(frozen: bool) -> Any:
    params = inspect.signature(dataclasses._DataclassParams).parameters  # type: ignore[attr-defined]
    wanted = {"init": True, "repr": True, "eq": True, "order": False, "unsafe_hash": False}
    wanted |= {"frozen": frozen, "match_args": True, "kw_only": False, "slots": False}
    wanted |= {"weakref_slot": False}
    return dataclasses._DataclassParams(  # type: ignore[attr-defined]
        **{k: v for k, v in wanted.items() if k in params}
    )


def register(cls: type, in_registry: bool = True) -> None:
    """Add ``cls`` to ``CLASS_REGISTRY`` and make it a pytree node (once per class)."""
    if in_registry:
        CLASS_REGISTRY[f"{cls.__module__}:{cls.__qualname__}"] = cls
    if cls not in _REGISTERED:
        from tensorbox._core.pytree import register_collection

        _REGISTERED.add(cls)
        register_collection(cls, f"{cls.__module__}.{cls.__qualname__}")
