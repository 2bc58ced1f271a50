"""The parent's side of the producer processes: start them, wait for batches, stop them.

The consumer blocks in ``multiprocessing.connection.wait`` on every producer's pipe *and*
every producer's process sentinel at once, so it wakes up as soon as a batch is done or
a producer exits, whatever the reason: a producer killed by a signal is noticed at once,
never waited on. Shutdown sets the stop flag, wakes producers waiting for a slot, gives
them a moment to exit, then terminates (SIGTERM, then SIGKILL) whatever is left: a
producer in the middle of a batch is making data nobody will read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import signal
import time
from collections import deque
from multiprocessing import connection
from typing import Any

from tensorbox.buffer import _worker
from tensorbox.buffer._plan import Plan
from tensorbox.buffer._worker import (
    DONE,
    ERROR,
    EXIT,
    MSG,
    QUIT,
    READY,
    STOP,
    TASK,
    WORK,
    WorkerConfig,
)
from tensorbox.errors import TensorboxError

__all__ = ["ProducerError", "Runtime"]

_F_SETPIPE_SZ = 1031  # Linux: grow a pipe so producers far ahead never block on a report
_GRACE_S = 0.5  # how long shutdown waits for producers to exit on their own


class ProducerError(TensorboxError, RuntimeError):
    """A producer process raised, could not start, or died (killed by a signal).

    The message carries the producer's traceback. Attributes: ``worker`` (its number),
    ``epoch`` and ``batch`` (what it was making, None if unknown), ``exitcode``
    (negative: killed by that signal), ``remote_traceback`` (text).
    """

    def __init__(
        self,
        message: str,
        *,
        worker: int,
        epoch: int | None = None,
        batch: int | None = None,
        exitcode: int | None = None,
        remote_traceback: str = "",
    ) -> None:
        super().__init__(message)
        self.worker = worker
        self.epoch = epoch
        self.batch = batch
        self.exitcode = exitcode
        self.remote_traceback = remote_traceback


def _grow_pipe(conn: Any) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(conn.fileno(), _F_SETPIPE_SZ, 1 << 20)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Runtime:
    """One generation of producer processes making batches ``start`` .. ``end - 1``."""

    def __init__(
        self,
        ctx: Any,  # a multiprocessing context (BaseContext lacks Process in typeshed)
        *,
        plan: Plan,
        slots: Any,
        user: tuple[Any, Any, Any, Any],  # dataset, transform, batch_transform, init_fn
        num_workers: int,
        capacity: int,
        tokens: int,
        start: int,
        end: int,
        seed_global: bool,
        threads: int,
        folder: str,
    ) -> None:
        self.plan = plan
        self.capacity = capacity
        self.start_g = start
        self.end = end
        self.workers = num_workers
        self.ctrl = ctx.RawArray("q", WORK + num_workers)
        for w in range(num_workers):
            self.ctrl[WORK + w] = -1
        # Batch numbers for the producers (see _worker): both ends non-blocking, so that
        # neither a full pipe nor an empty one ever blocks the consumer or a producer.
        self.task_r, self.task_w = ctx.Pipe(duplex=False)
        os.set_blocking(self.task_r.fileno(), False)
        os.set_blocking(self.task_w.fileno(), False)
        _grow_pipe(self.task_w)
        self.next_task = start  # the next batch number to write
        self.limit = start + tokens  # batches below it may be handed out
        self.quit_sent = False
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.open: list[bool] = []
        self.exited: set[int] = set()
        self.ready: set[int] = set()  # batches done and not yet consumed
        self.started_at = time.perf_counter()
        self.startup_s: float | None = None  # until the first producer was ready
        self.produced = 0
        self.busy_s = 0.0
        self.idle_s = 0.0
        self.done_times: deque[float] = deque(maxlen=64)
        self.closed = False
        try:
            for wid in range(num_workers):
                self._start_one(ctx, wid, slots, user, seed_global, threads, folder)
            self._feed()
        except BaseException:
            self.shutdown()
            raise

    def _start_one(
        self,
        ctx: Any,
        wid: int,
        slots: Any,
        user: tuple[Any, ...],
        seed_global: bool,
        threads: int,
        folder: str,
    ) -> None:
        r, w = ctx.Pipe(duplex=False)
        _grow_pipe(w)
        cfg = WorkerConfig(wid, self.capacity, seed_global, threads, folder)
        args = (cfg, self.plan, slots, *user, self.ctrl, self.task_r, w)
        proc = ctx.Process(
            target=_worker.main, args=args, name=f"tensorbox-buffer-{wid}", daemon=True
        )
        try:
            proc.start()
        except (pickle.PicklingError, AttributeError, TypeError) as err:
            r.close()
            w.close()
            raise TypeError(
                f"cannot send the dataset or functions to producer processes ({err}). With "
                f"start_method={ctx.get_start_method()!r} they are pickled: define functions "
                "and classes at module level of an importable module (not in __main__ of an "
                "interactive session, not lambdas), or use start_method='fork'"
            ) from err
        finally:
            w.close()  # the child has its own copy; ours would hide the child's death (EOF)
        self.procs.append(proc)
        self.conns.append(r)
        self.open.append(True)

    # -------------------------------------------------------------- waiting

    @property
    def pids(self) -> list[int | None]:
        return [p.pid for p in self.procs]

    def in_progress(self) -> int:
        return sum(1 for w in range(len(self.procs)) if self.ctrl[WORK + w] >= 0)

    def taken(self) -> int:
        """Batches handed out to producers so far (done, in progress, or in the pipe)."""
        return self.next_task - self.start_g

    def _feed(self) -> None:
        """Write the batch numbers that may be handed out now (never blocks)."""
        hi = self.limit if self.end < 0 else min(self.limit, self.end)
        fd = self.task_w.fileno()
        while self.next_task < hi:
            # At most 512 records (4096 bytes, PIPE_BUF) per write: all or nothing.
            n = min(hi - self.next_task, 512)
            data = b"".join(TASK.pack(g) for g in range(self.next_task, self.next_task + n))
            try:
                os.write(fd, data)
            except BlockingIOError:  # the pipe is full; the rest goes on a later call
                return
            self.next_task += n
        if 0 <= self.end <= self.next_task and not self.quit_sent:
            with contextlib.suppress(BlockingIOError):
                os.write(fd, TASK.pack(QUIT) * self.workers)
                self.quit_sent = True

    def release(self) -> None:
        """The consumer moved past a batch: its slot is free for batch ``g + capacity``."""
        self.limit += 1
        self._feed()

    def wait_for(self, g: int, timeout: float | None) -> None:
        """Return when batch ``g`` is in its slot; raise ProducerError / TimeoutError."""
        if self.next_task < self.limit:
            self._feed()  # a full pipe refused numbers earlier
        if g not in self.ready:
            # Fast path: read the reports already in the pipes (a poll() syscall each),
            # cheaper than building a selector; a dead producer shows when we must block.
            for w, o in enumerate(self.open):
                if o:
                    self._drain(w)
        deadline = None if timeout is None else time.perf_counter() + timeout
        while g not in self.ready:
            step = 1.0
            if deadline is not None and timeout is not None:
                if self.startup_s is None:  # start-up (imports, unpickling) is not counted
                    deadline = time.perf_counter() + timeout
                step = deadline - time.perf_counter()
                if step <= 0:
                    raise TimeoutError(self._stuck(g, timeout))
            if not self.poll(min(step, 1.0)) and len(self.exited) == len(self.procs):
                raise RuntimeError(
                    f"every producer exited but batch {g} (epoch, batch "
                    f"{self.plan.locate(g)}) was never made; this is a bug in tensorbox"
                )
        self.ready.discard(g)

    def poll(self, timeout: float) -> bool:
        """Handle what producers reported within ``timeout`` seconds; False if nothing."""
        waitables = [c for c, o in zip(self.conns, self.open) if o]
        waitables += [p.sentinel for w, p in enumerate(self.procs) if w not in self.exited]
        if not waitables:
            return False
        hits = connection.wait(waitables, timeout)
        for w, conn in enumerate(self.conns):
            if self.open[w] and conn in hits:
                self._drain(w)
        for w, proc in enumerate(self.procs):
            if proc.sentinel in hits and w not in self.exited:
                self._drain(w)  # an error report sent just before exiting comes first
                proc.join(0.1)
                if w not in self.exited:
                    raise self._died(w, proc.exitcode)
        return bool(hits)

    def _drain(self, w: int) -> None:
        conn = self.conns[w]
        try:
            while self.open[w] and conn.poll():
                self._handle(w, conn.recv_bytes())
        except (EOFError, OSError):
            self.open[w] = False

    def _handle(self, w: int, msg: bytes) -> None:
        kind = msg[:1]
        if kind == ERROR:
            raise self._failed(*pickle.loads(msg[1:]))
        _, g, busy, idle = MSG.unpack(msg)
        if kind == DONE:
            self.ready.add(g)
            self.produced += 1
            self.busy_s += busy
            self.idle_s += idle
            self.done_times.append(time.perf_counter())
        elif kind == READY:
            if self.startup_s is None:
                self.startup_s = time.perf_counter() - self.started_at
        elif kind == EXIT:
            self.exited.add(w)

    def _where(self, g: int) -> str:
        if g < 0:
            return "while starting (worker_init_fn, or unpickling the dataset and functions)"
        epoch, b = self.plan.locate(g)
        return f"while making epoch {epoch} batch {b}"

    def _failed(
        self, w: int, g: int, name: str, text: str, tb: str, original: bytes | None
    ) -> ProducerError:
        epoch, b = self.plan.locate(g) if g >= 0 else (None, None)
        err = ProducerError(
            f"producer {w} raised {name}: {text}\n{self._where(g)}. "
            f"Traceback from the producer:\n{tb}",
            worker=w, epoch=epoch, batch=b, remote_traceback=tb,
        )  # fmt: skip
        if original is not None:
            with contextlib.suppress(Exception):
                err.__cause__ = pickle.loads(original)
        return err

    def _died(self, w: int, code: int | None) -> ProducerError:
        g = self.ctrl[WORK + w]
        epoch, b = self.plan.locate(g) if g >= 0 else (None, None)
        pid = self.procs[w].pid
        if code is not None and code < 0:
            how = f"was killed by {_signal_name(code)}"
            hint = (
                " (SIGKILL often comes from the kernel's out-of-memory killer; SIGBUS from a "
                "full RAM disk; SIGSEGV from a crash in native code)"
            )
        else:
            how, hint = f"exited unexpectedly with code {code}", ""
        where = self._where(g) if g >= 0 else "while idle"
        return ProducerError(
            f"producer {w} (pid {pid}) {how} {where}{hint}; no traceback is available",
            worker=w, epoch=epoch, batch=b, exitcode=code,
        )  # fmt: skip

    def _stuck(self, g: int, timeout: float | None) -> str:
        epoch, b = self.plan.locate(g)
        working = {
            w: self.plan.locate(self.ctrl[WORK + w])
            for w in range(len(self.procs))
            if self.ctrl[WORK + w] >= 0
        }
        return (
            f"batch {b} of epoch {epoch} was not ready after timeout={timeout} s; producers "
            f"busy on (epoch, batch): {working!r}; batches done and waiting: {len(self.ready)}"
        )

    # -------------------------------------------------------------- stopping

    def shutdown(self) -> None:
        """Stop every producer (idempotent). Never raises, never waits long."""
        if self.closed:
            return
        self.closed = True
        self.ctrl[STOP] = 1  # idle producers see it within _worker._POLL_S
        deadline = time.perf_counter() + _GRACE_S
        for p in self.procs:
            p.join(max(0.0, deadline - time.perf_counter()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join()
            p.close()
        for c in (*self.conns, self.task_r, self.task_w):
            c.close()
        self.open = [False] * len(self.conns)
