"""A producer process for tests/buffer/test_buffer_redis.py: the dataset and transforms the
tests' consumer uses, served into the queue named on the command line.

``python -m tests.redis_producer URL NAME MODE [MAX_IDLE]`` (MODE: ``ok``, ``fails``
raises on sample 21, ``hangs`` sleeps on sample 5 so that the test can kill it
mid-batch; MAX_IDLE: seconds without a task before it ends, 10 by default).
"""

from __future__ import annotations

import sys
import time

import torch

from tensorbox import TensorDict

data = TensorDict(
    {
        "image": torch.arange(40 * 12, dtype=torch.float32).reshape(40, 12),
        "label": torch.arange(40),
    },
    batch_size=[40],
)


def augment(sample, generator):  # type: ignore[no-untyped-def]
    return {
        "image": sample["image"] + torch.rand(12, generator=generator),
        "label": sample["label"],
    }


def fails(sample, generator):  # type: ignore[no-untyped-def]
    if int(sample["label"]) == 21:
        raise ValueError("cannot decode sample 21")
    return augment(sample, generator)


def hangs(sample, generator):  # type: ignore[no-untyped-def]
    if int(sample["label"]) == 5:
        time.sleep(600)
    return augment(sample, generator)


if __name__ == "__main__":
    from tensorbox.buffer import run_producer

    url, name, mode = sys.argv[1:4]
    idle = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    fn = {"ok": augment, "fails": fails, "hangs": hangs}[mode]
    run_producer(data, fn, url=url, name=name, heartbeat=1.0, max_idle=idle)
