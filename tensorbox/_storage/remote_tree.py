"""Trees behind URLs, read lazily: an archive object or a folder of objects, as a store.

Opening a tree reads its description only: for an archive, the tail of the object (the
zip central directory, parsed by :func:`tensorbox._storage.archive.zip.read_index`, and
the ``meta.json`` entries, which tensorbox writes beside it: one request); for a folder,
each node's ``meta.json`` and its listing. Leaf sizes come from the central directory or
the listing: nothing is fetched per leaf at open.

Each leaf is a :class:`RemoteTensor`: a tensor of the leaf's shape whose bytes arrive
on first use. Reading rows (``t[i]``, ``t[idx]``, ``t[a:b]``, ``index_select`` along
dim 0) fetches the parts holding those rows; any other operation fetches the whole leaf
first, after which the tensor becomes a plain :class:`MemoryMappedTensor` of the cache.
A part is whole rows, at least :data:`PART_BYTES` (one page: a rank reading its share
of shuffled image rows fetches those rows, not their neighbours). Parts wanted together
(a batch's rows of every leaf) go out as one call. Parts of a leaf closer than
:func:`gap` bytes are read with the parts between them, which are kept too (a dense
read, a single rank going through a whole epoch, becomes a few large requests; a rank
reading its share of a large dataset reads its rows alone); adjacent ranges go out as
one request.

The local cache (:class:`tensorbox._storage.remote.RangeCache`) holds one file per
leaf, keyed by the object's identity (size, ETag or modification time), the entry and
the leaf's recorded file id: a tree replaced remotely gets new files, never mixed ones.
The file is sparse; bytes are written into it as they arrive (streamed replies, see
:func:`tensorbox._storage.remote.read_into`), and the parts they fill are recorded in a
``.have`` file beside it only once the whole fetch arrived and the object is known
unchanged (so a server dying mid-read leaves nothing recorded: unrecorded bytes are
never served, nor trusted by another process). Every fetch checks the object's identity:
each streamed reply's ETag against the one the tree was opened at, else one look at the
object afterwards; bytes of an object replaced since the tree was opened are an
``OSError`` naming the URL, never served. With ``cache=False`` parts land in memory.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import math
import os
import struct
import threading
import weakref
from collections.abc import Iterable
from typing import Any, NamedTuple

import torch
import torch.utils._pytree as _pytree

from tensorbox._core.tree import iter_shaped
from tensorbox._storage import remote as _remote
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.format.spec import MAX_META_BYTES, META
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, map_file
from tensorbox._storage.store import ListedFiles, NodeFiles, Store, TensorEntry
from tensorbox.errors import FormatError, IncompleteTreeError

__all__ = ["RemoteRef", "RemoteTensor", "open_url", "prefetch"]

#: A part is whole rows and at least this many bytes.
PART_BYTES = 4096
#: Ranges of one object closer than this are read by one request (the metadata at open).
GAP = 64 << 10


def gap() -> int:
    """Missing parts of a leaf closer than this many bytes are read with the parts between
    them (``$TENSORBOX_REMOTE_GAP``, 256 KiB by default; 0: the rows asked for only)."""
    return int(os.environ.get("TENSORBOX_REMOTE_GAP", 256 << 10))


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
_TAIL = 128 << 10  # the end of an archive read at open: its end record and, usually, its index
#: The most bytes of a remote archive's index (its central directory and end records) read:
#: a larger claim is refused before anything is fetched (``$TENSORBOX_MAX_INDEX_BYTES``).
MAX_INDEX_BYTES = int(os.environ.get("TENSORBOX_MAX_INDEX_BYTES", 256 << 20))
#: The end of a leaf's cache file (after its bytes and its parts' marks).
_LEAF_MAGIC = b"TBXLEAF2"
_LOCAL_SIZE = 30  # a zip local header's fixed part


class _Source:
    """A URL's filesystem, made again in a forked child (fsspec's event loop does not
    survive a fork)."""

    def __init__(self, url: str, options: dict[str, Any] | None) -> None:
        self.url, self.options = url, options
        self._pid = -1
        self._fs: Any = None
        self.path = ""
        self.fs  # noqa: B018 - made now: a missing package or a bad URL raises here

    @property
    def fs(self) -> Any:
        if self._pid != os.getpid():
            self._fs, self.path = _remote.filesystem(self.url, self.options)
            self._pid = os.getpid()
        return self._fs

    def path_of(self, rel: str) -> str:
        self.fs  # noqa: B018
        return f"{self.path.rstrip('/')}/{rel}" if rel else self.path

    def url_of(self, rel: str) -> str:
        return f"{self.url.rstrip('/')}/{rel}" if rel else self.url


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
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        for _ in range(4):  # a file another process deletes meanwhile: open again
            try:
                if create:
                    os.makedirs(cache.directory, exist_ok=True)
                fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o644)
            except FileNotFoundError:
                if not create:
                    return
                continue
            except OSError as err:
                raise cache.failure(err, self.url, path) from err
            try:
                size = os.fstat(fd).st_size
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
            if t is not None and type(t) is RemoteTensor:
                t.__class__ = final  # type: ignore[assignment]
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def tensor(self) -> torch.Tensor:
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
        t.__class__ = RemoteTensor
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


class _RemoteStore(Store):
    """What the archive and folder stores share: the cache, fetching, the tensors."""

    def __init__(self, src: _Source, cache: _remote.RangeCache | None) -> None:
        self.src, self.cache = src, cache
        self.name = src.url
        self.leaves: dict[Any, _Leaf] = {}
        self.lock = threading.Lock()

    # hooks
    def _header(self, leaf: _Leaf) -> tuple[int, int] | None:
        return None

    def _locate(self, leaf: _Leaf, header: bytes) -> bool:
        return True

    def _decode(self, leaf: _Leaf, raw: bytes) -> bytes:
        return raw

    def _unchanged(self, leaves: list[_Leaf]) -> None:
        raise NotImplementedError

    def _leaf(self, e: TensorEntry) -> _Leaf:
        raise NotImplementedError

    def version(self, leaf: _Leaf) -> Any:
        """What identifies the bytes ``leaf`` reads (the object's version), for a
        reference that another process attaches to (:class:`RemoteRef`)."""
        raise NotImplementedError

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        with self.lock:
            leaf = self.leaves.get(e.ident)
            if leaf is None:
                leaf = self.leaves[e.ident] = self._leaf(e)
        return leaf.tensor()

    def check(self, e: TensorEntry) -> None:
        t = self.tensor(e, "r")
        leaf = self.leaves[e.ident]
        ensure([(leaf, None)])
        with torch._C.DisableTorchFunctionSubclass():
            flat = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
            raw = memoryview(flat.numpy())[: e.nbytes]  # type: ignore[arg-type]
        self._check_bytes(leaf, raw)
        if e.sha256 is not None and hashlib.sha256(raw).hexdigest() != e.sha256:
            raise FormatError(
                f"{e.path}: the bytes do not match the SHA-256 recorded when the tree was "
                "saved: the object is damaged"
            )

    def _check_bytes(self, leaf: _Leaf, raw: memoryview) -> None:
        pass

    def fetch(self, todo: list[tuple[_Leaf, list[int]]]) -> None:
        """Read the parts ``todo`` names (and the local headers not checked yet), check
        the objects did not change meanwhile, then write them where they are kept.

        Consecutive parts go out as one range, split into requests of :func:`request_size`
        (a dense read of a whole tree: a few large requests in flight together)."""
        fs = self.src.fs
        total = sum(
            self._raw_size(leaf) if leaf.whole else sum(map(_size(leaf), parts))
            for leaf, parts in todo
        )
        size = request_size(total)
        reqs: list[tuple[str, str, int, int]] = []
        owners: list[tuple[_Leaf, int, int]] = []  # (leaf, first, stop); first -1: the header
        for leaf, parts in todo:
            header = None if leaf.located else self._header(leaf)
            if header is not None:
                reqs.append((leaf.obj, leaf.url, *header))
                owners.append((leaf, -1, -1))
            if leaf.whole:
                if parts:
                    reqs.append((leaf.obj, leaf.url, leaf.base, leaf.base + self._raw_size(leaf)))
                    owners.append((leaf, 0, 1))
                continue
            per = max(1, size // max(leaf.part, 1))  # parts in one request, at most
            for first, stop in _runs(sorted(parts), per):
                reqs.append(
                    (leaf.obj, leaf.url, leaf.base + leaf.span(first)[0],
                     leaf.base + leaf.span(stop - 1)[1])
                )  # fmt: skip
                owners.append((leaf, first, stop))
        at = 0
        while at < len(reqs):  # waves: a whole tree is not held in memory at once
            end, got = at, 0
            while end < len(reqs) and (end == at or got + reqs[end][3] - reqs[end][2] <= WAVE):
                got += reqs[end][3] - reqs[end][2]
                end += 1
            self._wave(fs, reqs[at:end], owners[at:end], size)
            at = end

    def _raw_size(self, leaf: _Leaf) -> int:
        return leaf.nbytes

    def _have(self, req: tuple[str, str, int, int]) -> bytes | None:
        """Bytes of ``req`` read already (the tail of a small archive), else None."""
        return None

    def _wave(
        self,
        fs: Any,
        reqs: list[tuple[str, str, int, int]],
        owners: list[tuple[_Leaf, int, int]],
        size: int,
    ) -> None:
        """Read ``reqs``, writing each run's bytes as they arrive (streamed where the
        filesystem allows: :func:`tensorbox._storage.remote.read_into`); once all arrived
        and the objects are known unchanged, record them.

        A run of a leaf whose local header is not checked yet is held back until the
        header has arrived and agrees (the header is read in the same request as the
        leaf's first run, ahead of it, where they are adjacent); a compressed leaf is
        decoded once all its bytes are here."""
        headers: dict[int, bytearray] = {}  # request -> what arrived of a local header
        state: dict[int, str] = {}  # leaf -> "wait" (its header not checked), "ok", "moved"
        held: dict[int, list[tuple[int, list[memoryview]]]] = {}  # request -> bytes kept
        for leaf, first, _ in owners:
            if first == -1:
                state[id(leaf)] = "wait"

        def put(i: int, at: int, bufs: list[memoryview]) -> None:
            leaf, first, _ = owners[i]
            leaf.put(leaf.span(first)[0] + at, bufs)

        def sink(i: int, at: int, bufs: list[memoryview]) -> None:
            leaf, first, _ = owners[i]
            if first == -1:
                got = headers.setdefault(i, bytearray())
                for b in bufs:
                    got += b
                if len(got) < reqs[i][3] - reqs[i][2]:
                    return
                # Checked here only when the bytes at hand settle it (nothing to fetch):
                # else after the read, in the caller's thread, which may fetch.
                if self._fits(leaf, bytes(got)) and self._locate(leaf, bytes(got)):
                    state[id(leaf)] = "ok"
                    for j in list(held):
                        if owners[j][0] is leaf and not leaf.whole:
                            for a, views in held.pop(j):
                                put(j, a, views)
                else:
                    state[id(leaf)] = "later"
                return
            now = state.get(id(leaf), "ok")
            if now in ("moved", "later"):
                return
            if leaf.whole or now == "wait":
                held.setdefault(i, []).append((at, list(bufs)))  # views of immutable bytes
                return
            put(i, at, bufs)

        local = [self._have(r) for r in reqs]
        for i, b in sorted(enumerate(local), key=lambda x: owners[x[0]][1] != -1):
            if b is not None:  # headers first
                sink(i, 0, [memoryview(b)])
        far = [i for i, b in enumerate(local) if b is None]
        leaves = list({id(owners[i][0]): owners[i][0] for i in far}.values())
        # adjacent ranges (a leaf's header and its first run) in one request
        vouched = _remote.read_into(
            fs,
            [reqs[i] for i in far],
            lambda j, at, bufs: sink(far[j], at, bufs),
            0,
            size + GAP,
            REQUESTS,
            self._etags(leaves),
            self._sizes(),
        )
        for i, got in headers.items():
            leaf = owners[i][0]
            if state[id(leaf)] == "later":  # checked now (fetching what it needs), and
                self._locate(leaf, bytes(got))  # its runs, dropped meanwhile, read again
                state[id(leaf)] = "moved"
        if not vouched:  # the replies' ETags said nothing: ask for the objects' now
            self._unchanged(leaves)
        written: dict[int, tuple[_Leaf, list[int]]] = {}
        for i, (leaf, first, stop) in enumerate(owners):
            if first == -1 or state.get(id(leaf), "ok") != "ok":
                continue
            if leaf.whole:
                raw = b"".join(b for _, views in held.pop(i, []) for b in views)
                new = leaf.write([(0, 1, self._decode(leaf, raw))])
            else:
                for a, views in held.pop(i, []):  # a header that came after its run
                    put(i, a, views)
                new = [c for c in range(first, stop) if not leaf.have[c]]
            written.setdefault(id(leaf), (leaf, []))[1].extend(new)
        for leaf, parts in written.values():
            leaf.record(parts)
        again = [
            (
                leaf,
                sorted({c for lf, a, z in owners if lf is leaf and a >= 0 for c in range(a, z)}),
            )
            for leaf in {id(lf): lf for lf, _, _ in owners}.values()
            if state.get(id(leaf)) == "moved"
        ]
        if again:  # the data sits elsewhere than guessed (a data descriptor, padding)
            self.fetch(again)

    def _etags(self, leaves: list[_Leaf]) -> dict[str, str | None]:
        """The strong ETag each leaf's object had when the tree was opened (None: none)."""
        return {}

    def _sizes(self) -> dict[str, int]:
        """The size of each object when the tree was opened (replies are checked by it)."""
        return {}

    def _fits(self, leaf: _Leaf, header: bytes) -> bool:
        """Whether ``header`` (a leaf's local header, read up to where its data should
        start) holds all that checking it needs, so that no byte more is fetched."""
        return True


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


# ---------------------------------------------------------------- archives


class _Sparse:
    """The bytes of a remote archive that were read, by offset; other slices are fetched
    when asked for (what :func:`~tensorbox._storage.archive.zip.read_index` and
    :class:`~tensorbox._storage.archive.zip.ZipIndex` read)."""

    def __init__(self, store: RemoteArchiveStore, size: int) -> None:
        self.store, self.size = store, size
        self.windows: list[tuple[int, bytes]] = []

    def __len__(self) -> int:
        return self.size

    def add(self, start: int, data: bytes) -> None:
        self.windows.append((start, data))

    def covered(self, a: int, b: int) -> bytes | None:
        for start, data in reversed(self.windows):
            if start <= a and b <= start + len(data):
                return data[a - start : b - start]
        return None

    def __getitem__(self, s: slice) -> bytes:
        a, b, _ = s.indices(self.size)
        b = max(a, b)
        got = self.covered(a, b)
        if got is not None:
            return got
        if b - a > MAX_INDEX_BYTES:  # a size claim of the end record, checked before reading
            raise FormatError(
                f"{self.store.src.url}: its zip index claims {b - a} bytes at offset {a}, over "
                f"the {MAX_INDEX_BYTES} a remote archive's index may take: damaged, or not "
                "an archive tensorbox wrote"
            )
        blob = self.store.read([(a, b)], 0)[0]
        self.add(a, blob)
        return blob


def _index_start(index: _zip.ZipIndex, size: int) -> int:
    """Where the archive's central directory starts (its entries end there)."""
    return max((ze.bound for ze in index.entries.values()), default=max(0, size - 22))


def tree_id(index: _zip.ZipIndex, buf: Any) -> str:
    """What tells one archive's content from another's: the SHA-256 of its index (the
    central directory and end records), which holds every entry's CRC-32 and size, and so
    each ``meta.json``'s, whose file ids are new at every save. A server without a strong
    validator (an ETag, a version id) is checked by it; an upload is tied to its bytes
    by it.

    >>> import os, tempfile, torch, tensorbox
    >>> from tensorbox._storage.archive import zip as _zip
    >>> f = os.path.join(tempfile.mkdtemp(), "t.tdz")
    >>> _ = tensorbox.TensorDict(x=torch.zeros(3)).memmap(f, archive=True)
    >>> import pathlib
    >>> raw = pathlib.Path(f).read_bytes()
    >>> len(tree_id(_zip.read_index(raw, f), raw))
    64
    """
    size = len(buf)
    return hashlib.sha256(bytes(buf[_index_start(index, size) : size])).hexdigest()


class RemoteArchiveStore(_RemoteStore):
    """The archive at a URL: its index and ``meta.json`` entries read at open (or from the
    cache), each leaf fetched on first use."""

    checksummed = True

    def __init__(
        self, src: _Source, cache: _remote.RangeCache | None, info: dict[str, Any] | None = None
    ) -> None:
        super().__init__(src, cache)
        fs, path, url = src.fs, src.path, src.url
        # the description open_url just read, else a fresh one
        self.ident = (
            {"url": url, **_remote.stamp(info)}
            if info is not None
            else _remote.identity(fs, path, url)
        )
        size = int(self.ident["size"] or 0)
        self.buf = _Sparse(self, size)
        self.vouched = True  # every reply of the open vouched for by its ETag, so far
        key = {"object": self.ident, "part": "index", "v": 2}
        if not self._from_cache(key):
            if size < 22:
                raise FormatError(f"{url}: {size} bytes, too short for a zip archive")
            # The tail: the end record, the central directory and, as tensorbox lays an
            # archive out, every meta.json (the root's last, beside the directory): a tree
            # opens in one request. Archives laid out otherwise (older tensorbox versions
            # wrote each node's meta.json first) cost one more, below.
            tail = max(0, size - _TAIL)
            self.buf.add(tail, self.read([(tail, size)], 0)[0])
            self.index = _zip.read_index(self.buf, url)
            metas = [
                ze
                for name, ze in self.index.entries.items()
                if (name == META or name.endswith("/" + META)) and ze.usize <= MAX_META_BYTES
            ]
            metas = [ze for ze in metas if self.buf.covered(ze.header, ze.bound) is None]
            for ze, blob in zip(
                metas, self.read([(ze.header, ze.bound) for ze in metas], GAP), strict=True
            ):
                self.buf.add(ze.header, blob)
            self.tree = tree_id(self.index, self.buf)
            if not self.vouched:
                self._unchanged([])
            self._to_cache(key)
        self.sizes = {name: ze.usize for name, ze in self.index.entries.items()}

    def _from_cache(self, key: dict[str, Any]) -> bool:
        """The index kept from an earlier open of this version (a strong validator only:
        a modification time does not tell two versions of one second apart)."""
        if self.cache is None or not _remote._versioned(self.ident):
            return False
        raw = self.cache.get_bytes(key)
        if raw is None:
            return False
        try:
            at = raw.index(b"\n")
            head = json.loads(raw[:at])
            at += 1
            for start, n in head["windows"]:
                self.buf.add(start, raw[at : at + n])
                at += n
            self.index = _zip.read_index(self.buf, self.src.url)
            self.tree = tree_id(self.index, self.buf)
            if self.tree != head["tree"]:
                raise ValueError("another tree")
            for ze in self.index.entries.values():  # each meta.json kept: checked now
                if ze.name.rpartition("/")[2] == META and self.buf.covered(ze.header, ze.bound):
                    self.index.read(ze)
        except (OSError, ValueError, KeyError, TypeError, FormatError):
            # Damaged (checked above: its SHA-256 matched, so a bug or an older layout):
            # dropped, read from the server again.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.cache.path_for(key))
            self.buf = _Sparse(self, self.buf.size)
            return False
        return True

    def _to_cache(self, key: dict[str, Any]) -> None:
        if self.cache is None or not _remote._versioned(self.ident):
            return
        head = {"windows": [[s, len(d)] for s, d in self.buf.windows], "tree": self.tree}
        blob = json.dumps(head).encode() + b"\n" + b"".join(d for _, d in self.buf.windows)
        self.cache.put_bytes(key, blob, self.src.url)

    def where(self, rel: str) -> str:
        return f"{self.src.url}::{rel}"

    def read_meta(self, rel: str) -> bytes:
        name = f"{rel}/{META}" if rel else META
        ze = self.index.entries.get(name)
        if ze is None:
            prefix = f"{rel}/" if rel else ""
            if rel and not any(n.startswith(prefix) for n in self.index.entries):
                raise FileNotFoundError(f"no sub-directory {rel!r} in the archive {self.src.url}")
            raise IncompleteTreeError(
                f"{self.where(name)} is missing: not a saved tree (or one whose save did not "
                "finish)"
            )
        if ze.usize > MAX_META_BYTES:
            raise FormatError(f"{self.where(name)} is {ze.usize} bytes, over {MAX_META_BYTES}")
        return bytes(self.index.read(ze))

    def open_node(self, rel: str) -> NodeFiles:
        return ListedFiles(self.sizes, rel, self.where, exact=True)

    def _leaf(self, e: TensorEntry) -> _Leaf:
        ze = self.index.entries[e.ident]
        key = {"object": self.ident, "tree": self.tree, "entry": e.ident, "gen": e.gen, "v": 2}
        leaf = _Leaf(self, e.ident, self.src.path, self.src.url, ze.bound - ze.csize, e, key)
        leaf.located = False
        if ze.method != _zip.STORED:
            leaf.whole, leaf.per, leaf.part, leaf.count = True, 1 << 62, e.nbytes, 1
            leaf.have, leaf.missing = bytearray(1), 1
        return leaf

    def _raw_size(self, leaf: _Leaf) -> int:
        return int(self.index.entries[leaf.name].csize)

    def version(self, leaf: _Leaf) -> Any:
        return {**self.ident, "tree": self.tree}

    def _have(self, req: tuple[str, str, int, int]) -> bytes | None:
        return self.buf.covered(req[2], req[3])

    def _header(self, leaf: _Leaf) -> tuple[int, int]:
        ze = self.index.entries[leaf.name]
        return ze.header, max(leaf.base, ze.header + 30)

    def _etags(self, leaves: list[_Leaf]) -> dict[str, str | None]:
        return {self.src.path: _remote.strong_etag(self.ident)}

    def _sizes(self) -> dict[str, int]:
        return {self.src.path: self.buf.size}

    def read(self, ranges: list[tuple[int, int]], gap: int, vouch: bool = True) -> list[bytes]:
        """The bytes of each ``(start, end)`` of the object; ranges closer than ``gap``
        read by one request. Replies not vouched for by their ETag leave
        :attr:`vouched` False (the object's identity is then read again)."""
        src = self.src
        out = [bytearray() for _ in ranges]

        def sink(i: int, at: int, bufs: list[memoryview]) -> None:
            for b in bufs:
                out[i] += b

        vouched = _remote.read_into(
            src.fs,
            [(src.path, src.url, a, b) for a, b in ranges],
            sink,
            gap,
            etags=self._etags([]),
            sizes=self._sizes(),
        )
        if vouch:
            self.vouched &= vouched
        return [bytes(b) for b in out]

    def _fits(self, leaf: _Leaf, header: bytes) -> bool:
        ze = self.index.entries[leaf.name]
        if len(header) < _LOCAL_SIZE or header[:4] != b"PK\x03\x04":
            return False  # damaged: the check, after the read, says how
        n, x = struct.unpack_from("<HH", header, 26)  # the name's and extra field's lengths
        return bool(ze.header + _LOCAL_SIZE + n + x == leaf.base == ze.header + len(header))

    def _locate(self, leaf: _Leaf, header: bytes) -> bool:
        ze = self.index.entries[leaf.name]
        self.buf.add(ze.header, header)
        data = self.index.data_offset(ze)  # the local header checked against the index
        leaf.located = True
        if data != leaf.base:
            leaf.base = data
            return False
        return True

    def _decode(self, leaf: _Leaf, raw: bytes) -> bytes:
        ze = self.index.entries[leaf.name]
        self.buf.add(leaf.base, raw)
        return self.index.read(ze)[: leaf.nbytes]

    def _check_bytes(self, leaf: _Leaf, raw: memoryview) -> None:
        ze = self.index.entries[leaf.name]
        if ze.method == _zip.STORED and _zip.crc32(raw) != ze.crc:
            raise FormatError(
                f"{self.where(leaf.name)}: CRC-32 does not match the recorded {ze.crc:08x}: "
                "the archive is damaged"
            )

    def _unchanged(self, leaves: list[_Leaf]) -> None:
        """Raise unless the object is still the version opened: by its strong validator
        (ETag, version id...), else by content: its index read again (every entry's
        CRC-32 and size, and each save's new file ids in its meta.json entries)."""
        url = self.src.url
        changed = OSError(
            f"{url!r}: the object changed since the tree was opened (it was replaced): "
            "open it again to read the new tree"
        )
        if _remote._versioned(self.ident):
            if _remote.identity(self.src.fs, self.src.path, url) != self.ident:
                raise changed
            return
        start = _index_start(self.index, self.buf.size)
        try:
            again = self.read([(start, self.buf.size)], 0, vouch=False)[0]
        except (_remote.ReplyMismatch, FileNotFoundError) as err:
            raise changed from err
        except OSError as err:
            if "came back as" in str(err):  # shorter now
                raise changed from err
            raise
        if hashlib.sha256(again).hexdigest() != self.tree:
            raise changed


# ---------------------------------------------------------------- folders


class _Listing:
    """The files of a remote folder tree, listed one directory at a time (on demand),
    ``"/"``-joined names relative to the tree, with their fsspec info."""

    def __init__(self, store: RemoteFolderStore) -> None:
        self.store = store
        self.dirs: dict[str, dict[str, dict[str, Any]] | None] = {}

    def listing(self, d: str) -> dict[str, dict[str, Any]] | None:
        if d not in self.dirs:
            src = self.store.src
            try:
                rows = src.fs.ls(src.path_of(d), detail=True)
            except (NotImplementedError, FileNotFoundError, ValueError, OSError):
                self.dirs[d] = None  # a server that does not list (plain HTTP)
            else:
                out: dict[str, dict[str, Any]] = {}
                for r in rows:
                    base = str(r["name"]).rstrip("/").rpartition("/")[2]
                    out[base] = r
                self.dirs[d] = out
        return self.dirs[d]

    def info(self, name: str) -> dict[str, Any] | None:
        d, _, base = name.rpartition("/")
        found = self.listing(d)
        return None if found is None else found.get(base)

    def get(self, name: str) -> int | None:
        info = self.info(name)
        if info is None or info.get("type") == "directory":
            return None
        return int(info["size"])

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None


class _UnlistedFiles(ListedFiles):
    """A node on a server that cannot list: sizes are checked when the bytes arrive."""

    def leaf(self, spec: Any, where: str, key: str = "") -> TensorEntry:
        name = self.pre + (spec.file if type(spec.file) is str else spec.file[0])
        return TensorEntry(
            spec.dtype, spec.shape, self.show(name), spec.nbytes, name, spec.gen, spec.sha256
        )

    def exists(self, name: str) -> bool:
        return True

    def child(self, name: str, where: str) -> str:
        return self.pre + name


class RemoteFolderStore(_RemoteStore):
    """A folder tree at a URL (uploaded by a sync tool: tensorbox saves archives to URLs):
    each node's ``meta.json`` read when the node is, its leaves on first use."""

    def __init__(self, src: _Source, cache: _remote.RangeCache | None) -> None:
        super().__init__(src, cache)
        self.files = _Listing(self)
        self.stamps: dict[str, dict[str, Any]] = {}

    def where(self, rel: str) -> str:
        return self.src.url_of(rel)

    def read_meta(self, rel: str) -> bytes:
        name = f"{rel}/{META}" if rel else META
        src = self.src
        listed = self.files.listing(rel)
        info = self.files.info(name)
        if listed is not None and info is None:
            if not listed:
                raise FileNotFoundError(f"{src.url_of(rel)!r}: no tree there")
            raise IncompleteTreeError(
                f"{src.url_of(name)} is missing: not a saved tree (or one whose upload did "
                "not finish)"
            )
        key = None
        if info is not None and self.cache is not None:
            key = {"file": src.url_of(name), **_remote.stamp(info), "v": 2}
            if _remote._versioned(key):
                hit = self.cache.get_bytes(key)  # a damaged copy: dropped, read again
                if hit is not None:
                    return hit
        try:
            raw = _remote.read_whole(src.fs, src.path_of(name), src.url_of(name), MAX_META_BYTES)
        except FileNotFoundError:
            raise IncompleteTreeError(
                f"{src.url_of(name)} is missing: not a saved tree (or one whose upload did "
                "not finish)"
            ) from None
        if key is not None and self.cache is not None and _remote._versioned(key):
            self.cache.put_bytes(key, raw, src.url_of(name))
        return raw

    def open_node(self, rel: str) -> NodeFiles:
        if self.files.listing(rel) is None:
            return _UnlistedFiles({}, rel, self.where)
        return ListedFiles(self.files, rel, self.where)

    def _leaf(self, e: TensorEntry) -> _Leaf:
        name = str(e.ident)
        info = self.files.info(name)
        key = None
        if info is not None:
            self.stamps[name] = _remote.stamp(info)
            key = {"file": self.src.url_of(name), **self.stamps[name], "gen": e.gen, "v": 2}
        return _Leaf(self, name, self.src.path_of(name), self.src.url_of(name), 0, e, key)

    def version(self, leaf: _Leaf) -> Any:
        return self.stamps.get(leaf.name)  # None: not listed, its identity not read yet

    def _etags(self, leaves: list[_Leaf]) -> dict[str, str | None]:
        return {leaf.obj: _remote.strong_etag(self.stamps.get(leaf.name, {})) for leaf in leaves}

    def _sizes(self) -> dict[str, int]:
        return {
            self.src.path_of(name): int(st["size"])
            for name, st in self.stamps.items()
            if st.get("size") is not None
        }

    def fetch(self, todo: list[tuple[_Leaf, list[int]]]) -> None:
        for leaf, _ in todo:
            if leaf.key is None:  # not listed: the object's identity now, before its bytes
                info = _remote.describe(self.src.fs, leaf.obj, leaf.url)
                if int(info.get("size") or 0) < leaf.nbytes:
                    raise FormatError(
                        f"{leaf.url} is {info.get('size')} bytes, but the tree needs "
                        f"{leaf.nbytes}: the object is truncated or belongs to another tree"
                    )
                self.stamps[leaf.name] = _remote.stamp(info)
                leaf.key = {"file": leaf.url, **self.stamps[leaf.name], "gen": None, "v": 2}
                leaf.refresh()
            if not _remote._versioned(self.stamps[leaf.name]) and not _remote.trust_weak():
                raise OSError(
                    f"{leaf.url!r}: the server names no version of this file (no ETag or "
                    "version id), so bytes of a file replaced during the read could mix with "
                    "the old ones. Save the tree as one archive (checked by its content), or "
                    "accept the risk: TENSORBOX_TRUST_WEAK_VALIDATORS=1"
                )
        super().fetch(todo)

    def _unchanged(self, leaves: list[_Leaf]) -> None:
        for leaf in leaves:
            now = _remote.stamp(_remote.describe(self.src.fs, leaf.obj, leaf.url))
            if now != self.stamps.get(leaf.name):
                raise OSError(
                    f"{leaf.url!r}: the object changed since the tree was opened (the tree "
                    "was replaced): open it again to read the new tree"
                )


# ---------------------------------------------------------------- tensors


def _rows(index: Any, n: int) -> torch.Tensor | None:
    """The rows (dim 0) an index reads, or None when it is not a plain row index."""
    if isinstance(index, tuple):
        if not index or index[0] is Ellipsis or index[0] is None:
            return None
        index = index[0]
    if isinstance(index, bool):
        return None
    if isinstance(index, int):
        return torch.tensor([index % n if n else 0])
    if isinstance(index, slice):
        return _span(index, n)
    if isinstance(index, list):
        index = torch.as_tensor(index)
    if isinstance(index, torch.Tensor) and type(index) is torch.Tensor:
        if index.dtype == torch.bool:
            return (
                index.reshape(index.shape[0], -1).any(1).nonzero().flatten()
                if index.dim()
                else None
            )
        if not index.dtype.is_floating_point and not index.dtype.is_complex:
            return index.flatten().to(torch.int64) % max(n, 1)
    return None


def _span(s: slice, n: int) -> torch.Tensor:
    start, stop, step = s.indices(n)
    if (stop - start) * step <= 0:
        return torch.empty(0, dtype=torch.int64)
    return torch.arange(start, stop, step)


_Tensor = torch.Tensor
#: Functions that read a tensor's description only: answered without fetching.
_META = {
    getattr(_Tensor, name).__get__ if prop else getattr(_Tensor, name)
    for name, prop in (
        *[
            (n, True)
            for n in (
                "shape",
                "dtype",
                "device",
                "ndim",
                "layout",
                "requires_grad",
                "is_cuda",
                "is_sparse",
                "is_nested",
                "is_meta",
                "grad",
                "names",
            )
        ],
        *[
            (n, False)
            for n in (
                "size",
                "dim",
                "numel",
                "nelement",
                "element_size",
                "__len__",
                "is_floating_point",
                "is_complex",
                "get_device",
                "requires_grad_",
            )
        ],
    )
    if hasattr(_Tensor, name)
}


class RemoteTensor(MemoryMappedTensor):
    """A leaf of a tree behind a URL whose bytes arrive on first use (see the module doc).

    Its description (shape, dtype, device) needs nothing; reading rows fetches those
    rows; anything else fetches the whole leaf, after which the tensor is a plain
    :class:`MemoryMappedTensor` of the local cache.
    """

    _tbx_leaf: _Leaf

    @classmethod
    def __torch_function__(  # type: ignore[override]  # the base's is the disabled one
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _META:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        first: Any = args[0] if args else None
        rows = None
        if type(first) is RemoteTensor:
            n = first._tbx_leaf.shape[0] if first._tbx_leaf.shape else 0
            if func is _Tensor.__getitem__ and len(args) == 2:
                rows = _rows(args[1], n)
            elif (
                func in (torch.index_select, _Tensor.index_select)
                and len(args) >= 3
                and args[1] == 0
                and isinstance(args[2], torch.Tensor)
            ):
                rows = args[2].flatten().to(torch.int64)
        if rows is not None:
            ensure([(first._tbx_leaf, rows)])
        else:
            flat, _ = _pytree.tree_flatten((args, kwargs))
            ensure([(t._tbx_leaf, None) for t in flat if type(t) is RemoteTensor])
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    #: pickled by reference (:class:`RemoteRef`), never fetched for it
    _tbx_by_reference = True

    def __reduce_ex__(self, protocol: Any) -> Any:
        from tensorbox._core.pickling import in_torch_save

        if in_torch_save():  # a file written by torch.save holds the bytes themselves
            ensure([(self._tbx_leaf, None)])  # whole now: a mapping of the cache
            return self.__reduce_ex__(protocol)
        return (_attach, (_reference(self._tbx_leaf),))


class RemoteRef(NamedTuple):
    """A leaf behind a URL, by reference: what a process needs to read it lazily on its
    own (a spawned DataLoader worker, a process on another machine).

    It carries the ``storage_options`` the tree was opened with, as fsspec's own
    filesystems do when pickled: credentials passed there travel with the pickle. Pass
    them through the environment instead (``AWS_*``...) to keep them out of pickles;
    each process then reads its own. The receiving process uses its own cache
    (``$TENSORBOX_CACHE``): on one machine, the same folder, shared.
    """

    url: str
    storage_options: dict[str, Any] | None
    cache: bool
    entry: TensorEntry
    version: Any  # the object's identity when the reference was made (see _attach)


def _reference(leaf: _Leaf) -> RemoteRef:
    store = leaf.store
    return RemoteRef(
        store.src.url, store.src.options, store.cache is not None, leaf.entry, store.version(leaf)
    )


#: Stores opened in this process, by URL and options: references to one tree share its
#: leaves (and what arrived of them) instead of opening it once per leaf.
_opened: weakref.WeakValueDictionary[str, _RemoteStore] = weakref.WeakValueDictionary()
_opened_lock = threading.RLock()  # _attach holds it around open_url, which takes it too


def _opened_key(url: str, options: dict[str, Any] | None, cache: bool) -> str:
    return json.dumps([os.getpid(), url, options, cache], sort_keys=True, default=repr)


def _attach(ref: RemoteRef) -> torch.Tensor:
    """The leaf ``ref`` names, attached lazily in this process: its tree opened once
    (its description only), nothing of the leaf fetched. A tree replaced since the
    reference was made is an ``OSError`` naming the URL, never the new bytes."""
    key = _opened_key(ref.url, ref.storage_options, ref.cache)
    with _opened_lock:
        store = _opened.get(key)
        if store is not None and not _same(store, ref):
            store = None  # opened before a replacement: open the tree as it is now
        if store is None:
            store = open_url(ref.url, ref.storage_options, ref.cache)
    t = store.tensor(ref.entry, "r")
    if not _same(store, ref):
        raise OSError(
            f"{ref.url!r}: the tree was replaced since this reference to "
            f"{ref.entry.path} was made: open it again to read the new tree"
        )
    return t


def _same(store: _RemoteStore, ref: RemoteRef) -> bool:
    if isinstance(store, RemoteArchiveStore):
        return bool({**store.ident, "tree": store.tree} == ref.version)
    now = store.stamps.get(str(ref.entry.ident)) if isinstance(store, RemoteFolderStore) else None
    return ref.version is None or now is None or now == ref.version


# ---------------------------------------------------------------- the public side


def open_url(
    url: str,
    storage_options: dict[str, Any] | None = None,
    cache: bool = True,
    kept: _remote.RangeCache | None = None,
) -> _RemoteStore:
    """The store of the tree at ``url`` (an archive object, or a folder of objects), its
    bytes kept in ``kept`` (the process's cache by default) unless ``cache`` is False."""
    src = _Source(url, storage_options)
    kept = (kept or _remote.default_cache()) if cache else None
    info = _remote.describe(src.fs, src.path, url)
    store: _RemoteStore
    if info.get("type") == "directory":
        store = RemoteFolderStore(src, kept)
    else:
        store = RemoteArchiveStore(src, kept, info)
    with _opened_lock:
        _opened[_opened_key(url, storage_options, cache)] = store
    return store


def _wanted(data: Any, rows: Any) -> list[tuple[_Leaf, torch.Tensor | None]]:
    idx = None if rows is None else _rows(rows, 1 << 62)
    if rows is not None and idx is None:
        raise TypeError(
            f"prefetch: rows must be an int, a slice, a list or a 1-D integer or bool "
            f"tensor of row numbers, got {type(rows).__name__}"
        )
    leaves = [data] if isinstance(data, torch.Tensor) else [t for _, t in iter_shaped(data)]
    out: list[tuple[_Leaf, torch.Tensor | None]] = []
    for t in leaves:
        if type(t) is RemoteTensor:
            leaf = t._tbx_leaf
            if isinstance(rows, slice):
                idx = _span(rows, leaf.shape[0] if leaf.shape else 1)
            out.append((leaf, idx))
    return out


def prefetch(data: Any, rows: Any = None) -> concurrent.futures.Future[None]:
    """Fetch rows ``rows`` (all rows when None) of every leaf of ``data`` that lives
    behind a URL, in a background thread; the returned future is done when they are in
    the cache (``.result()`` waits, and raises what the fetch raised). Leaves that are
    local, or already here, cost nothing: for local data the future is done at once.

    All leaves' rows go out together, ranges of one object merged where they are close,
    so a batch of rows of every leaf costs a few requests, not one per leaf.

    >>> import torch, tensorbox
    >>> tensorbox.prefetch(tensorbox.TensorDict(x=torch.arange(4), batch_size=[4]), [0, 2]).done()
    True
    """
    wanted = _wanted(data, rows)
    if not any(leaf.missing for leaf, _ in wanted):
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done
    # Claimed here, in the caller's thread: a read that starts after this call waits for
    # these parts instead of fetching them again (or splitting this call's ranges).
    claimed, _ = _claim(wanted)
    fut: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run() -> None:
        # A thread of its own (not a bounded pool): a fetch waiting for parts that another
        # prefetch claimed must never wait behind it in a queue.
        try:
            _fetch(claimed)
            ensure(wanted)  # parts in flight elsewhere: waited for (fetched if that failed)
        except BaseException as err:
            fut.set_exception(err)
        else:
            fut.set_result(None)

    threading.Thread(target=run, name="tensorbox-prefetch", daemon=True).start()
    return fut
