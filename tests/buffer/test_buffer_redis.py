"""RedisAugmentBuffer: producers in other processes (standing in for other machines)
fill a bounded queue of batches in a real redis-server on loopback; the local
AugmentBuffer with the same seed is the oracle for the batches, and the fault tests
kill producers or make them raise."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorbox.buffer import AugmentBuffer, ProducerError, RedisAugmentBuffer, run_producer
from tests.redis_producer import augment, data
from tests.servers import RedisProcess, RedisProxy, RedisServer

pytest.importorskip("redis")
ROOT = Path(__file__).resolve().parents[2]


def _producers(
    url: str, name: str, mode: str, n: int, *extra: str
) -> list[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "tests.redis_producer", url, name, mode, *extra]
    return [subprocess.Popen(cmd, cwd=ROOT) for _ in range(n)]


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


@pytest.mark.heavy
def test_batches_match_the_local_buffer(redis_server: RedisServer, procs: list) -> None:
    procs += _producers(redis_server.url, "same", "ok", 2)
    kw = dict(batch_size=16, seed=7, num_epochs=2)
    with RedisAugmentBuffer(
        data, augment, url=redis_server.url, name="same", capacity=3, timeout=60, **kw
    ) as buf:
        assert len(buf) == 3
        got = [b.clone() for _ in range(2) for b in buf]
        state = buf.state_dict()
    with AugmentBuffer(data, augment, num_workers=0, **kw) as local:
        want = [b.clone() for _ in range(2) for b in local]
    assert len(got) == len(want) == 6
    assert got[2].batch_size == torch.Size([8])  # the short last batch of an epoch
    for a, b in zip(got, want, strict=True):
        assert (a == b).all()
    assert state["epoch"] == 2 and state["batch"] == 0
    # resume mid-epoch, served by the same producers: the same batches again
    with RedisAugmentBuffer(
        data, augment, url=redis_server.url, name="same", capacity=3, timeout=60, **kw
    ) as buf:
        buf.load_state_dict({**state, "epoch": 1, "batch": 1})
        assert (buf.epoch, buf.batch, buf.capacity) == (1, 1, 3)  # as AugmentBuffer's
        assert [(b == w).all() for b, w in zip(buf, want[4:], strict=True)] == [True, True]
        with pytest.raises(ValueError, match=r"other settings.*seed=4 vs 7"):
            buf.load_state_dict({**state, "seed": 4})


@pytest.mark.heavy
def test_a_transform_that_raises_surfaces_with_its_traceback(
    redis_server: RedisServer, procs: list
) -> None:
    procs += _producers(redis_server.url, "fails", "fails", 1)
    with (
        RedisAugmentBuffer(
            data,
            augment,
            batch_size=16,
            shuffle=False,
            url=redis_server.url,
            name="fails",
            timeout=60,
        ) as buf,
        pytest.raises(
            ProducerError, match=r"(?s)failed on epoch 0 batch 1.*cannot decode sample 21"
        ) as info,
    ):
        for _ in buf:
            pass
    assert info.value.batch == 1 and "ValueError" in info.value.remote_traceback


@pytest.mark.heavy
def test_a_killed_producer_surfaces_naming_the_batch(
    redis_server: RedisServer, procs: list
) -> None:
    procs += _producers(redis_server.url, "killed", "hangs", 1)
    with RedisAugmentBuffer(
        data, augment, batch_size=16, shuffle=False, url=redis_server.url, name="killed",
        capacity=1, timeout=60, heartbeat=1.0,
    ) as buf:  # fmt: skip
        it = iter(buf)
        _wait_until_held(redis_server, "killed")  # the producer sleeps inside batch 0
        procs[0].kill()
        with pytest.raises(
            ProducerError, match=r"stopped \(no heartbeat for 1 s\) while making epoch 0 batch 0"
        ):
            next(it)


def _wait_until_held(server: RedisServer, name: str) -> None:
    import redis

    r = redis.Redis(host=server.host, port=server.port)
    deadline = time.monotonic() + 120  # a start-up budget for the producer process
    while time.monotonic() < deadline:
        if any(r.llen(k) for k in r.scan_iter(match=f"tensorbox:augment:{name}:working:*")):
            return
        time.sleep(0.1)
    raise RuntimeError("the producer never took a batch")


@pytest.mark.heavy
def test_no_producer_is_an_error_not_a_hang(redis_server: RedisServer) -> None:
    with (
        RedisAugmentBuffer(
            data, augment, batch_size=16, url=redis_server.url, name="nobody", timeout=1.5
        ) as buf,
        pytest.raises(ProducerError, match=r"no producer is serving queue 'nobody'.*1.5 s"),
    ):
        next(iter(buf))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"capacity must be a positive int"):
        RedisAugmentBuffer(data, augment, batch_size=4, url="redis://127.0.0.1:1/0", capacity=0)
    with pytest.raises(ValueError, match=r"give transform="):
        RedisAugmentBuffer(data, batch_size=4, url="redis://127.0.0.1:1/0")


def test_a_producer_reconnects_after_a_restart(redis_process: RedisProcess, procs: list) -> None:
    """Also seen: after a Redis restart, run_producer died on the ConnectionError."""
    procs += _producers(redis_process.url, "back", "ok", 1, "120")
    kw = dict(batch_size=16, seed=5, num_epochs=1)
    remote = dict(url=redis_process.url, name="back", capacity=2, timeout=60, **kw)
    with RedisAugmentBuffer(data, augment, **remote) as buf:
        it = iter(buf)
        next(it)  # the producer serves this server
        redis_process.restart()  # without persistence: every key is gone
        with pytest.raises(  # the consumer says so instead of waiting for ever
            ProducerError, match=r"keys of queue 'back' are gone from the server.*load_state_dict"
        ):
            for _ in range(2):
                next(it)
    time.sleep(3)  # the producer's blocking wait meets the lost connection meanwhile
    assert procs[0].poll() is None, "the producer died on the restart"
    with RedisAugmentBuffer(data, augment, **remote) as buf:
        got = [b.clone() for b in buf]
    with AugmentBuffer(data, augment, num_workers=0, **kw) as local:
        want = [b.clone() for b in local]
    assert len(got) == len(want) == 3
    assert all((a == b).all() for a, b in zip(got, want, strict=True))


def test_a_producer_gives_up_after_its_bound(redis_process: RedisProcess) -> None:
    """The reconnection is bounded: a server gone for good ends the producer, naming it."""
    out: list[BaseException] = []

    def run() -> None:
        try:
            run_producer(
                data, augment, url=redis_process.url, name="gone", heartbeat=1.0,
                reconnect_timeout=1.0, torch_threads=None,
            )  # fmt: skip
        except BaseException as err:  # handed to the test
            out.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(1.0)  # it waits for tasks now
    redis_process.stop()
    t.join(120)  # a hang bound, not a speed
    assert not t.is_alive() and out
    with pytest.raises(
        ConnectionError, match=r"queue 'gone': the Redis server at redis://.* unreachable for 1 s"
    ):
        raise out[0]


@pytest.mark.slow  # waits out the buffer's 30 s socket timeout once
def test_a_silent_server_is_a_connection_error_naming_the_queue(redis_proxy: RedisProxy) -> None:
    """A server that stops answering (SIGSTOP, overload) while the consumer waits: the
    consumer's client retried each call 3 times with growing pauses (over 2 minutes),
    then raised redis-py's bare TimeoutError. One try now, and a ConnectionError naming
    the queue, the server and the batch."""
    url = f"redis://127.0.0.1:{redis_proxy.port}/0"
    with RedisAugmentBuffer(
        data, augment, url=url, name="quiet", batch_size=8, capacity=2, timeout=600
    ) as buf:
        it = iter(buf)
        redis_proxy.mode = "silent"
        before = redis_proxy.accepted
        with pytest.raises(
            ConnectionError,
            match=r"queue 'quiet': the Redis server at redis://.* did not answer .*epoch 0 batch 0",
        ):
            next(it)
        assert redis_proxy.accepted - before <= 1
        redis_proxy.mode = "pass"


def test_a_late_batch_of_an_old_run_never_lands_in_the_new_runs_slot(
    redis_server: RedisServer,
) -> None:
    """A producer still making a batch of the run a ``load_state_dict`` ended wrote it into
    the slot the new run reads (both runs shared one slot store): the resumed buffer
    served the old batch (1 in 4 runs of the test above). Each run has slots of its own
    now, and the late write fails on the deleted store and is dropped."""
    import redis as redis_py

    from tensorbox.buffer import _redis_buffer as rb

    kw = dict(batch_size=16, seed=7, shuffle=False)
    with RedisAugmentBuffer(
        data, augment, url=redis_server.url, name="late", capacity=1, timeout=30, **kw
    ) as buf:
        r = redis_py.Redis.from_url(redis_server.url)
        p = rb._prefix("late")
        old_task = r.lpop(p + ":tasks")  # the run's first batch, taken by a slow producer
        slow = rb._ProducerState(data, augment, None, True, redis_server.url, "late")
        fast = rb._ProducerState(data, augment, None, True, redis_server.url, "late")
        produce = rb.Producer.produce
        resumed = [False]

        def produce_then_resume(self: Any, g: int, w: int) -> Any:
            out = produce(self, g, w)
            if not resumed[0]:  # the consumer resumes, a fast producer serves the new run
                resumed[0] = True
                buf.load_state_dict({**buf.state_dict(), "batch": 1})
                fast.serve(r, p, "fast", r.lpop(p + ":tasks"))
            return out

        rb.Producer.produce = produce_then_resume  # type: ignore[method-assign]
        try:
            slow.serve(r, p, "slow", old_task)  # finishes after the resume: dropped
        finally:
            rb.Producer.produce = produce  # type: ignore[method-assign]
        got = next(iter(buf))
        r.close()
    with AugmentBuffer(data, augment, num_workers=0, **kw) as local:
        want = [b.clone() for b in local][1]
    assert resumed[0] and (got == want).all()
