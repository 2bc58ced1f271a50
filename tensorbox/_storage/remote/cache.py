"""The local disk cache of remote bytes (:class:`RangeCache`): bounded, least recently
used evicted first, shared by the processes of one machine (a DataLoader's workers,
the ranks), every file checked before it is trusted."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from tensorbox._storage.atomic import replacing

__all__ = ["RangeCache", "default_cache", "env_number"]


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
        self.move_in(tmp, path)
        self.added(os.path.getsize(path), keep=path)
        return path

    @contextlib.contextmanager
    def writing(self, key: dict[str, Any]) -> Iterator[str]:
        """A new file of this folder for the block to write, put under ``key`` once the
        block succeeds (:func:`~tensorbox._storage.atomic.replacing`), deleted if not."""
        path = self.path_for(key)
        with replacing(path, tmp=self.new_tmp(), rename=self.move_in) as tmp:
            yield tmp
        self.added(os.path.getsize(path), keep=path)

    def move_in(self, tmp: str, path: str) -> None:
        """``os.replace``, after clearing a link or an empty folder planted at ``path``."""
        try:
            os.replace(tmp, path)
        except (IsADirectoryError, FileExistsError, NotADirectoryError):
            if not self.clear(path):
                raise
            os.replace(tmp, path)

    def release(self) -> None:
        """A file put with :meth:`put_file` is open (mapped) now: apply the bound, which
        it alone may pass (it is then deleted, and its reader keeps its pages)."""
        self.added(0)

    @staticmethod
    def clear(path: str) -> bool:
        """Drop what is at ``path`` when it is no cache file (a symlink, an empty folder):
        True when it is gone. A folder with files in it is left, for the caller's error."""
        try:
            if os.path.islink(path):
                os.unlink(path)
            elif os.path.isdir(path):
                os.rmdir(path)
            else:
                return False
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    _MAGIC = b"TBXC1\n"

    def put_bytes(self, key: dict[str, Any], data: bytes, url: str) -> None:
        """Keep ``data`` under ``key``, with its SHA-256 (see :meth:`get_bytes`)."""
        try:
            with self.writing(key) as tmp, open(tmp, "wb") as f:
                f.write(self._MAGIC + hashlib.sha256(data).digest() + data)
        except OSError as err:
            raise self.failure(err, url, self.path_for(key)) from err

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
        """A new file being written here (a fetch, a save before its upload), named by its
        owner, this process: one a killed process left is deleted by the next scan."""
        os.makedirs(self.directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".part-{_HOST}-{os.getpid()}-")
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
        """Delete the least recently used files until at most 7/8 of the bound is held,
        never ``keep`` (the file just put, which its caller is about to open: one larger
        than the bound goes at the next scan, see :meth:`release`)."""
        with self._lock:
            files = []
            try:
                found = list(os.scandir(self.directory))
            except FileNotFoundError:
                self._held = 0
                return
            writing = 0  # bytes of files being written (by live processes): counted, kept
            for e in found:
                tmp = e.name.startswith(".part-")
                if tmp and _orphan(e.name):  # its process was killed while writing it
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(e.path)
                    continue
                if tmp or e.name.endswith((".bin", ".have")):
                    try:
                        st = e.stat()
                    except FileNotFoundError:  # another process evicted it
                        continue
                    # a leaf's file is sparse until every part of it was fetched
                    used = min(st.st_size, getattr(st, "st_blocks", st.st_size // 512 + 1) * 512)
                    if tmp:
                        writing += used
                        continue
                    last = e.path == keep or e.path[: -len(".have")] + ".bin" == keep
                    files.append((last, st.st_mtime, used, e.path))
            total = writing + sum(f[2] for f in files)
            target = self.max_bytes - self.max_bytes // 8 if total > self.max_bytes else total
            for last, _, size, path in sorted(files):
                if total <= target or last:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # a process mapping it keeps its pages
                total -= size
            self._held = total


def _host() -> str:
    """This machine and process-id namespace, in the names of files being written: a file
    of a process on another machine, or in another container, is never taken for an
    orphan (its process id means nothing here)."""
    where = socket.gethostname()
    with contextlib.suppress(OSError):
        where += os.readlink("/proc/self/ns/pid")
    return hashlib.sha256(where.encode()).hexdigest()[:8]


_HOST = _host()


def _orphan(name: str) -> bool:
    """Whether ``name`` (``.part-HOST-PID-...``) was left by a process of this machine that
    is gone (killed while writing it)."""
    _, host, pid, *_ = [*name.split("-", 3), "", "", ""]
    if host != _HOST or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def env_number(name: str, default: float, kind: type = int) -> Any:
    """The setting ``$name`` as a ``kind`` (``default`` when unset); a value that is not one
    is a ``ValueError`` naming the variable.

    >>> env_number("TENSORBOX_NO_SUCH_SETTING", 7)
    7
    """
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return kind(default)
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(
            f"${name}={raw!r}: expected {'a whole number' if kind is int else 'a number'} "
            f"(of bytes or seconds), such as {kind(default)!r}"
        ) from None
    if value < 0:
        raise ValueError(f"${name}={raw!r}: expected a number of at least 0")
    return value


_default: RangeCache | None = None


def default_cache() -> RangeCache:
    """The process's cache (``$TENSORBOX_CACHE`` or ``~/.cache/tensorbox/remote``, 10 GiB;
    ``TENSORBOX_CACHE_BYTES`` changes the bound)."""
    global _default
    if _default is None:
        _default = RangeCache(max_bytes=env_number("TENSORBOX_CACHE_BYTES", 10 << 30))
    return _default
