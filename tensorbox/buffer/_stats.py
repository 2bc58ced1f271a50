"""``BufferStats``: a snapshot for ``AugmentBuffer.stats()`` (its progress bar is
:class:`tensorbox.progress.Progress`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["BufferStats", "rate"]


def rate(times: Iterable[float]) -> float:
    """Events per second over a window of event times (0.0 with fewer than two)."""
    t = list(times)
    if len(t) < 2 or t[-1] <= t[0]:
        return 0.0
    return (len(t) - 1) / (t[-1] - t[0])


@dataclass(frozen=True)
class BufferStats:
    """What the buffer is doing; rates are over the last 64 batches.

    ``wait_s`` is the consumer's total time blocked waiting for a batch (in inline mode,
    ``num_workers=0``, the time spent making batches); ``first_wait_s`` the part of it
    spent on the first batch after producers (re)started, which includes their start-up.
    ``producer_idle_s`` sums the time producers spent waiting for a free slot: large
    means the buffer is full and the consumer is the bottleneck (the good case).
    """

    capacity: int  # slots, in batches
    slot_bytes: int  # bytes of one slot (one batch)
    filled: int  # batches made and not yet consumed
    in_progress: int  # batches being made now
    produced: int  # batches made, since construction
    consumed: int  # batches handed to the consumer, since construction
    epoch: int  # position: the next batch to consume is (epoch, batch)
    batch: int
    producer_rate: float  # batches/s made, all producers together
    consumer_rate: float  # batches/s consumed
    wait_s: float
    first_wait_s: float
    producer_busy_s: float
    producer_idle_s: float
    num_workers: int
    workers_alive: int

    @property
    def fill(self) -> float:
        """``filled / capacity``."""
        return self.filled / self.capacity if self.capacity else 0.0

    def __str__(self) -> str:
        return (
            f"epoch {self.epoch} batch {self.batch} | fill {self.filled}/{self.capacity} "
            f"(+{self.in_progress} in progress) | made {self.produced} at "
            f"{self.producer_rate:.1f}/s, consumed {self.consumed} at {self.consumer_rate:.1f}/s "
            f"| consumer waited {self.wait_s:.2f} s ({self.first_wait_s:.2f} s for the first)"
        )


def window() -> deque[float]:
    return deque(maxlen=64)
