"""Trees behind URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``memory://``...),
through fsspec.

A path that looks like a URL (``scheme://...``) is never taken for a local path: a
known scheme goes to fsspec (its package missing: an ``ImportError`` naming the
extra to install), an unknown one is a ``ValueError``. Credentials and endpoints come
from each filesystem's own configuration (``AWS_*`` variables, ``AWS_ENDPOINT_URL``...)
or from ``storage_options=``, as pandas and zarr take them.

What this module does:

- **Archives only on object storage.** A folder tree is committed by renaming a new
  generation into place, and object stores have no rename: a reader could list a mix
  of two generations. A folder save to a URL is refused with the advice to save an
  archive; an archive is one object, written by one ``put`` (a multipart upload for
  large files) that readers see whole or not at all.
- **A bounded local disk cache** (:class:`RangeCache`): fetched bytes are kept under a
  key made of the URL and the object's identity (size, ETag and modification time,
  whichever the server reports), so an object replaced remotely is fetched again,
  never served stale or mixed. Files are written under a temporary name and renamed,
  so a fetch that fails (a server dying mid-read) leaves nothing half-written; the
  least recently used files are evicted past ``max_bytes``.
- **Range requests coalesced**: ranges closer than ``gap`` bytes are read as one
  request (adjacent leaves of an archive come back in one round trip).

>>> split_url("/data/ds.tbx") is None, split_url("memory://bucket/ds.tbx")
(True, ('memory', 'memory://bucket/ds.tbx', None))
>>> split_url("s3://bucket/ds.tbx::train")
('s3', 's3://bucket/ds.tbx', 'train')
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = [
    "RangeCache",
    "coalesce",
    "default_cache",
    "fetch_archive",
    "filesystem",
    "identity",
    "is_url",
    "check_mode",
    "read_into",
    "read_many",
    "read_whole",
    "stamp",
    "describe",
    "refuse",
    "save_target",
    "upload",
    "split_url",
]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_SEP = "::"  # URL::DIR names a sub-tree of an archive, as FILE::DIR does locally

#: scheme -> (the package fsspec needs for it, the tensorbox extra that installs it)
SCHEMES: dict[str, tuple[str | None, str]] = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
    "http": ("aiohttp", "http"),
    "https": ("aiohttp", "http"),
    "memory": (None, "remote"),
    "file": (None, "remote"),
}
_READ_ONLY = ("http", "https")
_CHUNK = 16 << 20  # one request's size when a whole object is fetched


def split_url(prefix: Any) -> tuple[str, str, str | None] | None:
    """``(scheme, url, sub-tree)`` when ``prefix`` is a URL, None for a local path.

    An unknown scheme raises ``ValueError``: ``"foo://x"`` is never a local path.
    """
    if isinstance(prefix, bytes):
        prefix = os.fsdecode(prefix)
    if not isinstance(prefix, str):
        return None
    m = _URL.match(prefix)
    if m is None:
        return None
    scheme = m.group(1).lower()
    if scheme not in SCHEMES:
        raise ValueError(
            f"{prefix!r}: unknown URL scheme {scheme!r}; tensorbox reads and writes "
            f"{', '.join(s + '://' for s in sorted(SCHEMES))} URLs (through fsspec) and local "
            "paths"
        )
    url, sep, sub = prefix.partition(_SEP)
    return scheme, url, (sub or None) if sep else None


def is_url(prefix: Any) -> bool:
    """True for ``scheme://...`` (an unknown scheme raises ``ValueError``)."""
    return split_url(prefix) is not None


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path inside it, after checking that the
    packages it needs are installed (an ``ImportError`` names the extra)."""
    found = split_url(url)
    if found is None:
        raise ValueError(f"{url!r} is not a URL")
    scheme = found[0]
    package, extra = SCHEMES[scheme]
    for needed in ("fsspec", package):
        if needed is not None and importlib.util.find_spec(needed) is None:
            raise ImportError(
                f"{url!r}: {scheme}:// URLs need the {needed!r} package: "
                f"pip install 'tensorbox[{extra}]'"
            )
    import fsspec.core

    options = _with_timeouts(scheme, dict(storage_options or {}))
    fs, path = fsspec.core.url_to_fs(found[1], **options)
    return fs, path


def timeout() -> float:
    """Seconds a network read may stall (``$TENSORBOX_REMOTE_TIMEOUT``, 60 by default)."""
    return float(os.environ.get("TENSORBOX_REMOTE_TIMEOUT", 60))


#: Attempts of a failed range read (a dropped connection, a timeout), then an error.
ATTEMPTS = 3


def _with_timeouts(scheme: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with connect and read timeouts added where the caller set none: a
    silent server is an error after :func:`timeout` seconds, never a hang."""
    t = timeout()
    if scheme in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", t)
        config.setdefault("read_timeout", t)
        config.setdefault("retries", {"max_attempts": 2})
        options["config_kwargs"] = config
    elif scheme in ("http", "https"):
        import aiohttp

        client = dict(options.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, connect=t, sock_read=t))
        options["client_kwargs"] = client
    return options


def describe(fs: Any, path: str, url: str) -> dict[str, Any]:
    """fsspec's ``info`` of the object (fresh: fsspec's listing cache dropped first); errors
    name the URL."""
    with contextlib.suppress(Exception):
        fs.invalidate_cache(path)
    try:
        info: dict[str, Any] = fs.info(path)
    except FileNotFoundError as err:
        raise _not_found(err, url) from err.__cause__
    except PermissionError as err:
        raise PermissionError(f"{url!r}: access refused: check the credentials ({err})") from err
    except Exception as err:  # aiohttp, botocore...: their own types
        status = getattr(err, "status", None)
        if status in (401, 403):
            raise PermissionError(
                f"{url!r}: access refused (HTTP {status}): check the credentials"
            ) from err
        raise OSError(f"{url!r}: cannot read the object's description ({err})") from err
    return info


def _not_found(err: FileNotFoundError, url: str) -> OSError:
    """What a ``FileNotFoundError`` from fsspec means: fsspec's HTTP filesystem raises it
    for any failure of its HEAD and GET (a dead server, HTTP 503...), with the real
    error as its cause; only a 404 or 410 (or no cause: another filesystem's own
    verdict) is a missing object."""
    cause = err.__cause__
    if cause is None or not type(cause).__module__.startswith(("aiohttp", "asyncio")):
        if cause is not None and isinstance(cause, (TimeoutError, ConnectionError)):
            return ConnectionError(f"{url!r}: cannot reach the server ({cause!r})")
        return FileNotFoundError(f"{url!r}: no such object")
    status = getattr(cause, "status", None)
    if status in (404, 410):
        return FileNotFoundError(f"{url!r}: no such object (HTTP {status})")
    if status in (401, 403):
        return PermissionError(f"{url!r}: access refused (HTTP {status}): check the credentials")
    if status is not None:
        return OSError(
            f"{url!r}: the server answered HTTP {status} ({getattr(cause, 'message', '')}), "
            "not the object: try again later"
        )
    return ConnectionError(
        f"{url!r}: cannot reach the server ({type(cause).__name__}: {cause}): is it running?"
    )


_VERSION_FIELDS = (
    "ETag",
    "etag",
    "LastModified",
    "Last-Modified",
    "last_modified",
    "mtime",
    "generation",
    "VersionId",
    "version_id",
    "md5Hash",
    "created",
)


def stamp(info: dict[str, Any]) -> dict[str, Any]:
    """What identifies one version of an object, from its ``info`` or listing row: its
    size and whatever of ETag, modification time, generation or version id it has."""
    out: dict[str, Any] = {"size": info.get("size")}
    for k in _VERSION_FIELDS:
        v = info.get(k)
        if v is not None:
            # one instant, however it is given (memory:// lists a float, describes a datetime)
            out[k] = str(v.timestamp() if hasattr(v, "timestamp") else v)
    return out


def identity(fs: Any, path: str, url: str) -> dict[str, Any]:
    """What identifies the object's current version: its size and whatever of ETag,
    modification time, generation or version id the server reports."""
    info = describe(fs, path, url)
    if info.get("type") == "directory":
        raise IsADirectoryError(f"{url!r} is a folder, not an archive")
    return {"url": url, **stamp(info)}


#: Validators that name one version of an object's bytes: a strong ETag, a version id,
#: a generation, a content hash. A modification time is not one: two versions written in
#: the same second (or clock tick) share it.
_STRONG = ("ETag", "etag", "generation", "VersionId", "version_id", "md5Hash")


def _versioned(ident: dict[str, Any]) -> bool:
    """Whether ``ident`` holds a strong validator (see :data:`_STRONG`); a weak ETag
    (``W/"..."``) is not one."""
    for k in _STRONG:
        v = ident.get(k)
        if v is not None and not str(v).startswith("W/"):
            return True
    return False


def trust_weak() -> bool:
    """Whether files of a folder tree on a server without a strong validator may be read
    (``$TENSORBOX_TRUST_WEAK_VALIDATORS=1``; archives need no such opt-in: their content
    is checked)."""
    return os.environ.get("TENSORBOX_TRUST_WEAK_VALIDATORS", "") not in ("", "0")


def strong_etag(ident: dict[str, Any]) -> str | None:
    """The object's ETag when it is a strong one (a reply carrying it vouches for its
    bytes), else None."""
    tag = ident.get("ETag", ident.get("etag"))
    return None if tag is None or str(tag).startswith("W/") else str(tag)


def coalesce(
    ranges: Sequence[tuple[int, int]], gap: int, limit: int = 1 << 62
) -> list[tuple[int, int, list[int]]]:
    """Byte ranges ``(start, end)`` merged when closer than ``gap`` (a merged range stays
    under ``limit`` bytes unless one range alone is longer): ``(start, end, indices of
    the ranges inside)``.

    >>> coalesce([(0, 10), (10, 20), (100, 110)], gap=0)
    [(0, 20, [0, 1]), (100, 110, [2])]
    >>> coalesce([(0, 10), (30, 40)], gap=64)
    [(0, 40, [0, 1])]
    >>> coalesce([(0, 10), (10, 20)], gap=0, limit=15)
    [(0, 10, [0]), (10, 20, [1])]
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    out: list[tuple[int, int, list[int]]] = []
    for i in order:
        s, e = ranges[i]
        if out and s - out[-1][1] <= gap and max(out[-1][1], e) - out[-1][0] <= limit:
            ps, pe, members = out[-1]
            out[-1] = (ps, max(pe, e), [*members, i])
        else:
            out.append((s, e, [i]))
    return out


class RangeCache:
    """A local disk cache of remote bytes, bounded, least recently used evicted first.

    Every file is named by a hash of its key (the URL, the object's identity and what
    part of it). Whole files (an archive's index, a ``meta.json``) are written under a
    temporary name and renamed into place, with a SHA-256 of their bytes in front: a
    reader sees a whole file or none, and a damaged one is dropped and fetched again.
    A leaf's file records which of its parts arrived inside itself (see
    :mod:`tensorbox._storage.remote_tree`). Use refreshes a file's modification time,
    which is the LRU order (shared by every process using the same folder). The bound
    holds for every file written here, leaves included: past it, the least recently
    used files are deleted (a tree that maps one keeps reading its pages).
    """

    def __init__(self, directory: str | None = None, max_bytes: int = 10 << 30) -> None:
        self.directory = (
            directory
            or os.environ.get("TENSORBOX_CACHE")
            or os.path.join(os.path.expanduser("~"), ".cache", "tensorbox", "remote")
        )
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._held = -1  # bytes held as of the last scan plus those written since (-1: unknown)

    def path_for(self, key: dict[str, Any]) -> str:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:40]
        return os.path.join(self.directory, digest + ".bin")

    def failure(self, err: OSError, url: str, path: str | None = None) -> OSError:
        """``err`` from writing the cache, as an error naming the cache file and the URL
        (a full disk: ENOSPC)."""
        where = path or self.directory
        return OSError(
            err.errno,
            f"{where}: cannot write the local cache of {url!r} ({err.strerror or err}): free "
            "space there, lower $TENSORBOX_CACHE_BYTES, point $TENSORBOX_CACHE elsewhere, or "
            "open with cache=False",
        )

    def get(self, key: dict[str, Any]) -> str | None:
        path = self.path_for(key)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        return path

    def put_file(self, key: dict[str, Any], tmp: str) -> str:
        """Move the finished file ``tmp`` (in this folder) into place under ``key``."""
        path = self.path_for(key)
        os.replace(tmp, path)
        self.added(os.path.getsize(path), keep=path)
        return path

    _MAGIC = b"TBXC1\n"

    def put_bytes(self, key: dict[str, Any], data: bytes, url: str) -> None:
        """Keep ``data`` under ``key``, with its SHA-256 (see :meth:`get_bytes`)."""
        tmp = None
        try:
            tmp = self.new_tmp()
            with open(tmp, "wb") as f:
                f.write(self._MAGIC + hashlib.sha256(data).digest() + data)
            self.put_file(key, tmp)
        except OSError as err:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise self.failure(err, url, tmp) from err

    def get_bytes(self, key: dict[str, Any]) -> bytes | None:
        """What :meth:`put_bytes` kept under ``key``, or None: absent, or damaged (a byte
        changed, cut short), in which case the file is dropped and the caller fetches
        the bytes again."""
        path = self.get(key)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            return None
        n = len(self._MAGIC)
        data = raw[n + 32 :]
        if raw[:n] != self._MAGIC or hashlib.sha256(data).digest() != raw[n : n + 32]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return None
        return data

    def new_tmp(self) -> str:
        os.makedirs(self.directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".part-")
        os.close(fd)
        return tmp

    def added(self, nbytes: int, keep: str | None = None) -> None:
        """``nbytes`` more are held (a file put, a leaf's parts written): evict when the
        bound is passed. Files are scanned only then, down to 7/8 of the bound, so a
        steady stream of small writes costs one scan per eighth of the bound."""
        with self._lock:
            if self._held >= 0:
                self._held += nbytes
                if self._held <= self.max_bytes:
                    return
        self.evict(keep)

    def evict(self, keep: str | None = None) -> None:
        """Delete the least recently used files until at most 7/8 of the bound is held
        (``keep`` last of all, and only when it alone passes the bound)."""
        with self._lock:
            files = []
            try:
                found = list(os.scandir(self.directory))
            except FileNotFoundError:
                self._held = 0
                return
            for e in found:
                if e.name.endswith((".bin", ".have")):
                    try:
                        st = e.stat()
                    except FileNotFoundError:  # another process evicted it
                        continue
                    # a leaf's file is sparse until every part of it was fetched
                    used = min(st.st_size, getattr(st, "st_blocks", st.st_size // 512 + 1) * 512)
                    last = e.path == keep or e.path[: -len(".have")] + ".bin" == keep
                    files.append((last, st.st_mtime, used, e.path))
            total = sum(f[2] for f in files)
            target = self.max_bytes - self.max_bytes // 8 if total > self.max_bytes else total
            for _, _, size, path in sorted(files):
                if total <= target:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # a process mapping it keeps its pages
                total -= size
            self._held = total


_default: RangeCache | None = None


def default_cache() -> RangeCache:
    """The process's cache (``$TENSORBOX_CACHE`` or ``~/.cache/tensorbox/remote``, 10 GiB;
    ``TENSORBOX_CACHE_BYTES`` changes the bound)."""
    global _default
    if _default is None:
        _default = RangeCache(max_bytes=int(os.environ.get("TENSORBOX_CACHE_BYTES", 10 << 30)))
    return _default


def read_ranges(
    fs: Any,
    path: str,
    url: str,
    ranges: Sequence[tuple[int, int]],
    gap: int = 1 << 20,
    limit: int = 1 << 62,
) -> list[bytes]:
    """The bytes of each ``(start, end)`` range, adjacent ranges read by one request."""
    return read_many(fs, [(path, url, s, e) for s, e in ranges], gap, limit)


def _groups(
    ranges: Sequence[tuple[str, str, int, int]], gap: int, limit: int
) -> list[tuple[str, str, int, int, list[int]]]:
    """The requests that read ``ranges``: ``(path, url, start, end, members)``."""
    by_path: dict[str, list[int]] = {}
    for i, r in enumerate(ranges):
        by_path.setdefault(r[0], []).append(i)
    groups: list[tuple[str, str, int, int, list[int]]] = []
    for path, members in by_path.items():
        url = ranges[members[0]][1]
        for start, end, inner in coalesce(
            [(ranges[i][2], ranges[i][3]) for i in members], gap, limit
        ):
            groups.append((path, url, start, end, [members[j] for j in inner]))
    return groups


def read_many(
    fs: Any, ranges: Sequence[tuple[str, str, int, int]], gap: int = 1 << 20, limit: int = 1 << 62
) -> list[bytes]:
    """The bytes of each ``(path, url, start, end)``: ranges of one object closer than
    ``gap`` read by one request, every request of the call in flight at once (fsspec's
    ``cat_ranges``). A failed call is tried :data:`ATTEMPTS` times; an error names the URL."""
    groups = _groups(ranges, gap, limit)
    out: list[bytes] = [b""] * len(ranges)
    if not groups:
        return out
    blobs = _cat_ranges(fs, groups)
    for (_, _, start, _, members), blob in zip(groups, blobs, strict=True):
        for i in members:
            s, e = ranges[i][2], ranges[i][3]
            out[i] = blob[s - start : e - start]
    return out


#: A streamed reply's bytes are handed on about this many at a time (one write each).
STREAM_CHUNK = 1 << 20

#: ``sink(i, offset, buffers)``: bytes of range ``i``, ``offset`` bytes into it.
Sink = Callable[[int, int, list[memoryview]], None]


def read_into(
    fs: Any,
    ranges: Sequence[tuple[str, str, int, int]],
    sink: Sink,
    gap: int = 0,
    limit: int = 1 << 62,
    lanes: int = 4,
    etags: dict[str, str | None] | None = None,
    sizes: dict[str, int] | None = None,
) -> bool:
    """Read each ``(path, url, start, end)`` range, handing its bytes on as they arrive:
    ``sink(i, offset, buffers)`` for the bytes of range ``i`` from ``offset`` on, every
    byte of every range once, in order within a range. Ranges of one object closer than
    ``gap`` are one request (at most ``limit`` bytes unless one range alone is longer);
    ``lanes`` requests are in flight together.

    From S3 (s3fs) and HTTP(S) servers the replies are **streamed**: a request's bytes
    are handed on about every :data:`STREAM_CHUNK` bytes as they come off the network,
    from fsspec's event-loop thread, never gathered into one object, so writing them
    overlaps the transfer. A request that fails midway is resumed where it stopped
    (:data:`ATTEMPTS` tries in all). Other filesystems hand on each request's bytes
    whole once it is done (fsspec's ``cat_ranges``), from the calling thread. Calls to
    ``sink`` never overlap; an exception it raises stops the read and is raised here.
    Errors name the URL, as :func:`read_many`'s do.

    ``etags`` (path -> the ETag the object had when its tree was opened): True comes
    back when every reply was streamed with that ETag, so that the bytes are known to be
    that version's (the objects need no other check); False when some were not (not
    streamed, no ETag known or sent, or another one: the caller asks the server).
    ``sizes`` (path -> the object's size when its tree was opened): a streamed reply
    whose ``Content-Range`` names another size, or other bytes than those asked for, is
    an :class:`ReplyMismatch`, never handed on.

    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe("/r/obj", bytes(range(100)))
    >>> got = {}
    >>> obj = ("/r/obj", "memory://r/obj")
    >>> read_into(fs, [(*obj, 65, 68), (*obj, 90, 92)],
    ...           lambda i, at, bufs: got.setdefault(i, []).append((at, b"".join(bufs))))
    False
    >>> got
    {0: [(0, b'ABC')], 1: [(0, b'Z[')]}
    """
    groups = _groups(ranges, gap, limit)
    if not groups:
        return True
    opener = _opener(fs)
    if opener is not None:
        vouched = _stream(fs, opener, ranges, groups, sink, lanes, etags or {}, sizes or {})
        return vouched >= {g[0] for g in groups}
    import concurrent.futures

    lanes = max(1, min(lanes, len(groups)))
    split = [groups[i::lanes] for i in range(lanes)]

    def hand_on(lane: list[_Group], blobs: list[bytes]) -> None:
        for (_, _, start, _, members), blob in zip(lane, blobs, strict=True):
            view = memoryview(blob)
            for i in members:
                sink(i, 0, [view[ranges[i][2] - start : ranges[i][3] - start]])

    if lanes == 1:  # one call: no thread for it
        hand_on(split[0], _cat_ranges(fs, split[0]))
        return False
    pool = concurrent.futures.ThreadPoolExecutor(lanes, thread_name_prefix="tensorbox-read")
    try:
        futures = {pool.submit(_cat_ranges, fs, lane): lane for lane in split}
        for fut in concurrent.futures.as_completed(futures):
            hand_on(futures[fut], fut.result())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return False


_Group = tuple[str, str, int, int, list[int]]
#: ``await read()`` gives the reply's next bytes (b"" at its end); ``close()`` drops it.
#: The reply's ETag (None: it sent none) comes with them.
_Body = tuple[Callable[[], Awaitable[bytes]], Callable[[], Any], str | None]


class ReplyMismatch(OSError):
    """A reply that is not the bytes asked for (another status, ``Content-Range`` or
    length): never served, never retried."""


def _check_range(status: int, header: str | None, length: int | None, rng: _Range) -> None:
    """Raise :class:`ReplyMismatch` unless a reply (HTTP ``status``, ``Content-Range``
    ``header``, ``length`` bytes announced) is bytes ``start..end`` of an object of
    ``total`` bytes (None: not known), as asked."""
    start, end, total = rng
    asked = f"bytes {start}..{end}"
    if status == 200:  # the whole object: acceptable when it is exactly what was asked
        if start == 0 and length == end and total in (None, end):
            return
        raise ReplyMismatch(
            f"the server answered {asked} with the whole object ({length} bytes, HTTP 200): "
            "it does not honour Range requests"
        )
    if status != 206:
        raise ReplyMismatch(f"the server answered {asked} with HTTP {status}")
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", header or "")
    if m is None or (int(m.group(1)), int(m.group(2)) + 1) != (start, end):
        raise ReplyMismatch(
            f"the server answered {asked} with Content-Range {header!r}: other bytes than "
            "those asked for"
        )
    if total is not None and m.group(3) != "*" and int(m.group(3)) != total:
        raise ReplyMismatch(
            f"the server answered {asked} with Content-Range {header!r}: an object of "
            f"{m.group(3)} bytes, not the {total} it had when the tree was opened (replaced?)"
        )
    if length is not None and length != end - start:
        raise ReplyMismatch(f"the server answered {asked} with {length} bytes")


#: ``(start, end, the object's size or None)`` of a request.
_Range = tuple[int, int, "int | None"]


def _opener(fs: Any) -> Callable[[Any, str, _Range], Awaitable[_Body]] | None:
    """How to stream a range of ``fs``'s objects, or None (no streaming for it)."""
    if getattr(fs, "loop", None) is None:
        return None
    module = type(fs).__module__
    if module.startswith("s3fs") and hasattr(fs, "_call_s3"):
        return _s3_body
    if module.startswith("fsspec.implementations.http") and hasattr(fs, "set_session"):
        return _http_body
    return None


async def _s3_body(fs: Any, path: str, rng: _Range) -> _Body:
    start, end, _ = rng
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    reply = await fs._call_s3(
        "get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **extra
    )
    body = reply["Body"]
    status = reply.get("ResponseMetadata", {}).get("HTTPStatusCode", 206)
    try:
        _check_range(status, reply.get("ContentRange"), reply.get("ContentLength"), rng)
    except BaseException:
        body.close()
        raise
    content = getattr(getattr(body, "_raw_stream", None), "content", None)
    if content is not None and hasattr(content, "readany"):
        return content.readany, body.close, reply.get("ETag")  # aiohttp's chunks: no copy
    return (lambda: body.read(STREAM_CHUNK)), body.close, reply.get("ETag")


async def _http_body(fs: Any, path: str, rng: _Range) -> _Body:
    start, end, _ = rng
    kw = dict(getattr(fs, "kwargs", None) or {})
    headers = dict(kw.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{end - 1}"
    session = await fs.set_session()
    reply = await session.get(fs.encode_url(path), headers=headers, **kw)
    try:
        if reply.status == 404:
            raise FileNotFoundError(path)
        reply.raise_for_status()  # aiohttp's error: its status is mapped by the caller
        _check_range(reply.status, reply.headers.get("Content-Range"), reply.content_length, rng)
    except BaseException:
        reply.release()
        raise
    return reply.content.readany, reply.release, reply.headers.get("ETag")


class _SinkFailed(Exception):
    """What the sink raised, carried out of the read untouched (never retried)."""

    def __init__(self, err: BaseException) -> None:
        self.err = err


def _stream(
    fs: Any,
    opener: Callable[[Any, str, _Range], Awaitable[_Body]],
    ranges: Sequence[tuple[str, str, int, int]],
    groups: list[_Group],
    sink: Sink,
    lanes: int,
    etags: dict[str, str | None],
    sizes: dict[str, int],
) -> set[str]:
    """Stream ``groups``; the paths whose every reply's ETag matched ``etags``."""
    import asyncio

    from fsspec.asyn import sync

    vouched: set[str] = set()
    unvouched: set[str] = set()

    def hand_on(members: list[int], at: int, bufs: list[bytes]) -> None:
        """``bufs``: the object's bytes from ``at`` on, spread over the ranges inside."""
        out: dict[int, tuple[int, list[memoryview]]] = {}
        for b in bufs:
            view, a = memoryview(b), at
            at += len(view)
            for i in members:
                s, e = ranges[i][2], ranges[i][3]
                lo, hi = max(s, a), min(e, at)
                if lo < hi:
                    out.setdefault(i, (lo - s, []))[1].append(view[lo - a : hi - a])
        try:
            for i, (offset, views) in out.items():
                sink(i, offset, views)
        except BaseException as err:
            raise _SinkFailed(err) from err

    async def one(group: _Group, lane: asyncio.Semaphore) -> None:
        path, url, start, end, members = group
        got = 0  # bytes handed on
        async with lane:
            for attempt in range(ATTEMPTS):
                try:
                    read, close, tag = await opener(fs, path, (start + got, end, sizes.get(path)))
                    try:
                        # Another ETag than the strong one the tree was opened at: the
                        # object was replaced, and these bytes are never written.
                        known = etags.get(path)
                        if known is not None and tag is not None and tag != known:
                            raise ReplyMismatch(
                                f"the object changed since the tree was opened (it was "
                                f"replaced: ETag {tag} now, {known} then): open it again to "
                                "read the new tree"
                            )
                        (vouched if known is not None and tag == known else unvouched).add(path)
                        pending: list[bytes] = []
                        held = 0
                        while True:
                            chunk = await read()
                            if chunk and start + got + held + len(chunk) > end:
                                raise OSError(f"more than the {end - start} bytes asked for")
                            if chunk:
                                pending.append(chunk)
                                held += len(chunk)
                            if held and (held >= STREAM_CHUNK or not chunk):
                                hand_on(members, start + got, pending)
                                got, pending, held = got + held, [], 0
                            if not chunk:
                                break
                    finally:
                        close()
                    if got != end - start:
                        raise OSError(
                            f"{url!r}: bytes {start}..{end} came back as {got} bytes (the "
                            "object is shorter than its tree says, or the server cut the reply)"
                        )
                    return
                except _SinkFailed:
                    raise
                except Exception as err:
                    mapped = _refusal(err, url)
                    if mapped is not None:
                        raise mapped from err
                    if attempt + 1 == ATTEMPTS:
                        raise OSError(
                            f"{url!r}: reading bytes {start}..{end} failed {ATTEMPTS} times "
                            f"({type(err).__name__}: {err})"
                        ) from err
                    await asyncio.sleep(0.1 * 4**attempt)

    async def every() -> None:
        lane = asyncio.Semaphore(max(1, lanes))
        tasks = [asyncio.ensure_future(one(g, lane)) for g in groups]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    try:
        sync(fs.loop, every)
    except _SinkFailed as failed:
        raise failed.err from None
    return vouched - unvouched


def _refusal(err: BaseException, where: str) -> BaseException | None:
    """The error to raise at once for ``err`` (a missing object, refused credentials),
    or None when trying again may help."""
    if isinstance(err, ReplyMismatch):
        return ReplyMismatch(f"{where!r}: {err}")
    if isinstance(err, FileNotFoundError):
        return FileNotFoundError(f"{where!r}: no such object ({err})")
    if isinstance(err, PermissionError):
        return PermissionError(f"{where!r}: access refused: check the credentials ({err})")
    status = getattr(err, "status", None)  # each filesystem raises its own types
    if status in (401, 403):
        return PermissionError(f"{where!r}: access refused (HTTP {status}): check the credentials")
    if status == 404:
        return FileNotFoundError(f"{where!r}: no such object (HTTP 404)")
    return None


def _cat_ranges(fs: Any, groups: list[tuple[str, str, int, int, list[int]]]) -> list[bytes]:
    import time

    urls = sorted({g[1] for g in groups})
    where = urls[0] if len(urls) == 1 else f"{urls[0]} (and {len(urls) - 1} more objects)"
    for attempt in range(ATTEMPTS):
        try:
            blobs = fs.cat_ranges(
                [g[0] for g in groups],
                [g[2] for g in groups],
                [g[3] for g in groups],
                on_error="return",
            )
            for g, blob in zip(groups, blobs, strict=True):
                if isinstance(blob, BaseException):
                    raise blob
                if len(blob) != g[3] - g[2]:
                    raise OSError(
                        f"{g[1]!r}: bytes {g[2]}..{g[3]} came back as {len(blob)} bytes (the "
                        "object is shorter than its tree says, or the server cut the reply)"
                    )
            return list(blobs)
        except Exception as err:  # each filesystem raises its own types (aiohttp, botocore...)
            mapped = _refusal(err, where)
            if mapped is not None:
                raise mapped from err
            if attempt + 1 == ATTEMPTS:
                raise OSError(
                    f"{where!r}: reading {len(groups)} range(s) failed {ATTEMPTS} times "
                    f"({type(err).__name__}: {err})"
                ) from err
            time.sleep(0.1 * 4**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def read_whole(fs: Any, path: str, url: str, limit: int) -> bytes:
    """The bytes of a small object (a ``meta.json``), at most ``limit``; errors name the URL."""
    info = describe(fs, path, url)
    size = int(info.get("size") or 0)
    if size > limit:
        raise OSError(f"{url!r} is {size} bytes, over the {limit} a description may take")
    return read_many(fs, [(path, url, 0, size)])[0] if size else b""


def _local_tree_id(path: str) -> str:
    """:func:`~tensorbox._storage.remote_tree.tree_id` of the archive file at ``path``."""
    import mmap

    from tensorbox._storage.archive import zip as _zip
    from tensorbox._storage.remote_tree import tree_id

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return tree_id(_zip.read_index(buf, path), buf)


def fetch_archive(
    url: str, storage_options: dict[str, Any] | None = None, cache: RangeCache | None = None
) -> str:
    """A local file holding the archive at ``url`` now, from the cache when the object is
    unchanged there (the same identity and the same index: see
    :func:`~tensorbox._storage.remote_tree.tree_id`), else fetched in ranges into the
    cache. The fetched file's index must be the one read first, and the object's identity
    is read again after the fetch: one replaced meanwhile is an error, never a file
    mixing two versions."""
    from tensorbox._storage import remote_tree

    cache = cache or default_cache()
    store = remote_tree.open_url(url, storage_options, cache=True, kept=cache)
    if not isinstance(store, remote_tree.RemoteArchiveStore):
        raise IsADirectoryError(f"{url!r} is a folder, not an archive")
    fs, path = store.src.fs, store.src.path
    ident, size = store.ident, store.buf.size
    key = {"object": ident, "tree": store.tree, "part": "whole"}
    hit = cache.get(key)
    if hit is not None and os.path.getsize(hit) == size:
        return hit
    tmp = cache.new_tmp()
    try:
        try:
            with open(tmp, "wb") as f:
                starts = list(range(0, size, _CHUNK))
                for i in range(0, len(starts), 8):  # eight requests in flight, 128 MiB at most
                    batch = [(s, min(s + _CHUNK, size)) for s in starts[i : i + 8]]
                    for blob in read_ranges(fs, path, url, batch, gap=0):
                        f.write(blob)
        except OSError as err:
            if isinstance(err, (ConnectionError, FileNotFoundError, PermissionError)) or (
                str(url) in str(err)
            ):
                raise
            raise cache.failure(err, url, tmp) from err
        if _local_tree_id(tmp) != store.tree or (
            _versioned(ident) and identity(fs, path, url) != ident
        ):
            raise OSError(f"{url!r}: the object was replaced while it was being read; read again")
        return cache.put_file(key, tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def refuse(what: str, url: str, advice: str) -> None:
    raise ValueError(f"{what}({url!r}): {advice}")


_FOLDER_ADVICE = (
    "a folder tree cannot be saved to object storage: its generations are committed by "
    "a rename, which object stores do not have, so a reader could see a mix of two "
    "saves. Save one archive instead, which appears whole or not at all: "
    "memmap(url, archive=True)"
)


def save_target(url: str, sub: str | None) -> str:
    """A new local file in the cache where an archive save to ``url`` is written before
    :func:`upload` (refusals first: ``URL::DIR``, read-only schemes)."""
    if sub is not None:
        refuse(
            "memmap", f"{url}{_SEP}{sub}", "an archive is saved whole; drop '::' and what follows"
        )
    scheme = url.partition("://")[0].lower()
    if scheme in _READ_ONLY:
        refuse(
            "memmap", url, "http(s) URLs are read-only; save to object storage (s3://, gs://...)"
        )
    tmp = default_cache().new_tmp()
    os.unlink(tmp)
    return tmp


def upload(tmp: str, url: str, storage_options: dict[str, Any] | None = None) -> str:
    """Put the archive written at ``tmp`` to ``url`` as one object (one put: readers see
    the old object or the new one, whole); the local copy, kept in the cache.

    The copy is kept under the identity the server reports after the put *and* the
    archive's own tree id (:func:`~tensorbox._storage.remote_tree.tree_id`): should
    another writer's upload land between this put and that look, its identity is never
    tied to these bytes, since a later read compares the object's index with the
    copy's."""
    cache = default_cache()
    try:
        fs, path = filesystem(url, storage_options)
        try:
            fs.put_file(tmp, path)
        except PermissionError as err:
            raise PermissionError(
                f"{url!r}: the upload was refused, nothing was written there: check the "
                f"credentials ({err})"
            ) from err
        except Exception as err:  # botocore, aiohttp...: their own types (a dead endpoint)
            raise OSError(
                f"{url!r}: the upload failed, nothing was written there "
                f"({type(err).__name__}: {err})"
            ) from err
        ident = identity(fs, path, url)
        if ident.get("size") != os.path.getsize(tmp):
            return tmp  # not these bytes (another upload won): kept out of the cache
        return cache.put_file({"object": ident, "tree": _local_tree_id(tmp), "part": "whole"}, tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_mode(prefix: str, mode: str | None) -> None:
    """A tree behind a URL opens read-only: ``mode`` None or ``"r"``."""
    if mode not in (None, "r"):
        refuse(
            "load_memmap",
            prefix,
            f"mode={mode!r}: a tree behind a URL opens read-only (mode='r'); "
            "save a changed copy with memmap(url, archive=True)",
        )


def folder_refusal(what: str, prefix: str) -> None:
    """The error for a folder save (``memmap``, ``memmap_``, ``memmap_like``) to a URL."""
    refuse(what, prefix, _FOLDER_ADVICE)
