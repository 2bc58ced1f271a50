"""Transports: where a tree's bytes are, behind a URL.

A :class:`Transport` is one small protocol: ranged reads (several ranges per call,
coalesced here in the base: ranges of one object closer than ``gap`` are one request),
``describe``/``identity`` (the object's size and whatever validator the server gives:
ETag, version id, generation, modification time), ``list``, ``put_file``, and capability
flags (``writable``, ``mappable``, ``listable``, ``transactional``). Every reply is
checked (its status, ``Content-Range`` and length), and a reply of another version than
the one asked for is refused before any of its bytes are handed on.

:class:`FsspecTransport` reaches ``s3://``, ``gs://``, ``az://``, ``http(s)://``,
``memory://`` and ``file://`` through fsspec. Its replies from S3 (s3fs) and HTTP(S)
are streamed through a fast path on s3fs's and aiohttp's objects (:func:`_opener`),
feature-detected here and nowhere else; any other filesystem, or one whose internals
changed, goes through fsspec's public ``cat_ranges`` (tested as such). An obstore
transport is :class:`tensorbox._storage.remote.obstore.ObstoreTransport`.

A path that looks like a URL (``scheme://...``) is never taken for a local path: a
known scheme goes to fsspec (its package missing: an ``ImportError`` naming the
extra to install), an unknown one is a ``ValueError``.

>>> split_url("/data/ds.tbx") is None, split_url("memory://bucket/ds.tbx")
(True, ('memory', 'memory://bucket/ds.tbx', None))
>>> split_url("s3://bucket/ds.tbx::train")
('s3', 's3://bucket/ds.tbx', 'train')
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

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
    url = scheme + url[len(scheme) :]  # schemes are case-insensitive; fsspec's table is not
    return scheme, url, (sub or None) if sep else None


def is_url(prefix: Any) -> bool:
    """True for ``scheme://...`` (an unknown scheme raises ``ValueError``)."""
    return split_url(prefix) is not None


_USERINFO = re.compile(r"(?<=://)[^/@\s'\"]*@")


def shown(text: str, url: str = "") -> str:
    """``text`` (a URL, or a message holding URLs) with each URL's user information
    (``user:password@``) masked: what error messages and cache keys carry. ``url``: its
    user information is masked wherever it appears (a library's error quoting it bare).

    >>> shown("s3://key:secret@bucket/x.tdz: the upload failed")
    's3://***@bucket/x.tdz: the upload failed'
    """
    found = _USERINFO.search(url)
    if found is not None and len(found.group()) > 1:
        text = text.replace(found.group(), "***@")
    return _USERINFO.sub("***@", text)


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
                f"{shown(url)!r}: {scheme}:// URLs need the {needed!r} package: "
                f"pip install 'tensorbox[{extra}]'"
            )
    import fsspec.core

    options = _with_timeouts(scheme, dict(storage_options or {}))
    fs, path = fsspec.core.url_to_fs(found[1], **options)
    return fs, path


def timeout() -> float:
    """Seconds a network read may stall (``$TENSORBOX_REMOTE_TIMEOUT``, 60 by default)."""
    from tensorbox._storage.remote.cache import env_number

    return float(env_number("TENSORBOX_REMOTE_TIMEOUT", 60, float))


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
        raise PermissionError(
            shown(f"{url!r}: access refused: check the credentials ({err})", path)
        ) from err
    except Exception as err:  # aiohttp, botocore...: their own types
        status = getattr(err, "status", None)
        if status in (401, 403):
            raise PermissionError(
                f"{url!r}: access refused (HTTP {status}): check the credentials"
            ) from err
        raise OSError(
            shown(f"{url!r}: cannot read the object's description ({err})", path)
        ) from err
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
    if status:
        return OSError(
            f"{url!r}: the server answered HTTP {status} ({getattr(cause, 'message', '')}), "
            "not the object: try again later"
        )
    if status is not None:  # an answer with no status of its own: redirects in a loop...
        return OSError(f"{url!r}: the request failed ({type(cause).__name__}): not the object")
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


def read_into(fs: Any, ranges: Sequence[tuple[str, str, int, int]], sink: Sink, **kw: Any) -> bool:
    """Read each ``(path, url, start, end)`` range from the fsspec filesystem ``fs``,
    handing its bytes on as they arrive: ``sink(i, offset, buffers)`` for the bytes of
    range ``i`` from ``offset`` on, every byte of every range once, in order within a
    range. The keywords are :meth:`Transport.read_into`'s: ranges of one object closer
    than ``gap`` are one request (at most ``limit`` bytes unless one range alone is
    longer); ``lanes`` requests are in flight together.

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
    return _OnFilesystem(fs).read_into(ranges, sink, **kw)


def _read_groups(fs: Any, reads: Reads) -> bool:
    """:func:`read_into` once its ranges are coalesced into ``groups``."""
    ranges, groups, sink, lanes, etags, sizes = reads
    opener = _opener(fs)
    if opener is not None:
        vouched = _stream(fs, opener, ranges, groups, sink, lanes, etags, sizes)
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


class Reads(NamedTuple):
    """One :func:`read_into` call once its ranges are coalesced into ``groups`` (the
    requests): what every transport's reader takes."""

    ranges: Sequence[tuple[str, str, int, int]]
    groups: list[_Group]
    sink: Sink
    lanes: int
    etags: dict[str, str | None]
    sizes: dict[str, int]


#: ``await read()`` gives the reply's next bytes (b"" at its end); ``close()`` drops it.
#: The reply's ETag (None: it sent none) comes with them.
_Body = tuple[Callable[[], Awaitable[bytes]], Callable[[], Any], str | None]


#: ``(start, end, the object's size or None)`` of a request.
_Range = tuple[int, int, "int | None"]


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


def spread(
    ranges: Sequence[tuple[str, str, int, int]],
    members: list[int],
    at: int,
    bufs: Sequence[Any],
    sink: Sink,
) -> None:
    """Hand ``bufs`` (an object's bytes from ``at`` on, a request's reply) to ``sink``,
    spread over the ranges ``members`` of that request."""
    out: dict[int, tuple[int, list[memoryview]]] = {}
    for b in bufs:
        view, a = memoryview(b), at
        at += len(view)
        for i in members:
            s, e = ranges[i][2], ranges[i][3]
            lo, hi = max(s, a), min(e, at)
            if lo < hi:
                out.setdefault(i, (lo - s, []))[1].append(view[lo - a : hi - a])
    for i, (offset, views) in out.items():
        sink(i, offset, views)


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
        try:
            spread(ranges, members, at, bufs, sink)
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
                    what = f"reading bytes {start}..{end}"
                    await asyncio.sleep(_retry_after(err, url, attempt, what))

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


def _retry_after(err: Exception, where: str, attempt: int, what: str) -> float:
    """The retry rule of a read that failed with ``err`` on try ``attempt`` (from 0): a
    refusal (see :func:`_refusal`) is raised at once; the last of :data:`ATTEMPTS` tries
    raises an OSError naming ``where`` and ``what`` was done; else the seconds to wait
    before the next try (backing off)."""
    mapped = _refusal(err, where)
    if mapped is not None:
        raise mapped from err
    if attempt + 1 == ATTEMPTS:
        raise OSError(
            f"{where!r}: {what} failed {ATTEMPTS} times ({type(err).__name__}: {err})"
        ) from err
    return 0.1 * 4.0**attempt


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
            time.sleep(_retry_after(err, where, attempt, f"reading {len(groups)} range(s)"))
    raise AssertionError("unreachable")  # pragma: no cover


def read_whole(fs: Any, path: str, url: str, limit: int) -> bytes:
    """The bytes of a small object (a ``meta.json``), at most ``limit``; errors name the URL."""
    info = describe(fs, path, url)
    size = int(info.get("size") or 0)
    if size > limit:
        raise OSError(f"{url!r} is {size} bytes, over the {limit} a description may take")
    return read_many(fs, [(path, url, 0, size)])[0] if size else b""


# ---------------------------------------------------------------- the protocol


class Transport:
    """Where one tree's objects are: the object (an archive) or folder at :attr:`url`,
    named inside by ``rel`` paths ("" is the URL itself).

    A subclass implements :meth:`describe`, :meth:`_read`, :meth:`list` and
    :meth:`put_file`; ranged reads are coalesced here, and :meth:`identity`,
    :meth:`read_many` and :meth:`read_whole` are built on those.
    """

    #: Capabilities: objects can be written; read in place (a local mapping); listed;
    #: changed by a transaction (several objects at once).
    writable = True
    mappable = False
    listable = True
    transactional = False

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        # ``url`` names the object in messages and cache keys, its password masked;
        # ``real`` (with it) is what connects and what a pickled reference carries
        self.url, self.real, self.options = shown(url), url, options

    def path_of(self, rel: str) -> str:
        """The transport's own name of ``rel`` (what :meth:`read_into` ranges hold)."""
        return f"{self.url.rstrip('/')}/{rel}" if rel else self.url

    def url_of(self, rel: str) -> str:
        return f"{self.url.rstrip('/')}/{rel}" if rel else self.url

    def describe(self, rel: str) -> dict[str, Any]:
        """The object's size, ``type`` ("file" or "directory") and validators; errors name
        the URL (a missing object: ``FileNotFoundError``; a server that cannot be reached:
        ``ConnectionError``)."""
        raise NotImplementedError

    def identity(self, rel: str = "") -> dict[str, Any]:
        """What identifies the object's current version: its size and validators."""
        info = self.describe(rel)
        if info.get("type") == "directory":
            raise IsADirectoryError(f"{self.url_of(rel)!r} is a folder, not an archive")
        return {"url": self.url_of(rel), **stamp(info)}

    def read_into(
        self,
        ranges: Sequence[tuple[str, str, int, int]],
        sink: Sink,
        gap: int = 0,
        limit: int = 1 << 62,
        lanes: int = 4,
        etags: dict[str, str | None] | None = None,
        sizes: dict[str, int] | None = None,
    ) -> bool:
        """Read each ``(path, url, start, end)``, handing its bytes to ``sink`` as they
        arrive; ranges of one object closer than ``gap`` are one request. True when every
        reply carried the strong ETag ``etags`` names for its object (see
        :func:`read_into`)."""
        groups = _groups(ranges, gap, limit)
        if not groups:
            return True
        return self._read(Reads(ranges, groups, sink, lanes, etags or {}, sizes or {}))

    def _read(self, reads: Reads) -> bool:
        raise NotImplementedError

    def read_many(
        self, ranges: Sequence[tuple[str, str, int, int]], gap: int = 1 << 20
    ) -> list[bytes]:
        """The bytes of each ``(path, url, start, end)``."""
        out = [bytearray() for _ in ranges]

        def keep(i: int, at: int, bufs: list[memoryview]) -> None:
            for b in bufs:
                out[i] += b

        self.read_into(ranges, keep, gap)
        return [bytes(b) for b in out]

    def read_whole(self, rel: str, limit: int) -> bytes:
        """The bytes of a small object (a ``meta.json``), at most ``limit``."""
        url = self.url_of(rel)
        size = int(self.describe(rel).get("size") or 0)
        if size > limit:
            raise OSError(f"{url!r} is {size} bytes, over the {limit} a description may take")
        return self.read_many([(self.path_of(rel), url, 0, size)])[0] if size else b""

    def list(self, rel: str) -> list[dict[str, Any]] | None:
        """The objects and folders directly under ``rel`` (``name``, ``size``, ``type``
        and validators), or None where the server cannot list."""
        raise NotImplementedError

    def put_file(self, local: str, rel: str = "", create: bool = False) -> dict[str, Any] | None:
        """Upload the file ``local`` as one object; the identity the upload's reply gives
        (ties the object to these bytes), or None when the transport returns none.

        ``create``: only where no object is there yet (``existsok=False``), a conditional
        put where the transport has one (``FileExistsError`` when an object is there);
        elsewhere the caller's look before the put is the only check."""
        raise NotImplementedError


class _OnFilesystem(Transport):
    """Reads from an fsspec filesystem already made (:func:`read_into`'s)."""

    def __init__(self, fs: Any) -> None:
        super().__init__("")
        self.fs = fs

    def _read(self, reads: Reads) -> bool:
        return _read_groups(self.fs, reads)


class FsspecTransport(Transport):
    """A URL through fsspec's public API (its filesystem made again in a forked child:
    fsspec's event loop does not survive a fork)."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        super().__init__(url, options)
        self._pid = -1
        self._fs: Any = None
        self.path = ""
        scheme = url.partition("://")[0].lower()
        self.writable = scheme not in _READ_ONLY
        self.listable = scheme not in _READ_ONLY
        self.fs  # noqa: B018 - made now: a missing package or a bad URL raises here

    @property
    def fs(self) -> Any:
        if self._pid != os.getpid():
            self._fs, self.path = filesystem(self.real, self.options)
            self._pid = os.getpid()
        return self._fs

    def path_of(self, rel: str) -> str:
        self.fs  # noqa: B018
        return f"{self.path.rstrip('/')}/{rel}" if rel else self.path

    def describe(self, rel: str) -> dict[str, Any]:
        return describe(self.fs, self.path_of(rel), self.url_of(rel))

    def _read(self, reads: Reads) -> bool:
        return _read_groups(self.fs, reads)

    def list(self, rel: str) -> list[dict[str, Any]] | None:
        try:
            rows = self.fs.ls(self.path_of(rel), detail=True)
        except (NotImplementedError, FileNotFoundError, ValueError, OSError):
            return None  # a server that does not list (plain HTTP)
        return [{**r, "name": str(r["name"]).rstrip("/").rpartition("/")[2]} for r in rows]

    def put_file(self, local: str, rel: str = "", create: bool = False) -> dict[str, Any] | None:
        fs, kwargs = self.fs, dict[str, Any]()
        if create and "mode" in inspect.signature(fs.put_file).parameters:
            # fsspec's mode="create" (FileExistsError when an object is there): s3fs sends
            # If-None-Match: * (atomic); fsspec's default looks first (not atomic)
            kwargs["mode"] = "create"
        if getattr(fs, "async_impl", False):
            # A deadline: s3fs's put waits for the server's "100 Continue" with none of
            # its own (a server that accepts and never answers hangs it forever). One
            # read timeout per started 8 MiB (a slower link: raise the timeout).
            kwargs["timeout"] = timeout() * (1 + os.path.getsize(local) // (8 << 20))
        fs.put_file(local, self.path_of(rel), **kwargs)
        return None  # fsspec's put returns nothing to tie the object to these bytes
