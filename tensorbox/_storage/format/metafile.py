"""``meta.json`` files on disk: reading their bytes safely, writing them (one entry per
line) by atomic replacement or inside a staged tree, and directory syncs.

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

import json
import os
import stat
from typing import Any

from tensorbox._core.encoding import json_bytes
from tensorbox._storage.atomic import fsync_dir, replacing, temp_name
from tensorbox._storage.format.spec import MAX_META_BYTES, META
from tensorbox.errors import FormatError, IncompleteTreeError

__all__ = [
    "fsync_dir",
    "read_meta_bytes",
    "meta_bytes",
    "temp_name",
    "write_meta",
    "write_new_meta",
]


def meta_bytes(meta: dict[Any, Any], std_json: bool = False) -> bytes:
    """The bytes of a ``meta.json``: one entry per line, so the file reads well and diffs well."""
    if std_json:  # NaN, infinities or huge ints, which orjson does not write

        def dumps(v: Any) -> bytes:
            return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")
    else:
        dumps = json_bytes
    entries = meta.get("entries")
    if entries is None:  # tensordict's layout: one object, entries mixed with its fields
        return dumps(meta) + b"\n"
    head = dumps({k: v for k, v in meta.items() if k != "entries"})[:-1]
    lines = b",\n".join(dumps(k) + b": " + dumps(v) for k, v in entries.items())
    return b"".join((head, b', "entries": {\n', lines, b"\n}}\n"))


def write_meta(
    directory: str, meta: dict[Any, Any], *, fsync: bool = False, std_json: bool = False
) -> None:
    """Write ``directory/meta.json`` atomically (:func:`~tensorbox._storage.atomic.replacing`)."""
    data = meta_bytes(meta, std_json)
    with replacing(os.path.join(directory, META), fsync=fsync) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            _write_all(fd, data, fsync)
        finally:
            os.close(fd)


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


_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def read_meta_bytes(directory: str, meta_path: str) -> bytes:
    """The bytes of ``meta_path``, read without following a symlink or blocking."""
    try:
        # Non-blocking: a FIFO or a device in its place must be refused, not waited on.
        fd = os.open(meta_path, _READ_FLAGS)
    except FileNotFoundError:
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"no saved tree at {directory!r}: not a directory") from None
        if not os.listdir(directory):  # nothing was ever saved here: as a missing path
            raise FileNotFoundError(
                f"no saved tree at {directory!r}: the folder is empty"
            ) from None
        raise IncompleteTreeError(
            f"{meta_path} is missing: the save that wrote {directory!r} did not finish "
            "(or this is not a saved tree); save it again"
        ) from None
    except OSError as err:  # a symlinked meta.json (ELOOP), a directory, no permission
        raise FormatError(f"{meta_path} cannot be read: {err}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"{meta_path} is not a regular file")
        if st.st_size > MAX_META_BYTES:
            raise FormatError(f"{meta_path} is {st.st_size} bytes, over {MAX_META_BYTES}")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
