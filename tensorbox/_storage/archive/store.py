"""One-file trees: a saved tree as one zip archive, mapped once, every leaf a view.

The archive holds the directory tree of :mod:`tensorbox._storage.format.spec` byte for byte: a
STORED entry per file, at the file's relative path (``meta.json``,
``info/meta.json``, ``info/step.memmap``...): every leaf first, then every ``meta.json``,
the root's last, beside the central directory (see :class:`ArchiveWriter`). Tensor
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
import os
import stat
import sys
import zipfile
from pathlib import PurePath
from typing import Any

import torch

from tensorbox._core.chunks import as_bytes, byte_chunks
from tensorbox._storage import commit as _commit
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.atomic import replacing
from tensorbox._storage.format.metafile import meta_bytes
from tensorbox._storage.format.names import is_plain_name
from tensorbox._storage.format.spec import MAX_META_BYTES, META
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, _blank
from tensorbox._storage.store import ListedFiles, Store, TensorEntry, Writer
from tensorbox.errors import FormatError, IncompleteTreeError
from tensorbox.progress import advance

__all__ = ["SUFFIX", "Archive", "ArchiveStore", "ArchiveWriter", "split", "wanted"]

SEP = "::"
#: tensordict's archive suffix: a save to a path ending with it writes an archive.
SUFFIX = ".tdz"
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


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
        # What each entry holds once read (the size checks at open use these, no data)
        self.sizes = {name: ze.usize for name, ze in self.entries.items()}

    def where(self, name: str) -> str:
        return f"{self.path}{SEP}{name}"

    def leaf(self, e: TensorEntry) -> torch.Tensor:
        """A view of the mapping when the entry is stored and aligned, else a copy."""
        ze = self.entries[e.ident]
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

    def check(self, e: TensorEntry) -> None:
        """Read every byte of a leaf: its CRC-32, and its SHA-256 when one was recorded."""
        raw = self.checked(self.entries[e.ident], e.path)
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


# ---------------------------------------------------------------- the store


class ArchiveStore(Store):
    """The tree in the archive ``path``, mapped once (a sub-tree: nodes below ``DIR``)."""

    checksummed = True  # every entry has its CRC-32

    def __init__(self, path: str) -> None:
        self.root = self.name = path
        self._ar: Archive | None = None

    @property
    def ar(self) -> Archive:
        """The archive, mapped on first use (a store made to write one maps nothing)."""
        if self._ar is None:
            self._ar = Archive(self.root)
        return self._ar

    def where(self, rel: str) -> str:
        return f"{self.root}{SEP}{rel}"

    def read_meta(self, rel: str) -> bytes:
        ar = self.ar
        meta_name = f"{rel}/{META}" if rel else META
        where = ar.where(meta_name)
        ze = ar.entries.get(meta_name)
        if ze is None:
            prefix = f"{rel}/" if rel else ""
            if rel and not any(n.startswith(prefix) for n in ar.entries):
                raise FileNotFoundError(f"no sub-directory {rel!r} in the archive {ar.path}")
            raise IncompleteTreeError(
                f"{where} is missing: not a saved tree (or one whose save did not finish)"
            )
        if ze.usize > MAX_META_BYTES:
            raise FormatError(f"{where} is {ze.usize} bytes, over {MAX_META_BYTES}")
        return bytes(ar.index.read(ze))

    def open_node(self, rel: str) -> ListedFiles:
        # exact: an archive entry holds its tensor's bytes, no more (pack and saves write
        # the committed bytes only), so a longer entry is damage, not a grown file
        return ListedFiles(self.ar.sizes, rel, self.where, exact=True)

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        return self.ar.leaf(e)

    def check(self, e: TensorEntry) -> None:
        self.ar.check(e)

    def writer(self, **options: Any) -> ArchiveWriter:
        options.pop("sparse", None)
        return ArchiveWriter(self.root, **options)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return _commit.writing(self.root, file=True)  # a file at the path is replaced


# ---------------------------------------------------------------- saving


class ArchiveWriter(Writer):
    """A new archive at ``root``: nodes and leaves collected, then laid out and written at
    :meth:`commit` to a hidden file beside it, renamed in (the caller holds the lock).

    ``compression`` (a name of :data:`tensorbox._storage.archive.zip.COMPRESSIONS`)
    compresses the tensor entries (``meta.json`` files stay stored, as tensordict
    writes them); their leaves are then copies, decompressed from the archive.
    """

    def __init__(self, root: str, fsync: bool = False, compression: Any = None) -> None:
        self.root, self.fsync = root, fsync
        self.method = _zip.compression_method(compression)
        _check_target(root)
        self.order: list[str] = []
        self.metas: dict[str, tuple[dict[str, Any], bool]] = {}
        self.leaves: dict[str, list[tuple[int, str, torch.Tensor]]] = {}
        self.count = 0
        self.starts: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.ar: Archive | None = None
        self.storage: Any = None

    def node(self, rel: str, meta: dict[str, Any], std_json: bool) -> None:
        self.order.append(rel)
        self.metas[rel] = (meta, std_json)

    def leaf(
        self,
        rel: str,
        t: torch.Tensor,
        reserve: bool = False,
        gen: str | None = None,
        key: str = "",
    ) -> int:
        i = self.count
        self.count += 1
        self.leaves.setdefault(rel.rpartition("/")[0], []).append((i, rel, t))
        self.names[i] = rel
        return i

    def commit(self, num_threads: int = 0) -> None:
        items: list[tuple[str, Any, bool]] = []
        sizes: list[int | None] = []
        at: dict[int, int] = {}  # leaf -> its item
        method = self.method
        for d in self.order:  # every node's leaves, then the meta.json files (below)
            for i, name, t in self.leaves.get(d, ()):
                at[i] = len(items)
                if method != _zip.STORED:
                    items.append(
                        (name, _zip.compress_loadable(lambda t=t: byte_chunks(t), method), True)
                    )
                elif (
                    t.device.type == "cpu" and t.is_contiguous() and not (t.is_conj() or t.is_neg())
                ):
                    items.append((name, as_bytes(t.detach()), True))
                else:
                    items.append((name, lambda t=t: byte_chunks(t), True))
                sizes.append(t.numel() * t.element_size())
        # Then each node's meta.json, children first and the root's last: the descriptions
        # sit beside the central directory at the end of the file, so a reader that fetches
        # the archive over a network gets both in one read of its tail (readers go by the
        # central directory: the order is free, and archives in other orders read alike).
        for d in reversed(self.order):
            meta, std_json = self.metas[d]
            items.append((f"{d}/{META}" if d else META, meta_bytes(meta, std_json), False))
            sizes.append(None)
        starts = write_file(self.root, items, sizes, num_threads, self.fsync)
        advance(sum(n for n in sizes if n is not None), files=self.count)  # written whole
        self.starts = {i: starts[j] for i, j in at.items()}
        # Mapped while the lock is held: the file is the one just written.
        if method != _zip.STORED:
            self.ar = Archive(self.root)
        else:
            self.storage = _map(self.root)[0]

    def opened(self, i: int, t: torch.Tensor) -> torch.Tensor:
        """A view of the new file, as a load gives it (compressed: read back)."""
        if self.ar is not None:
            name = self.names[i]
            nbytes = t.numel() * t.element_size()
            return self.ar.leaf(TensorEntry(t.dtype, tuple(t.shape), name, nbytes, name))
        # torch's stubs lack set_(storage, offset, size); strides are computed (contiguous)
        start = self.starts[i] // t.dtype.itemsize
        view: torch.Tensor = _blank(t.dtype).new().set_(self.storage, start, t.shape)  # type: ignore[call-overload]
        view.__class__ = MemoryMappedTensor
        return view


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


# A zip item: (name, payload, align) for :func:`tensorbox._storage.archive.zip.write_zip`
_Item = tuple[str, Any, bool]


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
    with replacing(root, tmp=os.path.join(parent, stale + os.urandom(8).hex()), fsync=fsync) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            with contextlib.suppress(OSError):
                os.fchmod(fd, stat.S_IMODE(os.stat(root).st_mode))
            starts = _zip.write_zip(fd, items, num_threads, sizes)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
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
