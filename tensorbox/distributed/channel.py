"""One ordered stream of transfers per (process group, direction, peer, tag).

:class:`_Channel` remembers the structure digests a peer has seen (both ends in the
same order, so a repeated structure is not sent again), keeps receives from one peer in
call order whether they run in the caller (``recv``) or on a worker thread
(``irecv``), and reuses its buffers. :func:`_receive` takes one whole transfer off a
channel. :func:`_pg` checks the process group and the peer, naming what is wrong.

>>> from tensorbox.distributed import channel
>>> import torch
>>> ch = channel._Channel(torch.device("cpu"), 64)
>>> ch.remember(1), ch.remember(1)
(False, True)
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from tensorbox.distributed import wire as _wire
from tensorbox.distributed.wire import (
    _HEADER,
    _JSON_INLINE,
    _PAYLOAD_INLINE,
    DistributedError,
    _align,
    _build,
    _bytes,
    _direct,
    _empty,
    _header,
    _mismatch,
    _parse,
    _plan,
    _unpack,
)


def _pg(group: Any, what: str, peer: Any = None, name: str = "") -> Any:
    if not dist.is_available():
        raise DistributedError(f"{what}: torch.distributed is not available in this torch build")
    if not dist.is_initialized():
        call = "init_process_group(backend, init_method=..., rank=..., world_size=...)"
        raise DistributedError(f"{what}: no process group: call torch.distributed.{call} first")
    pg = group if group is not None else dist.group.WORLD
    if dist.get_rank(pg) < 0:
        raise DistributedError(f"{what}: rank {dist.get_rank()} is not a member of this group")
    if name and type(peer) is not int:
        raise TypeError(f"{what}: {name}={peer!r} must be an int (a global rank)")
    if name and (peer == dist.get_rank() or peer not in dist.get_process_group_ranks(pg)):
        why = "this process's own rank" if peer == dist.get_rank() else "not a rank of the group"
        raise DistributedError(f"{what}: {name}={peer} is {why}")
    return pg


def _device(pg: Any) -> torch.device:
    """Where messages are staged: NCCL moves CUDA tensors only, gloo CPU ones."""
    if dist.get_backend(pg) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class _Channel:
    """One (group, direction, peer, tag): digests the peer saw, receive order, buffers."""

    def __init__(self, dev: torch.device, cap: int) -> None:
        self.dev, self.cap = dev, cap  # cap: the size of the first message's buffer
        self.lock = threading.Lock()
        self.seen: OrderedDict[int, Any] = OrderedDict()
        self.cv = threading.Condition()
        self.tickets = self.turn = 0
        self.jobs: queue.SimpleQueue[Any] | None = None

    def remember(self, key: int, value: Any = None) -> bool:
        """Both ends call this in the same order, so the sender knows exactly what the
        receiver still remembers. Returns whether ``key`` was known."""
        hit = key in self.seen
        self.seen[key] = value if value is not None else self.seen.get(key)
        self.seen.move_to_end(key)
        while len(self.seen) > _wire.CACHE_SIZE:
            self.seen.popitem(last=False)
        return hit

    def run(self, ticket: int, fn: Callable[[], Any]) -> Any:
        # Receives from one peer must consume its messages in call order, whether they
        # run in the caller (recv) or on the worker thread (irecv).
        with self.cv:
            self.cv.wait_for(lambda: self.turn == ticket)
        try:
            return fn()
        finally:
            with self.cv:
                self.turn += 1
                self.cv.notify_all()

    def call(self, fn: Callable[[], Any], wait: bool) -> Any:
        with self.cv:
            ticket, self.tickets = self.tickets, self.tickets + 1
        if wait:
            return self.run(ticket, fn)
        fut: Future[Any] = Future()
        with self.lock:
            if self.jobs is None:
                self.jobs = queue.SimpleQueue()
                threading.Thread(target=self._work, daemon=True, name="tensorbox-irecv").start()
            self.jobs.put((ticket, fn, fut))
        return fut

    def _work(self) -> None:
        assert self.jobs is not None
        while True:
            ticket, fn, fut = self.jobs.get()
            try:
                fut.set_result(self.run(ticket, fn))
            except BaseException as err:  # handed to the caller's wait()
                fut.set_exception(err)

    def buffer(self, attr: str, nbytes: int) -> Tensor:
        buf = getattr(self, attr, None)
        if buf is None or buf.numel() != nbytes:
            setattr(self, attr, buf := _bytes(nbytes, self.dev))
        return buf


_channels: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # dies with its group
_channels_lock = threading.Lock()


def _channel(pg: Any, *key: Any) -> _Channel:
    with _channels_lock:
        per: dict[Any, _Channel] = _channels.setdefault(pg, {})
        if key not in per:
            cap = _wire.COLLECTIVE_FRAME_BYTES if key[0] == "broadcast" else _wire.FRAME_BYTES
            per[key] = _Channel(_device(pg), cap)
        return per[key]


def _receive(
    ch: _Channel, recv: Callable[..., Any], src: int, what: str, mine: Any, obj: Any, cls: Any
) -> Any:
    """One whole transfer from ``src``: into ``mine``'s leaves (in place), or a new container."""
    dev, who = ch.dev, f"rank {src}"
    recv(frame := ch.buffer("frame", ch.cap))
    _, _, digest, _, json_n, payload_n, flags, threshold = _header(frame, who)
    pos = _HEADER + (json_n if flags & _JSON_INLINE else 0)
    raw = frame[_HEADER:pos].cpu().numpy().tobytes()
    if json_n and not flags & _JSON_INLINE:
        recv(jt := _bytes(json_n, dev))
        raw = jt.cpu().numpy().tobytes()
    if raw:
        ch.remember(digest, s := _parse(raw, who))
    elif ch.remember(digest):
        s = ch.seen[digest]
    else:
        why = "the stream is out of step (messages taken by other code? a restart?)"
        raise DistributedError(f"{who} sent a structure this rank never saw: {why}")
    plan = _plan(s, threshold)
    if plan.nbytes != payload_n:  # checked before the payload is allocated
        raise DistributedError(f"{who} sent {payload_n} bytes for a {plan.nbytes}-byte layout")
    if flags & _PAYLOAD_INLINE:
        payload = frame[_align(pos) : _align(pos) + payload_n]
        if mine is None:
            payload = payload.clone()  # the frame buffer is reused by the next transfer
    else:  # in place, the buffer is reused; a new container keeps views into it
        payload = ch.buffer("payload", payload_n) if mine else _bytes(payload_n, dev, who=who)
        if payload_n:
            recv(payload)
    problem = None if mine is None else _mismatch(s, mine, who, what)
    dsts = mine.leaves if mine is not None and problem is None else None
    rest = []  # the big leaves: straight into the destination when it can take them
    for i in plan.separate:
        if dsts is not None and _direct(dsts[i], dev):
            recv(dsts[i].detach())
        else:
            rest.append((i, _empty(s.shapes[i], s.dtypes[i], dev, who)))
            recv(rest[-1][1])
    if problem:  # raised only now: the transfer was drained, so the next one works
        raise problem
    if dsts is None:
        return _build(s, plan, payload, rest, cls, dev)
    _unpack(plan, payload, dsts)
    with torch.no_grad():
        for i, t in rest:
            dsts[i].copy_(t)
    return obj
