"""Reading trees written by tensordict 0.14/0.15 (its format versions 0 and 1).

A migration path: :func:`read_legacy_node` returns the same :class:`~tensorbox._storage.format.spec.Node`
as a tensorbox node, with the same checks.
"""

from __future__ import annotations

import os
from typing import Any, TypeGuard

from tensorbox._core.schema import _short_repr
from tensorbox._storage.format.names import is_plain_name, legacy_name
from tensorbox._storage.format.spec import (
    META,
    SUFFIX,
    JsonEntry,
    Node,
    _parse_json,
    check_device,
    check_shape,
    node_entry,
    read_meta_bytes,
    read_node,
    stacked_array,
    tensor_entry,
)
from tensorbox.errors import FormatError

__all__ = ["read_legacy_node"]

# Node fields of tensordict's meta.json, mixed with its entries: a field whose
# value is an object is an entry of that name (tensordict's own rule).
_LEGACY_FIELDS = frozenset(
    ("shape", "device", "_type", "_format_version", "_class", "_names", "_metadata")
)
_LEGACY_TD_TYPES = ("<class 'tensordict._td.TensorDict'>", "tensordict:TensorDict")


def legacy_version_class(doc: dict[str, Any], where: str) -> tuple[int, Any]:
    """tensordict's format version (0 or 1) and the class it records for a node."""
    version = doc.get("_format_version", 0)
    if type(version) is dict:  # a leaf named "_format_version" in a version-0 tree
        version = 0
    if type(version) is not int or version not in (0, 1):
        raise FormatError(
            f"{where}: tensordict format version {version!r}; tensorbox reads 0 and 1"
        )
    cls = doc.get("_class") if version else doc.get("_type")
    if type(cls) is dict:
        cls = doc.get("_type")
    return version, cls


def read_legacy_node(directory: str, meta_path: str, doc: dict[Any, Any], root_real: str) -> Node:
    """A node written by tensordict 0.14/0.15 (its format versions 0 and 1)."""
    version, cls = legacy_version_class(doc, meta_path)
    if _is_tensorclass_tree(cls, directory):
        return _read_tensorclass(directory, meta_path, doc, root_real, cls)
    if cls not in _LEGACY_TD_TYPES:
        raise FormatError(
            f"{meta_path}: a tensordict tree of class {_short_repr(cls)}; tensorbox reads "
            "TensorDict trees only (save lazy stacks and tensorclasses as TensorDicts)"
        )
    shape = doc.get("shape")
    batch_size = check_shape(shape if type(shape) is not dict else None, meta_path, "'shape'")
    device = doc.get("device")
    device = check_device(device if type(device) is not dict else None, meta_path)
    entries: dict[str, Any] = {}
    for key, e in doc.items():
        where = f"{meta_path}: entry {key!r}"
        if type(e) is not dict:
            if key in _LEGACY_FIELDS:
                continue
            raise FormatError(f"{where} is {_short_repr(e)}, expected an object")
        if "dtype" in e:
            dtype = e["dtype"]
            if type(dtype) is not str or not dtype.startswith("torch."):
                raise FormatError(f"{where}: dtype {_short_repr(dtype)} is not a torch dtype")
            if e.get("is_nested", False) is not False:
                raise FormatError(f"{where}: nested (jagged) tensors are not supported")
            name = _legacy_existing(directory, key, SUFFIX)
            entries[key] = tensor_entry(
                directory, root_real, name, dtype[6:], e.get("shape"), batch_size, where
            )
            continue
        kind = e.get("type")
        if kind == "TensorDict":
            entries[key] = node_entry(directory, root_real, _legacy_existing(directory, key), where)
        elif kind in ("NonTensorData", "NonTensorStack"):
            sub = node_entry(directory, root_real, _legacy_existing(directory, key), where).path
            sub_meta = os.path.join(sub, META)
            value = _parse_json(read_meta_bytes(sub, sub_meta), sub_meta)
            if type(value) is not dict or "data" not in value:
                raise FormatError(f"{sub_meta}: expected an object with a 'data' field")
            if kind == "NonTensorStack":
                if value.get("stack_dim", 0) != 0:
                    raise FormatError(f"{sub_meta}: only stacks along dim 0 are supported")
                entries[key] = JsonEntry(stacked_array(value["data"], batch_size, where), True)
            else:
                entries[key] = JsonEntry(value["data"], False)
        else:
            raise FormatError(
                f"{where} has type {_short_repr(kind)}; tensorbox reads TensorDict, "
                "NonTensorData, NonTensorStack and tensors from tensordict trees"
            )
    return Node(directory, version, "TensorDict", batch_size, device, entries, True)


def _legacy_existing(directory: str, key: str, suffix: str = "") -> str:
    """tensordict's encoded name, or the raw key when only that exists (older writers)."""
    name = legacy_name(key) + suffix
    if (
        not os.path.lexists(os.path.join(directory, name))
        and is_plain_name(key + suffix)
        and os.path.lexists(os.path.join(directory, key + suffix))
    ):
        return key + suffix
    return name


def _is_tensorclass_tree(cls: Any, directory: str) -> TypeGuard[str]:
    return (
        type(cls) is str
        and cls.startswith("<class '")
        and cls not in _LEGACY_TD_TYPES
        and os.path.isdir(os.path.join(directory, "_tensordict"))
    )


def _read_tensorclass(
    directory: str, meta_path: str, doc: dict[Any, Any], root_real: str, cls: str
) -> Node:
    """A tensorclass saved by tensordict: ``meta.json`` holds the class and the JSON
    fields, ``_tensordict/`` the tensors. Pickled fields (``other.pickle``) are refused."""
    if os.path.lexists(os.path.join(directory, "other.pickle")):
        raise FormatError(
            f"{os.path.join(directory, 'other.pickle')}: this tensordict tensorclass tree keeps "
            "fields as pickles, and tensorbox never unpickles; load it with tensordict and "
            "save those fields as strings, numbers or lists (JSON), then load it here"
        )
    sub = node_entry(directory, root_real, "_tensordict", f"{meta_path}: '_tensordict'").path
    inner = read_node(sub, root_real)
    entries: dict[str, Any] = dict(inner.entries)
    for key, value in doc.items():
        if key != "_type":
            entries[key] = JsonEntry(value, False)
    dotted = cls[len("<class '") : -2]
    return Node(
        directory, 0, _registered_name(dotted), inner.batch_size, inner.device, entries, True
    )


def _registered_name(dotted: str) -> str:
    """The registry key of the tensorclass tensordict names ``pkg.mod.Cls``, when one
    is registered in this process; else ``pkg.mod:Cls`` (loaded as a TensorDict)."""
    from tensorbox._core.tree import CLASS_REGISTRY

    for key, c in CLASS_REGISTRY.items():
        if f"{c.__module__}.{c.__qualname__}" == dotted:
            return key
    module, _, name = dotted.rpartition(".")
    return f"{module}:{name}"
