"""Share TensorDicts and tensorclasses between processes with ``torch.distributed``.

``send``/``isend`` pair with ``recv``/``irecv`` (in place, same keys, dtypes and
shapes) or ``recv_structure`` (a new container). Collectives: ``broadcast_``,
``broadcast``, ``all_reduce_``, ``all_gather``. ``shard_indices`` gives each rank its
rows in ``DistributedSampler`` order. Guide and wire format: ``docs/distributed.md``.
After ``torch.distributed.init_process_group`` in each process::

    import tensorbox.distributed as tbd

    if rank == 0:
        tbd.send(td, dst=1)               # or: req = tbd.isend(td, 1); ...; req.wait()
    else:
        tbd.recv(like_td, src=0)          # writes into like_td's tensors
        td = tbd.recv_structure(src=0)    # or builds a new container

Leaves travel in sorted nested-key order, packed into one buffer, after a header
and, the first time a peer sees a structure, its JSON description: never pickle,
and no module named by a peer is ever imported.

>>> shard_indices(10, rank=1, world_size=3).tolist(), shard_indices(10, 1, 3, drop_last=True).tolist()
([1, 4, 7, 0], [1, 4, 7])
"""

from __future__ import annotations

import hashlib
import json
import math
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from functools import partial
from typing import Any

import orjson
import torch
import torch.distributed as dist
from torch import Tensor
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from tensorbox._core.keys import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.schema import DTYPES, check_json_value, dtype_name, json_bytes, stacked_array
from tensorbox._core.tensordict import TensorDict, is_tensor_collection
from tensorbox._core.tree import CLASS_REGISTRY, rebuild, type_name
from tensorbox.errors import TensorboxError

# fmt: off
__all__ = [
    "DistributedError", "Request", "StructureMismatchError", "all_gather", "all_reduce_",
    "broadcast", "broadcast_", "from_remote_init", "init_remote", "irecv", "isend", "recv",
    "recv_structure", "send", "send_structure", "shard_indices",
]
# fmt: on

#: Largest p2p first message: a smaller transfer is one message in all.
FRAME_BYTES = 1 << 16
#: First message of broadcast/all_gather (every rank posts this size).
COLLECTIVE_FRAME_BYTES = 1 << 14
#: Leaves of at least this many bytes travel alone: packing would only copy them.
SEPARATE_BYTES = 1 << 22
#: Structures remembered per peer, so that a repeated one is not sent again.
CACHE_SIZE = 64

#: Largest structure description accepted from a peer (checked before allocating).
MAX_JSON_BYTES = 1 << 28

_MAGIC = 0x54424F58_44495354  # "TBOXDIST"
_VERSION = 1
_HEADER = 64  # eight int64: magic, version, digest, layout digest, json, payload, flags, threshold
_JSON_INLINE, _PAYLOAD_INLINE = 1, 2
_ALIGN = 16
_PER_LEAF = 1  # separate-leaf threshold: every non-empty leaf alone
_NAMES = {dt: name for name, dt in DTYPES.items()}


class DistributedError(TensorboxError, RuntimeError):
    """A transfer cannot run: no process group, a bad peer, a damaged message."""


class StructureMismatchError(DistributedError, ValueError):
    """The peers' containers differ in keys, dtypes or shapes; the message names the key."""


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _empty(shape: Any, dtype: torch.dtype, dev: Any, who: str) -> Tensor:
    try:
        return torch.empty(shape, dtype=dtype, device=dev)
    except RuntimeError as err:  # a size a peer described: say so, not an allocator trace
        raise DistributedError(f"{who} sent a leaf of shape {tuple(shape)}: {err}") from None


def _bytes(n: int, dev: Any, fill: bytes = b"", who: str = "") -> Tensor:
    try:
        out = torch.empty(n, dtype=torch.uint8, device=dev)
    except RuntimeError as err:  # a size a peer claimed: say so, not an allocator trace
        raise DistributedError(f"{who or 'a peer'} needs {n} bytes here: {err}") from None
    if fill:
        out[: len(fill)] = torch.frombuffer(bytearray(fill), dtype=torch.uint8)
    return out


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


def shard_indices(
    n: int,
    rank: int | None = None,
    world_size: int | None = None,
    *,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
) -> Tensor:
    """The rows of an ``n``-row dataset that ``rank`` reads (int64), in the order
    ``DistributedSampler(num_replicas=world_size, ...)`` yields them: shuffled by
    ``seed + epoch``, padded by repeating the first rows so that every rank gets as
    many, or with ``drop_last`` cut to a multiple of ``world_size``. ``rank`` and
    ``world_size`` default to the process group's. Index a memmapped TensorDict with
    them, a batch at a time, and each rank reads only its own rows from disk.
    """
    if rank is None or world_size is None:
        _pg(None, "shard_indices without rank= and world_size=")  # no group: DistributedError
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    if n < 0 or world_size < 1 or not 0 <= rank < world_size:
        got = f"n={n!r}, rank={rank!r}, world_size={world_size!r}"
        raise ValueError(f"shard_indices: need n >= 0 and 0 <= rank < world_size, got {got}")
    short = drop_last and n % world_size
    total = math.ceil((n - world_size if short else n) / world_size) * world_size
    g = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g) if shuffle else torch.arange(n)
    if total > n:
        order = torch.cat([order, order.repeat(math.ceil((total - n) / n))[: total - n]])
    return order[rank:total:world_size]


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
        while len(self.seen) > CACHE_SIZE:
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
            cap = COLLECTIVE_FRAME_BYTES if key[0] == "broadcast" else FRAME_BYTES
            per[key] = _Channel(_device(pg), cap)
        return per[key]


class _Structure:
    """A container's description (JSON tree) and its tensor leaves in wire order."""

    __slots__ = ("desc", "digest", "dtypes", "leaves", "paths", "raw", "shapes")

    def __init__(self, desc: Any, raw: bytes, paths: Any, dtypes: Any, shapes: Any) -> None:
        self.desc, self.raw, self.paths, self.dtypes, self.shapes = desc, raw, paths, dtypes, shapes
        self.digest, self.leaves = _digest(raw), list[Tensor]()

    def layout(self) -> bytes:
        """Keys, dtypes and shapes only: what in-place transfers and reductions need."""
        rows = zip(self.paths, self.dtypes, self.shapes)
        return orjson.dumps([[list(p), dtype_name(d), list(s)] for p, d, s in rows])


def _wire_order(paths: list[Any], *columns: list[Any]) -> Any:
    """Leaves travel in sorted nested-key order; descriptions keep the container's order."""
    order = sorted(range(len(paths)), key=paths.__getitem__)
    return [[col[i] for i in order] for col in (paths, *columns)]


def _digest(raw: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True)


def _describe(obj: Any, what: str, values: bool = True) -> _Structure:
    """Describe ``obj``; ``values=False`` skips the JSON (in-place transfers need none)."""
    if not is_tensor_collection(obj) or isinstance(obj, type):
        raise TypeError(f"{what}: expected a TensorDict or a tensorclass instance, got {obj!r}")
    paths, leaves, std = [], [], False

    def node(c: Any, path: tuple[str, ...]) -> dict[Any, Any]:
        nonlocal std
        td = c
        store, entries = td._tensordict, dict[str, Any]()
        for k, v in store.items():
            p = (*path, k)
            if isinstance(v, Tensor):
                if v.layout is not torch.strided or v.is_nested or v.is_meta:
                    why = f"is a {v.layout}, nested or meta tensor: only dense tensors travel"
                    raise TypeError(f"{what}: key {format_key(p)} {why}")
                paths.append(p)
                leaves.append(v)
                if values:
                    name = _NAMES.get(v.dtype) or dtype_name(v.dtype, f"{what}: {format_key(p)}")
                    entries[k] = {"kind": "tensor", "dtype": name, "shape": list(v.shape)}
            elif type(v) is NonTensorData:
                if values:
                    value = v.data.tolist() if v.stacked else v.data
                    std |= check_json_value(value, f"{what}: key {format_key(p)}")
                    entries[k] = {"kind": "json", "value": value, "stacked": v.stacked}
            else:
                entries[k] = {"kind": "node", **node(v, p)}
        cls, dev = type(c), td.device
        return {
            "type": type_name(cls),
            "batch_size": list(td.batch_size),
            "device": None if dev is None else str(dev),
            "entries": entries,
        }

    desc = node(obj, ())
    paths, leaves = _wire_order(paths, leaves)
    if values and std:  # orjson writes neither NaN, infinities nor ints beyond 64 bits
        raw = json.dumps(desc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    else:
        raw = json_bytes(desc) if values else b""
    s = _Structure(desc, raw, paths, [t.dtype for t in leaves], [tuple(t.shape) for t in leaves])
    s.leaves = leaves
    return s


def _parse(raw: bytes, who: str) -> _Structure:
    """Check a peer's JSON description strictly: it sizes this rank's allocations."""
    try:
        desc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # NaN and infinities come through Python's json
            desc = json.loads(raw)
        except (ValueError, RecursionError) as err:
            raise DistributedError(f"the description sent by {who} is not JSON: {err}") from None
    paths, dtypes, shapes = [], [], []

    def ints(v: Any) -> tuple[int, ...] | None:
        ok = type(v) is list and len(v) <= 64 and all(type(d) is int and d >= 0 for d in v)
        return tuple(v) if ok else None

    def node(n: Any, path: tuple[str, ...], parent: tuple[int, ...]) -> None:
        bs = ints(n.get("batch_size")) if type(n) is dict else None
        if (
            bs is None
            or bs[: len(parent)] != parent
            or type(n.get("type")) is not str
            or type(n.get("device")) not in (str, type(None))
            or type(n.get("entries")) is not dict
        ):
            raise _bad(who, path, n)
        for k, e in n["entries"].items():
            p, kind = (*path, k), e.get("kind") if type(e) is dict else None
            if kind == "tensor":
                dt, shape = DTYPES.get(e.get("dtype")), ints(e.get("shape"))
                if dt is None or shape is None or shape[: len(bs)] != bs:
                    raise _bad(who, p, e)
                paths.append(p)
                dtypes.append(dt)
                shapes.append(shape)
            elif kind == "node":
                node(e, p, bs)
            elif kind != "json" or "value" not in e or type(e.get("stacked")) is not bool:
                raise _bad(who, p, e)

    node(desc, (), ())
    return _Structure(desc, raw, *_wire_order(paths, dtypes, shapes))


def _bad(who: str, path: tuple[str, ...], value: Any) -> DistributedError:
    where, r = f" at key {format_key(path)}" if path else "", repr(value)
    r = r if len(r) <= 80 else r[:77] + "..."
    return DistributedError(f"the description sent by {who} is malformed{where}: {r}")


def _mismatch(theirs: _Structure, mine: _Structure, who: str, what: str) -> Exception | None:
    """None when the layouts agree, else an error naming the first differing key."""
    if (theirs.paths, theirs.dtypes, theirs.shapes) == (mine.paths, mine.dtypes, mine.shapes):
        return None
    return StructureMismatchError(
        f"{what}: {_difference(theirs, mine, who)}. The containers must have the same keys, "
        "dtypes and shapes (recv_structure and broadcast take a structure not known in advance)"
    )


def _difference(theirs: _Structure, mine: _Structure, who: str) -> str:
    a = {p: (d, s) for p, d, s in zip(mine.paths, mine.dtypes, mine.shapes)}
    b = {p: (d, s) for p, d, s in zip(theirs.paths, theirs.dtypes, theirs.shapes)}
    for p in sorted(a.keys() | b.keys()):
        k = format_key(p)
        if p not in a:
            d, s = b[p]
            return f"key {k} ({d}, shape {list(s)}) comes from {who} but this rank has no such leaf"
        if p not in b:
            return f"key {k} is a leaf on this rank but {who} has no such leaf"
        if a[p][0] != b[p][0]:
            return f"key {k}: {who} has dtype {b[p][0]}, this rank's leaf has dtype {a[p][0]}"
        if a[p][1] != b[p][1]:
            return f"key {k}: {who} has shape {list(b[p][1])}, this rank's has {list(a[p][1])}"
    return "the leaves are in another order"


class _Plan:
    """Where each leaf goes: a packed region per dtype, or a message of its own."""

    __slots__ = ("groups", "nbytes", "separate")

    def __init__(self, dtypes: list[Any], shapes: list[Any], threshold: int) -> None:
        by_dtype: dict[torch.dtype, list[int]] = {}
        self.separate: list[int] = []
        for i, (dt, shape) in enumerate(zip(dtypes, shapes)):
            n = math.prod(shape)
            if n and n * dt.itemsize >= threshold:
                self.separate.append(i)
            elif n:  # an empty leaf needs no bytes: both sides know its shape
                by_dtype.setdefault(dt, []).append(i)
        self.groups: list[tuple[torch.dtype, int, int, list[int], list[int]]] = []
        off = 0
        for dt, idx in by_dtype.items():
            numels = [math.prod(shapes[i]) for i in idx]
            self.groups.append((dt, off, off + sum(numels) * dt.itemsize, idx, numels))
            off = _align(self.groups[-1][2])
        self.nbytes = off

    def regions(self, buf: Tensor) -> list[tuple[Tensor, list[int], list[int]]]:
        return [(buf[a:b].view(dt), idx, numels) for dt, a, b, idx, numels in self.groups]


_plans: dict[tuple[int, int], _Plan] = {}


def _plan(s: _Structure, threshold: int) -> _Plan:
    plan = _plans.get((s.digest, threshold))
    if plan is None:
        if len(_plans) > 1024:
            _plans.clear()
        plan = _plans[s.digest, threshold] = _Plan(s.dtypes, s.shapes, threshold)
    return plan


@torch.no_grad()
def _pack(plan: _Plan, leaves: list[Tensor], buf: Tensor) -> None:
    # One C++ call per dtype: a Python loop over many small leaves costs more than the copy.
    for region, idx, _ in plan.regions(buf):
        parts = [leaves[i] for i in idx]
        try:
            region.copy_(_flatten_dense_tensors(parts))  # type: ignore[no-untyped-call]
        except RuntimeError:  # leaves on several devices
            region.copy_(_flatten_dense_tensors([t.to(buf.device) for t in parts]))  # type: ignore[no-untyped-call]


@torch.no_grad()
def _unpack(plan: _Plan, buf: Tensor, dsts: list[Tensor]) -> None:
    for region, idx, _ in plan.regions(buf):
        views = _unflatten_dense_tensors(region, targets := [dsts[i] for i in idx])  # type: ignore[no-untyped-call]
        try:
            torch._foreach_copy_(targets, views)
        except RuntimeError:  # conjugate or negative views among the destinations
            for t, v in zip(targets, views):
                t.copy_(v)


def _alone(t: Tensor, device: torch.device) -> Tensor:
    """A leaf as it travels by itself: contiguous, on the staging device, no autograd."""
    if _direct(t, device):
        return t.detach()
    return t.detach().resolve_conj().resolve_neg().to(device).contiguous()


def _direct(t: Tensor, device: torch.device) -> bool:
    return t.device == device and t.is_contiguous() and not (t.is_conj() or t.is_neg())


def _frame(
    s: _Structure, plan: _Plan, raw: bytes, cap: int, full: bool, threshold: int, dev: Any
) -> tuple[Tensor, list[Tensor]]:
    """The first message, and what must follow it in order (JSON, payload, big leaves)."""
    json_inline = _HEADER + len(raw) <= cap
    pos = _HEADER + (len(raw) if json_inline else 0)
    payload_inline = _align(pos) + plan.nbytes <= cap
    used = _align(pos) + plan.nbytes if payload_inline else pos
    frame = torch.zeros(cap if full else used, dtype=torch.uint8, device=dev)
    flags = _JSON_INLINE * json_inline | _PAYLOAD_INLINE * payload_inline
    head = [_MAGIC, _VERSION, s.digest, 0, len(raw), plan.nbytes, flags, threshold]
    frame[:_HEADER].view(torch.int64).copy_(torch.tensor(head))
    tail: list[Tensor] = []
    if raw and json_inline:
        frame[_HEADER:pos] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    elif raw:
        tail.append(_bytes(len(raw), dev, raw))
    if plan.nbytes:
        if not payload_inline:
            tail.append(_bytes(plan.nbytes, dev))
        _pack(plan, s.leaves, frame[_align(pos) : used] if payload_inline else tail[-1])
    tail.extend(_alone(s.leaves[i], dev) for i in plan.separate)
    return frame, tail


def _header(frame: Tensor, who: str) -> list[int]:
    h = frame[:_HEADER].view(torch.int64).tolist()
    if h[0] != _MAGIC or h[1] != _VERSION:
        raise DistributedError(f"{who} sent {h[:2]!r}, not a tensorbox v{_VERSION} transfer")
    json_n, payload_n, flags, threshold = h[4:8]
    end = _HEADER + (json_n if flags & _JSON_INLINE else 0)
    if (
        not (0 <= json_n <= MAX_JSON_BYTES and payload_n >= 0 and 0 <= flags <= 3)
        or threshold < 0
        or end > frame.numel()
        or (flags & _PAYLOAD_INLINE and _align(end) + payload_n > frame.numel())
    ):  # refused before anything is allocated from these numbers
        raise DistributedError(
            f"{who} sent a damaged header (description {json_n} B, payload {payload_n} B, "
            f"flags {flags}); nothing was allocated, and this stream is now out of step"
        )
    return h


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


def _build(s: _Structure, plan: _Plan, payload: Tensor, rest: list[Any], cls: Any, dev: Any) -> Any:
    """A new container from a description; leaves are views into ``payload``."""
    leaves = [_empty(sh, dt, dev, "a peer") for dt, sh in zip(s.dtypes, s.shapes)]
    for region, idx, numels in plan.regions(payload):
        for i, p in zip(idx, region.split(numels)):  # type: ignore[no-untyped-call]
            leaves[i] = p.view(s.shapes[i])
    for i, t in rest:
        leaves[i] = t
    by_path = dict(zip(s.paths, leaves))

    def node(n: dict[Any, Any], path: tuple[str, ...], want: Any) -> Any:
        store: dict[str, Any] = {}
        bs = torch.Size(n["batch_size"])
        for k, e in n["entries"].items():
            if e["kind"] == "tensor":
                store[k] = by_path[(*path, k)]
            elif e["kind"] == "node":
                store[k] = node(e, (*path, k), None)
            elif e["stacked"]:
                where = f"key {format_key((*path, k))}"
                store[k] = NonTensorData(stacked_array(e["value"], tuple(bs), where), stacked=True)
            else:
                store[k] = NonTensorData(e["value"])
        device = None if n["device"] is None else dev
        target: Any = want if want is not None else CLASS_REGISTRY.get(n["type"])
        if target is not None and hasattr(target, "__tc_names__"):
            extra = sorted(store.keys() - target.__tc_names__)
            if extra:
                raise TypeError(
                    f"{target.__name__} has no fields {extra!r} (sent type {n['type']!r})"
                )
            return target._new_unsafe(store, bs, device)  # a rebuild: no __post_init__
        return rebuild(n["type"], store, bs, device, target)

    return node(s.desc, (), cls)


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
    threshold = SEPARATE_BYTES if packed else _PER_LEAF
    plan, dev = _plan(s, threshold), _device(pg)
    ch = _channel(pg, "send", dst, tag)
    with ch.lock:  # the messages of one transfer go out back to back
        raw = b"" if ch.remember(s.digest) else s.raw
        frame, tail = _frame(s, plan, raw, FRAME_BYTES, False, threshold, dev)
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
        plan, raw = _plan(s, SEPARATE_BYTES), b"" if ch.remember(s.digest, bare) else s.raw
        dev = _device(pg)
        frame, tail = _frame(s, plan, raw, COLLECTIVE_FRAME_BYTES, True, SEPARATE_BYTES, dev)
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
    raise StructureMismatchError(f"{what}: the ranks' SEPARATE_BYTES settings differ")


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
    check = torch.tensor([_MAGIC, s.digest, SEPARATE_BYTES], device=dev)
    if not all(torch.equal(t, check) for t in _gather(check, group, world)):
        _check_layouts(s, dev, group, world, "all_reduce_")
    op = dist.ReduceOp.SUM if op is None else op
    avg = op == dist.ReduceOp.AVG  # gloo has no AVG
    for p, t in zip(s.paths, leaves):
        if avg and not (t.is_floating_point() or t.is_complex()):
            raise TypeError(f"all_reduce_: AVG of key {format_key(p)} ({t.dtype}) needs floats")
    op = dist.ReduceOp.SUM if avg else op
    plan = _plan(s, SEPARATE_BYTES)
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
    plan = _plan(s, SEPARATE_BYTES)
    # No JSON in the frames: the digests say whether the descriptions differ.
    frame, tail = _frame(s, plan, b"", COLLECTIVE_FRAME_BYTES, True, SEPARATE_BYTES, dev)
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
