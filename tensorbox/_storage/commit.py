"""Whole-tree commits: build a tree beside its path, swap it in at once, read one generation.

The commit model (the spec in :mod:`tensorbox._storage.format.spec` says what it guarantees):

- A save builds the complete new tree in a hidden staging directory next to the
  tree, ``<parent>/.<name>.tbx-new-<random>``, then swaps it with the tree at
  ``<parent>/<name>`` in one ``renameat2(RENAME_EXCHANGE)`` (Linux: ext4, xfs,
  btrfs, tmpfs...). A tree that did not exist appears by one ``rename``. The old
  tree, now under the staging name, is then taken apart: its ``meta.json``,
  ``*.memmap`` and ``.tbx-*`` files are deleted, anything else in it (a user's
  file) is moved into the new tree.
- Writers of one path take an exclusive ``flock`` on ``<parent>/.<name>.tbx-lock``
  for the whole save, so they run one after the other; the lock file is removed
  when the save ends. A lock file left behind means a save was killed: the next
  writer cleans its staging directories.
- Readers take a shared ``flock`` on the directory they open and check that it is
  still the one at the path; a writer takes an exclusive ``flock`` on every node
  directory of the old tree only around the swap. So a reader maps one
  generation, and waits at most for a swap (microseconds), never for a save.
- Where the file system cannot exchange directories (``EINVAL``, ``ENOSYS``,
  ``EOPNOTSUPP``: NFS, some FUSE file systems, non-Linux), the swap is two renames
  under the same locks: the old tree to ``<parent>/.<name>.tbx-old-<random>``,
  then the new one to the path. A reader that finds no tree in between waits for
  the writer; a save killed in between leaves the old tree under the ``-old-``
  name, and the next load or save at the path renames it back.

>>> import os, tempfile
>>> parent = tempfile.mkdtemp()
>>> root = os.path.join(parent, "tree")
>>> with writing(root):
...     stage = new_stage(root)
...     open(os.path.join(stage, "meta.json"), "w").close()
...     old = commit(stage, root, list)
>>> old is None, os.listdir(root), sorted(os.listdir(parent))
(True, ['meta.json'], ['tree'])
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator

from tensorbox.errors import IncompleteTreeError

__all__ = [
    "commit",
    "dispose",
    "exchange",
    "new_stage",
    "read_lock",
    "read_unlock",
    "remove_stage",
    "writing",
]

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NO_EXCHANGE = frozenset(
    (errno.EINVAL, errno.ENOSYS, getattr(errno, "EOPNOTSUPP", -1), getattr(errno, "ENOTSUP", -1))
)
_OWNED_SUFFIXES = (".memmap", ".tmp")

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


# ---------------------------------------------------------------- primitives


def _load_renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):  # pragma: no cover
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # pragma: no cover - old C library
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: str, b: str) -> None:
    """Swap the directories ``a`` and ``b`` atomically; OSError (EINVAL, ENOSYS...) if the
    file system or the platform cannot."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available on this platform", a)
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), a, None, b)


def _flock(fd: int, how: int) -> None:
    if fcntl is None:  # pragma: no cover - Windows: no locks, commits are still whole-tree
        return
    try:
        fcntl.flock(fd, how)
    except OSError as err:  # a file system without locks (some NFS): go on unlocked
        if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_ino == b.st_ino and a.st_dev == b.st_dev


def _names(root: str) -> tuple[str, str]:
    parent, name = os.path.split(root)
    return parent, name


# ---------------------------------------------------------------- writers


@contextlib.contextmanager
def writing(root: str, file: bool = False) -> Iterator[None]:
    """Hold the writer lock of the tree at ``root`` (an absolute path) for a save;
    ``file=True`` for a one-file archive save, where a file at ``root`` is replaced."""
    parent, name = _names(root)
    lock = os.path.join(parent, f".{name}.tbx-lock")
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(f"cannot save a tree at {root!r}: {parent!r} is a file") from None
    stale = False
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _NOFOLLOW, 0o666)
        except FileExistsError:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC | _NOFOLLOW)
            except FileNotFoundError:
                continue  # removed by the writer that held it: try again
            stale = True
        except PermissionError:
            raise PermissionError(
                f"cannot save a tree at {root!r}: tensorbox builds the new tree beside it and "
                f"swaps it in, which needs write permission on {parent!r}"
            ) from None
        _flock(fd, fcntl.LOCK_EX if fcntl else 0)
        try:
            if _same(os.fstat(fd), os.stat(lock, follow_symlinks=False)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # the writer before us removed it on its way out: take a fresh one
        stale = False
    try:
        if stale:  # a save was killed while holding this lock: clean up after it
            recover(root)
        if not file and os.path.lexists(root) and not os.path.isdir(root):
            raise NotADirectoryError(
                f"cannot save a tree at {root!r}: a file is there; remove it or choose another path"
            )
        yield
    finally:
        # Removed while still held: a writer waiting on this file sees it is gone and
        # takes a fresh one. Only a killed save leaves it (and then its leftovers).
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def new_stage(root: str) -> str:
    """A fresh, empty staging directory beside ``root``, with ``root``'s permissions."""
    parent, name = _names(root)
    stage = os.path.join(parent, f".{name}.tbx-new-{os.urandom(8).hex()}")
    os.mkdir(stage)
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(os.stat(root).st_mode)
        os.chmod(stage, mode)
    return stage


def commit(stage: str, root: str, node_dirs: Callable[[], list[str]]) -> str | None:
    """Make the tree in ``stage`` the tree at ``root`` in one step (see the module doc).

    ``node_dirs()`` lists the old tree's node directories below ``root``, which readers
    may hold (asked only when there is an old tree).
    Returns the directory that now holds the old tree, to :func:`dispose` of, or None.
    """
    try:
        os.rename(stage, root)  # no tree there yet (or an empty directory): one rename
        return None
    except OSError as err:
        if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
    fds = _lock_all([root, *node_dirs()])
    try:
        try:
            exchange(stage, root)
            return stage
        except OSError as err:
            if err.errno not in _NO_EXCHANGE:
                raise
        parent, name = _names(root)
        old = os.path.join(parent, f".{name}.tbx-old-{os.urandom(8).hex()}")
        os.rename(root, old)
        try:
            os.rename(stage, root)
        except BaseException:
            os.rename(old, root)
            raise
        return old
    finally:
        for fd in fds:
            os.close(fd)  # closing releases the lock


def _lock_all(dirs: list[str]) -> list[int]:
    fds = []
    for d in dirs:
        try:
            fd = os.open(d, _DIR | _NOFOLLOW)
        except OSError:
            continue  # gone or not a directory: no reader can hold it either
        fds.append(fd)
        _flock(fd, fcntl.LOCK_EX if fcntl else 0)
    return fds


def dispose(old: str, root: str) -> None:
    """Take apart an old tree after a commit: delete what tensorbox wrote there (its
    ``meta.json``, ``*.memmap`` and temporary files, node directories), move anything else
    into the tree now at ``root``. Never follows a symlink; leaves what it cannot move."""
    try:
        fd = os.open(old, _DIR | _NOFOLLOW)
    except OSError:
        return
    try:
        _dispose_dir(fd, old, root)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(old)


def _owned(name: str, is_dir: bool) -> bool:
    if is_dir:
        return False
    return name == "meta.json" or name.endswith(_OWNED_SUFFIXES) or name.startswith(".tbx-")


def _dispose_dir(fd: int, old: str, new: str) -> None:
    with os.scandir(fd) as it:
        entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    # meta.json last: a disposal killed midway leaves each node it has not finished
    # with its meta.json, so the next writer's recovery knows it as a node and finishes.
    entries.sort(key=lambda entry: entry[0] == "meta.json")
    for name, is_dir in entries:
        if _owned(name, is_dir):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            continue
        if is_dir:
            try:
                sub = os.open(name, _DIR | _NOFOLLOW, dir_fd=fd)
            except OSError:
                continue
            try:
                node = _has_meta(sub)
                if node:  # a node of the old tree: take it apart, keep what is not ours
                    _dispose_dir(sub, os.path.join(old, name), os.path.join(new, name))
            finally:
                os.close(sub)
            if node:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=fd)
                    continue
        _carry(fd, old, name, new)


def _has_meta(fd: int) -> bool:
    try:
        os.stat("meta.json", dir_fd=fd, follow_symlinks=False)
        return True
    except OSError:
        return False


def _carry(fd: int, old: str, name: str, new: str) -> None:
    """Move a user's entry of the old tree into the new one, when its name is free there."""
    target = os.path.join(new, name)
    try:
        os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            os.rename(os.path.join(old, name), target)
        return
    except OSError:
        return
    with contextlib.suppress(OSError):
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            os.unlink(name, dir_fd=fd)  # a symlink whose name the new tree uses: only the link goes
        elif stat.S_ISDIR(mode):  # an empty one: what a disposal killed midway left of a node
            os.rmdir(name, dir_fd=fd)


def recover(root: str) -> None:
    """After a killed save (the caller holds the writer lock): put back an old tree that a
    fallback commit had moved aside, and dispose of leftover staging directories."""
    parent, name = _names(root)
    prefix = f".{name}.tbx-"
    try:
        with os.scandir(parent) as it:
            leftovers = sorted(
                (e.path for e in it if e.name.startswith(prefix) and e.name != f"{prefix}lock"),
                key=lambda p: ("-old-" not in os.path.basename(p), p),
            )
    except OSError:
        return
    for path in leftovers:
        base = os.path.basename(path)
        if "-old-" in base and not os.path.lexists(root):
            with contextlib.suppress(OSError):
                os.rename(path, root)
            continue  # never take an old tree apart while no tree is at the path
        if "-new-" in base and not os.path.lexists(os.path.join(path, "meta.json")):
            remove_stage(path)  # a staging directory that was never finished: all ours
        else:
            dispose(path, root)


def remove_stage(path: str) -> None:
    try:
        fd = os.open(path, _DIR | _NOFOLLOW)
    except OSError:
        return
    try:
        _remove_owned(fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _remove_owned(fd: int) -> None:
    with os.scandir(fd) as it:
        entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    for name, is_dir in entries:
        if not is_dir:
            if _owned(name, False):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
            continue
        try:
            sub = os.open(name, _DIR | _NOFOLLOW, dir_fd=fd)
        except OSError:
            continue
        try:
            _remove_owned(sub)
        finally:
            os.close(sub)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=fd)


# ---------------------------------------------------------------- readers

#: How long a reader waits for a tree that a fallback commit moved aside for an instant.
READ_WAIT_S = 5.0


def read_lock(path: str) -> int | None:
    """Open ``path`` (a directory) with a shared lock, checked to be the directory now at
    ``path``: the tree under it is one generation until :func:`read_unlock`.

    Returns None when ``path`` is not a directory (the caller's checks then say why).
    """
    deadline = None
    while True:
        try:
            fd = os.open(path, _DIR)
        except FileNotFoundError:
            if deadline is None:
                deadline = time.monotonic() + READ_WAIT_S
            if _moved_aside(path) and time.monotonic() < deadline:
                continue
            return None
        except OSError:
            return None
        _flock(fd, fcntl.LOCK_SH if fcntl else 0)
        try:
            if _same(os.fstat(fd), os.stat(path)):
                return fd
        except OSError:
            pass
        os.close(fd)  # a commit swapped it out while we waited: open the new one


def read_unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _moved_aside(path: str) -> bool:
    """True after waiting, when the tree at ``path`` is missing because a fallback commit
    moved it aside (the writer is still running, or was killed and we put it back)."""
    parent, name = _names(path)
    prefix = f".{name}.tbx-old-"
    try:
        with os.scandir(parent) as it:
            olds = [e.path for e in it if e.name.startswith(prefix)]
    except OSError:
        return False
    if not olds:
        return False
    lock = os.path.join(parent, f".{name}.tbx-lock")
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | _NOFOLLOW)
    except FileNotFoundError:
        fd = None
    except OSError:
        fd = None
    if fd is not None:
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # a writer is at work: wait for it, then look again
                    fcntl.flock(fd, fcntl.LOCK_SH)
                    return True
        finally:
            os.close(fd)
    if not os.path.lexists(path):  # the writer died between its two renames
        try:
            os.rename(max(olds, key=os.path.getmtime), path)
        except OSError as err:
            raise IncompleteTreeError(
                f"{path} is missing: a save was killed while swapping it; the previous tree "
                f"is in {olds[0]!r} and could not be moved back ({err}): rename it to {path!r}"
            ) from None
    return True
