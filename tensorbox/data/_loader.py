"""``BatchLoader``: batches out of a (memory-mapped) dataset, read ahead by threads.

What it does per epoch, and why:

- the order is a permutation drawn from ``(seed, epoch)`` (``shuffle=False``: file order),
  so an epoch's batches are known in advance and can be rebuilt after a restart;
- each batch's rows are sorted, then read with one ``index_select`` per leaf into a
  reused buffer (``_read.py``); the image leaf can be cropped, flipped and normalised
  while it is read;
- ``num_threads`` background threads prepare the next batches. Threads, not processes:
  torch's copies and arithmetic release the GIL, so threads run in parallel, and the
  batch never needs pickling or a copy out of a worker process (on the machine this was
  tuned on, 2 DataLoader worker processes shipping float batches ran at 45% of the
  speed of the same work done in the main process);
- with a CUDA ``device``, buffers are pinned, copies are ``non_blocking`` and the
  transforms and normalisation run on the GPU, after uint8 crossed the bus;
- per-batch randomness (crop offsets, flips, the transform's draws) comes from a
  generator seeded by ``(seed, epoch, batch number)``, and the rank when there are
  several: ``state_dict()`` / ``load_state_dict()`` resume mid-epoch with exactly the
  same batches;
- data-parallel: with ``num_replicas`` ranks (by default, those of an initialised
  ``torch.distributed`` process group) every rank draws the same permutation and reads
  its own strided share of it (``tensorbox.data.sharding``), as ``DistributedSampler`` does. No
  collective runs inside the loader.

Buffers are reused, safely: a batch's memory is refilled only once nothing refers to
it any more (no tensor, view, numpy array or autograd graph made from the batch). In
the usual training loop each batch is dropped when the next arrives, so the same few
buffers go round; batches you keep (``list(loader)``, one saved for logging) are never
overwritten, their buffers simply leave the rotation. ``reuse_buffers=False`` makes
every batch in fresh memory.

>>> import torch
>>> from tensorbox import TensorDict
>>> data = TensorDict({"images": torch.zeros(10, 3, 8, 8, dtype=torch.uint8),
...                    "targets": torch.arange(10)}, batch_size=[10])
>>> loader = BatchLoader(data, batch_size=4, seed=0, crop=6, flip=True, normalize="imagenet")
>>> [tuple(b["images"].shape) for b in loader]
[(4, 3, 6, 6), (4, 3, 6, 6), (2, 3, 6, 6)]
>>> it = iter(loader); first = next(it)["targets"].tolist()
>>> state = loader.state_dict(); second = next(it)["targets"].tolist(); it.close()
>>> loader.load_state_dict(state); next(iter(loader))["targets"].tolist() == second
True
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import Tensor

from tensorbox import prefetch, unravel_key
from tensorbox.data._read import ReadOptions, ReadPlan, Slot, SlotPool
from tensorbox.data.sharding import resolve_replicas, share_length, share_positions
from tensorbox.data.transforms import IMAGENET_MEAN, IMAGENET_STD, Normalize

__all__ = ["BatchLoader"]

#: The dataset's type: every batch is one of it (a TensorDict, or the tensorclass).
T = TypeVar("T")

# Ends the seed material of a sharded batch: SeedSequence treats trailing zeros as
# absent, so without it (seed, epoch, b, rank=0, ...) could collide with (seed, epoch, b).
_SHARDED = 0x5EED


def _mix(*numbers: int) -> int:
    """A well-mixed 63-bit seed from small integers (SeedSequence's hashing)."""
    return int(
        np.random.SeedSequence([int(x) & (2**63 - 1) for x in numbers]).generate_state(
            1, np.uint64
        )[0]
        >> 1
    )


def _as_normalize(normalize: Any) -> Normalize | None:
    if normalize is None or isinstance(normalize, Normalize):
        return normalize
    if normalize == "imagenet":
        return Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if isinstance(normalize, Sequence) and len(normalize) == 2 and not isinstance(normalize, str):
        return Normalize(*normalize)
    raise ValueError(
        f"normalize must be None, 'imagenet', (mean, std) or a Normalize, got {normalize!r}"
    )


class _State:
    """What the reader threads share with the consumer (never the iterator itself, so that
    dropping the iterator can stop the threads: see ``_Epoch``)."""

    def __init__(self, slots: int) -> None:
        self.cond = threading.Condition()
        self.ready: dict[int, Any] = {}
        self.error: BaseException | None = None
        self.stopped = False
        self.next_task = 0
        self.limit = 0  # batches numbered below this may be produced (their slot is free)
        self.slots = slots
        self.threads: list[threading.Thread] = []

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.ready.clear()
            self.cond.notify_all()
        me = threading.current_thread()
        for t in self.threads:
            if t is not me:
                t.join()
        self.threads.clear()


class BatchLoader(Generic[T]):
    """Iterate over ``data`` (a TensorDict or tensorclass) in batches of its own type.

    Args:
        data: the dataset; its first batch dim indexes samples. Memory-mapped or not.
        batch_size: samples per batch; the last batch is smaller unless ``drop_last``.
        shuffle: a new permutation each epoch (from ``seed`` and the epoch number).
        seed: the loader's seed (default: drawn from torch's global generator).
        crop: ``int`` or ``(h, w)``: crop the image leaf while reading it.
        crop_mode: ``"random"`` (a uniform window per sample) or ``"center"``.
        flip: ``True`` (p = 0.5) or a probability: horizontal flip per sample, at read time.
        normalize: ``"imagenet"``, ``(mean, std)`` or a ``Normalize``: float output,
            fused with the read on CPU, run on the device otherwise.
        transform: a module for the image batch (e.g. ``transforms.RandomResizedCrop``),
            run after crop/flip and before normalize, on ``device``. tensorbox transforms
            receive the batch's generator, so they are reproducible and resumable too.
        image_key: the image leaf (a key or a tuple path), ``"images"`` by default.
        device: where batches go (default CPU). CUDA: pinned buffers, non_blocking copies.
        num_threads: reader threads (default: 2, or 1 on a 1-core machine).
        prefetch: batches prepared ahead (default: 2 per thread).
        pin_memory: pin the CPU buffers (default: when ``device`` is CUDA).
        reuse_buffers: refill the CPU buffers of batches no longer referenced (see the
            module docstring); ``False``: fresh buffers for every batch.
        num_replicas, rank: data-parallel training: this loader reads the share of rank
            ``rank`` of ``num_replicas``. Both default to the initialised default process
            group's world size and rank, else to one replica. A loader used on one rank
            only (an evaluation on rank 0) passes ``num_replicas=1``. Every rank draws the
            same permutation from ``(seed, epoch)`` (``seed=None`` means 0 with several
            replicas, so the ranks agree) and takes every ``num_replicas``-th row of it;
            without ``drop_last`` the shares are padded to equal length by repeating rows,
            with it they are cut to equal length and each rank drops its partial last
            batch. ``len()`` is the number of batches of this rank.
    """

    def __init__(
        self,
        data: T,
        batch_size: int,
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int | None = None,
        crop: int | tuple[int, int] | None = None,
        crop_mode: str = "random",
        flip: bool | float = False,
        normalize: Any = None,
        transform: Any = None,
        image_key: str | tuple[str, ...] = "images",
        device: str | torch.device | None = None,
        num_threads: int | None = None,
        prefetch: int | None = None,
        pin_memory: bool | None = None,
        reuse_buffers: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if crop_mode not in ("random", "center"):
            raise ValueError(f"crop_mode must be 'random' or 'center', got {crop_mode!r}")
        p = 0.5 if flip is True else float(flip)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"flip must be a bool or a probability in [0, 1], got {flip!r}")
        if isinstance(crop, int):
            crop = (crop, crop)
        if crop is not None and (len(crop) != 2 or min(crop) < 1):
            raise ValueError(f"crop must be a positive int or (height, width), got {crop!r}")
        dev = torch.device(device) if device is not None else torch.device("cpu")
        threads = num_threads if num_threads is not None else min(2, os.cpu_count() or 1)
        if threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads!r}")
        pin = dev.type == "cuda" if pin_memory is None else pin_memory
        self.options = ReadOptions(
            image_key=unravel_key(image_key),
            crop=None if crop is None else (int(crop[0]), int(crop[1])),
            crop_mode=crop_mode,
            flip=p,
            normalize=_as_normalize(normalize),
            transform=transform,
            device=dev,
            pin=pin,
        )
        self.plan = ReadPlan(data, self.options)
        if self.options.normalize is not None:
            self.options.normalize = self.options.normalize.to(dev)
        if isinstance(transform, torch.nn.Module):
            transform.to(dev)
        self.data = data
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        if seed is None:
            # Several replicas must agree on the permutation without talking: a fixed seed
            # (DistributedSampler's default, 0); one replica draws its own.
            seed = 0 if self.num_replicas > 1 else int(torch.randint(0, 2**62, (1,)).item())
        self.seed = int(seed)
        self.num_threads = threads
        self.prefetch = max(1, prefetch if prefetch is not None else 2 * threads)
        self.reuse_buffers = reuse_buffers
        self._epoch = 0
        self._start = 0
        # Rows of the current epoch's permutation read before a resume with another world
        # size (load_state_dict): the rest of the epoch is shared among the new ranks.
        self._offset = 0
        self._active: weakref.ref[_Epoch] | None = None
        # Batches in flight (prefetch + 1, see _Epoch) plus the one the caller's loop holds
        # while it asks for the next: in a plain loop every slot is reused.
        self._pool = SlotPool(batch_size, self.prefetch + 2) if reuse_buffers else None

    # ------------------------------------------------------------ sizes and state

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return self._count(share_length(self.plan.length, self.num_replicas, self.drop_last))

    def _count(self, rows: int) -> int:
        return rows // self.batch_size if self.drop_last else math.ceil(rows / self.batch_size)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration starts (its permutation); advances when one ends."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch`` (its own permutation)."""
        self._close_active()
        self._epoch = int(epoch)
        self._start = 0
        self._offset = 0

    def state_dict(self) -> dict[str, int]:
        """Where iteration stands: the next batch of the current epoch to be yielded.

        The ranks of a data-parallel run move in step, so their states are equal (the
        rank is not part of it): the state of rank 0 resumes every rank.
        """
        active = self._active() if self._active is not None else None
        batch = active._yielded if active is not None and not active._done else self._start
        return {
            "seed": self.seed,
            "epoch": self._epoch,
            "batch": batch,
            "batch_size": self.batch_size,
            "length": self.plan.length,
            "num_replicas": self.num_replicas,
            "offset": self._offset,
            "drop_last": int(self.drop_last),
            "shuffle": int(self.shuffle),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume: the next iteration yields exactly the batches an uninterrupted run would.

        A state saved with another number of replicas re-shards: the rows of the epoch's
        permutation the old ranks had not read yet are shared among this run's ranks
        (padded or cut for the new world size as usual), and the next epochs are this
        world size's own.
        """
        checks = (
            ("batch_size", self.batch_size),
            ("length", self.plan.length),
            ("drop_last", int(self.drop_last)),
            ("shuffle", int(self.shuffle)),
        )
        for key, mine in checks:
            if key in state and int(state[key]) != mine:
                raise ValueError(
                    f"state was saved with {key}={state[key]!r} but this loader has {key}={mine!r}; "
                    "resuming would yield different batches"
                )
        saved_replicas = int(state.get("num_replicas", 1))
        if saved_replicas < 1:
            raise ValueError(f"state has num_replicas={saved_replicas!r}; expected >= 1")
        self._close_active()
        self.seed = int(state["seed"])
        self._epoch = int(state["epoch"])
        offset, batch = int(state.get("offset", 0)), int(state["batch"])
        if saved_replicas != self.num_replicas:
            # The old ranks together read a prefix of the epoch's permutation (strided
            # shares of equal length): the rest is what this world reads.
            offset, batch = offset + batch * self.batch_size * saved_replicas, 0
            if offset >= self.plan.length:
                self._epoch, offset = self._epoch + 1, 0
        self._offset = offset
        self._start = batch

    # ------------------------------------------------------------ iteration

    def permutation(self, epoch: int) -> Tensor:
        """The order of all rows in ``epoch``, the same on every rank (int64): a
        permutation drawn from ``(seed, epoch)``, or ``arange`` without shuffle."""
        n = self.plan.length
        if not self.shuffle:
            return torch.arange(n)
        return torch.randperm(n, generator=torch.Generator().manual_seed(_mix(self.seed, epoch)))

    def order(self, epoch: int, offset: int = 0) -> Tensor:
        """The rows this rank reads in ``epoch``, in order (int64): its strided share of
        ``permutation(epoch)[offset:]``, padded or cut (see the class docstring)."""
        rest = self.permutation(epoch)[offset:]
        n, replicas = int(rest.shape[0]), self.num_replicas
        if replicas == 1 or n == 0:
            return rest
        return rest[share_positions(n, replicas, self.rank, self.drop_last) % n]

    def _batch_seed(self, epoch: int, batch: int, offset: int) -> int:
        if self.num_replicas == 1 and offset == 0:
            return _mix(self.seed, epoch, batch)
        return _mix(self.seed, epoch, batch, self.rank, self.num_replicas, offset, _SHARDED)

    def batch_indices(self, epoch: int, batch: int, order: Tensor | None = None) -> Tensor:
        """The sorted rows of batch number ``batch`` of ``epoch``."""
        order = self.order(epoch) if order is None else order
        rows = order[batch * self.batch_size : (batch + 1) * self.batch_size]
        return rows.sort().values if self.shuffle else rows

    def __iter__(self) -> Iterator[T]:
        self._close_active()
        it = _Epoch(self, self._epoch, self._start, self._offset)
        self._active = weakref.ref(it)
        return it

    def close(self) -> None:
        """Stop the reader threads of the current iteration (also done when it ends)."""
        self._close_active()

    def _close_active(self) -> None:
        active = self._active() if self._active is not None else None
        if active is not None:
            active.close()
        self._active = None

    def _finished_epoch(self, epoch: int) -> None:
        if self._epoch == epoch:  # set_epoch()/load_state_dict() during iteration win
            self._epoch = epoch + 1
            self._start = 0
            self._offset = 0

    def __repr__(self) -> str:
        o = self.options
        return (
            f"BatchLoader(len={len(self)}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"crop={o.crop}, crop_mode={o.crop_mode!r}, flip={o.flip}, "
            f"normalize={o.normalize is not None}, transform={o.transform!r}, device={o.device}, "
            f"num_threads={self.num_threads}, num_replicas={self.num_replicas}, rank={self.rank})"
        )


class _Epoch:
    """One pass over the loader's batches; an iterator that owns the reader threads."""

    def __init__(self, loader: BatchLoader[Any], epoch: int, start: int, offset: int) -> None:
        self.loader = loader
        self.plan = loader.plan
        self.epoch = epoch
        order = loader.order(epoch, offset)
        self.count = loader._count(int(order.shape[0]))
        self._yielded = start
        self._done = start >= self.count
        self.state = state = _State(loader.prefetch + 1)
        state.next_task = start
        state.limit = start + state.slots
        args = (state, loader, epoch, order, self.count, offset)
        self._order = order
        self._ahead = 0  # batches whose rows were asked for ahead (lazy leaves only)
        self._fetch_ahead(start)  # before the readers start: they wait for these rows
        for i in range(0 if self._done else min(loader.num_threads, self.count - start)):
            t = threading.Thread(
                target=_reader, args=args, name=f"tensorbox-loader-{i}", daemon=True
            )
            state.threads.append(t)
        for t in state.threads:
            t.start()
        # Dropping the iterator (a `for` loop left by `break`) stops and joins the threads.
        self._finalizer = weakref.finalize(self, state.close)

    def _fetch_ahead(self, b: int) -> None:
        """Leaves whose bytes arrive on first use (a tree behind a URL): ask for the rows
        of the next batches ``window`` at a time, in the background (``tensorbox.prefetch``),
        so that the network stays busy while the model trains and the rows of several
        batches go out together (closer rows: fewer, larger requests)."""
        window = self.loader.prefetch
        if self._ahead >= min(b + 2 * window, self.count) or not self.plan.lazy():
            return
        start = max(b, self._ahead)
        stop = min(start + window if self._ahead else b + 2 * window, self.count)
        rows = [self.loader.batch_indices(self.epoch, j, self._order) for j in range(start, stop)]
        if rows:
            prefetch(self.loader.data, torch.cat(rows))  # errors surface when the batch is read
        self._ahead = stop

    def __iter__(self) -> _Epoch:
        return self

    def __next__(self) -> Any:
        state = self.state
        b = self._yielded
        if b >= self.count:
            self._finish()
            raise StopIteration
        self._fetch_ahead(b)
        with state.cond:
            # Asking for batch b releases batch b - 1: its slot may be refilled.
            state.limit = b + state.slots
            state.cond.notify_all()
            while b not in state.ready and state.error is None and not state.stopped:
                state.cond.wait()
            # A batch that is ready is delivered even if a later one already failed.
            item = state.ready.pop(b, None)
            err = state.error if item is None else None
        if err is not None:
            self.close()  # outside the lock: the readers need it to finish
            raise err
        if item is None:
            raise StopIteration
        idx, values, gen, slot = item
        self._yielded = b + 1
        return self._deliver(idx, values, gen, slot)

    def _deliver(
        self, idx: Tensor, values: dict[Any, Any], gen: torch.Generator, slot: Slot
    ) -> Any:
        plan, dev = self.plan, self.plan.opts.device
        if dev.type != "cpu":
            values = {k: v.to(dev, non_blocking=True) for k, v in values.items()}
            if dev.type == "cuda":  # the pinned slot is free once these copies have run
                event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch leaves it untyped
                event.record()
                slot.event = event
            key = plan.opts.image_key
            if key in values:
                values[key] = plan.finish_image(None, values[key], gen)
        return plan.build(values, idx)

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self.loader._finished_epoch(self.epoch)
        self.close()

    def close(self) -> None:
        """Stop and join the reader threads; the iterator then yields nothing more."""
        self._finalizer()

    def __len__(self) -> int:
        return self.count - self._yielded


def _reader(
    state: _State, loader: BatchLoader[Any], epoch: int, order: Tensor, count: int, offset: int
) -> None:
    """Reader thread: take the next batch number in the window, fill a slot, hand it over."""
    plan, pool = loader.plan, loader._pool
    while True:
        with state.cond:
            while not state.stopped and state.next_task < count and state.next_task >= state.limit:
                state.cond.wait()
            if state.stopped or state.next_task >= count:
                return
            b = state.next_task
            state.next_task += 1
        try:
            slot = pool.acquire() if pool is not None else Slot(loader.batch_size)
            try:
                if slot.event is not None:
                    slot.event.synchronize()  # the previous batch's non_blocking copy is done
                    slot.event = None
                idx = loader.batch_indices(epoch, b, order)
                gen = torch.Generator().manual_seed(loader._batch_seed(epoch, b, offset))
                values = plan.read(slot, idx, gen)
            finally:
                if pool is not None:
                    pool.release(slot)  # from here on, the batch's tensors keep it in use
        except BaseException as err:
            err.add_note(f"(raised in a tensorbox BatchLoader thread while reading batch {b})")
            with state.cond:
                state.error = err
                state.cond.notify_all()
            return
        with state.cond:
            if state.stopped:
                return
            state.ready[b] = (idx, values, gen, slot)
            state.cond.notify_all()
        # This thread must not keep the batch alive: its slot is reusable once the
        # caller lets go of the batch.
        del values, slot
