"""The public transfers of ``tensorbox.distributed``: point to point and collectives.

``send``/``isend``/``recv``/``irecv``/``recv_structure`` between two ranks;
``broadcast_``/``broadcast``/``all_reduce_``/``all_gather`` over a group. Each describes
the container (:mod:`~tensorbox.distributed.wire`) and moves it over one channel
(:mod:`~tensorbox.distributed.channel`). The package face re-exports them.

>>> from tensorbox.distributed import ops
>>> callable(ops.send) and callable(ops.all_gather)
True
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from functools import partial
from typing import Any

import orjson
import torch
import torch.distributed as dist
from torch import Tensor

from tensorbox._core.encoding import DTYPES
from tensorbox._core.nestedkey import format_key
from tensorbox._core.tensordict import TensorDict
from tensorbox.distributed import wire as _wire
from tensorbox.distributed.channel import _channel, _device, _pg, _receive
from tensorbox.distributed.wire import (
    _HEADER,
    _MAGIC,
    _PAYLOAD_INLINE,
    _PER_LEAF,
    StructureMismatchError,
    _alone,
    _build,
    _bytes,
    _describe,
    _digest,
    _frame,
    _header,
    _mismatch,
    _pack,
    _parse,
    _plan,
    _Structure,
    _unpack,
)


class Request:
    """A transfer in flight: ``wait()`` blocks until it is done and returns the container.

    ``isend`` packs the leaves when called, but leaves sent alone (``SEPARATE_BYTES`` or
    more, or ``packed=False``) must not change before ``wait()``.
    """

    __slots__ = ("_finish", "_result", "_works")

    def __init__(self, result: Any, works: Any, finish: Callable[[], Any] | None = None) -> None:
        # works: torch Work objects or an irecv thread's Future; finish runs once, after.
        self._result, self._works, self._finish = result, works, finish

    def wait(self, timeout: float | None = None) -> Any:
        """Block until done (``timeout`` in seconds); returns the container."""
        if isinstance(self._works, Future):
            return self._works.result(timeout)
        for w in self._works:
            w.wait() if timeout is None else w.wait(timedelta(seconds=timeout))
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()
        return self._result

    def is_completed(self) -> bool:
        """True when every transfer has finished (never blocks; ``wait()`` then unpacks)."""
        if isinstance(self._works, Future):
            return self._works.done()
        return all(w.is_completed() for w in self._works)


def isend(obj: Any, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> Request:
    """Start sending ``obj`` to rank ``dst``; ``wait()`` on the returned :class:`Request`.

    ``packed=False`` sends each leaf as a message of its own (packing copies the
    leaves; it pays off below ``SEPARATE_BYTES`` a leaf). The receiver follows.
    """
    pg = _pg(group, "isend", dst, "dst")
    s = _describe(obj, "isend")
    threshold = _wire.SEPARATE_BYTES if packed else _PER_LEAF
    plan, dev = _plan(s, threshold), _device(pg)
    ch = _channel(pg, "send", dst, tag)
    with ch.lock:  # the messages of one transfer go out back to back
        raw = b"" if ch.remember(s.digest) else s.raw
        frame, tail = _frame(s, plan, raw, _wire.FRAME_BYTES, False, threshold, dev)
        works = [dist.isend(t, dst, group=group, tag=tag) for t in (frame, *tail)]
    return Request(obj, works, lambda: (frame, tail))


def send(obj: Any, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> None:
    """Send ``obj`` (a TensorDict or a tensorclass) to rank ``dst``; returns once sent.

    The receiver calls :func:`recv` (into a container of the same structure) or
    :func:`recv_structure`. Non-tensor entries and the class travel too.
    """
    isend(obj, dst, group=group, tag=tag, packed=packed).wait()


send_structure = send  # the structure always travels when the peer has not seen it
init_remote = send  # tensordict's name


def _p2p(obj: Any, src: int, group: Any, tag: int, what: str, wait: bool, cls: Any = None) -> Any:
    pg = _pg(group, what, src, "src")
    ch = _channel(pg, "recv", src, tag)
    mine = None if obj is None else _describe(obj, what, values=False)  # fails early
    recv_one = partial(dist.recv, src=src, group=group, tag=tag)
    return ch.call(lambda: _receive(ch, recv_one, src, what, mine, obj, cls), wait)


def recv(obj: Any, src: int, *, group: Any = None, tag: int = 0) -> Any:
    """Receive what rank ``src`` sends into ``obj``'s tensors, in place; returns ``obj``.

    ``obj`` must have the sender's keys, dtypes and shapes, else
    :class:`StructureMismatchError` names the first differing key (the transfer is
    still consumed, so the next one works). Non-tensor entries are not written.
    """
    return _p2p(obj, src, group, tag, "recv", True)


def irecv(obj: Any, src: int, *, group: Any = None, tag: int = 0) -> Request:
    """Start receiving into ``obj`` in place; ``wait()`` on the returned :class:`Request`.

    A background thread (one per peer) runs the transfer, so it overlaps your work;
    receives from one peer complete in the order they were called.
    """
    return Request(obj, _p2p(obj, src, group, tag, "irecv", False))


def recv_structure(
    src: int, *, cls: Any = None, group: Any = None, tag: int = 0, device: Any = None
) -> Any:
    """Receive a new container from rank ``src``, whatever its structure.

    It is a ``cls`` instance when given, else the sent tensorclass when registered here
    (by ``@tensorclass``), else a ``TensorDict``. Leaves are views into the received
    buffer; ``device`` moves them.
    """
    out = _p2p(None, src, group, tag, "recv_structure", True, cls)
    return out if device is None else out.to(device)


from_remote_init = recv_structure  # tensordict's name


def _broadcast(obj: Any, src: int, group: Any, inplace: bool, cls: Any, what: str) -> Any:
    pg = _pg(group, what)
    if type(src) is not int:
        raise TypeError(f"{what}: src={src!r} must be an int (a global rank)")
    ch, bcast = _channel(pg, "broadcast"), partial(dist.broadcast, src=src, group=group)
    with ch.lock:  # every rank sees the same broadcasts, so the caches agree
        if dist.get_rank() != src:
            mine = _describe(obj, what, values=False) if inplace else None
            return _receive(ch, bcast, src, what, mine, obj, cls)
        s = _describe(obj, what)
        # The source may receive the next broadcast: it remembers the structure too.
        bare = _Structure(s.desc, s.raw, s.paths, s.dtypes, s.shapes)
        plan, raw = _plan(s, _wire.SEPARATE_BYTES), b"" if ch.remember(s.digest, bare) else s.raw
        dev = _device(pg)
        frame, tail = _frame(
            s, plan, raw, _wire.COLLECTIVE_FRAME_BYTES, True, _wire.SEPARATE_BYTES, dev
        )
        for t in (frame, *tail):
            bcast(t)
        return obj


def broadcast_(obj: Any, src: int, *, group: Any = None) -> Any:
    """Copy rank ``src``'s ``obj`` into every other rank's ``obj`` (same structure), in place."""
    return _broadcast(obj, src, group, True, None, "broadcast_")


def broadcast(obj: Any, src: int, *, group: Any = None, cls: Any = None) -> Any:
    """Rank ``src``'s ``obj`` on every rank: ``obj`` itself on ``src``, a new container on
    the others (their ``obj`` is ignored: pass None). ``cls`` as in :func:`recv_structure`."""
    return _broadcast(obj, src, group, False, cls, "broadcast")


def _gather(t: Tensor, group: Any, world: int) -> list[Tensor]:
    outs = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(outs, t.contiguous(), group=group)
    return outs


def _gather_bytes(raw: bytes, dev: Any, group: Any, world: int) -> list[bytes]:
    """Every rank's bytes: two collectives, taken only when the ranks' structures differ."""
    sizes = [int(t) for t in _gather(torch.tensor([len(raw)], device=dev), group, world)]
    outs = _gather(_bytes(max(sizes), dev, raw), group, world)
    return [o[:n].cpu().numpy().tobytes() for o, n in zip(outs, sizes)]


def _check_layouts(s: _Structure, dev: Any, group: Any, world: int, what: str) -> None:
    """Every rank raises, naming a differing key, unless all have the same leaves."""
    for r, raw in enumerate(_gather_bytes(s.layout(), dev, group, world)):
        rows = orjson.loads(raw)
        theirs = [tuple(x[0]) for x in rows], [DTYPES[x[1]] for x in rows]
        theirs_s = _Structure(None, raw, *theirs, [tuple(x[2]) for x in rows])
        if problem := _mismatch(theirs_s, s, f"rank {r}", what):
            raise problem
    raise StructureMismatchError(f"{what}: the ranks' _wire.SEPARATE_BYTES settings differ")


def all_reduce_(obj: Any, op: Any = None, *, group: Any = None, async_op: bool = False) -> Any:
    """Reduce every leaf over the group, in place on every rank (default op: SUM).

    A small check that all ranks have the same keys, dtypes and shapes, then one
    collective per dtype (small leaves packed) and one per leaf of ``SEPARATE_BYTES``
    or more. ``ReduceOp.AVG`` works on any backend (a SUM, then a division). With
    ``async_op=True`` returns a :class:`Request`, whose ``wait()`` writes the leaves.
    """
    pg = _pg(group, "all_reduce_")
    s = _describe(obj, "all_reduce_", values=False)
    s.digest = _digest(s.layout())  # also the plan's cache key
    dev, world, leaves = _device(pg), dist.get_world_size(pg), s.leaves
    check = torch.tensor([_MAGIC, s.digest, _wire.SEPARATE_BYTES], device=dev)
    if not all(torch.equal(t, check) for t in _gather(check, group, world)):
        _check_layouts(s, dev, group, world, "all_reduce_")
    op = dist.ReduceOp.SUM if op is None else op
    avg = op == dist.ReduceOp.AVG  # gloo has no AVG
    for p, t in zip(s.paths, leaves):
        if avg and not (t.is_floating_point() or t.is_complex()):
            raise TypeError(f"all_reduce_: AVG of key {format_key(p)} ({t.dtype}) needs floats")
    op = dist.ReduceOp.SUM if avg else op
    plan = _plan(s, _wire.SEPARATE_BYTES)
    buf = torch.empty(plan.nbytes, dtype=torch.uint8, device=dev)
    _pack(plan, leaves, buf)
    alone = [(i, _alone(leaves[i], dev)) for i in plan.separate]
    works = [dist.all_reduce(r, op, group=group, async_op=True) for r, _, _ in plan.regions(buf)]
    works += [dist.all_reduce(t, op, group=group, async_op=True) for _, t in alone]

    @torch.no_grad()
    def finish() -> None:
        _unpack(plan, buf, leaves)
        for i, t in alone:
            if t.data_ptr() != leaves[i].data_ptr():
                leaves[i].copy_(t)
        if avg:
            torch._foreach_div_([t for t in leaves if t.numel()], float(world))

    req = Request(obj, works, finish)
    return req if async_op else req.wait()


def all_gather(obj: Any, *, group: Any = None) -> Any:
    """Every rank's ``obj`` stacked along a new first dim (of the group's size).

    The ranks must have the same keys, dtypes and shapes; non-tensor values may
    differ (they are stacked). Returns the caller's class.
    """
    pg = _pg(group, "all_gather")
    s = _describe(obj, "all_gather")
    dev, world = _device(pg), dist.get_world_size(pg)
    plan = _plan(s, _wire.SEPARATE_BYTES)
    # No JSON in the frames: the digests say whether the descriptions differ.
    frame, tail = _frame(
        s, plan, b"", _wire.COLLECTIVE_FRAME_BYTES, True, _wire.SEPARATE_BYTES, dev
    )
    frame[:_HEADER].view(torch.int64)[3] = _digest(s.layout())
    frames = _gather(frame, group, world)
    heads = [_header(f, f"rank {r}") for r, f in enumerate(frames)]
    if any(h[3] != heads[0][3] or h[7] != heads[0][7] for h in heads):
        _check_layouts(s, dev, group, world, "all_gather")
    structs = [s] * world
    if any(h[2] != s.digest for h in heads):  # other non-tensor values or batch sizes
        raws = _gather_bytes(s.raw, dev, group, world)
        structs = [_parse(raw, f"rank {r}") for r, raw in enumerate(raws)]
    if plan.nbytes and not heads[0][6] & _PAYLOAD_INLINE:
        payloads = _gather(tail.pop(0), group, world)
    else:
        payloads = [f[_HEADER : _HEADER + plan.nbytes] for f in frames]
    rests: list[list[tuple[int, Tensor]]] = [[] for _ in range(world)]
    for i, t in zip(plan.separate, tail):
        for r, out in enumerate(_gather(t, group, world)):
            rests[r].append((i, out))
    cls = None if isinstance(obj, TensorDict) else type(obj)
    parts = [_build(structs[r], plan, payloads[r], rests[r], cls, dev) for r in range(world)]
    return torch.stack(parts, 0)
