"""Containers to and from numpy structured arrays, namedtuples and dataclasses.

>>> import numpy as np
>>> from tensorbox import TensorDict
>>> x = np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "i4"), ("b", "f4")])
>>> td = TensorDict.from_struct_array(x)
>>> x["a"] += 10                       # shared memory
>>> td["a"].tolist(), td.to_struct_array()["b"].tolist()
([11, 13], [2.0, 4.0])
>>> td.to_namedtuple().a.tolist()
[11, 13]
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData, NonTensorStack
from tensorbox.interop._columns import container_of

__all__ = [
    "from_any",
    "from_dataclass",
    "from_namedtuple",
    "from_struct_array",
    "to_namedtuple",
    "to_struct_array",
]


def _field_value(arr: np.ndarray) -> Any:
    if arr.dtype.names is not None:
        return {n: _field_value(arr[n]) for n in arr.dtype.names}
    if arr.dtype.kind in "biufc":
        try:
            return torch.from_numpy(arr)  # a view of the structured array: shared memory
        except ValueError:  # a packed record whose strides torch cannot express: a copy
            return torch.from_numpy(np.ascontiguousarray(arr))
    return NonTensorData(
        np.array(arr.tolist(), dtype=object).reshape(arr.shape) if arr.ndim else arr.item(),
        stacked=bool(arr.ndim),
    )


def from_struct_array(
    struct_array: np.ndarray,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    cls: Any = None,
) -> Any:
    """A container over a structured array's fields (number fields share its memory;
    string fields become non-tensor data; nested record types nested containers)."""
    if not isinstance(struct_array, np.ndarray) or struct_array.dtype.names is None:
        raise TypeError(
            f"from_struct_array: expected a numpy structured array, got {type(struct_array).__name__}"
        )
    source = {n: _field_value(struct_array[n]) for n in struct_array.dtype.names}
    if batch_size is None and not auto_batch_size:
        batch_size = struct_array.shape
    return container_of(
        cls, source, batch_size, device, auto_batch_size, batch_dims, "from_struct_array"
    )


def _numpy_leaf(value: Any, batch: tuple[int, ...]) -> tuple[Any, np.ndarray]:
    if isinstance(value, Tensor):
        arr = value.detach().cpu().numpy()
        return (arr.dtype, arr.shape[len(batch) :]), arr
    if isinstance(value, NonTensorData):
        data = value.data if value.stacked else np.full(batch, value.data, dtype=object)
        arr = np.asarray(data.tolist() if isinstance(data, np.ndarray) else data)
        if arr.dtype.kind == "O":
            arr = arr.astype(str)
        return arr.dtype, np.broadcast_to(arr, batch) if arr.shape != batch else arr
    raise TypeError(f"to_struct_array: cannot hold a {type(value).__name__}")


def to_struct_array(td: Any) -> np.ndarray:
    """A numpy structured array of the container (a copy): one field per entry, nested
    containers as nested record types, trailing dims as sub-array fields."""
    batch = tuple(td.batch_size)
    fields: list[tuple[Any, ...]] = []
    values: dict[str, np.ndarray] = {}
    for name, value in td._tensordict.items():
        if getattr(type(value), "_is_tensor_collection", False):
            arr = to_struct_array(value)
            fields.append((name, arr.dtype))
        else:
            dt, arr = _numpy_leaf(value, batch)
            fields.append((name, *dt) if isinstance(dt, tuple) else (name, dt))
        values[name] = arr
    out = np.empty(batch, dtype=fields)
    for name, arr in values.items():
        out[name] = arr
    return out


def from_namedtuple(
    named_tuple: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    cls: Any = None,
) -> Any:
    """A container of a (nested) namedtuple's fields (also ``torch.return_types``)."""

    def convert(obj: Any) -> Any:
        if hasattr(obj, "_asdict"):
            return {k: convert(v) for k, v in obj._asdict().items()}
        if isinstance(obj, tuple) and hasattr(obj, "values") and hasattr(obj, "indices"):
            return {"values": obj.values, "indices": obj.indices}
        return obj

    source = convert(named_tuple)
    if not isinstance(source, dict):
        raise TypeError(f"from_namedtuple: expected a namedtuple, got {type(named_tuple).__name__}")
    return container_of(
        cls, source, batch_size, device, auto_batch_size, batch_dims, "from_namedtuple"
    )


def to_namedtuple(td: Any, dest_cls: type | None = None) -> Any:
    """A namedtuple (class ``GenericDict`` unless ``dest_cls``) of the entries, nested
    containers as nested namedtuples."""
    values: dict[str, Any] = {}
    for name, value in td._tensordict.items():
        if getattr(type(value), "_is_tensor_collection", False):
            values[name] = to_namedtuple(value)
        elif isinstance(value, NonTensorData):
            values[name] = value.value
        else:
            values[name] = value
    kind = dest_cls if dest_cls is not None else collections.namedtuple("GenericDict", values)
    return kind(**values)


def from_dataclass(
    dataclass: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    cls: Any = None,
    **kwargs: Any,
) -> Any:
    """A container of a dataclass instance's fields (nested dataclasses nested)."""
    if kwargs.get("as_tensorclass"):
        raise NotImplementedError(
            "from_dataclass(as_tensorclass=True): declare the tensorclass and use "
            "MyClass.from_tensordict(TensorDict.from_dataclass(obj))"
        )
    if not dataclasses.is_dataclass(dataclass) or isinstance(dataclass, type):
        raise TypeError(
            f"from_dataclass: expected a dataclass instance, got {type(dataclass).__name__}"
        )

    def convert(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {f.name: convert(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return obj

    return container_of(
        cls, convert(dataclass), batch_size, device, auto_batch_size, batch_dims, "from_dataclass"
    )


def from_any(obj: Any, *, cls: Any = None, **kwargs: Any) -> Any:
    """Dispatch on what ``obj`` is: container (returned as is), mapping, namedtuple,
    dataclass, structured array, pandas DataFrame, Arrow table or HDF5 file/group."""
    if getattr(type(obj), "_is_tensor_collection", False):
        return obj
    kind = type(obj)
    module = kind.__module__.split(".")[0]
    if module == "pandas":
        from tensorbox.interop.arrow import from_pandas

        return from_pandas(obj, cls=cls, **kwargs)
    if module == "pyarrow":
        from tensorbox.interop.arrow import from_arrow

        return from_arrow(obj, cls=cls, **kwargs)
    if module == "h5py":
        from tensorbox.interop.hierarchical import PersistentTensorDict

        return PersistentTensorDict(group=obj, backend="h5", **kwargs).to_tensordict()
    if isinstance(obj, np.ndarray) and obj.dtype.names is not None:
        return from_struct_array(obj, cls=cls, **kwargs)
    if hasattr(obj, "_asdict"):
        return from_namedtuple(obj, cls=cls, **kwargs)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return from_dataclass(obj, cls=cls, **kwargs)
    if type(obj) is list:  # as tensordict: a tensor when the lists are rectangular
        return _list_value(obj)
    if isinstance(obj, tuple):  # a pytree tuple: one entry per item, keyed "0", "1", ...
        obj = {str(i): v for i, v in enumerate(obj)}
    if isinstance(obj, dict):
        obj = {k: _any_value(v) for k, v in obj.items()}
        auto = kwargs.pop("auto_batch_size", False)
        batch_dims = kwargs.pop("batch_dims", None)
        return container_of(
            cls,
            obj,
            kwargs.pop("batch_size", None),
            kwargs.pop("device", None),
            auto,
            batch_dims,
            "from_any",
        )
    raise TypeError(
        f"from_any: cannot make a container of a {kind.__name__}; expected a mapping, "
        "tuple, list, namedtuple, dataclass, structured array, DataFrame, Arrow table or "
        "HDF5 object"
    )


def _list_value(obj: list[Any]) -> Any:
    """A tensor of rectangular nested lists of numbers, else a stack of the items."""
    try:
        return torch.tensor(obj)
    except (TypeError, ValueError, RuntimeError):
        return NonTensorStack(*obj) if obj else NonTensorData(obj)


def _any_value(v: Any) -> Any:
    """An entry of a mapping given to ``from_any``: nested structures become nested
    containers (a tuple's items keyed by position), the rest is set as it is."""
    if getattr(type(v), "_is_tensor_collection", False) or isinstance(v, Tensor):
        return v
    if isinstance(v, dict):
        return {k: _any_value(x) for k, x in v.items()}
    if isinstance(v, tuple) and not hasattr(v, "_asdict"):
        return {str(i): _any_value(x) for i, x in enumerate(v)}
    if type(v) is list:
        return _list_value(v)
    if (
        hasattr(v, "_asdict")
        or (dataclasses.is_dataclass(v) and not isinstance(v, type))
        or type(v).__module__.split(".")[0] in ("h5py", "pandas", "pyarrow")
    ):
        return from_any(v)
    return v
