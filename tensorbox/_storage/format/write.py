"""Writing ``meta.json`` files: their bytes (one entry per line), atomic replacement,
creation inside a staged tree, and directory syncs.

Part of the format module (:mod:`tensorbox._storage.format.spec` re-exports every name here); kept
apart so that the specification and the reader stay readable.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> write_meta(d, {"format": "tensorbox", "entries": {"a": 1, "b": 2}})
>>> with open(os.path.join(d, META)) as f:
...     print(f.read(), end="")
{"format":"tensorbox", "entries": {
"a": 1,
"b": 2
}}
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from itertools import count
from typing import Any

import orjson

__all__ = ["META", "fsync_dir", "meta_bytes", "temp_name", "write_meta", "write_new_meta"]

#: The name of a node's description file.
META = "meta.json"

_tmp_counter = count()


def temp_name(directory: str) -> str:
    """A fresh temporary path in ``directory``; no encoded name starts with '.'."""
    return os.path.join(
        directory, f".tbx-{os.getpid()}-{threading.get_ident()}-{next(_tmp_counter)}.tmp"
    )


def meta_bytes(meta: dict[Any, Any], std_json: bool = False) -> bytes:
    """The bytes of a ``meta.json``: one entry per line, so the file reads well and diffs well."""
    if std_json:  # NaN, infinities or huge ints, which orjson does not write

        def dumps(v: Any) -> bytes:
            return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")
    else:
        dumps = _orjson_or_json
    entries = meta["entries"]
    head = dumps({k: v for k, v in meta.items() if k != "entries"})[:-1]
    lines = b",\n".join(dumps(k) + b": " + dumps(v) for k, v in entries.items())
    return b"".join((head, b', "entries": {\n', lines, b"\n}}\n"))


def write_meta(
    directory: str, meta: dict[Any, Any], *, fsync: bool = False, std_json: bool = False
) -> None:
    """Write ``directory/meta.json`` atomically: a temporary file, then ``os.replace``."""
    data = meta_bytes(meta, std_json)
    tmp = temp_name(directory)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            _write_all(fd, data, fsync)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(directory, META))
    except BaseException:  # out of space, interrupted: leave no temporary file behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(directory)


def write_new_meta(
    directory: str, meta: dict[Any, Any], *, fsync: bool = False, std_json: bool = False
) -> None:
    """Create ``directory/meta.json`` in a tree being built in its staging directory.

    No temporary name: the commit publishes the whole tree at once, and a failed or
    killed save leaves only its staging directory, which is removed. The caller syncs
    the directory (once for all its files) when ``fsync``.
    """
    path = os.path.join(directory, META)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        _write_all(fd, meta_bytes(meta, std_json), fsync)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes, fsync: bool) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    if fsync:
        os.fsync(fd)


def _orjson_or_json(v: Any) -> bytes:
    try:
        return orjson.dumps(v)
    except TypeError:  # nesting deeper than orjson writes (255)
        return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")


def fsync_dir(directory: str) -> None:
    """Make a rename or a file creation in ``directory`` durable (POSIX)."""
    if sys.platform == "win32":  # pragma: no cover - directories cannot be opened there
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
