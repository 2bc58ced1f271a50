"""Whole-tree commits: build a tree beside its path, swap it in at once, read one generation.

The commit model (the spec in :mod:`tensorbox._storage.format.spec` says what it guarantees):

- A save builds the complete new tree in a hidden staging directory next to the
  tree, ``<parent>/.<name>.tbx-new-<random>``, then swaps it with the tree at
  ``<parent>/<name>`` in one ``renameat2(RENAME_EXCHANGE)`` (Linux: ext4, xfs,
  btrfs, tmpfs...). A tree that did not exist appears by one ``rename``. The old
  tree, now under the staging name, is then taken apart (:func:`dispose`).
- A save touches only what it wrote. It deletes the names the old tree's own
  ``meta.json`` files list (leaf files, node directories, the ``meta.json``
  files themselves) and tensorbox's temporary files (``.tbx-<pid>-<tid>-<n>.tmp``);
  every other entry (a user's file or folder, a folder holding a ``meta.json`` of
  its own that no node lists, ``*.tmp``...) moves to the same place in the new tree.
  A folder that is not a tree (no ``meta.json`` of a tree) lists nothing: all of it
  is kept. Before anything changes, a save is refused (``FileExistsError`` naming
  the file) where that cannot be done: a foreign entry whose path the new tree
  needs (a file the new tree links in, an in-place save's, is the same file).
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
import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from tensorbox._storage.atomic import move_aside
from tensorbox.errors import IncompleteTreeError

__all__ = [
    "Listed",
    "check_replace",
    "commit",
    "dispose",
    "exchange",
    "new_stage",
    "read_lock",
    "read_unlock",
    "listed",
    "remove_stage",
    "rename_new",
    "writing",
]

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NO_EXCHANGE = frozenset(
    (errno.EINVAL, errno.ENOSYS, getattr(errno, "EOPNOTSUPP", -1), getattr(errno, "ENOTSUP", -1))
)

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
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def rename_new(a: str, b: str) -> None:
    """Rename ``a`` to ``b``, never replacing an entry at ``b`` (FileExistsError then):
    ``renameat2(RENAME_NOREPLACE)`` where the file system has it, else a check first."""
    if _renameat2 is not None:
        if not _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_NOREPLACE):
            return
        code = ctypes.get_errno()
        if code not in _NO_EXCHANGE:
            raise OSError(code, os.strerror(code), a, None, b)
    if os.path.lexists(b):  # pragma: no cover - file systems without RENAME_NOREPLACE
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), b)
    os.rename(a, b)


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
    """A fresh staging directory beside ``root``, with ``root``'s permissions, holding
    only its building mark (:func:`_building`) until :func:`commit`."""
    parent, name = _names(root)
    stage = os.path.join(parent, f".{name}.tbx-new-{os.urandom(8).hex()}")
    os.mkdir(stage)
    os.close(os.open(_building(stage), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC))
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(os.stat(root).st_mode)
        os.chmod(stage, mode)
    return stage


def _building(stage: str) -> str:
    """The mark of a stage still being built: ``.tbx-building-<hex>``, the hex of the
    stage's own name, so that no user's file can pass for it.

    Why a mark and not the top ``meta.json``: a save killed while writing that file
    leaves it truncated, and a stage without one cannot be told from an old tree that
    had none (a user's folder saved over, swapped out, then killed before its disposal).
    With the mark, recovery deletes a stage only while it is marked, and takes apart
    (keeping every user's entry) whatever a swap has moved there.
    """
    return os.path.join(stage, ".tbx-building-" + stage.rsplit("-", 1)[-1])


def commit(stage: str, root: str, node_dirs: Callable[[], list[str]]) -> str | None:
    """Make the tree in ``stage`` the tree at ``root`` in one step (see the module doc).

    ``node_dirs()`` lists the old tree's node directories below ``root``, which readers
    may hold (asked only when there is an old tree).
    Returns the directory that now holds the old tree, to :func:`dispose` of, or None.
    """
    # Finished (every file written and closed): the stage loses its building mark, so
    # that recovery after a kill from here on takes it apart rather than deleting it.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_building(stage))
    try:
        try:
            os.rename(stage, root)  # no tree there yet (or an empty directory): one rename
            return None
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        check_replace(root, stage)  # before anything changes
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
            move_aside(stage, root, old)
            return old
        finally:
            for fd in fds:
                os.close(fd)  # closing releases the lock
    except OSError as err:
        if err.errno == errno.EXDEV:
            raise OSError(
                errno.EXDEV,
                f"cannot save the tree at {root!r}: the file system refuses to rename folders "
                "there (EXDEV: an overlayfs lower layer, a bind mount, a different device). "
                "A save builds the new tree beside the old one and renames it in: save to a "
                "path on a writable file system, or copy the folder there first (cp -a)",
            ) from err
        raise


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
    """Take apart an old tree after a commit: delete the names its ``meta.json`` files
    list (and those files themselves, and tensorbox's temporary files), move every other
    entry into the tree now at ``root``. Never follows a symlink; what it cannot move
    stays, with the ``meta.json`` of its node, for the next writer's recovery."""
    try:
        fd = os.open(old, _DIR | _NOFOLLOW)
    except OSError:
        return
    try:
        _dispose_dir(fd, listed(fd) or _NONE, old, root)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(old)


#: A temporary file tensorbox names (:func:`tensorbox._storage.atomic.temp_name`).
_TEMP = re.compile(r"\.tbx-[0-9]+-[0-9]+-[0-9]+\.tmp").fullmatch
_LEGACY_NODE_TYPES = ("TensorDict", "NonTensorData", "NonTensorStack", "MetaData")


class Listed(NamedTuple):
    """The names one node's ``meta.json`` gives: its leaf files and node directories."""

    files: frozenset[str]
    nodes: frozenset[str]
    tree: bool = True  # the directory's meta.json is a tree's (so it is the save's too)


def listed(fd: int) -> Listed | None:
    """The names the ``meta.json`` of the directory ``fd`` lists; None when it has none
    that a tensorbox or tensordict writer would have written (missing, damaged, foreign)."""
    from tensorbox._storage.format.names import is_plain_name, legacy_name

    try:
        mfd = os.open(
            "meta.json", os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
        )
    except OSError:
        return None
    try:
        st = os.fstat(mfd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 28:
            return None
        chunks = []
        while chunk := os.read(mfd, 1 << 20):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(mfd)
    try:
        doc = json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    files: set[Any] = set()  # names as the file gives them: plain names kept below
    nodes: set[Any] = set()
    if doc.get("format") == "tensorbox":
        entries = doc.get("entries")
        for e in entries.values() if isinstance(entries, dict) else ():
            if not isinstance(e, dict):
                continue
            if e.get("kind") == "node":
                nodes.add(e.get("dir"))
            for part in (e, e.get("values"), e.get("offsets")):  # a tensor, a jagged leaf
                if isinstance(part, dict):
                    files.add(part.get("file"))
    elif "_type" in doc or "shape" in doc:  # tensordict's (see format/legacy.py)
        for key, e in doc.items():
            if not isinstance(e, dict) or not isinstance(key, str):
                continue
            names = {legacy_name(key), key}
            if "dtype" in e:
                files.update(n + ".memmap" for n in names)
            elif e.get("type") in _LEGACY_NODE_TYPES:
                nodes.update(names)
        if isinstance(doc.get("_type"), str) and "_tensordict" in os.listdir(fd):
            nodes.add("_tensordict")  # a tensorclass's tensors
    else:
        return None
    return Listed(
        frozenset(n for n in files if is_plain_name(n)),
        frozenset(n for n in nodes if is_plain_name(n)),
    )


def _kind(name: str, is_dir: bool, names: Listed) -> str:
    """What a save does with one entry of an old tree's node: "node" (a node directory the
    ``meta.json`` lists: taken apart in turn), "ours" (deleted: that ``meta.json``, a file
    or link it lists, a tensorbox temporary file) or "carry" (moved to the new tree)."""
    if is_dir:
        return "node" if name in names.nodes else "carry"
    listed_here = name in names.files or name in names.nodes
    if (name == "meta.json" and names.tree) or listed_here or _TEMP(name):
        return "ours"
    return "carry"


_NONE = Listed(frozenset(), frozenset(), tree=False)


def check_replace(root: str, stage: str) -> None:
    """Refuse, before anything changes, a save of the tree in ``stage`` over ``root``
    that could not keep every entry at ``root`` that is not the old tree's: one whose
    path the new tree needs. A folder that is not a tree (no ``meta.json`` of a tree)
    lists nothing: all of it is kept."""
    try:
        fd = os.open(root, _DIR | _NOFOLLOW)
    except OSError:
        return  # not a directory: the commit's own errors say why
    try:
        _check_dir(fd, listed(fd) or _NONE, root, stage)
    finally:
        os.close(fd)


def _entries(fd: int) -> list[tuple[str, bool]]:
    with os.scandir(fd) as it:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]


def _is_real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_dir(fd: int, names: Listed, old: str, new: str) -> None:
    for name, is_dir in _entries(fd):
        kind = _kind(name, is_dir, names)
        if kind == "ours":
            continue
        target = os.path.join(new, name)
        if kind == "carry" and not (is_dir and _is_real_dir(target)):
            if os.path.lexists(target) and not _same_entry(fd, name, target):
                raise FileExistsError(
                    f"cannot save the tree at {old!r}: {os.path.join(old, name)!r} is not a "
                    "file of the saved tree there (no tree's meta.json lists it), and the new "
                    "tree needs its name. A save keeps such files: rename or move it, then "
                    "save again"
                )
            continue
        # A node of the old tree, or a user's folder whose name the new tree uses as a
        # folder too: their entries are checked one by one (a user's: all kept).
        _in_subdir(fd, name, kind == "node", _check_dir, old, new)


def _in_subdir(
    fd: int,
    name: str,
    node: bool,
    visit: Callable[[int, Listed, str, str], bool | None],
    old: str = "",
    new: str = "",
) -> bool | None:
    """``visit(sub, names, old/name, new/name)`` on the folder ``name`` in ``fd``, opened
    without following a link and closed after; ``names``: what its ``meta.json`` lists
    where it is a ``node`` of the old tree (else nothing: a user's folder). None, not
    visited, when ``name`` cannot be opened as a folder (gone since it was listed, or a
    link)."""
    try:
        sub = os.open(name, _DIR | _NOFOLLOW, dir_fd=fd)
    except OSError:
        return None
    try:
        names = (listed(sub) or _NONE) if node else _NONE
        return visit(sub, names, os.path.join(old, name), os.path.join(new, name))
    finally:
        os.close(sub)


def _dispose_dir(fd: int, names: Listed, old: str, new: str) -> bool:
    """Take apart one directory of the old tree (see :func:`dispose`); True when it
    could be emptied."""
    entries = _entries(fd)
    # meta.json last: a disposal killed midway leaves each node it has not finished
    # with its meta.json, so the next writer's recovery knows what it lists and finishes.
    entries.sort(key=lambda entry: entry[0] == "meta.json")
    kept = False
    for name, is_dir in entries:
        kind = _kind(name, is_dir, names)
        if kind == "ours":
            if name == "meta.json" and kept:
                continue  # something here could not be moved: keep what tells it apart
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            continue
        target = os.path.join(new, name)
        if kind == "node" or (is_dir and _is_real_dir(target)):
            emptied = _in_subdir(fd, name, kind == "node", _dispose_dir, old, new)
            if emptied:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=fd)
                    continue
            kept = True
            continue
        if not is_dir and _same_entry(fd, name, target):
            # The new tree holds this very file (an in-place save linked it in): only this
            # name of it goes, nothing is lost.
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            continue
        kept |= not _carry(old, name, new)
    return not kept


def _same_entry(fd: int, name: str, target: str) -> bool:
    """Whether ``name`` in directory ``fd`` and ``target`` are one regular file."""
    try:
        a = os.stat(name, dir_fd=fd, follow_symlinks=False)
        b = os.stat(target, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(a.st_mode) and _same(a, b)


def _carry(old: str, name: str, new: str) -> bool:
    """Move a user's entry of the old tree to the same place in the new one (creating
    the folders that lead there); False when it cannot (the name was taken meanwhile)."""
    try:
        os.makedirs(new, exist_ok=True)
        rename_new(os.path.join(old, name), os.path.join(new, name))
    except OSError:
        return False
    return True


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
        if "-new-" in base and os.path.lexists(_building(path)):
            remove_stage(path)  # a staging directory that was never finished: all ours
        else:
            dispose(path, root)  # an old tree swapped out, or a finished stage never swapped


def remove_stage(path: str) -> None:
    """Remove a staging directory still being built (or one its own writer gives up):
    everything in it is what the save building it wrote, under a random name no one
    else uses. Never follows a symlink."""
    try:
        fd = os.open(path, _DIR | _NOFOLLOW)
    except OSError:
        return
    mark = os.path.basename(_building(path))
    try:
        _remove_all(fd, keep=mark)
        # The mark last: a removal killed midway leaves a stage still marked as ours.
        with contextlib.suppress(OSError):
            os.unlink(mark, dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _remove_all(fd: int, keep: str = "") -> None:
    with os.scandir(fd) as it:
        entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it if e.name != keep]
    for name, is_dir in entries:
        if not is_dir:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            continue
        _in_subdir(fd, name, False, lambda sub, *_: _remove_all(sub))
        with contextlib.suppress(OSError):  # fails where name is no emptied folder: kept
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
