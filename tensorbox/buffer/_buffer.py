"""``AugmentBuffer``: the consumer. See :mod:`tensorbox.buffer` for the user's view."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tensorbox.buffer import _slots
from tensorbox.buffer._plan import (
    GlobalRNG,
    KeyTransforms,
    Plan,
    Producer,
    as_layout,
    sample_nbytes,
)
from tensorbox.buffer._runtime import ProducerError, Runtime
from tensorbox.buffer._stats import BufferStats, rate, window
from tensorbox.data.sharding import resolve_replicas
from tensorbox.progress import Progress

__all__ = ["AugmentBuffer"]


def _default_start_method() -> str:
    # forkserver: safe in a process that already runs threads (fork is not), and after the
    # first producer, starting one costs a fork of a server that has torch imported, not
    # a fresh interpreter (spawn: about 2 s here per producer).
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _load_by_value(data: bytes) -> Any:
    return pickle.loads(data)


class _ByValue:
    """Ships a function that pickle cannot name (a lambda, a function defined in a
    notebook) by value, with cloudpickle; unwraps itself in the producer."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __reduce__(self) -> tuple[Any, ...]:
        import cloudpickle

        return (_load_by_value, (cloudpickle.dumps(self.obj),))


def _portable(obj: Any, what: str, method: str) -> Any:
    """``obj`` ready to be sent to a producer started with ``method``."""
    if obj is None or method == "fork":  # fork copies the process: nothing is pickled
        return obj
    try:
        pickle.dumps(obj)
        return obj
    except Exception as err:
        try:
            import cloudpickle  # noqa: F401
        except ImportError:
            raise TypeError(
                f"{what} {obj!r} cannot be pickled ({err}), and start_method={method!r} sends "
                "it to producer processes by pickling: define it at module level of an "
                "importable module (not a lambda, not in an interactive session), install "
                "cloudpickle, or use start_method='fork'"
            ) from err
        return _ByValue(obj)


class _Resources:
    """What must be released even if the buffer is only garbage collected: the producer
    processes and the slot folder. Holds no reference to the buffer (weakref.finalize)."""

    def __init__(self, folder: str | None) -> None:
        self.folder: str | None = folder
        self.runtime: Runtime | None = None

    def stop(self) -> None:
        rt, self.runtime = self.runtime, None
        if rt is not None:
            rt.shutdown()

    def close(self) -> None:
        self.stop()
        _slots.remove(self.folder)
        self.folder = None


class AugmentBuffer:
    """Producer processes write augmented batches into shared-memory slots ahead of the
    training loop; iterating yields them in a fixed order. See :mod:`tensorbox.buffer`.

    Args:
        dataset: ``len(dataset)`` samples; ``dataset[i]`` is a sample (dict of tensors or
            numbers, TensorDict or tensorclass instance). With ``batch_transform`` and no
            ``transform``, a TensorDict or tensor dataset is indexed with the batch's index
            tensor (one gather), others through ``__getitems__`` or per sample.
        transform: ``transform(sample, generator) -> sample``, run per sample with a
            ``torch.Generator`` seeded by ``sample_seed(seed, epoch, index)``; or a dict
            ``{key: fn}`` applying ``fn(sample[key], generator)`` and keeping other keys.
        batch_size: samples per batch (the slot size).
        batch_transform: ``batch_transform(batch, generator) -> batch``, run once per batch
            (after ``transform``, if both are given), seeded by ``batch_seed(...)``.
        num_workers: producer processes; 0 makes each batch in the consumer when asked
            for (same output: for debugging, and for the docs).
        capacity: slots, in batches (default ``4 * num_workers``); or ``capacity_bytes``
            (an int or a string such as ``"4GiB"``): as many batches as fit.
        num_epochs: stop after this many epochs (default: unbounded; producers run ahead
            across epoch boundaries either way).
        shuffle, drop_last, seed: a fresh permutation per epoch from ``seed``; keep or drop
            the last short batch.
        seed_global: also seed torch's, Python's and numpy's global generators per sample
            (per batch), so transforms using them (torchvision's) are reproducible too.
        dir: root folder of the slot files (default ``/dev/shm``); a RAM disk or fast SSD.
        start_method: ``"forkserver"`` (default), ``"spawn"`` or ``"fork"``.
        example: one sample (one batch with ``batch_transform``) fixing the slot layout;
            by default the first sample is made in this process to find it.
        copy: yield a copy of each batch instead of a view of its slot.
        timeout: seconds to wait for one batch before ``TimeoutError`` (default: no limit;
            a dead producer is detected at once either way).
        worker_init_fn: ``fn(worker_id)`` run first in each producer.
        worker_threads: ``torch.set_num_threads`` in each producer (default 1).
        preallocate: allocate slot files now (fails early when the folder is too small).
        progress: show a progress bar per epoch (tqdm if installed).
        num_replicas, rank: data-parallel training: batch only the share of rank ``rank``
            of ``num_replicas``, with ``BatchLoader``'s rules (defaults from the
            initialised default process group, else one replica; the same permutation
            on every rank, strided shares padded by repeating rows or cut with
            ``drop_last``; ``len()`` is this rank's batches per epoch). Ranks never draw
            the same random numbers (see :mod:`tensorbox.buffer`).
    """

    def __init__(
        self,
        dataset: Any,
        transform: Callable[[Any, Any], Any] | Mapping[Any, Callable[..., Any]] | None = None,
        *,
        batch_size: int,
        batch_transform: Callable[[Any, Any], Any] | None = None,
        num_workers: int = 2,
        capacity: int | None = None,
        capacity_bytes: int | str | None = None,
        num_epochs: int | None = None,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        seed_global: bool = True,
        dir: str | os.PathLike[str] | None = None,
        start_method: str | None = None,
        example: Any = None,
        copy: bool = False,
        timeout: float | None = None,
        worker_init_fn: Callable[[int], Any] | None = None,
        worker_threads: int = 1,
        preallocate: bool = True,
        progress: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        replicas, rank = resolve_replicas(num_replicas, rank)
        n = len(dataset)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if capacity is not None and capacity_bytes is not None:
            raise ValueError("give capacity (in batches) or capacity_bytes, not both")
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        if num_epochs is not None and num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1 or None, got {num_epochs!r}")
        if isinstance(transform, Mapping):
            transform = KeyTransforms(transform)
        for name, fn in (("transform", transform), ("batch_transform", batch_transform)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {fn!r}")
        self._plan = Plan(n, batch_size, drop_last, shuffle, seed, replicas, rank)
        if self._plan.batches_per_epoch < 1:
            share = f" ({self._plan.share} per rank of {replicas})" if replicas > 1 else ""
            raise ValueError(
                f"the dataset has {n} samples{share}: not one full batch of {batch_size} "
                "(drop_last=True); lower batch_size or keep the last batch"
            )
        method = start_method or _default_start_method()
        self._ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            self._ctx.set_forkserver_preload(["tensorbox.buffer"])
        self._workers = num_workers
        # With no producer processes nothing is pickled, so any callable will do.
        ship = method if num_workers > 0 else "fork"
        self._user = (
            dataset,
            _portable(transform, "transform", ship),
            _portable(batch_transform, "batch_transform", ship),
            _portable(worker_init_fn, "worker_init_fn", ship),
        )
        self._producer = Producer(self._plan, dataset, transform, batch_transform, seed_global)
        self._seed_global = seed_global
        self._threads = worker_threads
        self._copy = copy
        self._timeout = timeout
        self._progress = progress
        self._end = -1 if num_epochs is None else num_epochs * self._plan.batches_per_epoch
        self._g = 0
        self._held = False  # the consumer holds a view of batch self._g - 1

        layout = self._layout(example)
        self._slot_bytes = batch_size * sample_nbytes(layout)
        if num_workers == 0:
            cap = 1  # inline: a batch is made when asked for, into the one slot
        elif capacity_bytes is not None:
            cap = _slots.parse_bytes(capacity_bytes) // self._slot_bytes
            if cap < 1:
                raise ValueError(
                    f"capacity_bytes={capacity_bytes!r} holds no batch: one batch takes "
                    f"{self._slot_bytes} bytes"
                )
        else:
            cap = 4 * num_workers if capacity is None else capacity
            if not isinstance(cap, int) or cap < 1:
                raise ValueError(f"capacity must be a positive int (batches), got {cap!r}")
        self._capacity = cap
        root = os.fspath(dir) if dir is not None else _slots.default_root()
        if num_workers == 0:  # inline: the one slot lives in this process's memory, so a
            # killed trainer leaves nothing in /dev/shm
            self._slots, folder = _slots.in_memory(layout, cap, batch_size), None
        else:
            self._slots, folder = _slots.allocate(layout, cap, batch_size, root, preallocate)
        self._producer.attach(self._slots)
        self._res = _Resources(folder)
        self._finalizer = weakref.finalize(self, self._res.close)
        self._closed = False
        self._pending: BaseException | None = None  # an error noticed by stats()
        # Statistics. Counters of stopped runtimes are folded into the totals.
        self._consumed = 0
        self._produced_before = 0
        self._busy_before = 0.0
        self._idle_before = 0.0
        self._wait_s = 0.0
        self._first_wait_s = 0.0
        self._fresh = True  # the next batch is the first since (re)start
        self._consume_times = window()

    def _layout(self, example: Any) -> Any:
        batched = self._producer.batch_transform is not None
        if example is not None:
            layout = as_layout(example, batched=batched)
        else:
            with GlobalRNG():
                layout = self._producer.example(0)
        return layout[0] if batched else layout

    # ------------------------------------------------------------------ properties

    def __len__(self) -> int:
        """Batches per epoch."""
        return self._plan.batches_per_epoch

    @property
    def epoch(self) -> int:
        """The epoch of the next batch."""
        return self._plan.locate(self._g)[0]

    @property
    def batch(self) -> int:
        """The index, within its epoch, of the next batch."""
        return self._plan.locate(self._g)[1]

    @property
    def capacity(self) -> int:
        """Number of slots (batches)."""
        return self._capacity

    @property
    def batch_size(self) -> int:
        """Samples per batch (the ``batch_size`` given at construction)."""
        return self._plan.batch_size

    @property
    def num_workers(self) -> int:
        """Producer processes (0: each batch is made in the consumer when asked)."""
        return self._workers

    @property
    def slots(self) -> Any:
        """The slot tree: a memory-mapped collection of batch size ``[capacity, batch_size]``."""
        return self._slots

    @property
    def dir(self) -> str | None:
        """The folder holding the slot files (removed by ``close()``)."""
        return self._res.folder

    @property
    def worker_pids(self) -> list[int | None]:
        """Process ids of the running producers (empty when none runs)."""
        rt = self._res.runtime
        return [] if rt is None else rt.pids

    def __repr__(self) -> str:
        return (
            f"AugmentBuffer(batches_per_epoch={len(self)}, batch_size={self.batch_size}, "
            f"capacity={self._capacity}, num_workers={self._workers}, epoch={self.epoch}, "
            f"batch={self.batch}, dir={self.dir!r})"
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> AugmentBuffer:
        """Start the producers now (iterating starts them otherwise): call it before
        building the model, and the buffer fills while you do."""
        self._check_open()
        if self._workers and self._res.runtime is None and not self._finished():
            self._res.runtime = Runtime(
                self._ctx,
                plan=self._plan,
                slots=self._slots,
                user=self._user,
                num_workers=self._workers,
                capacity=self._capacity,
                # A view the consumer still holds keeps its slot until the next step.
                tokens=self._capacity - self._held,
                start=self._g,
                end=self._end,
                seed_global=self._seed_global,
                threads=self._threads,
                folder=self._res.folder or "",
            )
            self._fresh = True
        return self

    def _stop(self) -> None:
        rt = self._res.runtime
        if rt is not None:
            self._produced_before += rt.produced
            self._busy_before += rt.busy_s
            self._idle_before += rt.idle_s
        self._res.stop()

    def close(self) -> None:
        """Stop the producers and remove the slot files (idempotent). Views of slots stay
        readable (their memory lives until they are freed) but are no longer filled."""
        if not self._closed:
            self._stop()
            self._closed = True
            self._finalizer()

    def __enter__(self) -> AugmentBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this AugmentBuffer is closed; make a new one")

    def _finished(self) -> bool:
        return 0 <= self._end <= self._g

    # ------------------------------------------------------------------ consuming

    def __iter__(self) -> Iterator[Any]:
        """The remaining batches of the current epoch, in order (see the module doc)."""
        self._check_open()
        bpe = self._plan.batches_per_epoch
        end = (self._g // bpe + 1) * bpe
        if self._end >= 0:
            end = min(end, self._end)
        bar = None
        if self._progress and self._g < end:
            bar = Progress(
                f"epoch {self.epoch}",
                bpe,
                unit="batch",
                progress=True,
                initial=self.batch,
                status=self._status,
            )
        try:
            while self._g < end:
                batch = self._next()
                if bar is not None:
                    bar.update(1, files=0)
                yield batch
        finally:
            if bar is not None:
                bar.close(ok=self._g >= end)  # a break or an error: "stopped after"

    def _next(self) -> Any:
        self._check_open()
        if self._pending is not None:
            err, self._pending = self._pending, None
            self._stop()
            raise err
        g = self._g
        t0 = time.perf_counter()
        if self._workers == 0:
            slot = 0
            with GlobalRNG():
                self._producer.produce(g, slot)
        else:
            slot = g % self._capacity
            rt = self._res.runtime or self.start()._res.runtime
            assert rt is not None
            if self._held:
                rt.release()
                self._held = False
            try:
                rt.wait_for(g, self._timeout)
            except BaseException:  # a producer failed, a timeout, or Ctrl-C while waiting
                self._stop()
                raise
        now = time.perf_counter()
        self._wait_s += now - t0
        if self._fresh:
            self._first_wait_s += now - t0
            self._fresh = False
        self._g = g + 1
        self._held = True
        self._consumed += 1
        self._consume_times.append(now)
        view = self._slots[slot]
        n = self._plan.rows(self._plan.locate(g)[1])
        if n < self._plan.batch_size:
            view = view[:n]
        return view.clone() if self._copy else view

    # ------------------------------------------------------------------ position

    def seek(self, epoch: int, batch: int = 0) -> None:
        """Continue at batch ``batch`` of ``epoch``. Producers restart there; batches made
        ahead are dropped, and views handed out before become invalid."""
        self._check_open()
        bpe = self._plan.batches_per_epoch
        if epoch < 0 or not 0 <= batch < bpe:
            raise ValueError(
                f"(epoch, batch)=({epoch!r}, {batch!r}) is out of range: epoch >= 0 and "
                f"0 <= batch < {bpe} (batches per epoch)"
            )
        g = epoch * bpe + batch
        if self._end >= 0 and g > self._end:
            raise ValueError(f"epoch {epoch} is past num_epochs={self._end // bpe}")
        if g != self._g:
            self._stop()
            self._held = False
            self._g = g

    def state_dict(self) -> dict[str, Any]:
        """Where to continue: the next batch to consume, and what fixes the batches' content."""
        return self._plan.state(self._g)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue where ``state`` (from ``state_dict()``) was taken; the buffer must be
        built with the same dataset size, batch size, seed, shuffle and drop_last.

        The ranks of a data-parallel run move in step, so rank 0's state resumes every
        rank. With another number of replicas, a state taken at an epoch boundary
        resumes (the next epoch is shared among the new ranks); one taken mid-epoch is
        refused, since the rows left over from the old shares cannot be re-dealt as
        this world size's batches."""
        self._plan.check_state(state, "AugmentBuffer")
        saved = state.get("num_replicas", 1)
        if saved != self._plan.num_replicas and int(state["batch"]) != 0:
            raise ValueError(
                f"the state was saved mid-epoch (epoch {state['epoch']!r}, batch "
                f"{state['batch']!r}) by {saved!r} replicas, but this buffer is one of "
                f"{self._plan.num_replicas}: resume with num_replicas={saved!r}, or from a "
                "state taken at an epoch boundary (batch 0)"
            )
        self.seek(int(state["epoch"]), int(state["batch"]))

    # ------------------------------------------------------------------ observing

    def _status(self) -> str:
        """The progress bar's state beside the count."""
        s = self.stats()
        return f"fill {s.filled}/{s.capacity} wait {s.wait_s:.1f}s"

    def stats(self) -> BufferStats:
        """A snapshot of fill, rates and waits (cheap: call it every step if you like)."""
        rt = self._res.runtime
        if rt is not None and self._pending is None:
            try:
                rt.poll(0)
            except ProducerError as err:  # raised by the next iteration step
                self._pending = err
        epoch, b = self._plan.locate(self._g)
        return BufferStats(
            capacity=self._capacity,
            slot_bytes=self._slot_bytes,
            filled=0 if rt is None else len(rt.ready),
            in_progress=0 if rt is None else rt.in_progress(),
            produced=self._produced_before + (rt.produced if rt else 0)
            if self._workers
            else self._consumed,
            consumed=self._consumed,
            epoch=epoch,
            batch=b,
            producer_rate=rate(rt.done_times) if rt else 0.0,
            consumer_rate=rate(self._consume_times),
            wait_s=self._wait_s,
            first_wait_s=self._first_wait_s,
            producer_busy_s=self._busy_before + (rt.busy_s if rt else 0.0),
            producer_idle_s=self._idle_before + (rt.idle_s if rt else 0.0),
            num_workers=self._workers,
            workers_alive=0 if rt is None else sum(p.is_alive() for p in rt.procs),
        )
