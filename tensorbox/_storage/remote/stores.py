"""Trees behind URLs, read lazily: an archive object or a folder of objects, as stores of
the one :class:`~tensorbox._storage.load.Loader`.

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

import contextlib
import hashlib
import json
import os
import struct
import threading
import weakref
from typing import Any

import torch

from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.format.spec import MAX_META_BYTES, META
from tensorbox._storage.remote.cache import RangeCache, default_cache, env_number
from tensorbox._storage.remote.leaf import (
    GAP,
    REQUESTS,
    WAVE,
    _Leaf,
    _runs,
    _size,
    ensure,
    request_size,
)
from tensorbox._storage.remote.tensor import RemoteRef, RemoteTensor
from tensorbox._storage.remote.transport import (
    FsspecTransport,
    ReplyMismatch,
    Transport,
    _versioned,
    stamp,
    strong_etag,
    trust_weak,
)
from tensorbox._storage.store import ListedFiles, NodeFiles, Store, TensorEntry
from tensorbox.errors import FormatError, IncompleteTreeError

__all__ = ["RemoteArchiveStore", "RemoteFolderStore", "open_url", "tree_id"]

_TAIL = 128 << 10  # the end of an archive read at open: its end record and, usually, its index
_LOCAL_SIZE = 30  # a zip local header's fixed part
#: The most bytes of a remote archive's index (its central directory and end records) read:
#: a larger claim is refused before anything is fetched (``$TENSORBOX_MAX_INDEX_BYTES``).
MAX_INDEX_BYTES = env_number("TENSORBOX_MAX_INDEX_BYTES", 256 << 20)


class _RemoteStore(Store):
    """What the archive and folder stores share: the cache, fetching, the tensors."""

    def __init__(self, src: Transport, cache: RangeCache | None) -> None:
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
        return leaf.tensor(RemoteTensor)

    def reduce(self, leaf: _Leaf) -> tuple[Any, tuple[RemoteRef]]:
        """How a tensor of ``leaf`` pickles: by reference (:class:`RemoteRef`)."""
        return (_attach, (_reference(leaf),))

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
            self._wave(reqs[at:end], owners[at:end], size)
            at = end

    def _raw_size(self, leaf: _Leaf) -> int:
        return leaf.nbytes

    def _have(self, req: tuple[str, str, int, int]) -> bytes | None:
        """Bytes of ``req`` read already (the tail of a small archive), else None."""
        return None

    def _wave(
        self,
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
        vouched = self.src.read_into(
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
        self, src: Transport, cache: RangeCache | None, info: dict[str, Any] | None = None
    ) -> None:
        super().__init__(src, cache)
        url = src.url
        # the description open_url just read, else a fresh one
        self.ident = {"url": url, **stamp(info)} if info is not None else src.identity()
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
        if self.cache is None or not _versioned(self.ident):
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
        if self.cache is None or not _versioned(self.ident):
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
        obj = self.src.path_of("")
        leaf = _Leaf(self, e.ident, obj, self.src.url, ze.bound - ze.csize, e, key)
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
        return {self.src.path_of(""): strong_etag(self.ident)}

    def _sizes(self) -> dict[str, int]:
        return {self.src.path_of(""): self.buf.size}

    def read(self, ranges: list[tuple[int, int]], gap: int, vouch: bool = True) -> list[bytes]:
        """The bytes of each ``(start, end)`` of the object; ranges closer than ``gap``
        read by one request. Replies not vouched for by their ETag leave
        :attr:`vouched` False (the object's identity is then read again)."""
        src = self.src
        out = [bytearray() for _ in ranges]

        def sink(i: int, at: int, bufs: list[memoryview]) -> None:
            for b in bufs:
                out[i] += b

        obj = src.path_of("")
        vouched = src.read_into(
            [(obj, src.url, a, b) for a, b in ranges],
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
        if _versioned(self.ident):
            if self.src.identity() != self.ident:
                raise changed
            return
        start = _index_start(self.index, self.buf.size)
        try:
            again = self.read([(start, self.buf.size)], 0, vouch=False)[0]
        except (ReplyMismatch, FileNotFoundError) as err:
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
            rows = self.store.src.list(d)  # None: a server that does not list (plain HTTP)
            self.dirs[d] = None if rows is None else {r["name"]: r for r in rows}
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

    def __init__(self, src: Transport, cache: RangeCache | None) -> None:
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
            key = {"file": src.url_of(name), **stamp(info), "v": 2}
            if _versioned(key):
                hit = self.cache.get_bytes(key)  # a damaged copy: dropped, read again
                if hit is not None:
                    return hit
        try:
            raw = src.read_whole(name, MAX_META_BYTES)
        except FileNotFoundError:
            raise IncompleteTreeError(
                f"{src.url_of(name)} is missing: not a saved tree (or one whose upload did "
                "not finish)"
            ) from None
        if key is not None and self.cache is not None and _versioned(key):
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
            self.stamps[name] = stamp(info)
            key = {"file": self.src.url_of(name), **self.stamps[name], "gen": e.gen, "v": 2}
        return _Leaf(self, name, self.src.path_of(name), self.src.url_of(name), 0, e, key)

    def version(self, leaf: _Leaf) -> Any:
        return self.stamps.get(leaf.name)  # None: not listed, its identity not read yet

    def _etags(self, leaves: list[_Leaf]) -> dict[str, str | None]:
        return {leaf.obj: strong_etag(self.stamps.get(leaf.name, {})) for leaf in leaves}

    def _sizes(self) -> dict[str, int]:
        return {
            self.src.path_of(name): int(st["size"])
            for name, st in self.stamps.items()
            if st.get("size") is not None
        }

    def fetch(self, todo: list[tuple[_Leaf, list[int]]]) -> None:
        for leaf, _ in todo:
            if leaf.key is None:  # not listed: the object's identity now, before its bytes
                info = self.src.describe(leaf.name)
                if int(info.get("size") or 0) < leaf.nbytes:
                    raise FormatError(
                        f"{leaf.url} is {info.get('size')} bytes, but the tree needs "
                        f"{leaf.nbytes}: the object is truncated or belongs to another tree"
                    )
                self.stamps[leaf.name] = stamp(info)
                leaf.key = {"file": leaf.url, **self.stamps[leaf.name], "gen": None, "v": 2}
                leaf.refresh()
            if not _versioned(self.stamps[leaf.name]) and not trust_weak():
                raise OSError(
                    f"{leaf.url!r}: the server names no version of this file (no ETag or "
                    "version id), so bytes of a file replaced during the read could mix with "
                    "the old ones. Save the tree as one archive (checked by its content), or "
                    "accept the risk: TENSORBOX_TRUST_WEAK_VALIDATORS=1"
                )
        super().fetch(todo)

    def _unchanged(self, leaves: list[_Leaf]) -> None:
        for leaf in leaves:
            now = stamp(self.src.describe(leaf.name))
            if now != self.stamps.get(leaf.name):
                raise OSError(
                    f"{leaf.url!r}: the object changed since the tree was opened (the tree "
                    "was replaced): open it again to read the new tree"
                )


#: Stores opened in this process, by URL and options: references to one tree share its
#: leaves (and what arrived of them) instead of opening it once per leaf.
_opened: weakref.WeakValueDictionary[str, _RemoteStore] = weakref.WeakValueDictionary()
_opened_lock = threading.RLock()  # _attach holds it around open_url, which takes it too


def _opened_key(url: str, options: dict[str, Any] | None, cache: bool) -> str:
    return json.dumps([os.getpid(), url, options, cache], sort_keys=True, default=repr)


# ---------------------------------------------------------------- the public side


def open_transport(url: str, options: dict[str, Any] | None = None) -> Transport:
    """The transport for ``url``: fsspec's, or obstore's where ``options`` holds
    ``transport="obstore"`` (or ``$TENSORBOX_REMOTE_TRANSPORT`` is ``obstore``); the
    other options go to the transport.

    >>> type(open_transport("memory://bucket/x.tdz")).__name__
    'FsspecTransport'
    """
    options = dict(options or {})
    kind = options.pop("transport", None) or os.environ.get("TENSORBOX_REMOTE_TRANSPORT")
    if kind in (None, "", "fsspec"):
        return FsspecTransport(url, options or None)
    if kind == "obstore":
        from tensorbox._storage.remote.obstore import ObstoreTransport

        return ObstoreTransport(url, options or None)
    raise ValueError(f"{url!r}: unknown transport {kind!r}; 'fsspec' or 'obstore'")


def open_url(
    url: str,
    storage_options: dict[str, Any] | None = None,
    cache: bool = True,
    kept: RangeCache | None = None,
) -> _RemoteStore:
    """The store of the tree at ``url`` (an archive object, or a folder of objects), its
    bytes kept in ``kept`` (the process's cache by default) unless ``cache`` is False."""
    src = open_transport(url, storage_options)
    kept = (kept or default_cache()) if cache else None
    info = src.describe("")
    store: _RemoteStore
    if info.get("type") == "directory":
        store = RemoteFolderStore(src, kept)
    else:
        store = RemoteArchiveStore(src, kept, info)
    with _opened_lock:
        _opened[_opened_key(url, storage_options, cache)] = store
    return store


# ---------------------------------------------------------------- references


def _reference(leaf: _Leaf) -> RemoteRef:
    store = leaf.store
    return RemoteRef(
        store.src.real, store.src.options, store.cache is not None, leaf.entry, store.version(leaf)
    )


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
