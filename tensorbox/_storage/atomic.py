"""Replacing a file or folder whole: the one place of the rule "write it under a
temporary name beside the target, then rename it in".

Every writer of tensorbox that replaces what may already be at a path goes through
:func:`replacing`: a leaf file written over an existing one, a ``meta.json``, a zip
archive, ``pack --force``, the tabular, HDF5, zarr and safetensors writers, the
synthetic image folder and the remote cache's files. Readers see the old content or
the new, never a part of either; a write that fails (a full disk, an interrupt, a bad
value) removes its temporary and leaves the old content as it was.

>>> import os, tempfile
>>> from pathlib import Path
>>> path = os.path.join(tempfile.mkdtemp(), "x.txt")
>>> with replacing(path) as tmp:
...     with open(tmp, "w") as f:
...         _ = f.write("new")
>>> Path(path).read_text()
'new'
>>> try:
...     with replacing(path) as tmp:
...         with open(tmp, "w") as f:
...             _ = f.write("half")
...         raise OSError("disk full")
... except OSError:
...     pass
>>> Path(path).read_text(), sorted(os.listdir(os.path.dirname(path)))
('new', ['x.txt'])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from itertools import count

__all__ = ["fsync_dir", "move_aside", "replace_folder", "replacing", "temp_name"]

_tmp_counter = count()


def temp_name(directory: str, suffix: str = "") -> str:
    """A fresh temporary path in ``directory``; no encoded name starts with '.'.

    The commit's recovery (:mod:`tensorbox._storage.commit`) knows these names
    (``.tbx-<pid>-<thread>-<n>.tmp``) as tensorbox's own inside a tree."""
    return os.path.join(
        directory, f".tbx-{os.getpid()}-{threading.get_ident()}-{next(_tmp_counter)}.tmp{suffix}"
    )


def fsync_dir(directory: str) -> None:
    """Make a rename or a file creation in ``directory`` durable (POSIX)."""
    if sys.platform == "win32":  # pragma: no cover - directories cannot be opened there
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    """Remove a file, a link or a folder at ``path``, if any (errors suppressed)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def move_aside(tmp: str, path: str, old: str) -> None:
    """Rename ``path`` to ``old``, then ``tmp`` to ``path``, putting ``path`` back when
    the second rename fails: replacing a folder where no atomic exchange exists (readers
    may find nothing at ``path`` between the two renames)."""
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise


def replace_folder(tmp: str, path: str) -> None:
    """Rename ``tmp`` onto ``path``, which may be a folder: it is moved aside first, and
    removed once ``tmp`` stands in its place (:func:`move_aside`)."""
    if not os.path.isdir(path) or os.path.islink(path):
        os.replace(tmp, path)
        return
    old = temp_name(os.path.dirname(os.path.abspath(path)))
    move_aside(tmp, path, old)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def replacing(
    path: str,
    *,
    tmp: str | None = None,
    suffix: str = "",
    fsync: bool = False,
    rename: Callable[[str, str], None] | None = None,
) -> Iterator[str]:
    """Yield a temporary path beside ``path`` for the block to write (a file or a folder);
    once the block succeeds, rename it onto ``path``; when the block or the rename
    raises, remove it and leave ``path`` as it was.

    - ``tmp``: the temporary path, for a writer whose clean-up of a killed run looks
      for names of its own (default: :func:`temp_name` in ``path``'s folder, with
      ``suffix``). It may exist already (made by ``mkstemp``); the block writes it.
    - ``fsync``: the rename is made durable (the folder is synced). The block syncs
      the bytes it writes itself: it holds the descriptor.
    - ``rename``: how ``tmp`` goes onto ``path``: ``os.replace`` (None, the default: a
      folder at ``path`` makes it fail), :func:`replace_folder` (a folder at ``path`` is
      replaced whole), or a caller's own (the cache clears a planted link or folder).
    """
    folder = os.path.dirname(os.path.abspath(path))
    if tmp is None:
        tmp = temp_name(folder, suffix)
    try:
        yield tmp
        (os.replace if rename is None else rename)(tmp, path)
    except BaseException:  # out of space, interrupted: leave no temporary behind
        _remove(tmp)
        raise
    if fsync:
        fsync_dir(folder)
