"""The folder store: a saved tree as a directory tree (the format's own shape).

Reading: each node's ``meta.json`` is read without following symlinks or blocking
(a FIFO in its place is refused, not waited on); each leaf file is checked with one
``stat`` relative to the node's open directory (one path walk per node). A leaf that
is a symlink must resolve inside the tree; symlinked directories are refused (they
could form cycles). Files are mapped with ``mmap``: shared for ``mode="r+"``,
copy-on-write for ``"r"`` (and for files this process may not write).

Writing: :class:`FolderWriter` builds the complete new tree in a hidden staging
directory beside the old one, hard-links the files a save keeps, and swaps the two
directories in one step (:mod:`tensorbox._storage.commit`).

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> d = tempfile.mkdtemp()
>>> _ = TensorDict(a=torch.arange(3), batch_size=[3]).memmap(d)
>>> store = FolderStore(d)
>>> store.tensor(store.node().entries["a"], "r").tolist()
[0, 1, 2]
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import zlib
from typing import Any

import orjson
import torch

from tensorbox._storage import checksum as _checksum
from tensorbox._storage import commit as _commit
from tensorbox._storage.fileappend import append_file, maps_file
from tensorbox._storage.filewrite import save_threads, write_all, write_file
from tensorbox._storage.format.metafile import fsync_dir, read_meta_bytes, write_new_meta
from tensorbox._storage.format.names import is_plain_name
from tensorbox._storage.format.parse import LeafSpec, is_legacy
from tensorbox._storage.format.spec import FORMAT, META
from tensorbox._storage.memmap_tensor import map_file
from tensorbox._storage.store import NodeFiles, Store, TensorEntry, Writer
from tensorbox.errors import FormatError
from tensorbox.progress import advance

__all__ = [
    "FolderStore",
    "FolderWriter",
    "generation",
    "linkable",
    "old_node_dirs",
    "tree_layout",
]

_S_IFMT = 0o170000
_S_IFREG = stat.S_IFREG
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_STAT_DIR_FD = os.stat in os.supports_dir_fd and os.stat in os.supports_follow_symlinks


class FolderStore(Store):
    """The tree in directory ``root`` (any node of a tree opens as a tree of its own)."""

    def __init__(self, root: str, must_write: bool = False) -> None:
        self.must_write = must_write  # mode="r+" asked for: an unwritable file raises
        self.root = os.path.abspath(root)
        self.name = self.root
        self.real = os.path.realpath(self.root)  # leaves reached by a symlink stay inside

    def where(self, rel: str) -> str:
        return f"{self.root}{os.sep}{rel}" if rel else self.root

    def read_meta(self, rel: str) -> bytes:
        d = self.where(rel)
        return read_meta_bytes(d, os.path.join(d, META))

    def open_node(self, rel: str) -> _Files:
        return _Files(self.where(rel), rel, self.real)

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        if mode == "r":
            return map_file(e.path, e.dtype, e.shape, "r", e.nbytes, e.ident, e.gen)
        try:
            return map_file(e.path, e.dtype, e.shape, "r+", e.nbytes, e.ident, e.gen)
        except PermissionError:
            if self.must_write:  # writes were asked to reach the file: they could not
                raise
            # mode=None: a tree we may read but not write maps copy-on-write
            return map_file(e.path, e.dtype, e.shape, "r", e.nbytes, e.ident, e.gen)

    def check(self, e: TensorEntry) -> None:
        _checksum.check_file(e.path, e.nbytes, e.sha256)

    def writer(self, **options: Any) -> FolderWriter:
        return FolderWriter(self.root, **options)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return _commit.writing(self.root)

    def linkable(self, rel: str, t: torch.Tensor) -> bool:
        """Whether an in-place save may keep the file ``t`` maps as ``rel`` (:func:`linkable`)."""
        return linkable(self.root, rel, t)

    # A live tree (Store.in_place): changes commit as whole new trees staged beside this
    # one and swapped in (FolderWriter), unchanged files hard-linked; rows grow a leaf
    # file after its committed bytes (tensorbox._storage.fileappend).
    in_place = True

    def generation(self) -> tuple[int, int] | None:
        return generation(self.root)

    def layout(self) -> str:
        return tree_layout(self.root)

    def holds(self, e: TensorEntry, t: torch.Tensor) -> bool | None:
        return maps_file(e, t)

    def append(
        self, e: TensorEntry, rows: torch.Tensor, fsync: bool, where: str, current: Any
    ) -> torch.Tensor:
        return append_file(e, rows, fsync, where, current)

    def subtree(self, rel: str) -> FolderStore:
        return FolderStore(self.where(rel))

    def entry_file(self, rel: str) -> str:
        return self.where(rel)


class _Files(NodeFiles):
    def __init__(self, directory: str, rel: str, root_real: str) -> None:
        self.directory, self.rel, self.root_real = directory, rel, root_real
        self.fd: int | None = None
        if _STAT_DIR_FD:
            with contextlib.suppress(OSError):
                self.fd = os.open(directory, _DIR_FLAGS)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def leaf(self, spec: LeafSpec, where: str, key: str = "") -> TensorEntry:
        file = spec.file if type(spec.file) is str else spec.file[0]
        if self.fd is not None:  # the usual case: one stat, no string building
            try:
                st = os.stat(file, dir_fd=self.fd, follow_symlinks=False)
                if st.st_mode & _S_IFMT == _S_IFREG and st.st_size >= spec.nbytes:
                    return TensorEntry(
                        spec.dtype,
                        spec.shape,
                        f"{self.directory}{os.sep}{file}",
                        spec.nbytes,
                        (st.st_dev, st.st_ino),
                        spec.gen,
                        spec.sha256,
                    )
            except OSError:
                pass  # missing: named below
        path, st = self._file(file, f"{where}: entry {key!r}")
        if st.st_size < spec.nbytes:
            raise FormatError(
                f"{path} is {st.st_size} bytes, but {_dtype_name(spec.dtype)} of shape "
                f"{list(spec.shape)} needs {spec.nbytes}: the file is truncated or belongs "
                "to another tree"
            )
        return TensorEntry(
            spec.dtype,
            spec.shape,
            path,
            spec.nbytes,
            (st.st_dev, st.st_ino),
            spec.gen,
            spec.sha256,
        )

    def _file(self, file: str, where: str) -> tuple[str, os.stat_result]:
        """The leaf's path and stat: a regular file, or a symlink to one inside the tree."""
        path = f"{self.directory}{os.sep}{file}"
        try:
            st = os.lstat(path)
        except OSError:
            raise FormatError(f"{path} is missing ({where})") from None
        if stat.S_ISREG(st.st_mode):
            return path, st
        if stat.S_ISLNK(st.st_mode):
            real = os.path.realpath(path)
            if _inside(real, self.root_real) and os.path.isfile(real):
                return real, os.stat(real)
            raise FormatError(
                f"{path} is a symlink to {real!r}, outside the tree {self.root_real!r}: refused"
            )
        raise FormatError(f"{path} is not a regular file ({where})")

    def exists(self, name: str) -> bool:
        return os.path.lexists(os.path.join(self.directory, name))

    def child(self, name: str, where: str) -> str:
        path = os.path.join(self.directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            raise FormatError(f"{path} is missing ({where})") from None
        if not stat.S_ISDIR(st.st_mode):
            raise FormatError(f"{path} is not a directory (symlinks are refused) ({where})")
        return f"{self.rel}/{name}" if self.rel else name


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# ---------------------------------------------------------------- writing


class FolderWriter(Writer):
    """A new tree staged beside ``root`` (a hidden directory made now) and swapped in at
    :meth:`commit`; the caller holds the writer lock
    (:func:`tensorbox._storage.commit.writing`)."""

    def __init__(self, root: str, fsync: bool = False, sparse: bool = False) -> None:
        self.root, self.fsync, self.sparse = root, fsync, sparse
        self.stage = _commit.new_stage(root)
        self.dirs: list[str] = []
        self.metas: list[tuple[str, dict[str, Any], bool]] = []
        self.files: list[tuple[str, torch.Tensor, bool, str]] = []
        self.idents: list[tuple[int, int]] = []
        self.gens: list[str | None] = []

    def _staged(self, rel: str) -> str:
        return f"{self.stage}{os.sep}{rel}" if rel else self.stage

    def node(self, rel: str, meta: dict[str, Any], std_json: bool) -> None:
        if rel:
            os.mkdir(self._staged(rel))
        self.dirs.append(rel)
        self.metas.append((rel, meta, std_json))

    def leaf(
        self,
        rel: str,
        t: torch.Tensor,
        reserve: bool = False,
        gen: str | None = None,
        key: str = "",
    ) -> int:
        self.files.append((rel, t, reserve, key))
        self.gens.append(gen)
        return len(self.files) - 1

    def link(self, rel: str, t: torch.Tensor) -> bool:
        return _link(f"{self.root}{os.sep}{rel}", self._staged(rel), t)

    def abort(self) -> None:
        _commit.remove_stage(self.stage)  # the old tree is untouched

    def commit(self, num_threads: int = 0) -> None:
        root, fsync, sparse, staged = self.root, self.fsync, self.sparse, self._staged
        files = self.files
        sizes = [t.numel() * t.element_size() for _, t, _, _ in files]

        def write(job: tuple[str, torch.Tensor, bool, str]) -> tuple[int, int]:
            rel, t, reserve, key = job
            nbytes = t.numel() * t.element_size()
            if reserve:
                return _reserve(staged(rel), nbytes, sparse, fsync, key, f"{root}{os.sep}{rel}")
            try:
                return write_file(staged(rel), t, nbytes, fsync=fsync, sync_dir=False)
            except OSError as err:  # a full disk, a file size limit: name what was written
                if err.filename is not None:
                    raise
                raise OSError(
                    err.errno, f"{err.strerror}: writing key {key!r} to {root}{os.sep}{rel}"
                ) from err

        def meta(m: tuple[str, dict[str, Any], bool]) -> None:
            write_new_meta(staged(m[0]), m[1], fsync=fsync, std_json=m[2])

        def done(i: int) -> None:  # in this thread: the bar's (tensorbox.progress)
            advance(sizes[i])

        try:
            # num_threads=0: threads for a large save only (filewrite.save_threads);
            # the caller writes too, so a busy machine loses nothing to them
            threads = save_threads(num_threads, sizes)
            self.idents = write_all(write, files, threads, done)
            # The root's meta.json last: a reader of the stage (none should) or a
            # tensordict reader never meets a top that lists a missing child.
            metas = [m for m in self.metas if m[0]]
            write_all(meta, metas, threads if fsync else 1)  # fsync: each waits on the disk
            write_all(meta, [m for m in self.metas if not m[0]], 1)
            if fsync:  # the files' directory entries, once per directory
                write_all(fsync_dir, [staged(d) for d in self.dirs], threads)
            old = _commit.commit(self.stage, root, lambda: old_node_dirs(root))
        except BaseException:
            self.abort()
            raise
        if fsync:
            fsync_dir(os.path.dirname(root))
        if old is not None:
            _commit.dispose(old, root)

    def opened(self, i: int, t: torch.Tensor) -> torch.Tensor:
        rel = self.files[i][0]
        return map_file(
            f"{self.root}{os.sep}{rel}",
            t.dtype,
            tuple(t.shape),
            ident=self.idents[i],
            gen=self.gens[i],
        )


def linkable(root: str, rel: str, t: torch.Tensor) -> bool:
    """True when ``t`` maps the file now at ``root/rel`` from its start, shared (the file
    may be longer: a file grown by ``extend_`` is mapped whole, its tail ignored).

    Compared by (device, inode), never by name: the mapping keeps its file alive, so
    its inode number cannot have been given to another file.
    """
    storage = t.untyped_storage()
    if storage.filename is None or t.storage_offset() or not t.is_contiguous():
        return False
    ident = getattr(storage, "_tbx_id", None)
    try:
        st = os.stat(f"{root}{os.sep}{rel}", follow_symlinks=False)
    except OSError:
        return False
    return ident == (st.st_dev, st.st_ino) and stat.S_ISREG(st.st_mode)


def _link(src: str, dst: str, t: torch.Tensor) -> bool:
    """Hard-link a kept file into the new tree; False when links are not possible here."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        return False
    st = os.stat(dst, follow_symlinks=False)
    if getattr(t.untyped_storage(), "_tbx_id", None) != (st.st_dev, st.st_ino):
        os.unlink(dst)  # not the mapped file after all: write the bytes
        return False
    return True


def _reserve(
    path: str, nbytes: int, sparse: bool, fsync: bool, key: str, shown: str
) -> tuple[int, int]:
    """A new zero-filled file of ``nbytes``, its blocks reserved unless ``sparse``.

    Reserving (``posix_fallocate``) turns a full disk into an error now, instead of a
    SIGBUS when a row is written through the mapping later.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        if nbytes:
            if sparse or not hasattr(os, "posix_fallocate"):
                os.ftruncate(fd, nbytes)
            else:
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as err:
                    if err.errno == errno.ENOSPC:
                        raise OSError(
                            errno.ENOSPC,
                            f"no space left to reserve {nbytes} bytes for key {key!r} at "
                            f"{shown}: free space, or pass sparse=True to create sparse files "
                            "(then a full disk shows up later, as a crash when a row is written)",
                        ) from None
                    if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    os.ftruncate(fd, nbytes)  # a file system that cannot reserve
        if fsync:
            os.fsync(fd)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_dev, st.st_ino)


def old_node_dirs(root: str) -> list[str]:
    """Node directories of the tree now at ``root`` that its ``meta.json`` files name
    (best effort: readers that opened one of them are waited for at the swap)."""
    dirs: list[str] = []
    todo = [root]
    while todo and len(dirs) < 100_000:
        d = todo.pop()
        try:
            doc = orjson.loads(read_meta_bytes(d, os.path.join(d, META)))
            entries = doc["entries"] if doc.get("format") == FORMAT else {}
        except Exception:  # missing, damaged, foreign: no nodes known below
            continue
        for e in entries.values() if isinstance(entries, dict) else ():
            name = e.get("dir") if isinstance(e, dict) and e.get("kind") == "node" else None
            if is_plain_name(name):
                p = os.path.join(d, name)
                dirs.append(p)
                todo.append(p)
    return dirs


def generation(root: str) -> tuple[int, int] | None:
    """What identifies the tree now at ``root``: its root ``meta.json``'s size and CRC-32.
    That file holds the random ids of the tree's files, so two saves differ there (None:
    no tree). A checksum, not a file identity: inode numbers are reused."""
    try:
        data = read_meta_bytes(root, os.path.join(root, META))
    except (OSError, ValueError):
        return None
    return len(data), zlib.crc32(data)


def tree_layout(root: str) -> str:
    """The layout of the tree now at ``root``: ``"tensordict"`` when tensordict's own
    (written by tensordict, or by ``memmap(format="tensordict")``), else
    ``"tensorbox"``. A write-through commit or an ``extend_`` keeps it, so a tree handed
    to tensordict users stays readable by them."""
    try:
        doc = orjson.loads(read_meta_bytes(root, os.path.join(root, META)))
    except Exception:  # missing, damaged: a new tree is tensorbox's
        return "tensorbox"
    return "tensordict" if is_legacy(doc) else "tensorbox"
