"""Reading trees written by tensordict 0.14/0.15 (its format versions 0 and 1).

A migration path: :func:`parse_legacy` turns tensordict's ``meta.json`` into the same
:class:`~tensorbox._storage.format.parse.NodeDoc` as a tensorbox node, with the same
checks. tensordict named files by one of two encodings and kept non-tensor values and
tensorclass tensors in sub-directories; the description says so (names to try,
``ChildSpec.json``, ``NodeDoc.inner``) and the store resolves it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorbox._core.encoding import _short_repr
from tensorbox._storage.format.names import is_plain_name, legacy_name
from tensorbox._storage.format.parse import (
    ChildSpec,
    JsonEntry,
    NodeDoc,
    check_device,
    check_shape,
    leaf_spec,
)
from tensorbox._storage.format.spec import META, SUFFIX
from tensorbox.errors import FormatError

__all__ = ["check_legacy_key", "legacy_node_meta", "legacy_value_meta", "parse_legacy"]

# Node fields of tensordict's meta.json, mixed with its entries: a field whose
# value is an object is an entry of that name (tensordict's own rule).
_LEGACY_FIELDS = frozenset(
    ("shape", "device", "_type", "_format_version", "_class", "_names", "_metadata")
)
_LEGACY_TD_TYPES = ("<class 'tensordict._td.TensorDict'>", "tensordict:TensorDict")
_LEGACY_LAZY_TYPES = (
    "<class 'tensordict._lazy.LazyStackedTensorDict'>",
    "tensordict:LazyStackedTensorDict",
)
_LEAF_KINDS = {"NonTensorData": "value", "NonTensorStack": "stack", "MetaData": "meta"}
INNER = "_tensordict"  # where tensordict keeps a tensorclass's tensors


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


def parse_legacy(doc: dict[Any, Any], where: str, exists: Callable[[str], bool]) -> NodeDoc:
    """A node written by tensordict; ``exists(name)`` tells whether the node has ``name``
    (a file or a sub-directory)."""
    version, cls = legacy_version_class(doc, where)
    if (
        type(cls) is str
        and cls.startswith("<class '")
        and cls not in _LEGACY_TD_TYPES
        and exists(INNER)
    ):
        return _tensorclass(doc, where, cls, exists)
    if cls in _LEGACY_LAZY_TYPES:
        return _lazy_stack(doc, where, version, exists)
    if cls not in _LEGACY_TD_TYPES:
        raise FormatError(
            f"{where}: a tensordict tree of class {_short_repr(cls)}; tensorbox reads "
            "TensorDicts, tensorclasses and lazy stacks of them (save it as a TensorDict)"
        )
    shape = doc.get("shape")
    batch_size = check_shape(shape if type(shape) is not dict else None, where, "'shape'")
    device = doc.get("device")
    device = check_device(device if type(device) is not dict else None, where)
    entries: dict[str, Any] = {}
    for key, e in doc.items():
        kwhere = f"{where}: entry {key!r}"
        if type(e) is not dict:
            if key in _LEGACY_FIELDS:
                continue
            raise FormatError(f"{kwhere} is {_short_repr(e)}, expected an object")
        if "dtype" in e:
            dtype = e["dtype"]
            if type(dtype) is not str or not dtype.startswith("torch."):
                raise FormatError(f"{kwhere}: dtype {_short_repr(dtype)} is not a torch dtype")
            if e.get("is_nested", False) is not False:
                raise FormatError(f"{kwhere}: nested (jagged) tensors are not supported")
            file = _existing(key, exists, SUFFIX)
            entries[key] = leaf_spec(file, dtype[6:], e.get("shape"), batch_size, kwhere)
            continue
        kind = e.get("type")
        if type(kind) is str and kind in _LEAF_KINDS:
            entries[key] = ChildSpec(_existing(key, exists), _LEAF_KINDS[kind])
        elif type(kind) is str and kind:
            # a TensorDict, a tensorclass (named by its class) or a lazy stack: a sub-node
            # whose own meta.json says which
            entries[key] = ChildSpec(_existing(key, exists))
        else:
            raise FormatError(
                f"{kwhere} has type {_short_repr(kind)}; expected the name of a tensordict "
                "class (TensorDict, a tensorclass, NonTensorData, ...)"
            )
    return NodeDoc(version, "TensorDict", batch_size, device, entries, True)


def _lazy_stack(
    doc: dict[Any, Any], where: str, version: int, exists: Callable[[str], bool]
) -> NodeDoc:
    """A ``LazyStackedTensorDict``: its elements are the sub-directories ``0``, ``1``, ...
    stacked along ``stack_dim`` (the store checks them, the load stacks them densely)."""
    dim = doc.get("stack_dim", 0)
    if type(dim) is not int or dim < 0:
        raise FormatError(f"{where}: stack_dim {_short_repr(dim)} is not a dim")
    entries: dict[str, Any] = {}
    while exists(str(len(entries))) and len(entries) < 1 << 20:
        entries[str(len(entries))] = ChildSpec(str(len(entries)))
    if not entries:
        raise FormatError(f"{where}: a lazy stack without elements (no sub-directory '0')")
    return NodeDoc(version, "TensorDict", (), None, entries, True, None, dim)


def _existing(key: str, exists: Callable[[str], bool], suffix: str = "") -> str:
    """tensordict's encoded name, or the raw key when only that exists (older writers)."""
    name = legacy_name(key) + suffix
    if not exists(name) and is_plain_name(key + suffix) and exists(key + suffix):
        return key + suffix
    return name


def _tensorclass(
    doc: dict[Any, Any], where: str, cls: str, exists: Callable[[str], bool]
) -> NodeDoc:
    """A tensorclass saved by tensordict: ``meta.json`` holds the class and the JSON
    fields, ``_tensordict/`` the tensors (:attr:`NodeDoc.inner`, read by the store).
    Pickled fields (``other.pickle``) are refused."""
    if exists("other.pickle"):
        pickled = where[: -len(META)] + "other.pickle" if where.endswith(META) else where
        raise FormatError(
            f"{pickled}: this tensordict tensorclass tree keeps fields as pickles, and "
            "tensorbox never unpickles; load it with tensordict and "
            "save those fields as strings, numbers or lists (JSON), then load it here"
        )
    entries: dict[str, Any] = {k: JsonEntry(v, False) for k, v in doc.items() if k != "_type"}
    dotted = cls[len("<class '") : -2]
    return NodeDoc(0, _registered_name(dotted), (), None, entries, True, INNER)


def _registered_name(dotted: str) -> str:
    """The registry key of the tensorclass tensordict names ``pkg.mod.Cls``, when one
    is registered in this process (that path, else the one class named ``Cls``); else
    ``pkg.mod:Cls`` (loaded as a TensorDict keeping that name)."""
    from tensorbox._core.tree import CLASS_REGISTRY

    for key, c in CLASS_REGISTRY.items():
        if f"{c.__module__}.{c.__qualname__}" == dotted:
            return key
    # tensordict's class was defined elsewhere (a script's __main__, another package):
    # the one class registered here under the same name stands for it
    module, _, name = dotted.rpartition(".")
    same = [k for k, c in CLASS_REGISTRY.items() if c.__qualname__.rpartition(".")[2] == name]
    return same[0] if len(same) == 1 else f"{module}:{name}"


# ---------------------------------------------------------------- writing (format="tensordict")

_TD_TYPE = "<class 'tensordict._td.TensorDict'>"


def check_legacy_key(key: str, suffix: str, names: set[str], where: str) -> str:
    """The file-system name tensordict gives ``key`` (``suffix`` added), or ValueError
    for a key its layout cannot hold: a node field's name (its ``meta.json`` mixes
    entries with fields), a name the file system refuses, or one that ``names`` (the
    names of the node's other entries) already holds."""
    name = legacy_name(key) + suffix
    problem = None
    if key in _LEGACY_FIELDS:
        problem = f"is the name of a field of tensordict's meta.json {sorted(_LEGACY_FIELDS)}"
    elif "\0" in key:
        problem = "holds a NUL character"
    elif len(name.encode("utf-8", "surrogatepass")) > 255:
        problem = "gives a file name too long for the file system"
    elif name == META or name in names:
        problem = f"gives the file name {name!r}, which another entry of the node has"
    if problem is not None:
        raise ValueError(
            f"format='tensordict': {where} {problem}; tensordict's layout cannot store it. "
            "Rename the key, or save with tensorbox's format (the default)"
        )
    return name


def legacy_node_meta(batch_size: Any, entries: dict[str, Any]) -> dict[str, Any]:
    """tensordict's ``meta.json`` of a node (format version 1) from the tensorbox entries
    the saver planned (tensors, nodes, JSON values); every node is a TensorDict."""
    out: dict[str, Any] = {}
    for k, e in entries.items():
        kind = e["kind"]
        if kind == "tensor":
            out[k] = {
                "device": "cpu",
                "shape": e["shape"],
                "dtype": f"torch.{e['dtype']}",
                "is_nested": False,
            }
        elif kind == "node":
            out[k] = {"type": "TensorDict"}
        else:
            value = "MetaData" if e.get("meta") else "NonTensorData"
            out[k] = {"type": "NonTensorStack" if e.get("stacked") else value}
    out.update(
        shape=[int(d) for d in batch_size],
        device="cpu",  # what tensordict writes: a memory-mapped tree lives on the CPU
        _type=_TD_TYPE,
        _format_version=1,
        _class="tensordict:TensorDict",
    )
    return out


def legacy_value_meta(entry: dict[str, Any]) -> dict[str, Any]:
    """tensordict's ``meta.json`` of a ``NonTensorData``/``NonTensorStack`` sub-node
    holding a JSON entry the saver planned."""
    if entry.get("stacked"):
        return {
            "_type": "<class 'tensordict.tensorclass.NonTensorStack'>",
            "_format_version": 1,
            "_class": "tensordict:NonTensorStack",
            "stack_dim": 0,
            "device": None,
            "data": entry["value"],
        }
    kind = "MetaData" if entry.get("meta") else "NonTensorData"
    return {
        "_type": f"<class 'tensordict.tensorclass.{kind}'>",
        "data": entry["value"],
        "_metadata": None,
        "_is_non_tensor": True,
    }
