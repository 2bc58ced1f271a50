"""Trees behind URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``memory://``...).

The package's parts, each with one job:

- :mod:`~tensorbox._storage.remote.transport`: where the bytes are (the
  :class:`~tensorbox._storage.remote.transport.Transport` protocol, fsspec's), the URL
  grammar, every reply checked; :mod:`~tensorbox._storage.remote.obstore`: obstore's.
- :mod:`~tensorbox._storage.remote.cache`: the bounded local disk cache.
- :mod:`~tensorbox._storage.remote.leaf`: one leaf's parts, fetched on use and kept in
  the cache; :mod:`~tensorbox._storage.remote.stores`: archives and folders at a URL as
  stores of the one loader; :mod:`~tensorbox._storage.remote.tensor`: the lazy tensor,
  its pickling by reference, and ``prefetch``.
- This face: the process's cache, and the save side (an archive written locally, then
  put as one object: folder saves to object storage are refused, since object stores
  have no rename and a reader could list a mix of two generations).

Credentials and endpoints come from each filesystem's own configuration (``AWS_*``
variables, ``AWS_ENDPOINT_URL``...) or from ``storage_options=``, as pandas and zarr take
them.

>>> split_url("/data/ds.tbx") is None, split_url("memory://bucket/ds.tbx")
(True, ('memory', 'memory://bucket/ds.tbx', None))
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from tensorbox._storage.remote.cache import RangeCache, default_cache
from tensorbox._storage.remote.transport import (
    _CHUNK,
    _READ_ONLY,
    _SEP,
    ATTEMPTS,
    SCHEMES,
    STREAM_CHUNK,
    FsspecTransport,
    ReplyMismatch,
    Sink,
    Transport,
    coalesce,
    describe,
    filesystem,
    identity,
    is_url,
    read_into,
    read_many,
    read_ranges,
    read_whole,
    shown,
    split_url,
    stamp,
    strong_etag,
    timeout,
    trust_weak,
)
from tensorbox._storage.remote.transport import (
    _versioned as _versioned,
)

__all__ = [
    "ATTEMPTS",
    "SCHEMES",
    "STREAM_CHUNK",
    "FsspecTransport",
    "RangeCache",
    "ReplyMismatch",
    "Sink",
    "Transport",
    "check_mode",
    "coalesce",
    "default_cache",
    "describe",
    "fetch_archive",
    "filesystem",
    "folder_refusal",
    "identity",
    "is_url",
    "local_archive",
    "read_into",
    "read_many",
    "read_ranges",
    "read_whole",
    "refuse",
    "save_target",
    "shown",
    "split_url",
    "stamp",
    "strong_etag",
    "timeout",
    "trust_weak",
    "upload",
]


def _tree_key(url: str, tree: str) -> dict[str, Any]:
    """The cache key of a whole archive known by its tree id alone (an upload whose
    transport returned no identity): used only once an object's index has that id."""
    return {"url": url, "tree": tree, "part": "whole"}


def _local_tree_id(path: str) -> str:
    """:func:`~tensorbox._storage.remote_tree.tree_id` of the archive file at ``path``."""
    import mmap

    from tensorbox._storage.archive import zip as _zip
    from tensorbox._storage.remote.stores import tree_id

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
    return local_archive(url, storage_options, cache)[0]


def local_archive(
    url: str,
    storage_options: dict[str, Any] | None = None,
    cache: RangeCache | None = None,
    fresh: bool = False,
) -> tuple[str, bool]:
    """:func:`fetch_archive`, and whether the file came from the cache (a copy whose
    index is not the object's is dropped and fetched again). ``fresh``: drop the cached
    copy first (the caller found it damaged)."""
    from tensorbox._storage.remote import stores

    cache = cache or default_cache()
    store = stores.open_url(url, storage_options, cache=True, kept=cache)
    if not isinstance(store, stores.RemoteArchiveStore):
        raise IsADirectoryError(f"{url!r} is a folder, not an archive")
    src = store.src
    path, ident, size = src.path_of(""), store.ident, store.buf.size
    key = {"object": ident, "tree": store.tree, "part": "whole"}
    # The copy a save kept (by the upload's reply, else by its tree id alone: checked
    # below against the tree id of the object's own index, read from the server now).
    by_tree = _tree_key(src.url, store.tree)
    hit = None if fresh else (cache.get(key) or cache.get(by_tree))
    with contextlib.suppress(OSError, ValueError):  # unreadable, not an archive: dropped
        if hit is not None and os.path.getsize(hit) == size and _local_tree_id(hit) == store.tree:
            return hit, True
    for damaged in (key, by_tree):  # damaged (or a directory): fetched again
        with contextlib.suppress(OSError):
            os.unlink(cache.path_for(damaged))
    with cache.writing(key) as tmp:
        try:
            with open(tmp, "wb") as f:
                starts = list(range(0, size, _CHUNK))
                for i in range(0, len(starts), 8):  # eight requests in flight, 128 MiB at most
                    batch = [(s, min(s + _CHUNK, size)) for s in starts[i : i + 8]]
                    for blob in src.read_many([(path, url, s, e) for s, e in batch], 0):
                        f.write(blob)
        except OSError as err:
            if isinstance(err, (ConnectionError, FileNotFoundError, PermissionError)) or (
                str(url) in str(err)
            ):
                raise
            raise cache.failure(err, url, tmp) from err
        if _local_tree_id(tmp) != store.tree or (_versioned(ident) and src.identity() != ident):
            raise OSError(
                f"{shown(url)!r}: the object was replaced while it was being read; read again"
            )
    return cache.path_for(key), False


def refuse(what: str, url: str, advice: str) -> None:
    raise ValueError(f"{what}({shown(str(url))!r}): {advice}")


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
    cache = default_cache()
    try:
        tmp = cache.new_tmp()
    except OSError as err:  # $TENSORBOX_CACHE a file, or a folder that cannot be made
        raise cache.failure(err, shown(url)) from err
    os.unlink(tmp)
    return tmp


def upload(
    tmp: str, url: str, storage_options: dict[str, Any] | None = None, create: bool = False
) -> str:
    """Put the archive written at ``tmp`` to ``url`` as one object (one put: readers see
    the old object or the new one, whole); the local copy, kept in the cache.

    The copy is kept under an identity tied to these bytes: the upload's reply where the
    transport returns one (obstore's ETag or version id), else only the archive's own
    tree id (:func:`~tensorbox._storage.remote.stores.tree_id`), never an identity read
    after the put (another writer's upload may have landed by then). The next open
    uses a copy kept by tree id only when the object's own index has that tree id
    (:func:`local_archive`). Saves reach this through
    :class:`~tensorbox._storage.remote.writer.UploadWriter`.

    ``create`` (``existsok=False``): the put is conditional where the transport has one
    (obstore; s3fs), and an object put there by another writer since the save looked
    raises ``TreeExistsError``, nothing written or cached."""
    cache = default_cache()
    try:
        from tensorbox._storage.remote.stores import open_transport

        t = open_transport(url, storage_options)
        try:
            reply = t.put_file(tmp, create=create)
        except FileExistsError as err:  # a racing writer's object landed since the look
            from tensorbox.errors import TreeExistsError

            raise TreeExistsError(
                f"{shown(url)!r} already holds an object (existsok=False): another writer "
                "put it there during this save; nothing was written. Pass existsok=True to "
                "replace it"
            ) from err
        except PermissionError as err:
            raise PermissionError(
                shown(
                    f"{url!r}: the upload was refused, nothing was written there: check the "
                    f"credentials ({err})",
                    url,
                )
            ) from err
        except TimeoutError as err:  # the deadline passed: the put may still land
            raise TimeoutError(
                f"{shown(url)!r}: the upload did not finish in time "
                f"($TENSORBOX_REMOTE_TIMEOUT, {timeout():g} s per 8 MiB): the object there is "
                "the old one, or this save's, whole; save again"
            ) from err
        except Exception as err:  # botocore, aiohttp...: their own types (a dead endpoint)
            raise OSError(
                shown(
                    f"{url!r}: the upload failed, nothing was written there "
                    f"({type(err).__name__}: {err})",
                    url,
                )
            ) from err
        tree = _local_tree_id(tmp)
        if reply is None:  # nothing ties the object to these bytes: the tree id alone
            return cache.put_file(_tree_key(t.url, tree), tmp)
        if reply.get("size") != os.path.getsize(tmp):
            return tmp  # a reply about other bytes: kept out of the cache
        return cache.put_file({"object": reply, "tree": tree, "part": "whole"}, tmp)
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
