"""Producers on other machines: a bounded queue of augmented batches in Redis.

CPU machines run :func:`run_producer`; the GPU machine iterates a
:class:`RedisAugmentBuffer`. The slots are a ``TensorDictStore`` of batch size
``[capacity, batch_size]`` on the server; batch ``g`` of the stream goes into slot
``g % capacity``, as in the local :class:`~tensorbox.buffer.AugmentBuffer`, and is made
by the same code with the same seeds (``sample_seed(seed, epoch, index)``), so the
batches are identical to the local buffer's for any number of producers.

The protocol, all under the key prefix ``tensorbox:augment:NAME``:

- ``:config``: the schedule (dataset size, batch size, seed, shuffle, drop_last,
  capacity), a run id and the run's slot store (``slots-RUN``), written by the consumer.
  A producer builds its plan from it, and checks that its dataset has the announced
  size. Each run has slots of its own, deleted when the next run starts, so a late
  batch of an ended run (``load_state_dict``) fails to land instead of overwriting a
  slot the new run reads.
- ``:tasks``: stream positions to make (``run:g``). The consumer pushes ``g`` only once
  ``g - capacity`` is consumed: that is the back-pressure. A producer moves a task
  atomically (``BLMOVE``) into its own ``:working:ID`` list while it makes it, so a
  producer that dies is found holding it.
- ``:alive:ID``: a key with a time-to-live that a producer's heartbeat thread renews.
- ``:done:RUN:g``: ``ok``, or the producer's traceback.

Faults follow the local buffer's rules: a transform that raises surfaces in the
training loop as :class:`~tensorbox.buffer.ProducerError` carrying the remote
traceback; a producer that stops (killed, machine lost) while holding a batch surfaces
as a ``ProducerError`` naming it and the batch once its heartbeat expires; with no live
producer at all the wait ends after ``timeout``. Nothing waits forever.

>>> RedisAugmentBuffer.__name__, run_producer.__name__
('RedisAugmentBuffer', 'run_producer')
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tensorbox import FormatError
from tensorbox.buffer._plan import GlobalRNG, Plan, Position, Producer
from tensorbox.buffer._runtime import ProducerError
from tensorbox.buffer._slots import in_memory

__all__ = ["RedisAugmentBuffer", "run_producer"]


def _client(url: str) -> Any:
    try:
        import redis
    except ImportError as err:
        raise ImportError(
            "redis is needed for a buffer in Redis and is not installed: "
            "pip install 'tensorbox[redis]'"
        ) from err
    from redis.backoff import ConstantBackoff
    from redis.retry import Retry

    # one try per timeout, as TensorDictStore's clients (redis-py's default retries a
    # silent server 3 times with growing pauses: over 2 minutes per call here)
    once = Retry(ConstantBackoff(0.1), 1, supported_errors=(redis.exceptions.ConnectionError,))
    return redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10, retry=once)


def _prefix(name: str) -> str:
    if not name or not isinstance(name, str):
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    return f"tensorbox:augment:{name}"


def _store(url: str, name: str, td_id: str) -> Any:
    from tensorbox import TensorDictStore

    return TensorDictStore.from_store(url=url, prefix=_prefix(name), td_id=td_id)


class RedisAugmentBuffer(Position):
    """The consumer side: batches made by :func:`run_producer` on other machines.

    ``dataset``, ``transform`` and ``batch_transform`` are the ones the producers run
    (the consumer makes one sample to learn the slot layout, unless ``example=`` gives
    it). ``url`` names the Redis server (``redis://host:port/db``), ``name`` the queue
    (several buffers can share a server). ``capacity`` bounds the batches made ahead;
    ``timeout`` (seconds) bounds the wait for one batch while no producer is alive;
    ``heartbeat`` is how long a silent producer counts as alive.

    ``for batch in buf`` yields the rest of the current epoch (each batch a local
    ``TensorDict`` of batch size ``[batch_size]``, the last one shorter unless
    ``drop_last``); ``state_dict()``/``load_state_dict()`` resume with the same
    batches; ``close()`` (or leaving a ``with`` block) deletes the queue's keys.
    """

    def __init__(
        self,
        dataset: Any,
        transform: Callable[..., Any] | None = None,
        *,
        batch_size: int,
        url: str,
        name: str = "default",
        capacity: int = 8,
        batch_transform: Callable[..., Any] | None = None,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        num_epochs: int | None = None,
        seed_global: bool = True,
        example: Any = None,
        timeout: float = 120.0,
        heartbeat: float = 10.0,
    ) -> None:
        from tensorbox import TensorDictStore
        from tensorbox.buffer._plan import as_layout

        if transform is None and batch_transform is None:
            raise ValueError("give transform= (per sample) or batch_transform= (per batch)")
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int (batches), got {capacity!r}")
        self._url, self._name, self._p = url, name, _prefix(name)
        self._r = _client(url)
        self._plan = Plan(len(dataset), batch_size, drop_last, shuffle, seed)
        producer = Producer(self._plan, dataset, transform, batch_transform, seed_global)
        batched = batch_transform is not None
        if example is not None:
            layout = as_layout(example, batched=batched)
        else:
            with GlobalRNG():
                layout = producer.example(0)
        layout = layout[0] if batched else layout
        self._capacity = capacity
        self._timeout, self._heartbeat = float(timeout), float(heartbeat)
        bpe = self._plan.batches_per_epoch
        self._end = -1 if num_epochs is None else num_epochs * bpe
        self._g = 0
        self._closed = False
        self._reset_keys()
        self._layout = layout
        self._slots: TensorDictStore | None = None
        self._start_run()

    # ------------------------------------------------------------------ the run

    def _reset_keys(self) -> None:
        """Delete what an earlier run of this queue left (tasks, results, slots)."""
        keys = list(self._r.scan_iter(match=self._p + ":*", count=500))
        for i in range(0, len(keys), 500):
            self._r.delete(*keys[i : i + 500])

    def _start_run(self) -> None:
        """A new run id from position ``self._g``: producers drop the old run's tasks.

        Each run has slots of its own, and the old run's are deleted once the new config
        is in place: a producer still making a batch of the old run then fails to write
        it (its store is gone) instead of overwriting a slot the new run reads."""
        from tensorbox import TensorDictStore

        self._run = uuid.uuid4().hex[:12]
        old, bs = self._slots, self._plan.batch_size
        zeros = in_memory(self._layout, self._capacity, bs).zero_()
        self._slots = TensorDictStore.from_dict(
            zeros,
            url=self._url,
            prefix=self._p,
            td_id=f"slots-{self._run}",
            batch_size=[self._capacity, bs],
        )
        del zeros
        p = self._plan
        config = {
            "run": self._run,
            "slots": f"slots-{self._run}",
            "num_samples": p.num_samples,
            "batch_size": p.batch_size,
            "shuffle": p.shuffle,
            "drop_last": p.drop_last,
            "seed": p.seed,
            "capacity": self._capacity,
        }
        pipe = self._r.pipeline()
        pipe.delete(self._p + ":tasks")
        pipe.set(self._p + ":config", json.dumps(config))
        pipe.execute()
        if old is not None:
            old.clear_redis()
            old.close()
        self._pushed = self._g
        self._push_upto(self._g + self._capacity)

    def _push_upto(self, stop: int) -> None:
        if self._end >= 0:
            stop = min(stop, self._end)
        if stop > self._pushed:
            tasks = [f"{self._run}:{g}" for g in range(self._pushed, stop)]
            self._r.rpush(self._p + ":tasks", *tasks)
            self._pushed = stop

    # ------------------------------------------------------------------ reading

    def __iter__(self) -> Iterator[Any]:
        """The remaining batches of the current epoch, in order."""
        self._check_open()
        end = self._epoch_end()
        while self._g < end:
            yield self._next()

    def _next(self) -> Any:
        g = self._g
        epoch, b = self._plan.locate(g)
        try:
            self._wait(g, epoch, b)
            try:
                assert self._slots is not None
                batch = self._slots[g % self._capacity][: self._plan.rows(b)]
            except FormatError:
                # a producer that reconnected after a restart announced its batch to the
                # new server, where the slots are gone: the keys-gone error, not this one
                self._check_run(epoch, b)
                raise
            self._g = g + 1
            self._push_upto(self._g + self._capacity)  # slot g % capacity is free again
        except _connection_errors() as err:
            raise ConnectionError(
                f"queue {self._name!r}: the Redis server at {self._url} did not answer while "
                f"the consumer waited for epoch {epoch} batch {b} ({type(err).__name__}: "
                f"{err}); once it is back, resume with a new RedisAugmentBuffer and "
                "load_state_dict(state_dict() of this one)"
            ) from err
        return batch

    def _wait(self, g: int, epoch: int, b: int) -> None:
        done = f"{self._p}:done:{self._run}:{g}"
        start = last_alive = time.monotonic()
        while True:
            got = self._r.blpop([done], timeout=1)
            if got is not None:
                text = got[1].decode()
                if text == "ok":
                    return
                err = json.loads(text)
                raise ProducerError(
                    f"producer {err['producer']} failed on epoch {epoch} batch {b} of queue "
                    f"{self._name!r} at {self._url}:\n{err['traceback']}",
                    worker=-1,
                    epoch=epoch,
                    batch=b,
                    remote_traceback=err["traceback"],
                )
            now = time.monotonic()
            self._check_run(epoch, b)
            holder = self._holder(f"{self._run}:{g}")
            if holder is not None and not self._r.exists(f"{self._p}:alive:{holder}"):
                raise ProducerError(
                    f"producer {holder} stopped (no heartbeat for {self._heartbeat:g} s) while "
                    f"making epoch {epoch} batch {b} of queue {self._name!r} at {self._url}",
                    worker=-1,
                    epoch=epoch,
                    batch=b,
                )
            if any(True for _ in self._r.scan_iter(match=f"{self._p}:alive:*", count=100)):
                last_alive = now
            elif now - max(last_alive, start) > self._timeout:
                raise ProducerError(
                    f"no producer is serving queue {self._name!r} at {self._url}: waited "
                    f"{self._timeout:g} s for epoch {epoch} batch {b} (start producers with "
                    "tensorbox.buffer.run_producer)",
                    worker=-1,
                    epoch=epoch,
                    batch=b,
                )

    def _check_run(self, epoch: int, b: int) -> None:
        """Raise unless the queue's keys are this run's: a restart without persistence,
        FLUSHALL or eviction took them, and no producer will ever answer this run."""
        config = self._r.get(self._p + ":config")
        if config is None or json.loads(config).get("run") != self._run:
            raise ProducerError(
                f"the keys of queue {self._name!r} are gone from the server at "
                f"{self._url} (a restart without persistence, FLUSHALL or eviction) "
                f"while waiting for epoch {epoch} batch {b}; resume with a new "
                "RedisAugmentBuffer and load_state_dict(state_dict() of this one)",
                worker=-1,
                epoch=epoch,
                batch=b,
            )

    def _holder(self, task: str) -> str | None:
        """The producer whose working list holds ``task``, if any."""
        pre = f"{self._p}:working:"
        for key in self._r.scan_iter(match=pre + "*", count=100):
            if task.encode() in self._r.lrange(key, 0, -1):
                return bytes(key).decode()[len(pre) :]
        return None

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict[str, Any]:
        """Where to continue, and what fixes the batches' content (``AugmentBuffer``'s form)."""
        return self._plan.state(self._g)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at ``state`` (from ``state_dict()`` of a buffer with the same settings)."""
        self._plan.check_state(state, "RedisAugmentBuffer")
        self._g = state["epoch"] * self._plan.batches_per_epoch + state["batch"]
        self._start_run()

    # ------------------------------------------------------------------ closing

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the buffer of queue {self._name!r} is closed")

    def close(self) -> None:
        """Delete the queue's keys (producers go idle, waiting for the next run)."""
        if self._closed:
            return
        self._closed = True
        self._reset_keys()
        if self._slots is not None:
            self._slots.close()
        self._r.close()

    def __enter__(self) -> RedisAugmentBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connection_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError)


def run_producer(
    dataset: Any,
    transform: Callable[..., Any] | None = None,
    *,
    url: str,
    name: str = "default",
    batch_transform: Callable[..., Any] | None = None,
    seed_global: bool = True,
    heartbeat: float = 10.0,
    max_idle: float | None = None,
    torch_threads: int | None = 1,
    reconnect_timeout: float = 120.0,
) -> int:
    """Make batches for the :class:`RedisAugmentBuffer` of queue ``name`` at ``url``.

    Run it on each CPU machine (any number of processes) with the dataset and transforms
    the consumer names. It serves run after run; ``max_idle`` (seconds without a task)
    ends it, else it runs until killed. A transform that raises is reported to the
    consumer (the producer goes on with the next task). Returns the batches made.
    ``torch_threads`` sets torch's intra-op threads of this process (one per producer,
    as the local buffer's producers run; None leaves it).

    A server that goes away (a restart, a network cut) is waited for, retrying with a
    growing pause, for at most ``reconnect_timeout`` seconds in a row; then the producer
    raises ``ConnectionError`` naming the server. The task it held is made again.
    """
    import torch

    r = _client(url)
    p = _prefix(name)
    me = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    alive, working = f"{p}:alive:{me}", f"{p}:working:{me}"
    stop = threading.Event()
    lost = _connection_errors()

    def beat() -> None:
        ms = max(1, int(heartbeat * 1000))
        while not stop.is_set():
            with contextlib.suppress(Exception):  # the main loop reports the server's errors
                r.set(alive, "1", px=ms)
            stop.wait(heartbeat / 3)

    r.set(alive, "1", px=max(1, int(heartbeat * 1000)))
    thread = threading.Thread(target=beat, name="tensorbox-heartbeat", daemon=True)
    thread.start()
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    state = _ProducerState(dataset, transform, batch_transform, seed_global, url, name)
    idle_since = time.monotonic()
    down_since: float | None = None
    pause = 0.1
    try:
        while True:
            try:
                if down_since is not None:
                    # back after a loss: what this producer held is made again first
                    while r.lmove(working, p + ":tasks", "RIGHT", "LEFT") is not None:
                        pass
                task = r.blmove(p + ":tasks", working, 1, "LEFT", "RIGHT")
                down_since, pause = None, 0.1
                if task is None:
                    if max_idle is not None and time.monotonic() - idle_since > max_idle:
                        return state.made
                    continue
                idle_since = time.monotonic()
                state.serve(r, p, me, task)
                r.lrem(working, 1, task)
            except lost as err:
                now = time.monotonic()
                down_since = now if down_since is None else down_since
                if now - down_since > reconnect_timeout:
                    raise ConnectionError(
                        f"producer {me} of queue {name!r}: the Redis server at {url} has been "
                        f"unreachable for {reconnect_timeout:g} s ({type(err).__name__}: "
                        f"{err}); giving up"
                    ) from err
                state.run = None  # the run's config and slots are read again
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
    finally:
        stop.set()
        thread.join(timeout=5)
        with contextlib.suppress(*lost):  # a server that is gone keeps nothing to clean
            r.delete(alive, working)
        r.close()


class _ProducerState:
    """What a producer keeps between tasks: the current run, its plan and slots."""

    def __init__(
        self,
        dataset: Any,
        transform: Callable[..., Any] | None,
        batch_transform: Callable[..., Any] | None,
        seed_global: bool,
        url: str,
        name: str,
    ) -> None:
        self.dataset, self.transform, self.batch_transform = dataset, transform, batch_transform
        self.seed_global, self.url, self.name = seed_global, url, name
        self.run: str | None = None
        self.made = 0
        self.config: dict[str, Any] = {}
        self.producer: Producer | None = None
        self.slots: Any = None
        self.store: Any = None

    def _start(self, r: Any, p: str, task_run: str) -> bool:
        """Take up the run ``task_run``: its schedule, layout and slots (False: the task
        is left from a run that has ended)."""
        raw = r.get(p + ":config")
        config = json.loads(raw) if raw else {}
        if config.get("run") != task_run:
            return False
        if len(self.dataset) != config["num_samples"]:
            raise ValueError(
                f"the consumer's dataset has {config['num_samples']} samples, this "
                f"producer's {len(self.dataset)}: both must run on the same data"
            )
        plan = Plan(
            config["num_samples"],
            config["batch_size"],
            config["drop_last"],
            config["shuffle"],
            config["seed"],
        )
        producer = Producer(
            plan, self.dataset, self.transform, self.batch_transform, self.seed_global
        )
        if self.store is not None:
            self.store.close()
        self.store = _store(self.url, self.name, config.get("slots", "slots"))
        # the slot layout as the consumer stored it (one sample of slot 0)
        self.slots = in_memory(self.store[0][0], 1, plan.batch_size)
        producer.attach(self.slots)
        self.producer, self.config, self.run = producer, config, task_run
        return True

    def serve(self, r: Any, p: str, me: str, task: bytes) -> None:
        """Make the batch ``task`` names into its slot, and say so (or report the
        transform's error to the consumer). A lost connection propagates: the caller
        reconnects and the task is made again."""
        task_run, _, g_text = task.decode().partition(":")
        lost = _connection_errors()
        try:
            if task_run != self.run and not self._start(r, p, task_run):
                return
            g = int(g_text)
            assert self.producer is not None and self.slots is not None
            with GlobalRNG():
                self.producer.produce(g, 0)
            self.store[g % self.config["capacity"]] = self.slots[0]
            r.rpush(f"{p}:done:{task_run}:{g}", "ok")
            r.expire(f"{p}:done:{task_run}:{g}", 3600)
            self.made += 1
        except lost:
            raise
        except Exception as exc:  # reported to the consumer, which raises it
            raw = r.get(p + ":config")
            if raw is None or json.loads(raw).get("run") != task_run:
                # the run is gone (a restart without persistence, FLUSHALL: its slots
                # with it): no consumer waits for this batch, and the one that did
                # says the keys are gone; not the transform's error
                self.run = None
                return
            text = "".join(traceback.format_exception(exc))
            r.rpush(
                f"{p}:done:{task_run}:{g_text}",
                json.dumps({"producer": me, "traceback": text}),
            )
            r.expire(f"{p}:done:{task_run}:{g_text}", 3600)
            self.run = None  # rebuild from the config before the next task
