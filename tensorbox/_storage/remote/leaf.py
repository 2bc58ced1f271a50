"""One leaf of a tree behind a URL: which of its parts arrived, where they are kept, and
fetching the missing ones (each call's parts of every leaf together, one call per store).

A part is whole rows, at least :data:`PART_BYTES` (one page: a rank reading its share
of shuffled image rows fetches those rows, not their neighbours). Parts of a leaf
closer than :func:`gap` bytes are read with the parts between them, which are kept too
(a dense read, a single rank going through a whole epoch, becomes a few large requests;
a rank reading its share of a large dataset reads its rows alone).

The local cache (:class:`tensorbox._storage.remote.RangeCache`) holds one file per
leaf, keyed by the object's identity, the archive's tree id, the entry and the leaf's
recorded file id: a tree replaced remotely gets new files, never mixed ones. The file
is sparse: the leaf's bytes, then one mark per part, then :data:`_LEAF_MAGIC`. Bytes
are written into it as they arrive, and the parts they fill are marked only once the
whole fetch arrived and the object is known unchanged (so a server dying mid-read
leaves nothing marked: unmarked bytes are never served, nor trusted by another
process). The marks live in the same file as the bytes they vouch for, so deleting the
file (an eviction) can never leave marks without their bytes. With ``cache=False``
parts land in memory.
"""

from __future__ import annotations

import errno
import math
import os
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, map_file
from tensorbox._storage.remote.cache import env_number
from tensorbox._storage.store import TensorEntry

if TYPE_CHECKING:
    from tensorbox._storage.remote.stores import _RemoteStore

__all__ = ["PART_BYTES", "ensure", "gap", "request_size"]

#: A part is whole rows and at least this many bytes.
PART_BYTES = 4096
#: Ranges of one object closer than this are read by one request (the metadata at open).
GAP = 64 << 10


def gap() -> int:
    """Missing parts of a leaf closer than this many bytes are read with the parts between
    them (``$TENSORBOX_REMOTE_GAP``, 256 KiB by default; 0: the rows asked for only)."""
    return int(env_number("TENSORBOX_REMOTE_GAP", 256 << 10))


#: A fetch is split into about this many requests in flight together...
REQUESTS = 4
#: ... each reading at least this much (unless the fetch is smaller): replies are streamed
#: into the cache, so a large request costs no memory, and fewer requests pay fewer fixed
#: costs (a round trip; on some servers, moto's among them, a read of the whole object) ...
MIN_REQUEST = 32 << 20
#: ... and at most this much (a whole leaf goes out as several).
MAX_REQUEST = 64 << 20
#: Bytes in flight in one call, at most.
WAVE = 256 << 20
#: The end of a leaf's cache file (after its bytes and its parts' marks).
_LEAF_MAGIC = b"TBXLEAF2"


# ---------------------------------------------------------------- one leaf's bytes


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


class _Leaf:
    """Where a leaf's bytes come from, which parts arrived, and where they are kept."""

    def __init__(
        self,
        store: _RemoteStore,
        name: str,
        obj: str,
        url: str,
        base: int,
        e: TensorEntry,
        key: dict[str, Any] | None,
    ) -> None:
        self.store, self.name, self.obj, self.url, self.base = store, name, obj, url, base
        self.entry = e
        self.dtype, self.shape, self.nbytes = e.dtype, e.shape, e.nbytes
        self.key = key
        rows = self.shape[0] if self.shape and self.shape[0] > 0 else 1
        row = self.nbytes // rows
        self.per = max(1, PART_BYTES // max(row, 1)) if self.shape else 1  # rows per part
        self.part = self.per * row if self.shape else self.nbytes
        self.count = max(1, math.ceil(self.nbytes / max(self.part, 1)))
        self.have = bytearray(self.count)
        self.missing = self.count if self.nbytes else 0
        self.whole = False  # compressed: fetched and decoded whole
        self.located = True  # the archive's local header was checked (base is right)
        self.lock = threading.Lock()
        self.storage: Any = None
        self.fd: int | None = None  # the cache file, open while parts are missing
        self.tensors: list[weakref.ref[torch.Tensor]] = []
        self.lazy: type[torch.Tensor] | None = None  # the class of its tensors until whole
        self.inflight: dict[int, threading.Event] = {}  # parts being fetched, by whom

    # -------- bookkeeping

    def parts(self, rows: torch.Tensor | None) -> list[int]:
        if rows is None:
            return [c for c in range(self.count) if not self.have[c]]
        if self.whole:
            return [] if self.have[0] else [0]
        got = torch.unique(rows.reshape(-1).to(torch.int64) // self.per).tolist()
        want = [c for c in got if 0 <= c < self.count and not self.have[c]]
        span = gap() // max(self.part, 1)  # parts between two wanted ones read with them
        if span and len(want) > 1:
            out = [want[0]]
            for c in want[1:]:
                if c - out[-1] - 1 <= span:
                    out.extend(m for m in range(out[-1] + 1, c) if not self.have[m])
                out.append(c)
            want = out
            if 2 * len(want) >= self.missing:
                # Most of what is missing is wanted now: the rest comes with it (at most as
                # many bytes again), instead of the stragglers costing a request each later
                # (a whole epoch's dense read becomes a few large requests, not a long tail).
                want = [c for c in range(self.count) if not self.have[c]]
        return want

    def span(self, c: int) -> tuple[int, int]:
        """Part ``c``'s bytes in the leaf."""
        return c * self.part, min((c + 1) * self.part, self.nbytes)

    def refresh(self) -> None:
        """Parts another process (or an earlier open) recorded in the cache file since."""
        if self.missing == 0 or self.store.cache is None or self.key is None:
            return
        with self.lock:
            if self.fd is None:
                if self.storage is not None:
                    return  # in memory (its cache file was damaged): nothing to learn
                self._file(create=False)
                return
            try:
                marks = os.pread(self.fd, self.count, self.nbytes)
            except OSError:
                return
            self._merge(marks)

    # -------- storage
    #
    # A leaf's cache file is its bytes, then one mark per part (1: recorded, 0: not),
    # then _LEAF_MAGIC. Marks live in the same file as the bytes they vouch for: a file
    # deleted (evicted, or by hand) takes its marks with it, and a tree holding it open
    # keeps both (its mapping and descriptor keep the file), so no mark ever names bytes
    # that are not there. A file of another size, another magic or marks other than 0
    # and 1 is damaged: it is dropped and its parts fetched again.

    def _merge(self, marks: bytes) -> bool:
        """Take the parts ``marks`` records; False (nothing taken) when they are damaged."""
        got = torch.frombuffer(bytearray(marks), dtype=torch.uint8)
        if len(marks) != self.count or bool((got > 1).any()):
            return False
        have = torch.frombuffer(self.have, dtype=torch.uint8)  # a view: writes land in it
        have |= got
        self.missing = self.count - int(have.sum())
        self._finish()
        return True

    def _size_on_disk(self) -> int:
        return self.nbytes + self.count + len(_LEAF_MAGIC)

    def _drop(self, fd: int, path: str) -> None:
        """Close ``fd`` and delete ``path`` when it still names that damaged file."""
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def _file(self, create: bool) -> None:
        """Open (``create``: or make) the leaf's cache file and map it (the caller holds
        the lock); a damaged one is dropped. Without ``create``, a missing or damaged file
        leaves the leaf as it was."""
        cache = self.store.cache
        assert cache is not None and self.key is not None
        path = cache.path_for(self.key)
        # Never through a symlink: one planted in a shared cache folder would have these
        # bytes written wherever it points.
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        for _ in range(4):  # a file another process deletes meanwhile: open again
            try:
                if create:
                    os.makedirs(cache.directory, exist_ok=True)
                fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o644)
            except FileNotFoundError:
                if not create:
                    return
                continue
            except OSError as err:  # a symlink (ELOOP) or an empty folder there: dropped
                if err.errno in (errno.ELOOP, errno.EISDIR) and cache.clear(path):
                    continue
                raise cache.failure(err, self.url, path) from err
            try:
                size = os.fstat(fd).st_size
                if size == 0 and not create:  # being made by another process: not yet
                    os.close(fd)
                    return
                if size == 0 and create:
                    os.ftruncate(fd, self._size_on_disk())
                    size = self._size_on_disk()
                magic = os.pread(fd, len(_LEAF_MAGIC), self.nbytes + self.count)
                marks = os.pread(fd, self.count, self.nbytes)
                if size != self._size_on_disk() or magic not in (_LEAF_MAGIC, bytes(8)):
                    self._drop(fd, path)
                    if not create:
                        return
                    continue
                if magic != _LEAF_MAGIC:  # made just now (here, or by another process)
                    os.pwrite(fd, _LEAF_MAGIC, self.nbytes + self.count)
                mapped = map_file(path, torch.uint8, (self.nbytes,), "r", self.nbytes)
                # The file still at the path is the one this descriptor holds: the mapping
                # is of it (a deleted file never comes back under its name).
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    os.close(fd)
                    continue
            except FileNotFoundError:
                os.close(fd)
                continue
            except OSError as err:
                os.close(fd)
                raise cache.failure(err, self.url, path) from err
            self.fd = fd
            self._attach(mapped.untyped_storage())
            if not self._merge(marks):
                self.fd = None
                self._drop(fd, path)
                self.have[:] = bytes(self.count)
                self.missing = self.count
                self.storage = None
                if not create:
                    return
                continue
            return
        # Files that keep vanishing under this process: keep the parts in memory.
        self._attach(torch.UntypedStorage(self.nbytes))  # type: ignore[no-untyped-call]

    def _attach(self, storage: Any) -> None:
        self.storage = storage
        with torch._C.DisableTorchFunctionSubclass():
            for ref in self.tensors:
                t = ref()
                if t is not None:
                    t.set_(storage, 0, self.shape, _strides(self.shape))

    def _ready(self) -> None:
        """Somewhere to write (the caller holds the lock): the cache file, or memory."""
        if self.storage is None:
            if self.store.cache is None:
                self._attach(torch.UntypedStorage(self.nbytes))  # type: ignore[no-untyped-call]
            else:
                self._file(create=True)

    def _unmarked(self, at: int, bufs: list[memoryview]) -> list[tuple[int, list[memoryview]]]:
        """The pieces of ``bufs`` (bytes of the leaf from ``at`` on) that fall in parts not
        recorded yet, here or in the shared file: bytes recorded by another process are
        never written over (a reply from a replaced object is found out only after it
        arrived)."""
        n = sum(len(b) for b in bufs)
        if n == 0:
            return []
        first, last = at // self.part, (at + n - 1) // self.part
        have = bytes(self.have[first : last + 1])
        if self.fd is not None:
            marks = os.pread(self.fd, last + 1 - first, self.nbytes + first)
            if any(marks):
                have = bytes(a | b for a, b in zip(have, marks, strict=False))
        if not any(have):
            return [(at, bufs)]
        out: list[tuple[int, list[memoryview]]] = []
        for b in bufs:
            pos = 0
            while pos < len(b):
                c = (at + pos) // self.part
                stop = min(len(b), (c + 1) * self.part - at)
                if not have[c - first]:
                    out.append((at + pos, [b[pos:stop]]))
                pos = stop
            at += len(b)
        return out

    def put(self, at: int, bufs: list[memoryview]) -> None:
        """Write ``bufs`` (consecutive bytes of the leaf) at byte ``at``, without recording
        anything (see :meth:`write`): a streamed reply's bytes, as they arrive. The parts
        they fill are recorded by :meth:`record` once the whole fetch is known good."""
        with self.lock:
            self._ready()
            pieces = self._unmarked(at, bufs)
            if self.fd is not None:
                try:
                    for off, views in pieces:
                        _zip._pwrite_all(self.fd, views, off)
                except OSError as err:
                    raise self._failure(err) from err
                return
            flat = torch.empty(0, dtype=torch.uint8).set_(self.storage)
            view = memoryview(flat.numpy())  # type: ignore[arg-type]
            for off, views in pieces:
                for b in views:
                    view[off : off + len(b)] = b
                    off += len(b)

    def _failure(self, err: OSError) -> OSError:
        cache = self.store.cache
        assert cache is not None and self.key is not None
        return cache.failure(err, self.url, cache.path_for(self.key))

    def write(self, runs: list[tuple[int, int, Any]]) -> list[int]:
        """Write arrived runs of parts ``(first, stop, bytes)`` (every byte of each part),
        without recording them: the parts written, for :meth:`record` once the fetch is
        known good. Unrecorded bytes are never served (nor trusted by another process:
        the file's marks say what is there)."""
        new: list[int] = []
        for first, stop, data in runs:
            new.extend(c for c in range(first, stop) if not self.have[c])
            self.put(self.span(first)[0], [memoryview(data)])
        return new

    def record(self, parts: list[int]) -> None:
        """Parts written by :meth:`write` are good: mark them, in the cache file after
        their bytes (and then here)."""
        with self.lock:
            new = sorted({c for c in parts if not self.have[c]})
            if self.fd is not None and new:
                try:
                    for first, stop in _runs(new, 1 << 62):
                        os.pwrite(self.fd, b"\x01" * (stop - first), self.nbytes + first)
                except OSError as err:
                    raise self._failure(err) from err
            for c in new:
                self.have[c] = 1
            self.missing -= len(new)
            held = self.fd is not None
            self._finish()
        if held and new and self.store.cache is not None:
            self.store.cache.added(sum(map(_size(self), new)) + len(new))

    def fill(self, runs: list[tuple[int, int, Any]]) -> None:
        """:meth:`write` then :meth:`record`."""
        self.record(self.write(runs))

    def _finish(self) -> None:
        """Every part here: the tensors become plain mappings of the cache (or memory)."""
        if self.missing:
            return
        final: type[torch.Tensor] = (
            MemoryMappedTensor if self.store.cache is not None else torch.Tensor
        )
        for ref in self.tensors:
            t = ref()
            if t is not None and type(t) is self.lazy:
                t.__class__ = final
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def tensor(self, lazy: type[torch.Tensor]) -> torch.Tensor:
        """A tensor of the leaf: a plain one when every part is here, else of class
        ``lazy`` (:class:`~tensorbox._storage.remote.tensor.RemoteTensor`), which
        becomes plain once they are."""
        if self.nbytes == 0:
            return torch.empty(self.shape, dtype=self.dtype)
        self.refresh()
        with torch._C.DisableTorchFunctionSubclass():
            t = torch.empty(0, dtype=self.dtype)
            if self.storage is not None:
                t.set_(self.storage, 0, self.shape, _strides(self.shape))
            else:  # nothing here yet: one element, every stride 0, until the first part
                one = torch.UntypedStorage(self.dtype.itemsize)  # type: ignore[no-untyped-call]
                t.set_(one, 0, self.shape, (0,) * len(self.shape))
        if self.missing == 0:
            t.__class__ = MemoryMappedTensor if self.store.cache is not None else torch.Tensor
            return t
        self.lazy = lazy
        t.__class__ = lazy
        t._tbx_leaf = self  # type: ignore[attr-defined]
        self.tensors.append(weakref.ref(t))
        return t


# ---------------------------------------------------------------- fetching


_Claim = tuple[_Leaf, list[int], threading.Event]


def _claim(
    wanted: list[tuple[_Leaf, torch.Tensor | None]],
) -> tuple[list[_Claim], set[threading.Event]]:
    """The missing parts of each ``(leaf, rows)`` that this thread will fetch (marked in
    flight), and the events of those another thread is fetching now."""
    claimed: list[_Claim] = []
    waits: set[threading.Event] = set()
    for leaf, rows in wanted:
        if leaf.missing == 0:
            continue
        leaf.refresh()
        parts = leaf.parts(rows)
        if not parts:
            continue
        ev = threading.Event()
        with leaf.lock:
            mine = [c for c in parts if c not in leaf.inflight and not leaf.have[c]]
            waits.update(leaf.inflight[c] for c in parts if c in leaf.inflight)
            for c in mine:
                leaf.inflight[c] = ev
        if mine:
            claimed.append((leaf, mine, ev))
    return claimed, waits


def _fetch(claimed: list[_Claim]) -> None:
    """Fetch the claimed parts (one call per store), then release them, fetched or not."""
    try:
        by_store: dict[int, tuple[_RemoteStore, list[tuple[_Leaf, list[int]]]]] = {}
        for leaf, mine, _ in claimed:
            by_store.setdefault(id(leaf.store), (leaf.store, []))[1].append((leaf, mine))
        for store, todo in by_store.values():
            store.fetch(todo)
    finally:
        for leaf, mine, ev in claimed:
            with leaf.lock:
                for c in mine:
                    if leaf.inflight.get(c) is ev:
                        del leaf.inflight[c]
            ev.set()


def ensure(wanted: Iterable[tuple[_Leaf, torch.Tensor | None]]) -> None:
    """Fetch what is missing of each ``(leaf, rows)`` (``rows`` None: all of it), one call
    per store. Parts another thread is fetching now are waited for, not fetched twice
    (fetched here after all when that fetch failed)."""
    wanted = list(wanted)
    while True:
        claimed, waits = _claim(wanted)
        _fetch(claimed)
        if not waits:
            return
        for ev in waits:
            ev.wait()


def _size(leaf: _Leaf) -> Any:
    return lambda c: leaf.span(c)[1] - leaf.span(c)[0]


def _runs(parts: list[int], most: int) -> list[tuple[int, int]]:
    """Sorted part numbers as runs ``(first, stop)`` of consecutive ones, ``most`` at most.

    >>> _runs([0, 1, 2, 5, 6, 9], 2)
    [(0, 2), (2, 3), (5, 7), (9, 10)]
    """
    out: list[tuple[int, int]] = []
    for c in parts:
        if out and out[-1][1] == c and c - out[-1][0] < most:
            out[-1] = (out[-1][0], c + 1)
        else:
            out.append((c, c + 1))
    return out


def request_size(total: int) -> int:
    """Bytes one request reads at most, for a fetch of ``total`` bytes: the fetch split
    into about :data:`REQUESTS` requests in flight together, each between
    :data:`MIN_REQUEST` and :data:`MAX_REQUEST` bytes. Each request has a fixed cost
    (a round trip, and on some servers work in proportion to the object's size), so a
    dense read goes out as a few large requests rather than many small ones.

    >>> request_size(96 << 20) >> 20, request_size(1 << 20) >> 20, request_size(1 << 40) >> 20
    (32, 32, 64)
    """
    return min(MAX_REQUEST, max(MIN_REQUEST, -(-total // REQUESTS)))
