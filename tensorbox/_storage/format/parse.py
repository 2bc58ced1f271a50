"""The ``meta.json`` parser: bytes in, a checked node description out, no I/O.

Every backend whose nodes are ``meta.json`` files (folders, zip archives, the
in-memory store of the tests, remote trees) parses them here, once. The result,
:class:`NodeDoc`, names files by their plain names in the node; the store then
resolves each name (exists, stays inside the tree, is long enough) and reads it.
Every problem is a :class:`~tensorbox.errors.FormatError` naming ``where`` (the
file as the store shows it) and the entry.

>>> doc = parse_node(b'{"format": "tensorbox", "version": 2, "type": "TensorDict", '
...                  b'"batch_size": [3], "device": null, "entries": {"x": {"kind": '
...                  b'"tensor", "dtype": "int64", "shape": [3], "file": "x.memmap", '
...                  b'"id": "' + b"0" * 32 + b'"}}}', "t/meta.json")
>>> doc.batch_size, doc.entries["x"].file, doc.entries["x"].nbytes
((3,), 'x.memmap', 24)
>>> parse_node(b'{"format": "other"}', "t/meta.json")
Traceback (most recent call last):
...
tensorbox.errors.FormatError: t/meta.json: 'format' is 'other', expected 'tensorbox': not a tree saved by tensorbox or tensordict
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NamedTuple

import orjson
import torch

from tensorbox._core.encoding import _INT64_LIMIT, DTYPES, _short_repr, stacked_array
from tensorbox._storage.format.names import is_plain_name
from tensorbox._storage.format.spec import FORMAT, MAX_DIMS, VERSION, VERSIONS
from tensorbox.errors import FormatError

__all__ = [
    "ChildSpec",
    "JaggedSpec",
    "JsonEntry",
    "LeafSpec",
    "NodeDoc",
    "check_device",
    "file_ids",
    "check_shape",
    "parse_json",
    "is_legacy",
    "parse_doc",
    "parse_node",
]

#: Offsets dtypes the format allows for jagged entries (as ``meta.json`` names them).
OFFSET_DTYPES = {"int64": torch.int64, "int32": torch.int32}


class LeafSpec(NamedTuple):
    """A tensor file of the node: its plain ``file`` name, or for trees written by
    tensordict the names to try in order (its encoding first, then the raw key)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    file: str | tuple[str, ...]
    nbytes: int  # of the tensor (the file may be longer)
    gen: str | None = None
    sha256: str | None = None


class JaggedSpec(NamedTuple):
    """A ``jagged`` entry: its values (``[length, *feature]``) and offsets (``[rows + 1]``)."""

    values: LeafSpec
    offsets: LeafSpec


class ChildSpec(NamedTuple):
    """A nested node: the sub-directory name(s) to try, as for :class:`LeafSpec`; ``json``
    marks a tensordict ``NonTensorData``/``NonTensorStack``/``MetaData`` node (``"value"``/
    ``"stack"``/``"meta"``)."""

    dir: str | tuple[str, ...]
    json: str | None = None


class JsonEntry(NamedTuple):
    value: Any  # a plain value, or a numpy object array of shape batch_size when stacked
    stacked: bool
    meta: bool = False  # a MetaData (format version 4; tensordict's "MetaData" nodes)


Spec = LeafSpec | JaggedSpec | ChildSpec | JsonEntry


class NodeDoc(NamedTuple):
    """One parsed and checked ``meta.json``."""

    version: int  # the tensorbox format version, or tensordict's (0, 1) when legacy
    type: str
    batch_size: tuple[int, ...]
    device: str | None
    entries: dict[str, Spec]
    legacy: bool = False
    inner: str | None = None  # tensordict tensorclass trees: the node holding the tensors
    stack_dim: int | None = None  # tensordict lazy stacks: entries "0".."n-1" stacked on it


_NODE_FIELDS = frozenset(("format", "version", "type", "batch_size", "device", "entries"))
_TENSOR_FIELDS = {
    1: frozenset(("kind", "dtype", "shape", "file")),
    2: frozenset(("kind", "dtype", "shape", "file", "id")),
    3: frozenset(("kind", "dtype", "shape", "file", "id")),
    4: frozenset(("kind", "dtype", "shape", "file", "id")),
}
_ENTRY_FIELDS = {
    "tensor": frozenset(("kind", "dtype", "shape", "file")),
    "node": frozenset(("kind", "dir")),
    "json": frozenset(("kind", "value", "stacked", "meta")),
    "jagged": frozenset(("kind", "dtype", "shape", "length", "values", "offsets")),
}
_JAGGED_PARTS = {"values": frozenset(("file", "id")), "offsets": frozenset(("file", "dtype", "id"))}
HEX32 = re.compile(r"[0-9a-f]{32}").fullmatch
HEX64 = re.compile(r"[0-9a-f]{64}").fullmatch


def parse_json(raw: bytes, where: str) -> Any:
    """JSON of a ``meta.json``; NaN and Infinity accepted (Python's json and tensordict
    write them)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise FormatError(f"{where} is not valid JSON (truncated or damaged): {err}") from None


def parse_node(raw: bytes, where: str) -> NodeDoc:
    """The checked description of the tensorbox ``meta.json`` bytes ``raw`` (shown as
    ``where``). A reader that also takes tensordict's trees parses the JSON with
    :func:`parse_json`, and hands a document for which :func:`is_legacy` holds to
    :func:`tensorbox._storage.format.legacy.parse_legacy`, any other to :func:`parse_doc`."""
    return parse_doc(parse_json(raw, where), where)


def is_legacy(doc: Any) -> bool:
    """Whether the parsed ``meta.json`` ``doc`` was written by tensordict."""
    return isinstance(doc, dict) and "format" not in doc and ("_type" in doc or "shape" in doc)


def parse_doc(doc: Any, where: str) -> NodeDoc:
    """:func:`parse_node` of an already parsed JSON document."""
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    version, type_name, batch, device, entries_doc = check_header(doc, where)
    tensor_fields = _TENSOR_FIELDS[version]
    entries: dict[str, Spec] = {}
    for key, e in entries_doc.items():
        # The common case first, with no per-entry string building (a tree of many
        # small leaves spends its open time here); anything unusual takes the long way.
        if type(e) is dict and e.get("kind") == "tensor" and e.keys() == tensor_fields:
            leaf = _tensor_fast(e, batch)
            if leaf is not None:
                entries[key] = leaf
                continue
        entries[key] = _entry(where, key, e, batch, version)
    return NodeDoc(version, type_name, batch, device, entries)


def check_header(
    doc: dict[str, Any], where: str
) -> tuple[int, str, tuple[int, ...], str | None, dict[str, Any]]:
    """The node fields of a tensorbox ``meta.json``, checked:
    ``(version, type name, batch size, device, entries)``."""
    if doc.get("format") != FORMAT:
        raise FormatError(
            f"{where}: 'format' is {doc.get('format')!r}, expected {FORMAT!r}: "
            "not a tree saved by tensorbox or tensordict"
        )
    version = doc.get("version")
    if type(version) is not int:
        raise FormatError(f"{where}: 'version' is {version!r}, expected an int")
    if version not in VERSIONS:
        raise FormatError(
            f"{where}: format version {version!r}; this tensorbox reads versions "
            f"{', '.join(map(str, VERSIONS))}"
            + (" (the tree is newer: upgrade tensorbox)" if version > VERSION else "")
        )
    extra = doc.keys() - _NODE_FIELDS
    missing = _NODE_FIELDS - doc.keys()
    if extra or missing:
        raise FormatError(
            f"{where}: unexpected fields {sorted(extra)!r}, missing fields {sorted(missing)!r}"
        )
    type_name = doc["type"]
    if type(type_name) is not str or not type_name:
        raise FormatError(f"{where}: 'type' is {type_name!r}, expected a non-empty str")
    batch_size = check_shape(doc["batch_size"], where, "'batch_size'")
    device = check_device(doc["device"], where)
    entries_doc = doc["entries"]
    if type(entries_doc) is not dict:
        raise FormatError(f"{where}: 'entries' is {_short_repr(entries_doc)}, expected an object")
    return version, type_name, batch_size, device, entries_doc


# Names every tensorbox writer makes (a subset of is_plain_name): no separator, no dot first.
_FAST_NAME = re.compile(r"[A-Za-z0-9_%^~-][A-Za-z0-9_.%^~-]{0,254}").fullmatch


def _tensor_fast(e: dict[Any, Any], batch: tuple[int, ...]) -> LeafSpec | None:
    """The usual tensor entry; None when anything is off (the long way names it)."""
    dtype, shape, file, gen = e["dtype"], e["shape"], e["file"], e.get("id")
    torch_dtype = DTYPES.get(dtype) if type(dtype) is str else None
    if (
        torch_dtype is None
        or type(shape) is not list
        or len(shape) > MAX_DIMS
        or type(file) is not str
        or _FAST_NAME(file) is None
        or (gen is not None and (type(gen) is not str or HEX32(gen) is None))
    ):
        return None
    numel = 1
    for d in shape:
        if type(d) is not int or d < 0:
            return None
        numel *= d
    need = numel * torch_dtype.itemsize
    if not numel or need >= _INT64_LIMIT:
        return None  # empty (its dims still need the overflow check) or too large
    shp = tuple(shape)
    if batch and shp[: len(batch)] != batch:
        return None
    return LeafSpec(torch_dtype, shp, file, need, gen)


def _entry(where: str, key: str, e: Any, batch: tuple[int, ...], version: int = VERSION) -> Spec:
    """One entry of ``meta.json``, checked."""
    kwhere = f"{where}: entry {key!r}"
    kind = e.get("kind") if type(e) is dict else None
    fields = _ENTRY_FIELDS.get(kind) if type(kind) is str else None
    if fields is None:
        raise FormatError(
            f"{kwhere} is {_short_repr(e)}; expected an object with 'kind' one of "
            f"{sorted(_ENTRY_FIELDS)!r}"
        )
    if kind == "tensor":
        fields = _TENSOR_FIELDS[version]
        if not fields <= e.keys() <= fields | {"sha256"}:
            raise FormatError(
                f"{kwhere} has fields {sorted(e)!r}; a 'tensor' entry of format version "
                f"{version} has {sorted(fields)!r} and may have 'sha256'"
            )
        gen, sha = _ids(e, "", kwhere)
        return leaf_spec(e["file"], e["dtype"], e["shape"], batch, kwhere)._replace(
            gen=gen, sha256=sha
        )
    if kind == "jagged":
        if version < 3:
            raise FormatError(f"{kwhere} is a 'jagged' entry, which format version 3 added")
        return _jagged(e, batch, kwhere)
    if not e.keys() <= fields or (kind != "json" and e.keys() != fields):
        raise FormatError(
            f"{kwhere} has fields {sorted(e)!r}; a {kind!r} entry has {sorted(fields)!r}"
        )
    if kind == "node":
        name = e["dir"]
        if not is_plain_name(name):
            raise FormatError(f"{kwhere}: dir {_short_repr(name)} is not a plain directory name")
        return ChildSpec(name)
    if "value" not in e:
        raise FormatError(f"{kwhere} has no 'value'")
    stacked = e.get("stacked", False)
    if type(stacked) is not bool:
        raise FormatError(f"{kwhere}: 'stacked' is {stacked!r}, expected true or false")
    meta = e.get("meta", False)
    if "meta" in e and version < 4:
        raise FormatError(f"{kwhere} has a 'meta' field, which format version 4 added")
    if type(meta) is not bool or (meta and stacked):
        raise FormatError(
            f"{kwhere}: 'meta' is {_short_repr(meta)}, expected true or false (and false "
            "for a stacked value: metadata is one value for the whole batch)"
        )
    value = stacked_array(e["value"], batch, kwhere) if stacked else e["value"]
    return JsonEntry(value, stacked, meta)


def _ids(e: dict[str, Any], part: str, where: str) -> tuple[Any, Any]:
    gen, sha = e.get("id"), e.get("sha256")
    what = f"{part} " if part else ""
    if gen is not None and (type(gen) is not str or HEX32(gen) is None):
        raise FormatError(f"{where}: {what}'id' is {_short_repr(gen)}, expected 32 hex digits")
    if sha is not None and (type(sha) is not str or HEX64(sha) is None):
        raise FormatError(f"{where}: {what}'sha256' is {_short_repr(sha)}, expected 64 hex digits")
    return gen, sha


def leaf_spec(file: Any, dtype: Any, shape: Any, batch: tuple[int, ...], where: str) -> LeafSpec:
    """A tensor file's description, checked (``file`` a plain name, or names to try)."""
    if type(dtype) is not str or dtype not in DTYPES:
        raise FormatError(f"{where}: dtype {_short_repr(dtype)} is not one of {sorted(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    shp = check_shape(shape, where, "'shape'")
    if shp[: len(batch)] != batch:
        raise FormatError(
            f"{where}: shape {list(shp)} does not start with batch_size {list(batch)}"
        )
    need = math.prod(shp) * torch_dtype.itemsize
    if need >= _INT64_LIMIT:
        raise FormatError(f"{where}: shape {list(shp)} is too large for a tensor")
    names = file if type(file) is tuple else (file,)
    for name in names:
        if not is_plain_name(name):
            raise FormatError(f"{where}: file {_short_repr(name)} is not a plain file name")
    return LeafSpec(torch_dtype, shp, file, need)


def _jagged(e: dict[str, Any], batch: tuple[int, ...], where: str) -> JaggedSpec:
    """A ``jagged`` entry: its fields, both files' descriptions (contents are checked
    when mapped, by :func:`tensorbox._storage.jagged_io.check_offsets`)."""
    if e.keys() != _ENTRY_FIELDS["jagged"]:
        raise FormatError(
            f"{where} has fields {sorted(e)!r}; a 'jagged' entry has "
            f"{sorted(_ENTRY_FIELDS['jagged'])!r}"
        )
    shape = e["shape"]
    if type(shape) is not list or len(shape) < 2 or shape[1] is not None:
        raise FormatError(
            f"{where}: shape {_short_repr(shape)} is not [rows, null, *feature] (null marks "
            "the ragged dim)"
        )
    rows = check_shape(shape[:1], where, "'shape'")[0]
    feature = check_shape(shape[2:], where, "'shape'")
    if batch != (rows,):
        raise FormatError(
            f"{where}: a jagged entry of {rows} rows needs batch_size [{rows}], the node's is "
            f"{list(batch)}"
        )
    length = e["length"]
    if type(length) is not int or length < 0:
        raise FormatError(f"{where}: 'length' is {_short_repr(length)}, expected an int >= 0")
    parts: dict[str, dict[str, Any]] = {}
    for name, fields in _JAGGED_PARTS.items():
        sub = e.get(name)
        if type(sub) is not dict or not fields <= sub.keys() <= fields | {"sha256"}:
            raise FormatError(
                f"{where}: {name!r} is {_short_repr(sub)}; expected an object with "
                f"{sorted(fields)!r} and maybe 'sha256'"
            )
        gen, _ = _ids(sub, name, where)
        if gen is None:
            raise FormatError(f"{where}: {name} 'id' is None, expected 32 hex digits")
        parts[name] = sub
    v, o = parts["values"], parts["offsets"]
    odt = o["dtype"]
    if type(odt) is not str or odt not in OFFSET_DTYPES:
        raise FormatError(
            f"{where}: offsets dtype {_short_repr(odt)} is not one of {sorted(OFFSET_DTYPES)}"
        )
    if odt == "int32" and length > 2**31 - 1:
        raise FormatError(f"{where}: 'length' {length} does not fit int32 offsets")
    values = leaf_spec(v["file"], e["dtype"], [length, *feature], (), where)
    offsets = leaf_spec(o["file"], odt, [rows + 1], (), where)
    return JaggedSpec(
        values._replace(gen=v["id"], sha256=v.get("sha256")),
        offsets._replace(gen=o["id"], sha256=o.get("sha256")),
    )


def check_shape(value: Any, where: str, what: str) -> tuple[int, ...]:
    """A list of ints >= 0 (bools refused) whose element count fits in int64."""
    if type(value) is not list or len(value) > MAX_DIMS:
        raise FormatError(
            f"{where}: {what} is {_short_repr(value)}, expected a list of at most "
            f"{MAX_DIMS} ints >= 0"
        )
    span = 1
    for d in value:
        if type(d) is not int or d < 0:
            raise FormatError(f"{where}: {what} is {_short_repr(value)}; {d!r} is not an int >= 0")
        span *= max(d, 1)
    if span >= _INT64_LIMIT:
        raise FormatError(f"{where}: {what} {_short_repr(value)} is too large for a tensor")
    return tuple(value)


def check_device(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if type(value) is str:
        try:
            torch.device(value)
            return value
        except Exception:  # torch raises RuntimeError, ValueError... for a bad string
            pass
    raise FormatError(f"{where}: 'device' is {_short_repr(value)}, expected a device or null")


def file_ids(entries: Any) -> dict[str, str]:
    """``{file name: id}`` of every file an ``entries`` object of ``meta.json`` names:
    tensor entries' files and both files of jagged entries (unchecked JSON: odd
    entries are skipped)."""
    ids: dict[str, str] = {}
    for e in entries.values() if type(entries) is dict else ():
        if type(e) is not dict:
            continue
        for f in (e, e.get("values"), e.get("offsets")) if e.get("kind") == "jagged" else (e,):
            if type(f) is dict and type(f.get("file")) is str and type(f.get("id")) is str:
                ids[f["file"]] = f["id"]
    return ids
