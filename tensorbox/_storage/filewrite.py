"""Writing the file of one tensor: the bytes of a leaf, or a sparse file of zeros.

Used by the folder writer (:mod:`tensorbox._storage.folder`) for every leaf of a saved
tree, and by :class:`~tensorbox._storage.memmap_tensor.MemoryMappedTensor`'s
constructors. Files are written with ``os.write`` from the tensor's own bytes (no extra
copy when contiguous), 3-4x faster here than copying into a fresh shared mapping. A
tensor that is not contiguous or not on the CPU is written in pieces of at most
:data:`tensorbox.weights.CHUNK_BYTES`, so an expanded or GPU tensor never needs
its full size in RAM. An existing file is never written into (another mapping may be
reading it): the new content goes to a temporary file that replaces it.

A save writes its files with :func:`write_all`: from the calling thread and, for a large
save, a few helper threads (:func:`save_threads` picks how many). The time of a save is
almost all inside ``write()`` (the kernel allocating page cache and copying into it), and
on a shared virtual machine that cost swings by 2-8x from one save to the next; helpers
overlap those stalls. The caller takes files too, so a machine too busy to run a helper
still makes progress at the speed of one thread.

>>> import os, tempfile, torch
>>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
>>> _ = write_file(path, torch.arange(4, dtype=torch.int32))
>>> os.path.getsize(path)
16
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from tensorbox._core.chunks import as_bytes, byte_chunks
from tensorbox._storage.atomic import fsync_dir, replacing
from tensorbox._storage.memmap_args import (
    MemmapFileExistsError,
)

__all__ = ["THREADED_BYTES", "save_threads", "write_all", "write_file"]

_J = TypeVar("_J")

#: A save of at least this many bytes, in two files or more, writes from several threads
#: by default (``num_threads=0``); smaller ones (every write-through commit) from the caller.
THREADED_BYTES = 32 << 20
#: At most this many threads by default: past it the kernel's page-cache work stops scaling.
_MAX_AUTO_THREADS = 4

#: Largest piece copied through RAM when writing a non-contiguous or non-CPU tensor.
# Linux writes at most 0x7FFFF000 bytes per write() call.
_MAX_WRITE = 1 << 30
_O_BINARY = getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY


def _refuse_replacing(path: str, existsok: bool) -> None:
    """``path`` exists: refuse a symlink, and any file unless ``existsok``."""
    if os.path.islink(path):  # replacing it would cut the link, not write its target
        raise MemmapFileExistsError(
            f"{path} is a symlink: a memory-mapped tensor is never written through "
            "symlink; pass the path of the file it points to, or remove the link"
        )
    if not existsok:
        raise MemmapFileExistsError(
            f"{path} already exists; pass existsok=True to replace it (it is replaced by a new "
            "file, so tensors already mapped from it keep the old data)"
        )


def write_file(
    path: str,
    tensor: Tensor | None = None,
    nbytes: int = 0,
    *,
    existsok: bool = True,
    fsync: bool = False,
    sync_dir: bool = True,
) -> tuple[int, int]:
    """Create ``path`` holding ``tensor``'s bytes, or ``nbytes`` zero bytes (a sparse file).

    ``fsync`` makes the bytes durable, and the directory entry too unless ``sync_dir``
    is False (a caller writing many files syncs their directory once). Returns the
    file's identity (device, inode), which :func:`map_file` records. An existing file
    is replaced (:func:`~tensorbox._storage.atomic.replacing`), never written into.
    """
    try:
        fd: int | None = os.open(path, _NEW, 0o666)
    except FileExistsError:
        fd = None
    if fd is not None:
        ident = _fill(fd, path, tensor, nbytes, fsync)
    else:
        _refuse_replacing(path, existsok)
        with replacing(path) as tmp:
            ident = _fill(os.open(tmp, _NEW, 0o666), tmp, tensor, nbytes, fsync)
    if fsync and sync_dir:
        fsync_dir(os.path.dirname(path))
    return ident


def _fill(fd: int, path: str, tensor: Tensor | None, nbytes: int, fsync: bool) -> tuple[int, int]:
    """Write the new file ``fd`` at ``path`` and close it (deleted when a write fails)."""
    try:
        if tensor is None:
            if nbytes:
                os.ftruncate(fd, nbytes)
        elif (
            tensor.device.type == "cpu"
            and tensor.is_contiguous()
            and tensor.layout is torch.strided
            and not (tensor.is_conj() or tensor.is_neg() or tensor.is_nested)
        ):  # the usual case, without byte_chunks' generator (a save calls this per leaf)
            chunk = as_bytes(tensor.detach())
            while chunk:
                chunk = chunk[os.write(fd, chunk[:_MAX_WRITE]) :]
        else:
            for chunk in byte_chunks(tensor):
                while chunk:
                    chunk = chunk[os.write(fd, chunk[:_MAX_WRITE]) :]
        if fsync:
            os.fsync(fd)
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return (st.st_dev, st.st_ino)


def _cpus() -> int:
    """The CPUs this process may run on (its affinity mask, where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def save_threads(num_threads: int, sizes: Sequence[int]) -> int:
    """How many threads write files of ``sizes`` bytes: ``num_threads`` when positive;
    with 0 (the default), ``min(4, CPUs)`` for a save of :data:`THREADED_BYTES` or more
    in two files or more, else 1 (the calling thread alone).

    >>> save_threads(3, [10]), save_threads(0, [10, 10]), save_threads(0, [1 << 30])
    (3, 1, 1)
    >>> save_threads(0, [16 << 20, 16 << 20]) == min(4, _cpus())
    True
    """
    if num_threads > 0:
        return num_threads
    if len(sizes) < 2 or sum(sizes) < THREADED_BYTES:
        return 1
    return max(1, min(_MAX_AUTO_THREADS, _cpus()))


def write_all(
    fn: Callable[[_J], Any],
    jobs: Sequence[_J],
    threads: int,
    done: Callable[[int], None] | None = None,
) -> list[Any]:
    """``[fn(job) for job in jobs]``, worked on by the caller and ``threads - 1`` helpers.

    Every thread takes the next job from one counter, the caller included: on a machine
    too busy to run a helper, the caller goes on alone. ``done(i)`` is called in the
    calling thread for each finished job (helpers' jobs are reported as the caller
    finds them finished), in any order. The first exception stops every thread before
    its next job, and is raised once all of them have stopped: when this returns or
    raises, no helper is still writing.

    >>> write_all(lambda x: x * x, [1, 2, 3], threads=2)
    [1, 4, 9]
    """
    results: list[Any] = [None] * len(jobs)
    if threads <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            results[i] = fn(job)
            if done is not None:
                done(i)
        return results
    counter = itertools.count()  # next() on it is atomic under the GIL
    finished: list[int] = []  # appended by every thread (atomic), reported by the caller
    failed: list[BaseException] = []
    reported = 0

    def work() -> None:
        try:
            while not failed and (i := next(counter)) < len(jobs):
                results[i] = fn(jobs[i])
                finished.append(i)
        except BaseException as err:  # stops the others; raised by the caller below
            failed.append(err)

    def report() -> None:
        nonlocal reported
        while done is not None and reported < len(finished):
            done(finished[reported])
            reported += 1

    helpers = [
        threading.Thread(target=work, daemon=True) for _ in range(min(threads, len(jobs)) - 1)
    ]
    for helper in helpers:
        helper.start()
    try:
        while not failed and (i := next(counter)) < len(jobs):
            results[i] = fn(jobs[i])
            finished.append(i)
            report()
    except BaseException as err:  # KeyboardInterrupt too: the helpers stop, then it is raised
        failed.insert(0, err)
    finally:
        for helper in helpers:
            helper.join()
    if failed:
        raise failed[0]
    report()
    return results
