"""Pickling file-backed tensors by reference: :class:`FileRef`, :func:`shareable`,
:func:`restore`.

A file-backed tensor, or any view of one, pickles as a :class:`FileRef` (file name,
storage size, dtype, offset, size, stride): the receiving process maps the same file,
so writes made on either side are seen on the other. :func:`shareable` and
:func:`restore` do this for TensorDict's ``__reduce__`` (the core's ``file_refs``
port), ``MemoryMappedTensor``'s, and ``torch.multiprocessing``'s reducer
(:mod:`tensorbox._storage.process_reduce`). The reference also carries which file it
was: the file's generation id in its saved tree (checked against the ``meta.json``
beside it), or for a file outside a tree its (device, inode). A reference whose file
was replaced since (a tree saved again at the same path) is refused, never mapped.

>>> import os, tempfile, torch
>>> from tensorbox import MemoryMappedTensor
>>> m = MemoryMappedTensor.zeros(4, 2, filename=os.path.join(tempfile.mkdtemp(), "a"))
>>> ref = shareable(m[1:])
>>> type(ref).__name__, ref.size
('FileRef', (3, 2))
"""

from __future__ import annotations

import os
import stat as _stat
from typing import Any, NamedTuple

import orjson
import torch
from torch import Tensor

from tensorbox._core.encoding import DTYPES, dtype_name
from tensorbox._storage.mapcache import mapped
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, _identity, _map_storage
from tensorbox.errors import FormatError

__all__ = ["FileRef", "restore", "shareable"]


class FileRef(NamedTuple):
    """A picklable reference to a view of a memory-mapped file (see :func:`shareable`)."""

    filename: str
    nbytes: int  # bytes of the mapped storage
    dtype: str
    offset: int  # in elements, as Tensor.storage_offset()
    size: tuple[int, ...]
    stride: tuple[int, ...]
    memmap: bool  # rebuild as a MemoryMappedTensor (else a plain tensor)
    mode: str
    ident: tuple[int, int] | None  # (st_dev, st_ino) of the file when it was mapped
    gen: str | None = None  # the file's generation id in its tree (format version 2)
    #: (size, mtime, ctime in ns) of a read-only file (an archive) when it was mapped: a
    #: file rewritten in place keeps its inode, never its ctime
    stamp: tuple[int, int, int] | None = None

    def open(self) -> Tensor:
        """Map the file again and rebuild the view; FormatError if it is not the same file.

        A file of a saved tree is checked by its generation id, read from the
        ``meta.json`` beside it under the tree's read lock (an inode number is reused
        once its file is deleted); any other file by (device, inode).
        """
        from tensorbox._storage.commit import read_lock, read_unlock

        lock = read_lock(os.path.dirname(self.filename)) if self.gen is not None else None
        try:
            if self.gen is not None:
                now = _file_gen(self.filename)
                if now != self.gen:
                    raise FormatError(
                        f"{self.filename} was replaced after a tensor mapping it was pickled "
                        f"(the tree was saved over: the file's id is now {now!r}, the "
                        f"reference's {self.gen!r}); open the tree again (load_memmap) and "
                        "send that"
                    )
            try:
                st = os.stat(self.filename)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"{self.filename}, the file of a pickled memory-mapped tensor, is gone"
                ) from None
            if not _stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or lie
                raise FormatError(f"{self.filename} is not a regular file")
            ident = (st.st_dev, st.st_ino)
            if self.ident is not None and ident != self.ident and self.gen is None:
                raise FormatError(
                    f"{self.filename} was replaced after a tensor mapping it was pickled; "
                    "open the tree again (load_memmap) and send that"
                )
            if self.stamp is not None and _stamp(st) != tuple(self.stamp):
                raise FormatError(
                    f"{self.filename} was rewritten in place after a tensor mapping it was "
                    f"pickled (size, modification and change times now {_stamp(st)}, "
                    f"{tuple(self.stamp)} then): its bytes are not the ones referenced. Open "
                    "it again (load_memmap) and send that"
                )
            if st.st_size < self.nbytes:
                raise FormatError(
                    f"{self.filename} is {st.st_size} bytes, shorter than the {self.nbytes} "
                    "bytes it had when the tensor was pickled"
                )
            storage = mapped(
                self.filename, self.mode, self.nbytes, st, self.gen, _map_storage, self.stamp
            )
            if self.stamp is not None and _stamp(os.stat(self.filename)) != tuple(self.stamp):
                raise FormatError(  # rewritten while it was being mapped
                    f"{self.filename} was rewritten in place while a pickled reference to it "
                    "was being opened; open it again (load_memmap) and send that"
                )
        finally:
            read_unlock(lock)
        t = torch.empty(0, dtype=DTYPES[self.dtype]).set_(
            storage, self.offset, self.size, self.stride
        )
        return t.as_subclass(MemoryMappedTensor) if self.memmap else t


# The last meta.json read per directory and the ids it gives: a DataLoader worker
# unpickles one reference per leaf, all against the same few files.
_GEN_CACHE: dict[str, tuple[bytes, dict[str, str]]] = {}


def _file_gen(filename: str) -> str | None:
    """The ``id`` that the ``meta.json`` beside ``filename`` gives it (None: none)."""
    from tensorbox._storage.format.metafile import read_meta_bytes
    from tensorbox._storage.format.parse import file_ids
    from tensorbox._storage.format.spec import META

    directory, name = os.path.split(filename)
    try:
        raw = read_meta_bytes(directory, os.path.join(directory, META))
    except (OSError, ValueError):
        return None
    cached = _GEN_CACHE.get(directory)
    if cached is not None and cached[0] == raw:
        return cached[1].get(name)
    try:
        doc = orjson.loads(raw)
        entries = doc.get("entries") if type(doc) is dict else None
    except orjson.JSONDecodeError:
        entries = None
    ids = file_ids(entries)  # tensor entries' files and jagged entries' two files
    if len(_GEN_CACHE) > 64:
        _GEN_CACHE.clear()
    _GEN_CACHE[directory] = (raw, ids)
    return ids.get(name)


def shareable(t: Tensor) -> Tensor | FileRef:
    """A :class:`FileRef` when ``t`` is a view of a file-backed storage, else ``t``.

    A tensor whose file was replaced or removed since it was mapped is returned as
    is (pickled with its data): the name now leads to other bytes.

    >>> import os, tempfile
    >>> m = MemoryMappedTensor.zeros(4, 2, filename=os.path.join(tempfile.mkdtemp(), "a"))
    >>> ref = shareable(m[1:])
    >>> ref.offset, ref.size, ref.stride
    (2, (3, 2), (2, 1))
    >>> restore(ref).shape, shareable(torch.zeros(2)).shape
    (torch.Size([3, 2]), torch.Size([2]))
    """
    if getattr(type(t), "_tbx_by_reference", False):
        return t  # a leaf whose bytes arrive on first use pickles itself by reference
    if t.device.type != "cpu" or t.dtype not in _DTYPE_OK or t.is_nested:
        return t  # (a nested tensor is pickled with its values)
    storage = t.untyped_storage()
    name = storage.filename
    mode = "r+"
    if name is None:
        name = getattr(storage, "_tbx_ro", None)
        if name is None:
            return t
        mode = "r"
    ident = getattr(storage, "_tbx_id", None)
    if ident is not None and _identity(name) != ident:
        return t
    return FileRef(
        name,
        storage.nbytes(),
        dtype_name(t.dtype),
        t.storage_offset(),  # type: ignore[arg-type]  # an int on CPU (SymInt: tracing only)
        tuple(t.shape),
        tuple(t.stride()),
        isinstance(t, MemoryMappedTensor),
        mode,
        ident,
        getattr(storage, "_tbx_gen", None),
        getattr(storage, "_tbx_stamp", None),
    )


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What changes when a file is rewritten in place (its inode stays): size, mtime, ctime."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_DTYPE_OK = frozenset(DTYPES.values())


def restore(obj: Any) -> Any:
    """Inverse of :func:`shareable`: a FileRef becomes a tensor again; anything else is kept."""
    return obj.open() if type(obj) is FileRef else obj
