"""Zip files for one-file trees: a fast writer of aligned STORED entries, a checked reader.

Only what a saved tree needs, written from the zip specification (APPNOTE 6.3):

* The writer lays every entry out before writing a byte, then two threads checksum
  and write units of the file from its end backwards, each unit while it is in the
  cache (CRC-32: libdeflate's when the system has it, else ``zlib.crc32``; both
  release the GIL), every local header whole with its CRC-32, and the central
  directory last. Entries may be compressed (:func:`compress`). Data entries start on a
  :data:`ALIGN`-byte boundary: the local header's extra field is padded (an extra
  block of id :data:`PAD_ID`, which every zip reader skips), as numpy and tensordict do.
  ZIP64 records are written when an entry, an offset or the central directory
  passes 4 GiB, or there are more than 65,535 entries.
* The reader parses the end records and the central directory of a file mapped
  once, and checks every entry it hands out: inside the file, no overlap with its
  neighbours, the local header agreeing with the central one. Every problem is a
  :class:`~tensorbox.errors.FormatError` naming the file and the entry.

>>> import os, tempfile, zipfile
>>> path = os.path.join(tempfile.mkdtemp(), "a.zip")
>>> fd = os.open(path, os.O_WRONLY | os.O_CREAT)
>>> starts = write_zip(fd, [("a.txt", b"hello", False), ("b.bin", b"\\x01" * 8, True)])
>>> os.close(fd)
>>> with zipfile.ZipFile(path) as zf:
...     zf.read("b.bin"), zf.testzip()
(b'\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01', None)
>>> with open(path, "rb") as f:
...     index = read_index(f.read(), path)
>>> index.entries["b.bin"].usize, index.data_offset(index.entries["b.bin"]) % ALIGN
(8, 0)
"""

from __future__ import annotations

import bz2
import contextlib
import itertools
import lzma
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

from tensorbox._storage.archive.crc32 import _CRC32, crc32, crc32_combine
from tensorbox._storage.archive.limits import _RATIO_FLOOR, MAX_RATIO, check_inflate
from tensorbox.errors import FormatError

__all__ = [
    "ALIGN",
    "COMPRESSIONS",
    "PAD_ID",
    "Packed",
    "ZipEntry",
    "ZipIndex",
    "check_inflate",
    "compress",
    "compress_loadable",
    "compression_method",
    "crc32",
    "crc32_combine",
    "read_index",
    "write_zip",
]

#: Alignment of data entries: torch.save's, and a multiple of every itemsize.
ALIGN = 64
#: Id of the padding block in local headers' extra fields (b"tb" little-endian).
PAD_ID = 0x6274
#: Sizes and offsets from which ZIP64 records are needed (module globals: tests lower them).
ZIP64_LIMIT = 0xFFFFFFFF
ZIP64_COUNT = 0xFFFF
STORED, DEFLATED, BZIP2, LZMA = 0, 8, 12, 14
METHODS = {STORED: "stored", DEFLATED: "deflate", BZIP2: "bzip2", LZMA: "lzma"}

_LOCAL = struct.Struct("<IHHHHHIIIHH")  # 30 bytes
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes
_END = struct.Struct("<IHHHHIIH")  # 22 bytes
_END64 = struct.Struct("<IQHHIIQQQQ")  # 56 bytes
_LOCATOR64 = struct.Struct("<IIQI")  # 20 bytes
_SIG_LOCAL, _SIG_CENTRAL = 0x04034B50, 0x02014B50
_SIG_END, _SIG_END64, _SIG_LOCATOR64 = 0x06054B50, 0x06064B50, 0x07064B50
_U32 = 0xFFFFFFFF
#: Bytes per unit of work (written in one call, checksummed just before when no helper
#: has: it fits in a core's cache; 2 MiB writes ran 4-6x slower in a quarter of the saves
#: measured here), and below which an entry's CRC-32 is computed while laying out.
_UNIT, _SMALL = 1 << 20, 1 << 16


# ---------------------------------------------------------------- writing


class _ZipEntry(NamedTuple):
    name: bytes
    size: int  # bytes in the file (compressed size)
    header: int  # offset of the local header
    data: int  # offset of the first data byte
    pad: int  # bytes of the padding block (0: none)
    method: int = STORED
    usize: int = -1  # uncompressed size (-1: ``size``, a stored entry)


class Packed(NamedTuple):
    """A compressed payload for :func:`write_zip` (made by :func:`compress`)."""

    data: bytes
    method: int
    usize: int
    crc: int


#: Names of the compression methods :func:`compress` writes, as tensordict spells them.
COMPRESSIONS = {None: STORED, "stored": STORED, "deflate": DEFLATED, "deflated": DEFLATED}
COMPRESSIONS.update({"bzip2": BZIP2, "lzma": LZMA})


def compression_method(compression: Any) -> int:
    """The zip method of ``compression`` (a name, None, or a zip method number)."""
    key = compression.lower() if isinstance(compression, str) else compression
    if type(key) is int and key in METHODS:
        return key
    if isinstance(key, str | None) and key in COMPRESSIONS:
        return COMPRESSIONS[key]
    names = sorted(k for k in COMPRESSIONS if k is not None)
    raise ValueError(
        f"compression={compression!r} is not a compression tensorbox writes: expected one of "
        f"{names}, None, or a zip method number {sorted(METHODS)}"
    )


def compress(pieces: Any, method: int, level: int | None = None) -> Packed:
    """Compress bytes-like ``pieces`` (an iterable) as one entry of zip ``method``."""
    if method == DEFLATED:
        comp: Any = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, -15)
        head = b""
    elif method == BZIP2:
        comp = bz2.BZ2Compressor(9 if level is None else level)
        head = b""
    elif method == LZMA:  # zip's LZMA: version 9.4, the 5 property bytes, a raw LZMA1 stream
        lc, lp, pb, dict_size = 3, 0, 2, 1 << 23  # lzma's preset 6
        filt = {"id": lzma.FILTER_LZMA1, "dict_size": dict_size, "lc": lc, "lp": lp, "pb": pb}
        comp = lzma.LZMACompressor(lzma.FORMAT_RAW, filters=[filt])
        props = struct.pack("<BI", (pb * 5 + lp) * 9 + lc, dict_size)
        head = struct.pack("<BBH", 9, 4, len(props)) + props
    else:
        raise ValueError(f"zip method {method} is not one tensorbox compresses with")
    out, crc, usize = [head], 0, 0
    for piece in pieces:
        view = memoryview(piece).cast("B")
        crc = crc32(view, crc)
        usize += view.nbytes
        out.append(comp.compress(view))
    out.append(comp.flush())
    return Packed(b"".join(out), method, usize, crc)


def compress_loadable(pieces: Any, method: int) -> Packed:
    """:func:`compress` a callable's pieces, in deflate instead when ``method`` would pass
    the ratio a reader accepts by default (:data:`MAX_RATIO`; bzip2 and lzma do on zeros,
    deflate cannot): what tensorbox writes loads without raising a limit."""
    packed = compress(pieces(), method)
    big = method != DEFLATED and packed.usize > _RATIO_FLOOR
    if big and packed.usize > MAX_RATIO * len(packed.data):
        return compress(pieces(), DEFLATED)
    return packed


def _dos_time() -> tuple[int, int]:
    t = time.localtime()
    return (
        (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2),
        ((max(t.tm_year, 1980) - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday,
    )


def _layout(items: Sequence[tuple[str, int, bool, int, int]]) -> tuple[list[_ZipEntry], int]:
    """Slots of ``(name, size, align, method, usize)`` items, and where the data ends."""
    slots, off = [], 0
    for name, size, align, method, usize in items:
        raw = name.encode("utf-8")
        big = max(size, usize) >= ZIP64_LIMIT
        base = off + _LOCAL.size + len(raw) + (20 if big else 0)
        pad = 4 + (-(base + 4)) % ALIGN if align and method == STORED else 0
        slots.append(_ZipEntry(raw, size, off, base + pad, pad, method, usize))
        off = base + pad + size
    return slots, off


def _usize(s: _ZipEntry) -> int:
    return s.size if s.usize < 0 else s.usize


def _flags(name: bytes) -> int:
    return 0x800 if not name.isascii() else 0  # UTF-8 names


def _local_header(s: _ZipEntry, crc: int, when: tuple[int, int]) -> bytes:
    usize = _usize(s)
    big = max(s.size, usize) >= ZIP64_LIMIT
    extra = struct.pack("<HHQQ", 1, 16, usize, s.size) if big else b""
    if s.pad:
        extra += struct.pack("<HH", PAD_ID, s.pad - 4) + bytes(s.pad - 4)
    head = _LOCAL.pack(
        _SIG_LOCAL,
        45 if big else 20,
        _flags(s.name),
        s.method,
        *when,
        crc,
        _U32 if big else s.size,
        _U32 if big else usize,
        len(s.name),
        len(extra),
    )
    return head + s.name + extra


def _central(slots: list[_ZipEntry], crcs: list[int], when: tuple[int, int], end: int) -> bytes:
    parts = []
    for s, crc in zip(slots, crcs, strict=True):
        fields = []
        usize, size = _usize(s), s.size
        if max(size, usize) >= ZIP64_LIMIT:  # both, in this order, as the local header
            fields += [usize, size]
            usize = size = _U32
        if s.header >= ZIP64_LIMIT:
            fields.append(s.header)
            offset = _U32
        else:
            offset = s.header
        extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
        version = 45 if fields else 20
        parts.append(
            _CENTRAL.pack(
                _SIG_CENTRAL,
                (3 << 8) | version,
                version,
                _flags(s.name),
                s.method,
                *when,
                crc,
                size,
                usize,
                len(s.name),
                len(extra),
                0,
                0,
                0,
                0o100644 << 16,
                offset,
            )
        )
        parts += [s.name, extra]
    cd = b"".join(parts)
    count, cd_size, cd_off = len(slots), len(cd), end
    tail = b""
    if count >= ZIP64_COUNT or cd_size >= ZIP64_LIMIT or cd_off >= ZIP64_LIMIT:
        at = cd_off + cd_size
        tail = _END64.pack(_SIG_END64, 44, 45, 45, 0, 0, count, count, cd_size, cd_off)
        tail += _LOCATOR64.pack(_SIG_LOCATOR64, 0, at, 1)
    tail += _END.pack(
        _SIG_END,
        0,
        0,
        min(count, ZIP64_COUNT),
        min(count, ZIP64_COUNT),
        min(cd_size, _U32),
        min(cd_off, _U32),
        0,
    )
    return cd + tail


#: The most buffers one ``pwritev`` takes (a unit of many tiny entries holds more).
def _iov_max() -> int:
    try:
        n = os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 16
    return n if n > 0 else 16  # POSIX guarantees at least 16


_IOV_MAX = _iov_max()


def _pwrite_all(fd: int, bufs: list[Any], offset: int) -> None:
    """``pwritev`` until every byte is written (a regular file may take fewer at once)."""
    views = [v for v in (memoryview(b).cast("B") for b in bufs) if v.nbytes]
    while views:
        n = os.pwritev(fd, views[:_IOV_MAX], offset)  # more buffers: EINVAL
        if n <= 0:  # pragma: no cover - a regular file never does this
            raise OSError("pwritev wrote nothing")
        offset += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views and n:
            views[0] = views[0][n:]


class _Unit(NamedTuple):
    """About :data:`_UNIT` bytes of the file, written in one call."""

    offset: int
    bufs: list[Any]  # in file order
    heads: list[tuple[int, bytearray]]  # (entry, its local header): CRC-32 filled in first
    stream: int  # an entry whose bytes come from a function (-1: none)
    jobs: list[int]  # the pieces of large entries in it (indices into _UnitPlan.jobs)


class _UnitPlan(NamedTuple):
    units: list[_Unit]
    crcs: list[int]  # each entry's CRC-32, when known from the layout (small entries)
    jobs: list[Any]  # pieces of large entries, in file order, to checksum
    owner: list[int]  # the entry of each piece
    pieces: list[list[int]]  # each entry's pieces (indices into jobs)


def _units(
    items: Sequence[tuple[str, Any, bool]], slots: list[_ZipEntry], when: tuple[int, int]
) -> _UnitPlan:
    """Cut the file into units, and large entries into pieces (a piece never spans two
    units), whose CRC-32s are computed apart and combined. Pieces end on multiples of
    _UNIT in the file, so most writes are of whole aligned blocks of the page cache."""
    plan = _UnitPlan([], [0] * len(items), [], [], [[] for _ in items])
    bufs: list[Any] = []
    heads: list[tuple[int, bytearray]] = []
    mine: list[int] = []
    start = filled = 0

    def close(at: int) -> None:
        nonlocal bufs, heads, mine, start, filled
        if bufs:
            plan.units.append(_Unit(start, bufs, heads, -1, mine))
        bufs, heads, mine, start, filled = [], [], [], at, 0

    for i, (_, payload, _) in enumerate(items):
        s = slots[i]
        if callable(payload):  # its pieces come as they are copied: one unit of its own
            close(s.header)
            plan.units.append(_Unit(s.header, [], [], i, []))
            start = s.data + s.size
            continue
        if type(payload) is Packed:  # compressed already: its CRC-32 is known
            plan.crcs[i], view, small = payload.crc, memoryview(payload.data), True
        else:
            view = memoryview(payload).cast("B")
            small = s.size <= _SMALL
            if small:
                plan.crcs[i] = zlib.crc32(view)
        head = bytearray(_local_header(s, plan.crcs[i], when))
        bufs.append(head)
        filled += s.data - s.header
        if small:
            bufs.append(view)
            filled += s.size
        else:
            heads.append((i, head))
            at = 0
            while at < s.size:  # pieces end on multiples of _UNIT in the file
                piece = view[at : at + _UNIT - (s.data + at) % _UNIT]
                plan.pieces[i].append(len(plan.jobs))
                mine.append(len(plan.jobs))
                plan.jobs.append(piece)
                plan.owner.append(i)
                bufs.append(piece)
                filled += piece.nbytes
                at += piece.nbytes
                if (s.data + at) % _UNIT == 0:
                    close(s.data + at)
        if filled >= _UNIT:
            close(s.data + s.size)
    close(0)
    return plan


def _stream(fd: int, s: _ZipEntry, item: tuple[str, Any, bool], when: tuple[int, int]) -> int:
    """Write an entry whose bytes come from a function, as they come; its CRC-32."""
    _pwrite_all(fd, [_local_header(s, 0, when)], s.header)
    crc, at = 0, s.data
    for chunk in item[1]():
        view = memoryview(chunk).cast("B")
        if at + view.nbytes > s.data + s.size:  # it would run into the next entry
            at += view.nbytes
            break
        crc = crc32(view, crc)
        _pwrite_all(fd, [view], at)
        at += view.nbytes
    if at - s.data != s.size:
        raise RuntimeError(f"entry {item[0]!r} changed size while being written")
    return crc


def write_zip(
    fd: int, items: Sequence[tuple[str, Any, bool]], num_threads: int = 0, sizes: Any = None
) -> list[int]:
    """Write a zip of ``(name, payload, align)`` items to ``fd`` (empty, open for writing).

    A payload is bytes-like, or a function returning an iterator of bytes-like pieces
    (then ``sizes[i]`` gives its size, checked), or a :class:`Packed` (compressed).
    The file is cut into units of about :data:`_UNIT` bytes, written by
    ``num_threads`` threads (0: two, one on a one-core machine) that take them from
    the end of the file backwards: each checksums the pieces of a unit then writes it
    (``pwritev`` at offsets laid out before any write) while those bytes are still in
    its cache, so memory is read once and the kernel's copy reads it from the cache.
    Going backwards, the rest of an entry is checksummed by the time the unit holding
    its local header is reached, so every header is written whole, CRC-32 included (no
    small write into the file later, which costs ~50 us each once the kernel writes
    those pages back). A piece another thread has not finished yet is checksummed
    again rather than waited for: a busy machine may not be running that thread.
    Returns where each item's data starts in the file.
    """
    layout = []
    for i, (name, p, align) in enumerate(items):
        if type(p) is Packed:
            layout.append((name, len(p.data), align, p.method, p.usize))
        else:
            size = sizes[i] if sizes is not None and sizes[i] is not None else None
            layout.append((name, memoryview(p).nbytes if size is None else size, align, STORED, -1))
    slots, end = _layout(layout)
    when = _dos_time()
    crc32(b"")  # loads the fastest CRC-32 at hand
    checksum = _CRC32[0]
    plan = _units(items, slots, when)
    crcs, jobs = plan.crcs, plan.jobs
    os.ftruncate(fd, end)  # the size once: the units' writes land inside the file
    results = [0] * len(jobs)
    done = [False] * len(jobs)  # a piece is checksummed at most twice, with one result
    streamed = [u.stream for u in plan.units if u.stream >= 0]
    for i in streamed:  # (rare: non-contiguous leaves) their bytes as they come
        crcs[i] = _stream(fd, slots[i], items[i], when)
    todo = [u for u in reversed(plan.units) if u.stream < 0]
    counter = itertools.count()  # next() on it is atomic under the GIL
    written = [False] * len(todo)
    # One lock per unit, held only around its write: closing waits for writes under
    # way (never for a checksum), and no thread writes to ``fd`` once it is closed. A
    # lock shared by all writes cost a quarter of the save here.
    locks = [threading.Lock() for _ in todo]
    closed: list[bool] = []
    failed: list[BaseException] = []

    def piece(j: int) -> int:
        if not done[j]:
            results[j] = checksum(jobs[j])
            done[j] = True
        return results[j]

    def unit(k: int) -> None:
        u = todo[k]
        for j in u.jobs:
            piece(j)
        for i, head in u.heads:  # the entry's later units are behind us
            crc = 0
            for j in plan.pieces[i]:
                crc = crc32_combine(crc, piece(j), jobs[j].nbytes)
            crcs[i] = crc
            struct.pack_into("<I", head, 14, crc)
        with locks[k]:
            if closed or failed or written[k]:
                return
            try:
                _pwrite_all(fd, u.bufs, u.offset)
            except BaseException as err:  # the others stop before their next write
                failed.append(err)
                raise
            written[k] = True

    def work() -> None:
        try:
            while not failed and not closed and (k := next(counter)) < len(todo):
                unit(k)
        except BaseException as err:  # stops the others; raised by the caller below
            if err not in failed:
                failed.append(err)

    threads = num_threads if num_threads > 0 else min(2, os.cpu_count() or 1)
    for _ in range(min(threads, len(todo)) - 1):
        threading.Thread(target=work, daemon=True).start()
    try:
        work()
        # A unit another thread took but has not written (it may be descheduled):
        # done here again rather than waited for; identical bytes, written once.
        for k in range(len(todo)):
            if not failed and not written[k]:
                unit(k)
    finally:
        closed.append(True)
        for held in locks:  # writes under way end; from here on no thread writes to ``fd``
            with held:
                pass
    if failed:
        raise failed[0]
    for i in streamed:  # known once their bytes are out
        os.pwrite(fd, struct.pack("<I", crcs[i]), slots[i].header + 14)
    _pwrite_all(fd, [_central(slots, crcs, when, end)], end)
    return [s.data for s in slots]


# ---------------------------------------------------------------- reading


class ZipEntry(NamedTuple):
    name: str
    header: int  # offset of the local header
    csize: int
    usize: int
    method: int
    crc: int
    flags: int
    raw_name: bytes
    bound: int  # where the next entry (or the central directory) starts


class ZipIndex:
    """The checked central directory of one zip file held in ``buf`` (bytes-like)."""

    def __init__(self, path: str, buf: Any, entries: dict[str, ZipEntry], dirs: set[str]) -> None:
        self.path, self.buf, self.entries, self.dirs = path, buf, entries, dirs

    def fail(self, entry: str | None, why: str) -> FormatError:
        where = self.path if entry is None else f"{self.path}, entry {entry!r}"
        return FormatError(f"{where}: {why}")

    def data_offset(self, e: ZipEntry) -> int:
        """Where ``e``'s data starts, checked against its local header and its neighbours."""
        buf, h = self.buf, e.header
        if h + _LOCAL.size > e.bound:
            raise self.fail(e.name, f"its local header at {h} runs into the next entry")
        sig, _, flags, method, _, _, crc, csize, usize, nlen, xlen = _LOCAL.unpack(
            bytes(buf[h : h + _LOCAL.size])
        )
        if sig != _SIG_LOCAL:
            raise self.fail(e.name, f"no local header at offset {h} (damaged or truncated)")
        start = h + _LOCAL.size
        if bytes(buf[start : start + nlen]) != e.raw_name or method != e.method:
            raise self.fail(e.name, "its local header does not match the central directory")
        data: int = start + nlen + xlen
        if data + e.csize > e.bound:
            raise self.fail(
                e.name,
                f"its {e.csize} bytes at offset {data} overlap the next entry or the central "
                f"directory (at {e.bound}): the archive is damaged",
            )
        if not flags & 8:  # sizes in the local header (else in a descriptor after the data)
            if _U32 in (csize, usize):
                extra = bytes(buf[start + nlen : data])
                usize, csize = _local_zip64(extra, usize, csize)
            if (csize, usize, crc) != (e.csize, e.usize, e.crc):
                raise self.fail(
                    e.name,
                    f"its local header says {csize} bytes ({usize} uncompressed, CRC-32 "
                    f"{crc:08x}), the central directory {e.csize} ({e.usize}, {e.crc:08x}): "
                    "the archive is damaged",
                )
        return data

    def read(self, e: ZipEntry, check_crc: bool = True) -> bytes:
        """The entry's bytes (decompressed when compressed), its CRC-32 checked."""
        data = self.data_offset(e)
        raw = self.buf[data : data + e.csize]
        if e.method == STORED:
            out = bytes(raw)
        else:
            out = self._inflate(e, raw)
        if check_crc and crc32(out) != e.crc:
            raise self.fail(
                e.name,
                f"CRC-32 {crc32(out):08x} does not match the recorded {e.crc:08x}: the "
                "archive is damaged",
            )
        return out

    def _inflate(self, e: ZipEntry, raw: Any) -> bytes:
        if e.method not in METHODS:
            raise self.fail(
                e.name,
                f"compressed with zip method {e.method}; tensorbox reads stored, deflate, bzip2 "
                "and lzma entries: extract it with another tool and load the folder",
            )
        check_inflate(e, self.path)  # before a byte is allocated for it
        try:
            if e.method == DEFLATED:
                d: Any = zlib.decompressobj(-15)
            elif e.method == BZIP2:
                d = bz2.BZ2Decompressor()
            else:  # lzma in zip: 2 bytes of version, 2 of property size, the properties
                psize = struct.unpack_from("<H", raw, 2)[0]
                props = bytes(raw[4 : 4 + psize])
                lc_lp_pb, dict_size = props[0], struct.unpack_from("<I", props, 1)[0]
                # No match reaches further back than the entry's own size: a larger declared
                # dictionary (4 GiB in 40 bytes) would only allocate memory.
                dict_size = min(dict_size, max(e.usize, 1 << 12))
                filt = {
                    "id": lzma.FILTER_LZMA1,
                    "dict_size": dict_size,
                    "lc": lc_lp_pb % 9,
                    "lp": lc_lp_pb // 9 % 5,
                    "pb": lc_lp_pb // 45,
                }
                d = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[filt])
                raw = raw[4 + psize :]
            out = d.decompress(bytes(raw), e.usize + 1)
        except (zlib.error, OSError, EOFError, lzma.LZMAError, struct.error, IndexError) as err:
            raise self.fail(e.name, f"cannot be decompressed ({err})") from None
        if len(out) != e.usize:
            raise self.fail(e.name, f"decompresses to {len(out)} bytes, not the recorded {e.usize}")
        return bytes(out)


#: Names every tensorbox and tensordict writer makes: plain parts, none starting with a dot.
_PLAIN = re.compile(
    r"(?:[A-Za-z0-9_%^~-][A-Za-z0-9_.%^~-]*/)*[A-Za-z0-9_%^~-][A-Za-z0-9_.%^~-]*"
).fullmatch


def _bad_name(name: str) -> bool:
    parts = name.split("/")
    return (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or any(p in ("", ".", "..") for p in parts)
    )


#: The last central directories parsed, by their bytes and offset: a process that opens
#: several sub-trees of one archive parses its index once. (What an entry points at is
#: still checked against the file's bytes each time it is used.)
_INDEXES: dict[tuple[int, bytes], tuple[dict[str, ZipEntry], set[str]]] = {}


def read_index(buf: Any, path: str) -> ZipIndex:
    """Parse and check the central directory of the zip in ``buf``; FormatError if damaged.

    ``buf`` is anything with ``len()`` and slices that give bytes-like values: a mapping
    of the file, or a remote archive's reader that fetches the slices it is asked for
    (:mod:`tensorbox._storage.remote_tree`: the tail, the central directory)."""
    size = len(buf)
    if size < _END.size:
        raise FormatError(f"{path}: {size} bytes, too short for a zip archive (truncated?)")
    tail_start = max(0, size - _END.size - 0xFFFF)
    tail = bytes(buf[tail_start:])
    at = len(tail)
    while True:  # the last end record whose comment ends the file exactly
        at = tail.rfind(b"PK\x05\x06", 0, at)
        if at < 0 or at + _END.size > len(tail):
            if at < 0:
                raise FormatError(
                    f"{path}: no zip end record: not a zip archive, or truncated (the end "
                    "of a zip file holds its index)"
                )
            continue
        if _END.unpack_from(tail, at)[7] == len(tail) - at - _END.size:
            break
    end = tail_start + at
    _, disk, cd_disk, _, count, cd_size, cd_off, _ = _END.unpack_from(tail, at)
    cd_end = end
    loc = end - _LOCATOR64.size
    locator = bytes(buf[loc : loc + _LOCATOR64.size]) if loc >= 0 else b""
    if locator and _LOCATOR64.unpack(locator)[0] == _SIG_LOCATOR64:
        _, _, z_at, _ = _LOCATOR64.unpack(locator)
        if z_at + _END64.size > loc:
            raise FormatError(f"{path}: its ZIP64 end record points outside the file")
        sig, _, _, _, disk, cd_disk, _, count, cd_size, cd_off = _END64.unpack(
            bytes(buf[z_at : z_at + _END64.size])
        )
        if sig != _SIG_END64:
            raise FormatError(f"{path}: no ZIP64 end record where its locator points")
        cd_end = z_at
    if disk or cd_disk:
        raise FormatError(f"{path}: a multi-part (split) zip archive; join the parts first")
    if cd_off + cd_size != cd_end:
        raise FormatError(
            f"{path}: the central directory ({cd_size} bytes at {cd_off}) does not end where "
            f"the end record starts ({cd_end}): damaged, truncated, or data was prepended"
        )
    cd = bytes(buf[cd_off:cd_end])  # one copy of the index: slicing bytes is cheap
    key = (cd_off, cd)
    known = _INDEXES.get(key)
    if known is not None:  # the same central directory, checked already
        return ZipIndex(path, buf, *known)
    rows: dict[str, tuple[int, int, int, int, int, int, bytes]] = {}
    dirs: set[str] = set()
    pos, unpack, fast = 0, _CENTRAL.unpack_from, _PLAIN
    for _ in range(count):  # the per-entry cost of opening an archive: kept lean
        if pos + 46 > len(cd):
            raise FormatError(f"{path}: the central directory is truncated")
        (sig, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, clen, _, _, _, hoff) = (
            unpack(cd, pos)
        )
        if sig != _SIG_CENTRAL:
            raise FormatError(f"{path}: damaged central directory at offset {cd_off + pos}")
        xstart = pos + 46 + nlen
        raw = cd[pos + 46 : xstart]
        pos = xstart + xlen + clen
        name = raw.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        if pos > len(cd):
            raise FormatError(f"{path}: the central directory is truncated (entry {name!r})")
        if usize == _U32 or csize == _U32 or hoff == _U32:
            usize, csize, hoff = _zip64_fields(
                cd[xstart : xstart + xlen], usize, csize, hoff, path, name
            )
        if flags & 1:
            raise FormatError(f"{path}, entry {name!r}: encrypted; tensorbox reads plain archives")
        if fast(name) is None:
            if _bad_name(name.removesuffix("/")):
                raise FormatError(
                    f"{path}, entry {name!r}: not a plain relative path (absolute, '..', '\\' "
                    "or empty parts): refused"
                )
            if name.endswith("/"):
                if name in dirs:
                    raise FormatError(f"{path}, entry {name!r}: appears twice")
                dirs.add(name.removesuffix("/"))
                continue
        if name in rows:
            raise FormatError(f"{path}, entry {name!r}: appears twice")
        if method == STORED and csize != usize:
            raise FormatError(
                f"{path}, entry {name!r}: stored (not compressed), yet its central directory "
                f"record says {csize} bytes in the file and {usize} uncompressed: the archive "
                "is damaged"
            )
        if hoff >= cd_off:
            raise FormatError(
                f"{path}, entry {name!r}: its offset {hoff} points past the data (the central "
                f"directory starts at {cd_off})"
            )
        rows[name] = (hoff, csize, usize, method, crc, flags, raw)
    if pos != len(cd):
        raise FormatError(f"{path}: the central directory holds more than its {count} entries")
    ordered = sorted(rows.items(), key=lambda kv: kv[1][0])
    bounds = [r[0] for _, r in ordered[1:]] + [cd_off] if ordered else []  # none: empty
    entries: dict[str, ZipEntry] = {}
    last = -1
    for (name, r), bound in zip(ordered, bounds, strict=True):
        if r[0] == last:
            prev = next(n for n, q in rows.items() if q[0] == last and n != name)
            raise FormatError(f"{path}, entry {name!r}: overlaps entry {prev!r}")
        last = r[0]
        entries[name] = ZipEntry(name, *r[:6], r[6], bound)
    if len(_INDEXES) >= 8:
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # another thread's
            _INDEXES.pop(next(iter(_INDEXES)))
    _INDEXES[key] = (entries, dirs)
    return ZipIndex(path, buf, entries, dirs)


def _local_zip64(extra: bytes, usize: int, csize: int) -> tuple[int, int]:
    """The sizes of a local header's ZIP64 extra block (both, in this order), else as given."""
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, at)
        if tag == 1 and length >= 16 and at + 20 <= len(extra):
            big_u, big_c = struct.unpack_from("<QQ", extra, at + 4)
            return big_u, big_c
        at += 4 + length
    return usize, csize


def _zip64_fields(
    extra: bytes, usize: int, csize: int, hoff: int, path: str, name: str
) -> tuple[int, int, int]:
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, at)
        if tag == 1:
            want = [usize == _U32, csize == _U32, hoff == _U32]
            need = 8 * sum(want)
            if length < need or at + 4 + need > len(extra):
                break
            values = list(struct.unpack_from(f"<{sum(want)}Q", extra, at + 4))
            if want[0]:
                usize = values.pop(0)
            if want[1]:
                csize = values.pop(0)
            if want[2]:
                hoff = values.pop(0)
            return usize, csize, hoff
        at += 4 + length
    raise FormatError(f"{path}, entry {name!r}: its ZIP64 sizes are missing or truncated")
