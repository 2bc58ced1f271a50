"""The wire format of ``tensorbox.distributed``: what one transfer's bytes are.

A first message (the *frame*: a 64-byte header of eight int64, then the structure's
JSON description when it fits, then the packed small leaves when they fit), then what
did not fit, in order, then each big leaf alone (``docs/distributed.md``, "Wire
format"). This module describes a container (:func:`_describe`), parses a peer's
description with every size checked before anything is allocated (:func:`_parse`,
:func:`_header`), plans the packing (:class:`_PackPlan`), builds the frame
(:func:`_frame`) and a new container from a received one (:func:`_build`). It sends
nothing: the sending is :mod:`~tensorbox.distributed.channel` and
:mod:`~tensorbox.distributed.ops`.

The sizes below are the package's knobs; set them on ``tensorbox.distributed`` (its
face writes them here, where they are read at each call).

>>> from tensorbox.distributed import wire
>>> wire.FRAME_BYTES, wire._align(17)
(65536, 32)
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import orjson
import torch
from torch import Tensor
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from tensorbox._core.encoding import DTYPES, check_json_value, dtype_name, json_bytes, stacked_array
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tensordict import is_tensor_collection
from tensorbox._core.tree import CLASS_REGISTRY, rebuild, type_name
from tensorbox.errors import TensorboxError

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


class _PackPlan:
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


_plans: dict[tuple[int, int], _PackPlan] = {}


def _plan(s: _Structure, threshold: int) -> _PackPlan:
    plan = _plans.get((s.digest, threshold))
    if plan is None:
        if len(_plans) > 1024:
            _plans.clear()
        plan = _plans[s.digest, threshold] = _PackPlan(s.dtypes, s.shapes, threshold)
    return plan


@torch.no_grad()
def _pack(plan: _PackPlan, leaves: list[Tensor], buf: Tensor) -> None:
    # One C++ call per dtype: a Python loop over many small leaves costs more than the copy.
    for region, idx, _ in plan.regions(buf):
        parts = [leaves[i] for i in idx]
        try:
            region.copy_(_flatten_dense_tensors(parts))  # type: ignore[no-untyped-call]
        except RuntimeError:  # leaves on several devices
            region.copy_(_flatten_dense_tensors([t.to(buf.device) for t in parts]))  # type: ignore[no-untyped-call]


@torch.no_grad()
def _unpack(plan: _PackPlan, buf: Tensor, dsts: list[Tensor]) -> None:
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
    s: _Structure, plan: _PackPlan, raw: bytes, cap: int, full: bool, threshold: int, dev: Any
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


def _build(
    s: _Structure, plan: _PackPlan, payload: Tensor, rest: list[Any], cls: Any, dev: Any
) -> Any:
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
