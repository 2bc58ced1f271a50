"""``from_dataclass``: a tensorclass made from a ``@dataclass`` type, or an instance of one.

For a type, the result is a new tensorclass named ``<Name>_tc`` with the dataclass's
fields (annotations, defaults, default factories; the dataclass's methods are not
carried over); a tensorclass is returned as it is. For an instance, the result is an
instance of that class (or of ``dest_cls``) holding the instance's field values.

>>> import dataclasses, torch
>>> @dataclasses.dataclass
... class Sample:
...     x: torch.Tensor
...     label: str = "none"
>>> S = from_dataclass(Sample)
>>> S.__name__, S(torch.zeros(3), batch_size=[3]).label
('Sample_tc', 'none')
>>> s = from_dataclass(Sample(torch.zeros(4, 2), "cat"), auto_batch_size=True)
>>> type(s).__name__, s.batch_size, s.label
('Sample_tc', torch.Size([4, 2]), 'cat')
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tensorbox._tensorclass.build import check_casting
from tensorbox._tensorclass.decorator import is_tensorclass, tensorclass
from tensorbox._tensorclass.fields import field as tc_field

__all__ = ["from_dataclass"]


def from_dataclass(
    obj: Any,
    *,
    dest_cls: type | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    frozen: bool = False,
    autocast: bool = False,
    nocast: bool = False,
    inplace: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    device: Any = None,
) -> Any:
    """A tensorclass type from a dataclass type, or a tensorclass instance from an instance.

    ``frozen``, ``shadow`` and ``tensor_only`` are the options of the class made;
    ``autocast``/``nocast`` as in ``@tensorclass``.
    For an instance: ``dest_cls`` (a tensorclass) to build instead of a new class,
    ``batch_size`` or ``auto_batch_size=True`` (up to ``batch_dims`` dims), ``device``.
    ``inplace=True`` (turning the dataclass itself into a tensorclass) is refused:
    ``@tensorclass`` always builds a new class.

    >>> import dataclasses, torch
    >>> @dataclasses.dataclass
    ... class Pair:
    ...     a: torch.Tensor
    ...     b: torch.Tensor
    >>> p = from_dataclass(Pair(torch.zeros(3), torch.ones(3)), batch_size=[3])
    >>> type(p).__name__, p[1].b
    ('Pair_tc', tensor(1.))
    """
    check_casting("from_dataclass", tensor_only, autocast, nocast)
    casts = {"autocast": autocast, "nocast": nocast}
    if inplace:
        raise TypeError(
            "from_dataclass(inplace=True): tensorbox never turns a class into a tensorclass "
            "in place; use the class from_dataclass(cls) returns"
        )
    if isinstance(obj, type):
        if is_tensorclass(obj):
            return obj
        if not dataclasses.is_dataclass(obj):
            raise TypeError(
                f"from_dataclass expects a dataclass or an instance of one, got {obj!r}"
            )
        return _class_of(obj, frozen=frozen, shadow=shadow, tensor_only=tensor_only, casts=casts)
    if not dataclasses.is_dataclass(obj):
        raise TypeError(
            f"from_dataclass expects a dataclass or an instance of one, got a {type(obj).__name__}"
        )
    if auto_batch_size and batch_size is not None:
        raise TypeError("from_dataclass: pass batch_size or auto_batch_size=True, not both")
    cls = dest_cls
    if cls is None:
        cls = _class_of(
            type(obj), frozen=frozen, shadow=shadow, tensor_only=tensor_only, casts=casts
        )
    elif not is_tensorclass(cls):
        raise TypeError(f"from_dataclass: dest_cls must be a tensorclass, got {cls!r}")
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    out = cls(**values, batch_size=batch_size, device=device)
    if auto_batch_size:
        out.auto_batch_size_(batch_dims)
    return out


def _class_of(
    dc: type, *, frozen: bool, shadow: bool, tensor_only: bool, casts: dict[str, bool]
) -> type:
    ns: dict[str, Any] = {"__module__": dc.__module__, "__qualname__": f"{dc.__qualname__}_tc"}
    annotations: dict[str, Any] = {}
    for f in dataclasses.fields(dc):
        annotations[f.name] = f.type
        if f.default is not dataclasses.MISSING:
            ns[f.name] = tc_field(default=f.default, init=f.init, repr=f.repr)
        elif f.default_factory is not dataclasses.MISSING:
            ns[f.name] = tc_field(default_factory=f.default_factory, init=f.init, repr=f.repr)
        elif not (f.init and f.repr):
            ns[f.name] = tc_field(init=f.init, repr=f.repr)
    ns["__annotations__"] = annotations
    plain = type(f"{dc.__name__}_tc", (), ns)
    made: type = tensorclass(frozen=frozen, shadow=shadow, tensor_only=tensor_only, **casts)(plain)
    return made
