"""The obstore transport: ``s3://``, ``gs://``, ``az://`` and ``http(s)://`` through
`obstore <https://developmentseed.org/obstore>`_ (Rust's ``object_store``), one class.

Chosen with ``storage_options={"transport": "obstore", ...}`` (or
``$TENSORBOX_REMOTE_TRANSPORT=obstore``); the other options go to
``obstore.store.from_url`` (``config=``, ``client_options=``, ``retry_config=``, or
config keys such as ``endpoint``, ``access_key_id``, ``region``). Every ranged read of
an object whose strong ETag is known is a conditional request (``If-Match``): a
replaced object answers 412, never other bytes. Each reply's range, object size and
ETag are checked before its bytes are handed on, and an upload's reply (its ETag and
version) is the identity the saved copy is kept under.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tensorbox._storage.remote.transport import (
    _READ_ONLY,
    STREAM_CHUNK,
    Reads,
    ReplyMismatch,
    Transport,
    _Group,
    _SinkFailed,
    split_url,
    spread,
)

if TYPE_CHECKING:
    from obstore import GetOptions

__all__ = ["ObstoreTransport"]

#: The largest archive an ``existsok=False`` save puts conditionally through obstore (the
#: put is one request that holds the file in memory).
_CREATE_MAX = 1 << 30


def _error(err: BaseException, url: str) -> BaseException:
    """obstore's error as the built-in one users catch, naming the URL."""
    kind = type(err).__name__
    if isinstance(err, FileNotFoundError) or kind == "NotFoundError":
        return FileNotFoundError(f"{url!r}: no such object")
    if isinstance(err, PermissionError) or kind in (
        "PermissionDeniedError",
        "UnauthenticatedError",
    ):
        return PermissionError(f"{url!r}: access refused: check the credentials ({err})")
    if kind in ("PreconditionError", "NotModifiedError"):
        return ReplyMismatch(
            f"{url!r}: the object changed since the tree was opened (it was replaced): open "
            "it again to read the new tree"
        )
    text = str(err)
    if any(w in text for w in ("connect", "Connection refused", "dns error", "timed out")):
        return ConnectionError(f"{url!r}: cannot reach the server ({kind}: {text})")
    return OSError(f"{url!r}: {kind}: {text}")


class ObstoreTransport(Transport):
    """A URL through obstore: the store of its bucket (or host), the object's key in it."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        super().__init__(url, options)
        found = split_url(url)
        if found is None or found[0] not in (
            "s3",
            "s3a",
            "gs",
            "gcs",
            "az",
            "abfs",
            "http",
            "https",
        ):
            raise ValueError(
                f"{url!r}: the obstore transport reads s3://, gs://, az:// and http(s):// URLs"
            )
        parts = urllib.parse.urlsplit(url)
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.key = parts.path.strip("/")
        self.writable = self.listable = found[0] not in _READ_ONLY
        self._pid = -1
        self._store: Any = None
        self.store  # noqa: B018 - made now: a bad option raises here

    @property
    def store(self) -> Any:
        """The obstore store, made again in a forked child (its runtime does not survive
        a fork)."""
        if self._pid != os.getpid():
            try:
                import obstore.store
            except ImportError:
                raise ImportError(
                    f"{self.url!r}: the obstore transport needs the 'obstore' package: pip "
                    "install 'tensorbox[obstore]'"
                ) from None
            try:
                self._store = obstore.store.from_url(self.base, **(self.options or {}))
            except Exception as err:  # obstore's configuration errors
                raise ValueError(f"{self.url!r}: obstore refused the options ({err})") from err
            self._pid = os.getpid()
        return self._store

    def path_of(self, rel: str) -> str:
        return f"{self.key}/{rel}".strip("/") if rel else self.key

    def describe(self, rel: str) -> dict[str, Any]:
        import obstore

        url, key = self.url_of(rel), self.path_of(rel)
        try:
            meta = obstore.head(self.store, key)
        except Exception as err:
            if not isinstance(_error(err, url), FileNotFoundError):
                raise _error(err, url) from err
            if self.listable and self.list(rel):
                return {"name": url, "size": 0, "type": "directory"}
            raise FileNotFoundError(f"{url!r}: no such object") from None
        return _info(meta)

    def put_file(self, local: str, rel: str = "", create: bool = False) -> dict[str, Any] | None:
        import obstore

        url = self.url_of(rel)
        # A conditional put (S3: If-None-Match: *, GCS: ifGenerationMatch=0) is one request
        # holding the file in memory (object_store has no conditional multipart upload):
        # up to _CREATE_MAX bytes; past it, the caller's look before the put alone.
        mode: Literal["create"] | None = (
            "create" if create and os.path.getsize(local) <= _CREATE_MAX else None
        )
        try:
            try:
                reply = obstore.put(self.store, self.path_of(rel), Path(local), mode=mode)
            except Exception as err:
                if mode is None or type(err).__name__ != "NotSupportedError":
                    raise
                reply = obstore.put(self.store, self.path_of(rel), Path(local))  # no create
        except Exception as err:
            if type(err).__name__ == "AlreadyExistsError":
                raise FileExistsError(f"{url!r}: an object is there already") from err
            mapped = _error(err, url)
            if isinstance(mapped, PermissionError):
                raise mapped from err
            raise OSError(
                f"{url!r}: the upload failed, nothing was written there ({mapped})"
            ) from err
        if not reply.get("e_tag") and not reply.get("version"):
            return None
        size = os.path.getsize(local)
        return {"url": url, **_stamp(size, reply.get("e_tag"), reply.get("version"), None)}

    def _read(self, reads: Reads) -> bool:
        import obstore

        ranges, groups, sink, lanes, etags, sizes = reads

        lock = threading.Lock()  # calls to sink never overlap
        vouched: list[bool] = []

        def one(group: _Group) -> None:
            path, url, start, end, members = group
            known = etags.get(path)
            options: GetOptions = {"range": (start, end)}
            if known is not None:
                options["if_match"] = known  # a replaced object: 412, not its bytes
            try:
                reply = obstore.get(self.store, path, options=options)
                meta, got = reply.meta, reply.range
                if tuple(got) != (start, end):
                    raise ReplyMismatch(f"bytes {start}..{end} asked for, {got[0]}..{got[1]} sent")
                total = sizes.get(path)
                if total is not None and meta["size"] != total:
                    raise ReplyMismatch(
                        f"an object of {meta['size']} bytes, not the {total} it had when the "
                        "tree was opened (replaced?)"
                    )
                tag = meta.get("e_tag")
                if known is not None and tag is not None and tag != known:
                    raise ReplyMismatch(f"ETag {tag} now, {known} when the tree was opened")
                at = start
                for chunk in reply.stream(min_chunk_size=STREAM_CHUNK):
                    with lock:
                        try:
                            spread(ranges, members, at, [chunk], sink)
                        except BaseException as err:  # the sink's own error, untouched
                            raise _SinkFailed(err) from err
                    at += len(chunk)
                if at != end:
                    raise OSError(f"bytes {start}..{end} came back as {at - start} bytes")
            except _SinkFailed:
                raise
            except ReplyMismatch as err:
                raise ReplyMismatch(f"{url!r}: {err}") from err
            except Exception as err:  # obstore's errors (some are built-in types)
                raise _error(err, url) from err
            vouched.append(known is not None and tag == known)

        try:
            if len(groups) == 1:  # one request: no thread for it
                one(groups[0])
            else:
                with concurrent.futures.ThreadPoolExecutor(
                    max(1, min(lanes, len(groups))), thread_name_prefix="tensorbox-obstore"
                ) as pool:
                    for fut in [pool.submit(one, g) for g in groups]:
                        fut.result()
        except _SinkFailed as failed:
            raise failed.err from None
        return all(vouched) and len(vouched) == len(groups)

    def list(self, rel: str) -> list[dict[str, Any]] | None:
        import obstore

        if not self.listable:
            return None
        prefix = self.path_of(rel)
        try:
            found = obstore.list_with_delimiter(self.store, prefix + "/" if prefix else None)
        except Exception as err:
            raise _error(err, self.url_of(rel)) from err
        rows = [{**_info(m), "name": m["path"].rpartition("/")[2]} for m in found["objects"]]
        rows += [
            {"name": p.rstrip("/").rpartition("/")[2], "size": 0, "type": "directory"}
            for p in found["common_prefixes"]
        ]
        return rows


def _stamp(size: int, tag: str | None, version: str | None, modified: Any) -> dict[str, Any]:
    """The identity fields of an object, as :func:`~.transport.stamp` writes them: a
    modification time only where no ETag or version names the version (an upload's
    reply has none, and must give the same identity as a later look)."""
    out: dict[str, Any] = {"size": size}
    if tag:
        out["ETag"] = tag
    if version:
        out["VersionId"] = version
    if not tag and not version and modified is not None:
        out["LastModified"] = str(modified.timestamp())
    return out


def _info(meta: Any) -> dict[str, Any]:
    return {
        "name": meta["path"],
        "type": "file",
        **_stamp(meta["size"], meta.get("e_tag"), meta.get("version"), meta.get("last_modified")),
    }
