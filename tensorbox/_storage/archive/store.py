"""One-file trees: a saved tree as one zip archive, mapped once, every leaf a view.

The archive holds the directory tree of :mod:`tensorbox._storage.format.spec` byte for byte: a
STORED entry per file, at the file's relative path (``meta.json``,
``info/meta.json``, ``info/step.memmap``...), each node's ``meta.json`` first. Tensor
data starts on a 64-byte boundary (see :mod:`tensorbox._storage.archive.zip`), so one private mapping
of the whole file serves every leaf without a copy, both parts of a jagged leaf
included (its offsets checked as a folder's are). ``unzip`` gives back the folder.

>>> import os, tempfile, torch
>>> from tensorbox import TensorDict
>>> path = os.path.join(tempfile.mkdtemp(), "model.tbx")
>>> td = TensorDict({"w": torch.arange(6.0).reshape(3, 2), "enc": {"b": torch.ones(3)}},
...                 batch_size=[3])
>>> saved = td.memmap(path, archive=True)          # one file, written then renamed in
>>> os.path.isfile(path), saved["w"].untyped_storage() is saved["enc", "b"].untyped_storage()
(True, True)
>>> TensorDict.load_memmap(path)["w"][2].tolist()       # nothing read until used
[4.0, 5.0]
>>> TensorDict.load_memmap(path + "::enc")["b"].tolist()  # a sub-tree alone: FILE::DIR
[1.0, 1.0, 1.0]

Archives are read-only: the mapping is private (copy-on-write), so a stray write
changes this process's copy, never the file; ``load_memmap(..., mode="r+")``, or a
folder save over an archive, raises. To change one, unpack it
(``python -m tensorbox unpack``) or save again. A save builds the new archive in a
hidden temporary file beside it (``.<name>.tbx-new-<hex>``) and renames it in, under
the same writer lock as folder saves: a killed save leaves the old archive, and the
next save at the path removes the leftover.

Archives written by tensordict 0.14+ (``.tdz``) load too; their compressed entries
(deflate, bzip2, lzma) are read by copying.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import stat
import sys
import zipfile
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any, NamedTuple, cast

import torch

from tensorbox._core.chunks import as_bytes, byte_chunks
from tensorbox._core.jagged import from_parts
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.schema import _short_repr
from tensorbox._core.tree import CLASS_REGISTRY
from tensorbox._storage import checksum as _checksum
from tensorbox._storage import commit as _commit
from tensorbox._storage import jagged_io as _jagged_io
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.format import spec as fmt
from tensorbox._storage.format.names import is_plain_name, legacy_name
from tensorbox._storage.jagged_io import JaggedEntry
from tensorbox._storage.load import _CPU, _fit, _Loader
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, _blank
from tensorbox._storage.persist import _Saver
from tensorbox.errors import FormatError, IncompleteTreeError

__all__ = [
    "SUFFIX",
    "ArchiveJagged",
    "ArchiveTensor",
    "Archive",
    "iter_nodes",
    "load",
    "save",
    "split",
    "target",
    "wanted",
]

SEP = "::"
#: tensordict's archive suffix: a save to a path ending with it writes an archive.
SUFFIX = ".tdz"
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


class ArchiveTensor(NamedTuple):
    """A tensor entry of an archive node (the archive's counterpart of ``TensorEntry``)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    path: str  # FILE::entry, for messages
    nbytes: int
    name: str  # the zip entry
    gen: str | None = None
    sha256: str | None = None


class ArchiveJagged(NamedTuple):
    """A ``jagged`` entry of an archive node: its two files' entries (shapes ``[length,
    *feature]`` and ``[rows + 1]``), the archive's counterpart of ``JaggedEntry``."""

    values: ArchiveTensor
    offsets: ArchiveTensor


# What the entries of a node read from an archive hold (``fmt.Node`` types them for folders).
Entry = (
    ArchiveTensor | ArchiveJagged | fmt.TensorEntry | fmt.NodeEntry | fmt.JsonEntry | JaggedEntry
)


# ---------------------------------------------------------------- finding archives


def split(prefix: Any) -> tuple[str, str] | None:
    """``(file, sub-directory)`` when ``prefix`` names an archive (``FILE`` or
    ``FILE::DIR``), else None (a folder, or nothing yet)."""
    if not isinstance(prefix, str | os.PathLike):
        return None
    p = os.fspath(prefix)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if os.path.isfile(p):
        return os.path.realpath(p), ""
    file, sep, inner = p.rpartition(SEP)
    if not sep or not os.path.isfile(file):
        return None
    inner = inner.strip("/")
    if inner and not all(is_plain_name(part) for part in inner.split("/")):
        raise FormatError(
            f"{p!r}: {inner!r} is not a sub-directory path inside the archive (plain names "
            "separated by '/', as unzip would create them)"
        )
    return os.path.realpath(file), inner


target = split


def wanted(prefix: Any, archive: bool | None, compression: Any) -> bool:
    """Whether a save at ``prefix`` writes an archive: ``archive``, or when it is None, a
    path ending with ``.tdz`` (tensordict's rule: the last suffix of the path, exactly).
    ``compression`` is checked here, before anything is written."""
    if archive is None:
        archive = False
        if isinstance(prefix, str | bytes | os.PathLike):
            archive = PurePath(os.fsdecode(prefix)).suffix == SUFFIX
    if compression is not None:
        if not archive:
            raise ValueError(
                f"compression={compression!r} applies to archives only, and {str(prefix)!r} is "
                f"saved as a folder: pass archive=True (or a path ending with {SUFFIX}), or "
                "drop compression"
            )
        _zip.compression_method(compression)
    return bool(archive)


class Archive:
    """One archive, mapped once (private, copy-on-write) and indexed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.storage, self.ident = _map(path)
        flat = _blank(torch.uint8).new().set_(self.storage)
        self.buf = memoryview(flat.numpy())  # type: ignore[arg-type]  # numpy's stubs: no Buffer before 3.12
        self.index = _zip.read_index(self.buf, path)
        self.entries = self.index.entries

    def where(self, name: str) -> str:
        return f"{self.path}{SEP}{name}"

    def leaf(self, e: ArchiveTensor) -> torch.Tensor:
        """A view of the mapping when the entry is stored and aligned, else a copy."""
        ze = self.entries[e.name]
        data = self.index.data_offset(ze)
        size = e.dtype.itemsize
        if ze.method == _zip.STORED and data % size == 0:
            # torch's stubs lack set_(storage, offset, size); strides are computed (contiguous)
            t: torch.Tensor = _blank(e.dtype).new().set_(self.storage, data // size, e.shape)  # type: ignore[call-overload]
            t.__class__ = MemoryMappedTensor
            return t
        raw = self.index.read(ze) if ze.method != _zip.STORED else self.buf[data : data + e.nbytes]
        out = torch.empty(e.shape, dtype=e.dtype)
        if e.nbytes:
            out.view(-1).view(torch.uint8).numpy()[:] = memoryview(raw)[: e.nbytes]
        return out

    def jagged(self, e: ArchiveJagged) -> torch.Tensor:
        """The jagged leaf of ``e``: two views of the mapping (copies when compressed),
        its offsets checked as a folder's are."""
        return _jagged_io.build(self.leaf(e.values), self.leaf(e.offsets), e)

    def checked(self, ze: _zip.ZipEntry, where: str) -> Any:
        """The bytes of entry ``ze``: a view of the mapping for a stored entry, its CRC-32
        checked (16 MiB at a time), else decompressed (which checks it)."""
        if ze.method != _zip.STORED:
            return self.index.read(ze)
        data = self.index.data_offset(ze)
        raw = self.buf[data : data + ze.csize]
        crc = 0
        for at in range(0, len(raw), 1 << 24):
            crc = _zip.crc32(raw[at : at + (1 << 24)], crc)
        if crc != ze.crc:
            raise FormatError(
                f"{where}: CRC-32 {crc:08x} does not match the recorded {ze.crc:08x}: "
                "the archive is damaged"
            )
        return raw

    def check(self, e: ArchiveTensor) -> None:
        """Read every byte of a leaf: its CRC-32, and its SHA-256 when one was recorded."""
        raw = self.checked(self.entries[e.name], e.path)
        if e.sha256 is not None and hashlib.sha256(raw[: e.nbytes]).hexdigest() != e.sha256:
            raise FormatError(
                f"{e.path}: the bytes do not match the SHA-256 recorded when the tree was "
                "saved: the archive is damaged"
            )


def _map(path: str) -> tuple[torch.UntypedStorage, tuple[int, int]]:
    """Map the whole file private; the mapping is of the file opened (no race with a rename)."""
    try:
        fd = os.open(path, _READ)
    except OSError as err:
        raise FormatError(f"{path} cannot be read: {err}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"{path} is not a regular file")
        if st.st_size < 22:
            raise FormatError(
                f"{path}: {st.st_size} bytes, too short for a zip archive (truncated?)"
            )
        source = f"/proc/self/fd/{fd}" if _PROC_FD else path
        # Any: the storage carries the _tbx_* attributes set below
        storage: Any = torch.UntypedStorage.from_file(source, False, st.st_size)
        ident = (st.st_dev, st.st_ino)
        if not _PROC_FD:  # pragma: no cover - mapped by name: check it is the file opened
            now = os.stat(path)
            if (now.st_dev, now.st_ino) != ident:
                raise FormatError(f"{path} was replaced while being opened; open it again")
    finally:
        os.close(fd)
    storage._tbx_id = ident
    storage._tbx_gen = None
    storage._tbx_ro = path
    # What a reference checks before mapping the file again: rewritten in place (cp,
    # rsync --inplace), an archive keeps its inode, never its size, mtime and ctime.
    storage._tbx_stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return storage, ident


# ---------------------------------------------------------------- reading nodes


def read_node(ar: Archive, d: str) -> fmt.Node:
    """The checked node of sub-directory ``d`` ("" for the root): a ``Node`` whose tensor
    entries are :class:`ArchiveTensor` and whose node entries name sub-directories."""
    meta_name = f"{d}/{fmt.META}" if d else fmt.META
    where = ar.where(meta_name)
    ze = ar.entries.get(meta_name)
    if ze is None:
        prefix = f"{d}/" if d else ""
        if d and not any(n.startswith(prefix) for n in ar.entries):
            raise FileNotFoundError(f"no sub-directory {d!r} in the archive {ar.path}")
        raise IncompleteTreeError(
            f"{where} is missing: not a saved tree (or one whose save did not finish)"
        )
    if ze.usize > fmt.MAX_META_BYTES:
        raise FormatError(f"{where} is {ze.usize} bytes, over {fmt.MAX_META_BYTES}")
    doc = fmt._parse_json(ar.index.read(ze), where)
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if "format" not in doc and ("_type" in doc or "shape" in doc):
        return _legacy_node(ar, d, where, doc)
    version, type_name, batch, device, entries_doc = fmt.check_header(doc, where)
    entries: dict[str, Any] = {}
    for key, e in entries_doc.items():
        kwhere = f"{where}: entry {key!r}"
        kind = e.get("kind") if type(e) is dict else None
        if kind == "tensor":
            fields = fmt._TENSOR_FIELDS[version]
            if not fields <= e.keys() <= fields | {"sha256"}:
                raise FormatError(
                    f"{kwhere} has fields {sorted(e)!r}; a 'tensor' entry of format version "
                    f"{version} has {sorted(fields)!r} and may have 'sha256'"
                )
            gen, sha = e.get("id"), e.get("sha256")
            if gen is not None and (type(gen) is not str or fmt._HEX32(gen) is None):
                raise FormatError(f"{kwhere}: 'id' is {_short_repr(gen)}, expected 32 hex digits")
            if sha is not None and (type(sha) is not str or fmt._HEX64(sha) is None):
                raise FormatError(
                    f"{kwhere}: 'sha256' is {_short_repr(sha)}, expected 64 hex digits"
                )
            leaf = _tensor(ar, d, e["file"], e["dtype"], e["shape"], batch, kwhere)
            entries[key] = leaf._replace(gen=gen, sha256=sha)
        elif kind == "jagged":
            if version < 3:
                raise FormatError(f"{kwhere} is a 'jagged' entry, which format version 3 added")

            def part(
                file: Any, dtype: Any, shape: list[Any], gen: str, sha: Any, kwhere: str = kwhere
            ) -> ArchiveTensor:
                leaf = _tensor(ar, d, file, dtype, shape, (), kwhere)
                return leaf._replace(gen=gen, sha256=sha)

            entries[key] = ArchiveJagged(*_jagged_io.parse_parts(e, batch, kwhere, part))
        elif kind == "node":
            if e.keys() != fmt._ENTRY_FIELDS["node"]:
                raise FormatError(
                    f"{kwhere} has fields {sorted(e)!r}; a 'node' entry has ['dir', 'kind']"
                )
            entries[key] = _node_entry(ar, d, e["dir"], kwhere)
        else:  # json values, or a bad entry: the folder reader's checks, which touch no file
            entries[key] = fmt._entry(d, "", where, key, e, batch, version)
    return fmt.Node(ar.where(d), version, type_name, batch, device, entries, False)


def _tensor(
    ar: Archive, d: str, file: Any, dtype: Any, shape: Any, batch: tuple[int, ...], where: str
) -> ArchiveTensor:
    if type(dtype) is not str or dtype not in fmt.DTYPES:
        raise FormatError(f"{where}: dtype {_short_repr(dtype)} is not one of {sorted(fmt.DTYPES)}")
    torch_dtype = fmt.DTYPES[dtype]
    shp = fmt.check_shape(shape, where, "'shape'")
    if shp[: len(batch)] != batch:
        raise FormatError(
            f"{where}: shape {list(shp)} does not start with batch_size {list(batch)}"
        )
    need = math.prod(shp) * torch_dtype.itemsize
    if need >= 1 << 63:
        raise FormatError(f"{where}: shape {list(shp)} is too large for a tensor")
    if not is_plain_name(file):
        raise FormatError(f"{where}: file {_short_repr(file)} is not a plain file name")
    name = f"{d}/{file}" if d else file
    ze = ar.entries.get(name)
    if ze is None:
        raise FormatError(f"{ar.where(name)} is missing ({where})")
    if ze.usize != need:  # stored: csize == usize (checked with the index)
        raise FormatError(
            f"{ar.where(name)} is {ze.usize} bytes, but {dtype} of shape {list(shp)} needs "
            f"{need}: the entry is truncated (or longer: damaged) or belongs to another tree"
        )
    return ArchiveTensor(torch_dtype, shp, ar.where(name), need, name)


def _node_entry(ar: Archive, d: str, name: Any, where: str) -> fmt.NodeEntry:
    if not is_plain_name(name):
        raise FormatError(f"{where}: dir {_short_repr(name)} is not a plain directory name")
    sub = f"{d}/{name}" if d else name
    if f"{sub}/{fmt.META}" not in ar.entries:
        raise FormatError(f"{ar.where(sub + '/' + fmt.META)} is missing ({where})")
    return fmt.NodeEntry(sub)


def read_child(ar: Archive, parent: fmt.Node, e: fmt.NodeEntry, depth: int) -> fmt.Node:
    child = read_node(ar, e.path)
    if depth > fmt.MAX_DEPTH:
        raise FormatError(f"{child.path}: nodes are nested more than {fmt.MAX_DEPTH} deep")
    if child.batch_size[: len(parent.batch_size)] != parent.batch_size:
        raise FormatError(
            f"{ar.where(e.path + '/' + fmt.META)}: batch_size {list(child.batch_size)} does not "
            f"start with its parent's {list(parent.batch_size)}"
        )
    return child


def iter_nodes(
    ar: Archive, d: str = "", top: fmt.Node | None = None
) -> Iterator[tuple[tuple[str, ...], fmt.Node]]:
    """Every node below ``d`` (whose node is ``top`` when already read), parents
    first, checked (``verify``, ``unpack``)."""
    todo: list[tuple[tuple[str, ...], fmt.Node]] = [((), top or read_node(ar, d))]
    while todo:
        keys, node = todo.pop()
        yield keys, node
        for k, e in reversed(node.entries.items()):
            if type(e) is fmt.NodeEntry:
                todo.append(((*keys, k), read_child(ar, node, e, len(keys) + 1)))


def _legacy_node(ar: Archive, d: str, where: str, doc: dict[str, Any]) -> fmt.Node:
    from tensorbox._storage.format.legacy import (
        _LEGACY_FIELDS,
        _LEGACY_TD_TYPES,
        legacy_version_class,
    )

    version, cls = legacy_version_class(doc, where)
    if cls not in _LEGACY_TD_TYPES:
        raise FormatError(
            f"{where}: a tensordict tree of class {_short_repr(cls)}; tensorbox reads "
            "TensorDict trees only (save lazy stacks and tensorclasses as TensorDicts)"
        )
    shape = doc.get("shape")
    batch = fmt.check_shape(shape if type(shape) is not dict else None, where, "'shape'")
    device = doc.get("device")
    device = fmt.check_device(device if type(device) is not dict else None, where)
    entries: dict[str, Any] = {}
    pre = f"{d}/" if d else ""
    for key, e in doc.items():
        kwhere = f"{where}: entry {key!r}"
        if type(e) is not dict:
            if key in _LEGACY_FIELDS:
                continue
            raise FormatError(f"{kwhere} is {_short_repr(e)}, expected an object")

        def existing(suffix: str = "", key: str = key) -> str:
            name = legacy_name(key) + suffix
            missing = pre + name not in ar.entries and f"{pre}{name}/{fmt.META}" not in ar.entries
            raw = pre + key + suffix in ar.entries or f"{pre}{key}/{fmt.META}" in ar.entries
            if missing and raw and is_plain_name(key + suffix):
                return key + suffix
            return name

        if "dtype" in e:
            dtype = e["dtype"]
            if type(dtype) is not str or not dtype.startswith("torch."):
                raise FormatError(f"{kwhere}: dtype {_short_repr(dtype)} is not a torch dtype")
            if e.get("is_nested", False) is not False:
                raise FormatError(f"{kwhere}: nested (jagged) tensors are not supported")
            file = existing(fmt.SUFFIX)
            entries[key] = _tensor(ar, d, file, dtype[6:], e.get("shape"), batch, kwhere)
            continue
        kind = e.get("type")
        if kind == "TensorDict":
            entries[key] = _node_entry(ar, d, existing(), kwhere)
        elif kind in ("NonTensorData", "NonTensorStack"):
            sub = _node_entry(ar, d, existing(), kwhere).path
            sub_where = ar.where(f"{sub}/{fmt.META}")
            value = fmt._parse_json(ar.index.read(ar.entries[f"{sub}/{fmt.META}"]), sub_where)
            if type(value) is not dict or "data" not in value:
                raise FormatError(f"{sub_where}: expected an object with a 'data' field")
            if kind == "NonTensorStack":
                if value.get("stack_dim", 0) != 0:
                    raise FormatError(f"{sub_where}: only stacks along dim 0 are supported")
                entries[key] = fmt.JsonEntry(fmt.stacked_array(value["data"], batch, kwhere), True)
            else:
                entries[key] = fmt.JsonEntry(value["data"], False)
        else:
            raise FormatError(
                f"{kwhere} has type {_short_repr(kind)}; tensorbox reads TensorDict, "
                "NonTensorData, NonTensorStack and tensors from tensordict trees"
            )
    return fmt.Node(ar.where(d), version, "TensorDict", batch, device, entries, True)


# ---------------------------------------------------------------- loading


def load(
    cls: type,
    file: str,
    inner: str = "",
    *,
    device: Any = None,
    non_blocking: bool = False,
    mode: str | None = None,
    verify: bool = False,
    strict: bool = True,
) -> Any:
    """Open the archive ``file`` (its sub-directory ``inner``) as ``cls``, locked."""
    if mode not in (None, "r"):
        if mode == "r+":
            raise ValueError(
                f"{file} is an archive, which opens read-only: mode='r+' would let writes "
                "reach it. Open it with mode='r' (copy-on-write), or unpack it (python -m "
                "tensorbox unpack FILE DIR) and open the folder with mode='r+'"
            )
        from tensorbox._storage.memmap_tensor import _check_mode

        _check_mode(mode)
    ar = Archive(file)
    top = read_node(ar, inner)
    if verify:
        verify_archive(ar, top, inner)
    dev = None if device is None else torch.device(device)
    loader = _Loader(file, CLASS_REGISTRY, dev, non_blocking, "r", _fit(cls, strict))
    obj = _build(ar, loader, top, cls, 0)
    obj.lock_()
    return obj


def _build(ar: Archive, loader: _Loader, node: fmt.Node, cls: type | None, depth: int) -> Any:
    store: dict[str, Any] = {}
    device = loader.device
    for key, e in cast("dict[str, Entry]", node.entries).items():
        if type(e) is ArchiveTensor:
            leaf = ar.leaf(e)
            store[key] = (
                leaf
                if device is None
                else leaf.to(device, non_blocking=loader.non_blocking, copy=True)
            )
        elif type(e) is ArchiveJagged:
            leaf = ar.jagged(e)
            store[key] = (
                leaf
                if device is None
                else leaf.to(device, non_blocking=loader.non_blocking, copy=True)
            )
        elif type(e) is fmt.NodeEntry:
            store[key] = _build(ar, loader, read_child(ar, node, e, depth + 1), None, depth + 1)
        else:
            json = cast(fmt.JsonEntry, e)
            store[key] = NonTensorData(json.value, stacked=json.stacked)
    want = device if device is not None else (None if node.device is None else _CPU)
    return loader.rebuild(node, store, want, cls)


def verify_archive(ar: Archive, top: fmt.Node | None = None, d: str = "") -> tuple[int, int, int]:
    """Check every node below ``d`` and every leaf's bytes; (nodes, tensors, bytes)."""
    nodes = tensors = total = 0
    for _, node in iter_nodes(ar, d, top):
        nodes += 1
        for e in cast("dict[str, Entry]", node.entries).values():
            tensors, total = count(ar, e, tensors, total, read=True)
    return nodes, tensors, total


def count(ar: Archive, e: Entry, tensors: int, total: int, read: bool) -> tuple[int, int]:
    """``(tensors, bytes)`` with the leaf ``e`` counted (anything else: unchanged); with
    ``read``, its bytes checked (:meth:`Archive.check`), and a jagged leaf's offsets."""
    if type(e) is ArchiveTensor:
        ar.index.data_offset(ar.entries[e.name])  # its local header, as a load checks it
        if read:
            ar.check(e)
        return tensors + 1, total + e.nbytes
    if type(e) is ArchiveJagged:
        for part in e:
            ar.index.data_offset(ar.entries[part.name])
        if read:
            ar.check(e.values)
            ar.check(e.offsets)
            ar.jagged(e)  # the offsets' contents, as a load checks them
        return tensors + 1, total + e.values.nbytes + e.offsets.nbytes
    return tensors, total


# ---------------------------------------------------------------- saving


def save(
    obj: Any,
    prefix: Any,
    *,
    num_threads: int = 0,
    fsync: bool = False,
    checksum: bool = False,
    compression: Any = None,
) -> Any:
    """Write ``obj`` as one archive at ``prefix``; returns it opened from the archive.

    ``compression`` (a name of :data:`tensorbox._storage.archive.zip.COMPRESSIONS`) compresses the
    tensor entries (``meta.json`` files stay stored, as tensordict writes them); their
    leaves are then copies, decompressed from the archive.
    """
    if prefix is None:
        raise ValueError("archive=True needs a file path to write (prefix is None)")
    method = _zip.compression_method(compression)
    root = os.path.realpath(os.fspath(prefix))
    saver = _Saver(root, "copy", True, fsync, checksum=checksum)
    with _commit.writing(root, file=True):
        _check_target(root)
        saver._walk(obj, root, (), None, None)  # every value checked: no I/O yet
        items, sizes, leaves = _plan(saver, root, checksum, method)
        starts = write_file(root, items, sizes, num_threads, fsync)
        # Mapped while the lock is held: the file is the one just written.
        ar = Archive(root) if method != _zip.STORED else None
        storage = _map(root)[0] if ar is None else ar.storage
    for i, t, store, key in leaves:  # the copy: views of the new file, as a load gives
        if ar is not None:  # compressed: read back, as a load reads it
            name = items[i][0]
            nbytes = t.numel() * t.element_size()
            store[key] = ar.leaf(ArchiveTensor(t.dtype, tuple(t.shape), name, nbytes, name))
            continue
        # torch's stubs lack set_(storage, offset, size); strides are computed (contiguous)
        view = _blank(t.dtype).new().set_(storage, starts[i] // t.dtype.itemsize, t.shape)  # type: ignore[call-overload]
        view.__class__ = MemoryMappedTensor
        store[key] = view
    for holder, store, key in saver.jagged:  # both parts are views now: the leaf again
        store[key] = from_parts(holder["values"], holder["offsets"])
    result = saver._build()
    result.lock_()
    return result


def _check_target(root: str) -> None:
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(
            f"cannot write an archive at {root!r}: it is a directory. Choose another path, or "
            "save without archive=True to write a folder there"
        )
    if st.st_size and not _is_zip(root):
        raise FileExistsError(
            f"{root!r} is a file that is not a zip archive; archive=True replaces only "
            "archives. Remove it or choose another path"
        )


def _is_zip(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) in (b"PK\x03\x04", b"PK\x05\x06")
    except OSError:
        return False


# A zip item (name, payload, align) for _zip.write_zip; a leaf (path, tensor, store, key)
_Item = tuple[str, Any, bool]
_Leaf = tuple[str, torch.Tensor, dict[Any, Any], str]


def _plan(
    saver: _Saver, root: str, checksum: bool, method: int = _zip.STORED
) -> tuple[list[_Item], list[int | None], list[tuple[int, torch.Tensor, dict[Any, Any], str]]]:
    """(name, payload, align) items, each node's meta.json first, then its leaves; their
    sizes; and (item, tensor, store, key) of each leaf, for the copy to return."""
    cut = len(root) + 1
    leaves: dict[str, list[_Leaf]] = {}
    for path, t, store, key, entry in saver.writes:
        if checksum:
            entry["sha256"] = _checksum.tensor_sha256(t)
        leaves.setdefault(os.path.dirname(path), []).append((path, t, store, key))
    metas = {m[0]: m for _, _, _, _, m in saver.nodes}
    items: list[_Item] = []
    sizes: list[int | None] = []
    placed: list[tuple[int, torch.Tensor, dict[Any, Any], str]] = []
    for d in saver.dirs:
        rel = d[cut:].replace(os.sep, "/")
        _, meta, std_json = metas[d]
        items.append(
            (f"{rel}/{fmt.META}" if rel else fmt.META, fmt.meta_bytes(meta, std_json), False)
        )
        sizes.append(None)
        for path, t, store, key in leaves.get(d, ()):
            placed.append((len(items), t, store, key))
            name = path[cut:].replace(os.sep, "/")
            nbytes = t.numel() * t.element_size()
            if method != _zip.STORED:
                items.append(
                    (name, _zip.compress_loadable(lambda t=t: byte_chunks(t), method), True)
                )
            elif t.device.type == "cpu" and t.is_contiguous() and not (t.is_conj() or t.is_neg()):
                items.append((name, as_bytes(t.detach()), True))
            else:
                items.append((name, lambda t=t: byte_chunks(t), True))
            sizes.append(nbytes)
    return items, sizes, placed


def write_file(
    root: str, items: list[_Item], sizes: list[int | None], num_threads: int, fsync: bool
) -> list[int]:
    """Write the zip to a hidden file beside ``root`` and rename it in (caller holds the lock)."""
    parent, name = os.path.split(root)
    stale = f".{name}.tbx-new-"
    with contextlib.suppress(OSError), os.scandir(parent) as it:
        for entry in it:  # leftovers of a killed save: writers of this path take turns
            if entry.name.startswith(stale) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
    tmp = os.path.join(parent, stale + os.urandom(8).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            with contextlib.suppress(OSError):
                os.fchmod(fd, stat.S_IMODE(os.stat(root).st_mode))
            starts = _zip.write_zip(fd, items, num_threads, sizes)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, root)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fmt.fsync_dir(parent)
    return starts


def refuse_folder_over(prefix: Any) -> None:
    """A folder save at a path that holds an archive: refuse (an archive is read-only)."""
    if prefix is None:
        return
    p = os.fspath(prefix)
    if os.path.isfile(p) and zipfile.is_zipfile(p):  # any other file: the commit refuses it
        raise FileExistsError(
            f"{p!r} is a file (an archive?): a folder cannot be saved there, and archives are "
            "read-only. Save with archive=True to replace the archive, or unpack it (python -m "
            "tensorbox unpack FILE DIR) and save into the folder"
        )
