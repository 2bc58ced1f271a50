"""The producer process: take the next batch number, make it into its slot, report it.

Coordination uses no data channel and no named semaphore (nothing that could be left
behind in ``/dev/shm``); see ``_runtime`` for the parent's side:

- a task pipe shared by all producers carries batch numbers, 8 bytes each. The parent
  writes batch ``g`` only once batch ``g - capacity`` has been consumed, so at most
  ``capacity`` batches are ever handed out and not consumed (the back-pressure), and
  batch ``g`` can go to slot ``g % capacity``. Pipe reads of 8 bytes are atomic, so
  each number goes to exactly one producer, and idle producers always take the oldest
  missing batch;
- a pipe per producer carries 25-byte reports to the parent: "batch g done" (with busy
  and idle seconds for ``stats()``), "exiting", or an error with its traceback;
- a small shared array holds the stop flag and, per producer, the batch it is making.

A producer ignores SIGINT (Ctrl-C reaches the whole process group; the parent decides).
If it finds the parent dead (the training process was killed), it removes the slot
folder itself, so nothing is left in ``/dev/shm``; a SIGTERM sent to the whole process
group is handled the same way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing import parent_process
from typing import Any

import torch

from tensorbox.buffer._plan import Plan, Producer
from tensorbox.buffer._slots import remove

__all__ = ["DONE", "ERROR", "EXIT", "MSG", "READY", "STOP", "TASK", "WORK", "WorkerConfig", "main"]

# Control block (a shared int64 array): the stop flag, then per producer the batch it
# is making (-1 when idle), for messages about a producer that died.
STOP, WORK = 0, 1
# Task records: a batch number >= 0, or QUIT (no more batches: exit).
TASK = struct.Struct("<q")
QUIT = -1
# Report kinds (first byte); DONE/READY/EXIT are struct "<cqdd": kind, g, busy, idle.
DONE, READY, EXIT, ERROR = b"D", b"R", b"X", b"E"
MSG = struct.Struct("<cqdd")
_POLL_S = 0.2  # how often an idle producer checks the stop flag and its parent
_ORPHAN_WAIT_S = 3.0  # after an outside SIGTERM: how long to wait for the parent to die


@dataclass(frozen=True)
class WorkerConfig:
    wid: int
    capacity: int
    seed_global: bool
    threads: int
    folder: str  # the slot folder, removed by a producer that outlives its parent


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that cleanup code runs."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated


def _send(conn: Any, kind: bytes, g: int = -1, busy: float = 0.0, idle: float = 0.0) -> None:
    conn.send_bytes(MSG.pack(kind, g, busy, idle))


def _send_error(conn: Any, wid: int, g: int, exc: BaseException) -> None:
    text = traceback.format_exc()
    try:  # the exception itself when it pickles (becomes the ProducerError's __cause__)
        original: bytes | None = pickle.dumps(exc)
    except Exception:
        original = None
    payload = pickle.dumps((wid, g, type(exc).__name__, str(exc), text, original))
    with contextlib.suppress(OSError):  # the parent is gone: nobody to tell
        conn.send_bytes(ERROR + payload)


def _parent_dead(parent: Any) -> bool:
    return parent is not None and not parent.is_alive()


def _watch_parent(parent: Any, folder: str) -> None:
    """End this producer when the trainer dies, even if the user's transform hangs: a
    thread polls the parent, removes the shared slots and exits (nothing left behind)."""

    def watch() -> None:
        while not _parent_dead(parent):
            time.sleep(_WATCH_S)
        remove(folder)
        os._exit(1)

    if parent is not None:
        threading.Thread(target=watch, name="tensorbox-orphan-watch", daemon=True).start()


_WATCH_S = 0.5


def main(
    cfg: WorkerConfig,
    plan: Plan,
    slots: Any,
    dataset: Any,
    transform: Any,
    batch_transform: Any,
    init_fn: Any,
    ctrl: Any,
    task_conn: Any,
    conn: Any,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    parent = parent_process()
    _watch_parent(parent, cfg.folder)
    try:
        torch.set_num_threads(cfg.threads)
        tasks = task_conn.fileno()  # read raw: 8-byte records, not Connection messages
        os.set_blocking(tasks, False)
        try:
            if init_fn is not None:
                init_fn(cfg.wid)
            producer = Producer(plan, dataset, transform, batch_transform, cfg.seed_global)
            producer.attach(slots)
            _send(conn, READY)
        except _Terminated:
            raise
        except BaseException as exc:
            _send_error(conn, cfg.wid, -1, exc)
            return
        _loop(cfg, producer, ctrl, tasks, conn, parent)
    except _Terminated:
        if not ctrl[STOP]:  # not our parent's shutdown: is the whole training run dying?
            deadline = time.monotonic() + _ORPHAN_WAIT_S
            while not _parent_dead(parent) and time.monotonic() < deadline:
                time.sleep(0.05)
        if _parent_dead(parent):
            remove(cfg.folder)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # exit as killed by SIGTERM, as expected
    except (BrokenPipeError, ConnectionResetError):
        pass  # the parent closed our report pipe: it is shutting down or gone
    finally:
        if _parent_dead(parent):
            remove(cfg.folder)


def _take(tasks: int, ctrl: Any, parent: Any, folder: str) -> int | None:
    """The next batch number, QUIT, or None when told to stop."""
    while not ctrl[STOP]:
        ready, _, _ = select.select([tasks], [], [], _POLL_S)
        if not ready:
            if _parent_dead(parent):
                remove(folder)
                return None
            continue
        try:
            data = os.read(tasks, TASK.size)
        except BlockingIOError:  # another producer took it
            continue
        if not data:  # every writer closed the pipe: the parent is gone
            return None
        task: int = TASK.unpack(data)[0]
        return task
    return None


def _loop(
    cfg: WorkerConfig, producer: Producer, ctrl: Any, tasks: int, conn: Any, parent: Any
) -> None:
    while True:
        t0 = time.perf_counter()
        g = _take(tasks, ctrl, parent, cfg.folder)
        if g is None or ctrl[STOP]:
            return
        if g == QUIT:
            _send(conn, EXIT)
            return
        idle = time.perf_counter() - t0
        ctrl[WORK + cfg.wid] = g
        try:
            producer.produce(g, g % cfg.capacity)
        except _Terminated:
            raise
        except BaseException as exc:
            _send_error(conn, cfg.wid, g, exc)
            return
        ctrl[WORK + cfg.wid] = -1
        _send(conn, DONE, g, time.perf_counter() - t0 - idle, idle)
