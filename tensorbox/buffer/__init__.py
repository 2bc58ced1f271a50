"""A shared-memory buffer of augmented batches, filled by producer processes.

Augmentation is random, so it is redone every epoch, and it is expensive. An
:class:`AugmentBuffer` runs ``num_workers`` producer processes that apply your per-sample
``transform`` (and/or a per-batch ``batch_transform``) to a dataset and write finished
batches straight into a fixed number of pre-allocated slots: one memory-mapped
TensorDict (or tensorclass) of batch size ``[capacity, batch_size]`` in ``/dev/shm`` (or
a folder you name). The training loop iterates batches as views of their slots, with
no copy and no pickling; only batch numbers cross process boundaries.

>>> import torch
>>> from tensorbox import TensorDict
>>> from tensorbox.buffer import AugmentBuffer
>>> data = TensorDict({"x": torch.arange(10.0), "y": torch.arange(10)}, batch_size=[10])
>>> def jitter(sample, generator):       # per sample, with its own random stream
...     return {"x": sample["x"] + torch.rand((), generator=generator), "y": sample["y"]}
>>> with AugmentBuffer(data, jitter, batch_size=4, num_workers=0, shuffle=False) as buf:
...     for batch in buf:                   # one epoch: batches of 4, 4 and 2
...         print(batch["y"].tolist(), batch.batch_size)
[0, 1, 2, 3] torch.Size([4])
[4, 5, 6, 7] torch.Size([4])
[8, 9] torch.Size([2])

Order and reproducibility. Batch ``b`` of epoch ``e`` always holds the same samples
(a permutation per epoch from ``seed`` when ``shuffle``) and the same random draws: the
generator handed to ``transform`` for dataset index ``i`` is seeded with
:func:`sample_seed` ``(seed, e, i)`` (``batch_transform`` gets :func:`batch_seed`
``(seed, e, b)``). With ``seed_global=True`` (the default) torch's, Python's and numpy's
global generators are seeded the same way, so transforms that draw from them
(torchvision's) are reproducible too. The batches are therefore identical for 0, 1 or
N producers, in the order they are consumed, whichever producer made which.

Views. Each batch is a view of its slot, valid until the next batch is requested (or
``seek``/``load_state_dict``/``close``): then its slot is handed back to the producers.
Keep a batch longer with ``batch.clone()``, or build the buffer with ``copy=True``.

Back-pressure. At most ``capacity`` batches are made ahead; producers then wait for a
free slot. The consumer waits when the buffer is empty; ``stats()`` reports that wait,
the fill, and both rates (the consumer's wait near 0 means the producers keep up).

Epochs. ``for batch in buf`` yields the rest of the current epoch; producers do not
stop at epoch boundaries, so the next epoch is already being made. ``num_epochs`` bounds
the stream. ``state_dict()``/``load_state_dict()`` and ``seek(epoch, batch)`` move it.

Faults. A producer that raises surfaces as :class:`ProducerError` carrying its
traceback; one killed by a signal (out of memory: SIGKILL) as a ``ProducerError`` naming
the signal, at once, never a hang. Leaving a ``with`` block, ``close()``, or garbage
collection stop the producers and delete the slot files; producers that find the
training process dead delete them too.

Other machines. :class:`RedisAugmentBuffer` is the same buffer with its slots in a Redis
server, filled by :func:`run_producer` on CPU machines: the same schedule, seeds and
fault rules (``docs/buffer.md``).

Processes. The default start method is ``"forkserver"`` (safe with threads; after the
first start a new producer is a fork of a server with torch already imported). With
``"forkserver"`` and ``"spawn"`` the dataset, ``transform``, ``batch_transform`` and
``worker_init_fn`` are pickled: define them at module level of an importable module and
guard the script with ``if __name__ == "__main__":`` (lambdas and functions defined in a
notebook are sent with cloudpickle when it is installed). ``"fork"`` pickles nothing. A
memory-mapped TensorDict dataset is sent by file name, not by value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorbox import _face

# The public names, each listed once (``tensorbox/_face.py``).
if TYPE_CHECKING:
    from tensorbox.buffer._buffer import AugmentBuffer as AugmentBuffer
    from tensorbox.buffer._plan import KeyTransforms as KeyTransforms
    from tensorbox.buffer._plan import batch_seed as batch_seed
    from tensorbox.buffer._plan import sample_seed as sample_seed
    from tensorbox.buffer._redis_buffer import RedisAugmentBuffer as RedisAugmentBuffer
    from tensorbox.buffer._redis_buffer import run_producer as run_producer
    from tensorbox.buffer._runtime import ProducerError as ProducerError
    from tensorbox.buffer._stats import BufferStats as BufferStats

__getattr__, __dir__, __all__ = _face.attach(__name__, __file__)
