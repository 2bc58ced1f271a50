"""The on-disk format of a saved tree: specification, key encoding, ``meta.json`` I/O.

This docstring is the specification (also rendered in ``docs/format.md``).

Format ``tensorbox`` version 3
==============================

Version 3 adds one entry kind, ``jagged`` (below); a writer writes version 3 in
the ``meta.json`` of a node that holds a jagged entry and version 2 elsewhere, so
a reader of versions 1 and 2 still opens every node that uses nothing new, and
refuses a jagged node by its version rather than by an unknown entry. Version 2
added one field to tensor entries, ``id``, and an optional ``sha256``; readers
accept versions 1 (the same without them), 2 and 3.

A saved tree is a directory. Every *node* (the root, and each nested
``TensorDict`` or tensorclass instance) is a directory that holds:

- ``meta.json``: the node's description, a UTF-8 JSON object (below);
- one ``<name>.memmap`` file per tensor leaf: the tensor's elements in C
  (row-major) order, little-endian, no header, no padding. A file may be longer
  than its tensor (readers ignore the tail) but never shorter;
- one sub-directory per nested node, itself a node.

Each node's ``meta.json`` is self-contained: any sub-directory of a tree can be
opened as a tree of its own.

``meta.json`` keeps the node's own fields apart from its entries, so no key name
can collide with a field::

    {
      "format": "tensorbox",           required, exactly this string
      "version": 2,                    required int; unknown versions are refused
      "type": "TensorDict",            "TensorDict", or "module:QualName" of a tensorclass
      "batch_size": [3],               list of ints >= 0
      "device": "cpu",                 a torch device string, or null
      "entries": {                     one per key, in the container's order
        "pixels": {"kind": "tensor", "dtype": "uint8", "shape": [3, 84, 84],
                   "file": "pixels.memmap", "id": "9f0c...32 hex digits"},
        "info":   {"kind": "node", "dir": "info"},
        "name":   {"kind": "json", "value": "a string"},
        "tags":   {"kind": "json", "value": ["a", "b", "c"], "stacked": true}
      }
    }

- ``tensor``: ``dtype`` is one of :data:`DTYPES` (torch names without ``torch.``);
  ``shape`` starts with the node's ``batch_size``; ``file`` is a file name in
  the node's directory. ``id`` (version 2) is the file's generation id: 32
  lower-case hex digits (128 random bits) drawn when the file is written, kept
  while the file is kept (an in-place save that links it into the new tree), never
  derived from a name or an inode. Pickled references to the file carry it and
  are refused when the ``meta.json`` beside the file names another. ``sha256``
  (optional, ``checksum=True`` at save) is the SHA-256 of the tensor's bytes at
  save time, checked by ``verify --read`` and ``load_memmap(verify=True)``.
- ``node``: ``dir`` is a sub-directory name; its ``meta.json`` describes it, and
  its ``batch_size`` starts with this node's.
- ``jagged`` (version 3): a jagged nested tensor, ``B`` rows of ``L_i`` elements
  of shape ``feature`` each, as two files in the node's directory::

      "tokens": {"kind": "jagged", "dtype": "int64", "shape": [3, null, 2],
                 "length": 17,
                 "values": {"file": "tokens.values.memmap", "id": "..."},
                 "offsets": {"file": "tokens.offsets.memmap", "dtype": "int64",
                             "id": "..."}}

  ``shape`` is ``[B, null, *feature]`` (``null`` marks the ragged dim); the node's
  ``batch_size`` is exactly ``[B]``. ``length`` is ``sum L_i``. The values file
  holds ``[length, *feature]`` elements of ``dtype`` (as a tensor file: C order,
  little-endian, may be longer); the offsets file holds ``B + 1`` integers of the
  offsets ``dtype`` (``int64`` or ``int32``): row ``i`` is values
  ``offsets[i]:offsets[i + 1]``. Offsets start at 0, never decrease and end at
  ``length``; a reader checks this (and both files' sizes) when it maps them and
  refuses anything else, naming the file. ``values`` and ``offsets`` each carry
  their file's ``id`` and may carry its ``sha256``, as tensor entries do.
- ``json``: a value shared by the whole batch, or with ``"stacked": true`` one
  value per batch element as nested lists of shape ``batch_size``. Values are
  JSON (``NaN`` and ``Infinity`` are written as Python's ``json`` writes them),
  nested at most :data:`MAX_JSON_DEPTH` deep, integers of at most
  ``sys.get_int_max_str_digits()`` digits: a writer refuses more before it
  writes anything, so what saves loads.

Nodes nest at most :data:`MAX_DEPTH` deep below the root, for writers and
readers alike.

No other field is allowed. Nothing in a file is ever unpickled or imported: a
``type`` only selects a class the reader already has.

Commits
-------
A save is atomic for the whole tree (:mod:`tensorbox._storage.commit` implements it):

1. Writers of one path take turns: an exclusive ``flock`` on
   ``<parent>/.<name>.tbx-lock``, removed when the save ends.
2. The new tree is built complete in ``<parent>/.<name>.tbx-new-<hex>``: every
   ``.memmap`` file (a file kept by an in-place save is hard-linked, so it keeps
   its ``id``), then every ``meta.json``, children first, each created in place
   (step 3 publishes the whole tree: no file of it needs a temporary name).
3. It replaces the tree at ``<parent>/<name>`` in one step: a ``rename`` when
   there was none, else ``renameat2(RENAME_EXCHANGE)`` of the two directories
   (Linux: ext4, xfs, btrfs, tmpfs), under an exclusive ``flock`` of each node
   directory of the old tree.
4. The old tree, now under the staging name, is taken apart: the names its
   ``meta.json`` files list (and those files, and tensorbox's ``.tbx-*.tmp`` files)
   go, any other entry (a user's file, a folder no node lists) moves into the new
   tree. A save that could not keep such an entry (the new tree needs its path), or
   whose path holds a non-empty folder that is not a tree, is refused before step 2.
   Nothing is followed through a symlink.

Readers open a directory once, take a shared ``flock`` on it and check it is
still the one at its path, then read that one generation: at any moment a reader
sees the old tree or the new one, whole, and waits at most for step 3. This
holds for a sub-directory opened alone too: it is one of the old tree's node
directories (locked at the swap) or one of the new tree's.

A save that fails or is killed before step 3 leaves the old tree as it was (and a
hidden staging directory that the next save at the path removes); after step 3,
the new tree. Where directories cannot be exchanged (``EINVAL``, ``ENOSYS``,
``EOPNOTSUPP``: NFS, some FUSE file systems, other kernels), step 3 is two
renames, the old tree to ``<parent>/.<name>.tbx-old-<hex>`` then the new one to
the path: a reader finding no tree in between waits for the writer, and a save
killed in between leaves the old tree there, which the next load or save puts
back. A save needs write permission on the tree's parent directory.

In place, without a new tree (a row written through a mapping, the tail of a
growing file), a file is changed where it is: readers mapping it see the bytes as
they are written.

A tree whose root has no ``meta.json`` (version 1 writers removed it first when
overwriting) is refused with :class:`~tensorbox.errors.IncompleteTreeError`.

Growth
------
Rows are appended along batch dim 0 (``extend_``) with no change to the format.
The committed size of a tree is written in its ``meta.json`` files: each node's
``batch_size`` and each tensor entry's ``shape``, which change only through a
whole-tree commit as above. A leaf file grows first, in place: it is lengthened
by a factor (amortised, so a file is often longer than its tensor) and the new rows
are written after the committed bytes, which are never touched; then a commit
links the same files (the same ``id``) under new ``meta.json`` files with the new
size. A reader maps only the rows its generation's ``meta.json`` commits, and so
does a sub-folder opened alone: rows written but not yet committed, or left by a
writer killed before its commit, are part of a file's ignored tail, and the next
append writes over them.

File names
----------
A key becomes a name by a reversible encoding that is safe on case-insensitive
and Unicode-normalising file systems: every byte of the key's UTF-8 is kept
when it is one of ``a-z 0-9 _ -``, and ``.`` too except in first place or in
a directory name; an ASCII capital ``X`` becomes ``^x``; every other byte
becomes ``%XX`` (upper-case hex). The empty key is ``%``. A name equal to a
Windows device name (``con``, ``nul``, ``com1``...) before its first dot gets its
first letter escaped. A name longer than 200 characters is cut to 180 and ends
with ``~`` and 16 hex digits of the key's SHA-256 (``meta.json`` keeps the key).
Leaf files add ``.memmap``; directories have no dot, so they never collide with a
leaf file or with ``meta.json``, and no name starts with ``.``, the prefix of
temporary files.

>>> encode_key("obs"), encode_key("Weird key/..", node=True), encode_key("")
('obs', '^weird%20key%2F%2E%2E', '%')
>>> decode_key("^weird%20key%2F%2E%2E")
'Weird key/..'

Reading a tree written by tensordict (0.14, 0.15: its format versions 0 and 1)
is supported as a migration path: :func:`read_node` returns the same
:class:`Node` for both.

The same tree can be one file, a standard zip whose stored entries mirror the
folder byte for byte (``memmap(path, archive=True)``): see ``docs/format.md``
("One-file archives") and the docstrings of ``_zip`` and ``_archive``.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import orjson
import torch

from tensorbox._core.schema import _INT64_LIMIT, MAX_JSON_DEPTH, _short_repr, check_json_value
from tensorbox._storage.format.names import decode_key, encode_key, is_plain_name
from tensorbox._storage.format.write import (
    META,
    fsync_dir,
    meta_bytes,
    temp_name,
    write_meta,
    write_new_meta,
)
from tensorbox.errors import FormatError, IncompleteTreeError

if TYPE_CHECKING:
    from tensorbox._storage.jagged_io import JaggedEntry

__all__ = [
    "DTYPES",
    "FORMAT",
    "FormatError",  # what the readers raise, re-exported for them
    "MAX_DEPTH",
    "MAX_JSON_DEPTH",
    "MAX_DIMS",
    "META",
    "SUFFIX",
    "VERSION",
    "VERSIONS",
    "JsonEntry",
    "Node",
    "NodeEntry",
    "TensorEntry",
    "check_json_value",
    "decode_key",
    "dtype_name",
    "encode_key",
    "is_plain_name",
    "iter_tree",
    "fsync_dir",
    "meta_bytes",
    "temp_name",
    "node_meta",
    "read_child",
    "read_node",
    "write_meta",
    "write_new_meta",
]

FORMAT = "tensorbox"
VERSION = 3
#: Versions this reader accepts (1: tensor entries without an ``id``; 3: jagged entries).
VERSIONS = (1, 2, 3)
SUFFIX = ".memmap"
#: Bounds that keep a hostile file from asking for absurd work before the size check.
MAX_DIMS = 64
MAX_DEPTH = 200  # nested nodes, for writers and readers; loading recurses once per level
MAX_META_BYTES = 1 << 28

#: dtype name (as written in ``meta.json``) -> torch dtype. Names are torch's, without "torch.".
_DTYPE_NAMES_TEXT = (
    "bool uint8 int8 int16 int32 int64 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
    "complex32 complex64 complex128 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz "
    "float8_e8m0fnu"
)
_DTYPE_LIST = _DTYPE_NAMES_TEXT.split()
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in _DTYPE_LIST
    if isinstance(getattr(torch, name, None), torch.dtype)
}
_DTYPE_NAMES = {dt: name for name, dt in DTYPES.items()}


def dtype_name(dtype: torch.dtype, where: str = "") -> str:
    """The name ``meta.json`` uses for ``dtype``; TypeError for dtypes the format lacks."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise TypeError(
            f"{where or 'tensor'} has dtype {dtype}, which the tensorbox format cannot store; "
            f"supported: {sorted(DTYPES)}"
        ) from None


# ---------------------------------------------------------------- writing


def node_meta(
    type_name: str, batch_size: Any, device: Any, entries: dict[str, Any], version: int = 1
) -> dict[Any, Any]:
    """The ``meta.json`` object of a node (entries built by the caller).

    ``version`` 2 when every tensor entry has its ``id``; writers that do not make
    ids (a tree built file by file) write version 1, which readers still accept.
    """
    return {
        "format": FORMAT,
        "version": version,
        "type": type_name,
        "batch_size": [int(d) for d in batch_size],
        "device": None if device is None else str(device),
        "entries": entries,
    }


# ---------------------------------------------------------------- reading


class TensorEntry(NamedTuple):
    dtype: torch.dtype
    shape: tuple[int, ...]
    path: str  # the file, checked to exist, to stay inside the tree and to be long enough
    nbytes: int  # of the tensor (the file may be longer)
    ident: tuple[int, int]  # (st_dev, st_ino) of the file
    gen: str | None = None  # the file generation id (version 2), None in version 1 trees
    sha256: str | None = None  # of the tensor's bytes, when the save recorded it


class NodeEntry(NamedTuple):
    path: str  # the sub-directory, checked to be a real directory


class JsonEntry(NamedTuple):
    value: Any  # a plain value, or a numpy object array of shape batch_size when stacked
    stacked: bool


class Node(NamedTuple):
    """One parsed and checked ``meta.json``."""

    path: str
    version: int  # the tensorbox format version, or tensordict's (0, 1) when legacy
    type: str
    batch_size: tuple[int, ...]
    device: str | None
    entries: dict[str, TensorEntry | NodeEntry | JsonEntry | JaggedEntry]
    legacy: bool


_NODE_FIELDS = frozenset(("format", "version", "type", "batch_size", "device", "entries"))
_TENSOR_FIELDS = {
    1: frozenset(("kind", "dtype", "shape", "file")),
    2: frozenset(("kind", "dtype", "shape", "file", "id")),
    3: frozenset(("kind", "dtype", "shape", "file", "id")),
}
_ENTRY_FIELDS = {
    "tensor": frozenset(("kind", "dtype", "shape", "file")),
    "node": frozenset(("kind", "dir")),
    "json": frozenset(("kind", "value", "stacked")),
    "jagged": frozenset(("kind", "dtype", "shape", "length", "values", "offsets")),
}


def check_header(
    doc: dict[str, Any], where: str
) -> tuple[int, str, tuple[int, ...], str | None, dict[str, Any]]:
    """The node fields of a tensorbox ``meta.json`` (a folder's or an archive's), checked:
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


def read_node(directory: str, root_real: str | None = None, dir_fd: int | None = None) -> Node:
    """Parse and check ``directory/meta.json``; every problem is a FormatError naming the file.

    ``root_real`` is the top of the tree, symlinks resolved (default: ``directory``'s):
    a leaf reached through a symlink must resolve inside it. Sub-nodes are not read:
    their :class:`NodeEntry` tells the caller where they are. ``dir_fd``, an open
    descriptor of ``directory`` (the caller's, left open), saves opening it again.
    """
    directory = os.path.abspath(directory)
    if root_real is None:
        root_real = os.path.realpath(directory)
    meta_path = os.path.join(directory, META)
    raw = read_meta_bytes(directory, meta_path)
    doc = _parse_json(raw, meta_path)
    if not isinstance(doc, dict):
        raise FormatError(f"{meta_path}: expected a JSON object, got {type(doc).__name__}")
    if "format" not in doc and ("_type" in doc or "shape" in doc):
        from tensorbox._storage.format.legacy import (
            read_legacy_node,  # a rare path: imported when needed
        )

        return read_legacy_node(directory, meta_path, doc, root_real)
    version, type_name, batch_size, device, entries_doc = check_header(doc, meta_path)
    entries: dict[str, Any] = {}
    tensor_fields = _TENSOR_FIELDS[version]
    own_fd = dir_fd is None or not _STAT_DIR_FD
    if own_fd:
        dir_fd = _open_dir(directory)
    try:
        for key, e in entries_doc.items():
            # The common case first, with no per-entry string building (a tree of many
            # small leaves spends its open time here); anything unusual takes the long
            # way below, which names the problem.
            if type(e) is dict and e.get("kind") == "tensor" and e.keys() == tensor_fields:
                leaf = _tensor_fast(directory, dir_fd, e, batch_size)
                if leaf is not None:
                    entries[key] = leaf
                    continue
            entries[key] = _entry(directory, root_real, meta_path, key, e, batch_size, version)
    finally:
        if dir_fd is not None and own_fd:
            os.close(dir_fd)
    return Node(directory, version, type_name, batch_size, device, entries, False)


def _entry(
    directory: str,
    root_real: str,
    meta_path: str,
    key: str,
    e: Any,
    batch_size: tuple[Any, ...],
    version: int = VERSION,
) -> TensorEntry | NodeEntry | JsonEntry | JaggedEntry:
    """One entry of ``meta.json``, checked; every problem is a FormatError naming the file."""
    where = f"{meta_path}: entry {key!r}"
    kind = e.get("kind") if type(e) is dict else None
    fields = _ENTRY_FIELDS.get(kind) if type(kind) is str else None
    if fields is None:
        raise FormatError(
            f"{where} is {_short_repr(e)}; expected an object with 'kind' one of "
            f"{sorted(_ENTRY_FIELDS)!r}"
        )
    if kind == "tensor":
        fields = _TENSOR_FIELDS[version]
        if not fields <= e.keys() <= fields | {"sha256"}:
            raise FormatError(
                f"{where} has fields {sorted(e)!r}; a 'tensor' entry of format version "
                f"{version} has {sorted(fields)!r} and may have 'sha256'"
            )
        gen, sha = e.get("id"), e.get("sha256")
        if gen is not None and (type(gen) is not str or _HEX32(gen) is None):
            raise FormatError(f"{where}: 'id' is {_short_repr(gen)}, expected 32 hex digits")
        if sha is not None and (type(sha) is not str or _HEX64(sha) is None):
            raise FormatError(f"{where}: 'sha256' is {_short_repr(sha)}, expected 64 hex digits")
        leaf = tensor_entry(
            directory, root_real, e["file"], e["dtype"], e["shape"], batch_size, where
        )
        return leaf._replace(gen=gen, sha256=sha)
    if kind == "jagged":
        if version < 3:
            raise FormatError(f"{where} is a 'jagged' entry, which format version 3 added")
        from tensorbox._storage.jagged_io import (
            parse_entry,  # imports this module: imported when needed
        )

        return parse_entry(directory, root_real, e, batch_size, where)
    if not e.keys() <= fields or (kind != "json" and e.keys() != fields):
        raise FormatError(
            f"{where} has fields {sorted(e)!r}; a {kind!r} entry has {sorted(fields)!r}"
        )
    if kind == "node":
        return node_entry(directory, root_real, e["dir"], where)
    if "value" not in e:
        raise FormatError(f"{where} has no 'value'")
    stacked = e.get("stacked", False)
    if type(stacked) is not bool:
        raise FormatError(f"{where}: 'stacked' is {stacked!r}, expected true or false")
    value = stacked_array(e["value"], batch_size, where) if stacked else e["value"]
    return JsonEntry(value, stacked)


_S_IFMT = 0o170000
_HEX32 = re.compile(r"[0-9a-f]{32}").fullmatch
_HEX64 = re.compile(r"[0-9a-f]{64}").fullmatch
# Names every tensorbox writer makes (a subset of is_plain_name): no separator, no dot first.
_FAST_NAME = re.compile(r"[A-Za-z0-9_%^~-][A-Za-z0-9_.%^~-]{0,254}").fullmatch
_S_IFREG = stat.S_IFREG
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_STAT_DIR_FD = os.stat in os.supports_dir_fd and os.stat in os.supports_follow_symlinks


def _open_dir(directory: str) -> int | None:
    """A descriptor of ``directory`` for stat calls relative to it (one path walk per node)."""
    if not _STAT_DIR_FD:  # pragma: no cover - Windows
        return None
    try:
        return os.open(directory, _DIR_FLAGS)
    except OSError:
        return None


def _tensor_fast(
    directory: str, dir_fd: int | None, e: dict[Any, Any], batch: tuple[int, ...]
) -> TensorEntry | None:
    """The usual tensor entry, checked; None when anything is off (the caller's
    :func:`tensor_entry` then finds and names the problem), symlinks included."""
    dtype, shape, file, gen = e["dtype"], e["shape"], e["file"], e.get("id")
    torch_dtype = DTYPES.get(dtype) if type(dtype) is str else None
    if (
        torch_dtype is None
        or type(shape) is not list
        or len(shape) > MAX_DIMS
        or type(file) is not str
        or _FAST_NAME(file) is None
        or (gen is not None and (type(gen) is not str or _HEX32(gen) is None))
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
    if dir_fd is None:
        return None
    try:
        st = os.stat(file, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    if st.st_mode & _S_IFMT != _S_IFREG or st.st_size < need:
        return None  # a symlink, missing, too short...: checked and named the long way
    return TensorEntry(
        torch_dtype, shp, f"{directory}{os.sep}{file}", need, (st.st_dev, st.st_ino), gen
    )


_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def read_meta_bytes(directory: str, meta_path: str) -> bytes:
    try:
        # Non-blocking: a FIFO or a device in its place must be refused, not waited on.
        fd = os.open(meta_path, _READ_FLAGS)
    except FileNotFoundError:
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"no saved tree at {directory!r}: not a directory") from None
        raise IncompleteTreeError(
            f"{meta_path} is missing: the save that wrote {directory!r} did not finish "
            "(or this is not a saved tree); save it again"
        ) from None
    except OSError as err:  # a symlinked meta.json (ELOOP), a directory, no permission
        raise FormatError(f"{meta_path} cannot be read: {err}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"{meta_path} is not a regular file")
        if st.st_size > MAX_META_BYTES:
            raise FormatError(f"{meta_path} is {st.st_size} bytes, over {MAX_META_BYTES}")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _parse_json(raw: bytes, meta_path: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        # orjson refuses NaN/Infinity, which Python's json writes; tensordict writes them too.
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise FormatError(
                f"{meta_path} is not valid JSON (truncated or damaged): {err}"
            ) from None


def check_shape(value: Any, meta_path: str, what: str) -> tuple[int, ...]:
    """A list of ints >= 0 (bools refused) whose element count fits in int64."""
    if type(value) is not list or len(value) > MAX_DIMS:
        raise FormatError(
            f"{meta_path}: {what} is {_short_repr(value)}, expected a list of at most "
            f"{MAX_DIMS} ints >= 0"
        )
    span = 1
    for d in value:
        if type(d) is not int or d < 0:
            raise FormatError(
                f"{meta_path}: {what} is {_short_repr(value)}; {d!r} is not an int >= 0"
            )
        span *= max(d, 1)
    if span >= _INT64_LIMIT:
        raise FormatError(f"{meta_path}: {what} {_short_repr(value)} is too large for a tensor")
    return tuple(value)


def check_device(value: Any, meta_path: str) -> str | None:
    if value is None:
        return None
    if type(value) is str:
        try:
            torch.device(value)
            return value
        except Exception:  # torch raises RuntimeError, ValueError... for a bad string
            pass
    raise FormatError(f"{meta_path}: 'device' is {_short_repr(value)}, expected a device or null")


def tensor_entry(
    directory: str,
    root_real: str,
    file: Any,
    dtype: Any,
    shape: Any,
    batch: tuple[Any, ...],
    where: str,
) -> TensorEntry:
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
    path, st = _leaf_file(directory, root_real, file, where)
    size = st.st_size
    if size < need:
        raise FormatError(
            f"{path} is {size} bytes, but {dtype} of shape {list(shp)} needs {need}: "
            "the file is truncated or belongs to another tree"
        )
    return TensorEntry(torch_dtype, shp, path, need, (st.st_dev, st.st_ino))


def _leaf_file(directory: str, root_real: str, file: Any, where: str) -> tuple[str, Any]:
    """The leaf's path and stat: a regular file, or a symlink to one inside the tree."""
    if not is_plain_name(file):
        raise FormatError(f"{where}: file {_short_repr(file)} is not a plain file name")
    path = f"{directory}{os.sep}{file}"  # a plain name: no need for os.path.join
    try:
        st = os.lstat(path)
    except OSError:
        raise FormatError(f"{path} is missing ({where})") from None
    if stat.S_ISREG(st.st_mode):
        return path, st
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(path)
        if _inside(real, root_real) and os.path.isfile(real):
            return real, os.stat(real)
        raise FormatError(
            f"{path} is a symlink to {real!r}, outside the tree {root_real!r}: refused"
        )
    raise FormatError(f"{path} is not a regular file ({where})")


def node_entry(directory: str, root_real: str, name: Any, where: str) -> NodeEntry:
    if not is_plain_name(name):
        raise FormatError(f"{where}: dir {_short_repr(name)} is not a plain directory name")
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except OSError:
        raise FormatError(f"{path} is missing ({where})") from None
    if not stat.S_ISDIR(st.st_mode):
        # Symlinked directories are refused outright: they could form cycles.
        raise FormatError(f"{path} is not a directory (symlinks are refused) ({where})")
    return NodeEntry(path)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def stacked_array(value: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    """Nested lists of exactly ``shape`` -> an object array, checked before allocating."""
    flat: list[Any] = []

    def walk(v: Any, depth: int) -> None:
        if depth == len(shape):
            flat.append(v)
            return
        if type(v) is not list or len(v) != shape[depth]:
            raise FormatError(
                f"{where}: stacked value does not have the shape of batch_size {list(shape)} "
                f"(at depth {depth}: {_short_repr(v)})"
            )
        for item in v:
            walk(item, depth + 1)

    walk(value, 0)
    arr = np.empty(len(flat), dtype=object)
    for i, v in enumerate(flat):  # one by one: numpy would turn list values into dims
        arr[i] = v
    return arr.reshape(shape)


def read_child(parent: Node, entry: NodeEntry, root_real: str, depth: int) -> Node:
    """The sub-node ``entry`` of ``parent``, checked against it; ``depth`` is its level."""
    child = read_node(entry.path, root_real)
    if depth > MAX_DEPTH:
        raise FormatError(f"{child.path}: nodes are nested more than {MAX_DEPTH} deep")
    if child.batch_size[: len(parent.batch_size)] != parent.batch_size:
        raise FormatError(
            f"{os.path.join(child.path, META)}: batch_size {list(child.batch_size)} does not "
            f"start with its parent's {list(parent.batch_size)}"
        )
    return child


def iter_tree(path: str, top: Node | None = None) -> Iterator[tuple[tuple[str, ...], Node]]:
    """Every node of the tree at ``path``, parents first, checked (used by ``verify``);
    ``top`` is the root node when the caller has read it already."""
    root_real = os.path.realpath(path)
    if top is None:
        top = read_node(os.path.abspath(path), root_real)
    todo: list[tuple[tuple[str, ...], Node]] = [((), top)]
    while todo:
        keys, node = todo.pop()
        yield keys, node
        for k, e in reversed(node.entries.items()):
            if type(e) is NodeEntry:
                todo.append(((*keys, k), read_child(node, e, root_real, len(keys) + 1)))
