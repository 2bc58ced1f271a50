"""``consolidate``: every tensor leaf of a container in one contiguous storage.

The result is a locked container of the same types whose leaves are views into one
``uint8`` buffer (in memory, or a file with ``filename=``). What that buys, as in
tensordict:

- ``to(device)`` moves the buffer in one copy and rebuilds the views there;
- pickling sends one buffer and a small layout instead of one tensor per leaf;
- ``from_consolidated(filename)`` maps a consolidated file back, without a copy.

Unlocking drops the consolidation (``is_consolidated()`` turns False): entries may then
be replaced, and the buffer no longer holds every leaf.

A file is the buffer followed by the layout as JSON and the layout's length (8 bytes,
little-endian): non-tensor values must be JSON values there. A tensorclass node is
written as its fields; ``from_consolidated`` rebuilds the root as the class it is
called on and nested nodes as TensorDicts.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"a": torch.arange(3), "n": {"b": torch.ones(3, 2)}}, batch_size=[3])
>>> c = consolidate(td)
>>> c.is_consolidated(), c.is_locked
(True, True)
>>> c["a"].untyped_storage().data_ptr() == c["n", "b"].untyped_storage().data_ptr()
True
"""

from __future__ import annotations

import json
import math
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.encoding import DTYPES
from tensorbox._core.future import run_in_thread
from tensorbox._core.jagged import NJT, from_parts, parts
from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll, new_plain, set_locked

__all__ = [
    "consolidate",
    "drop",
    "from_consolidated",
    "is_consolidated",
    "packed_reduce",
    "to",
    "to_device",
]

_ALIGN = 16  # every leaf starts on a 16-byte boundary: any dtype's view is aligned
_NTD = NonTensorData
_TRAILER = struct.Struct("<Q")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _plan(
    td: Any, path: tuple[str, ...], leaves: list[tuple[Tensor, int, int]], at: list[int]
) -> dict[str, Any]:
    """The layout of ``td`` (JSON-able), collecting its leaves with their offsets."""
    entries: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        key = (*path, k)
        if type(v) is NJT:  # a jagged leaf: its values and offsets, each a dense leaf
            entries[k] = {"jagged": [_place(p, leaves, at) for p in parts(v)]}
        elif isinstance(v, Tensor):
            if v.layout is not torch.strided or v.is_nested:
                raise TypeError(
                    f"consolidate: key {format_key(key)} is a {v.layout} tensor; only dense "
                    "and jagged tensors go into one storage"
                )
            entries[k] = {"tensor": _place(v, leaves, at)}
        elif type(v) is _NTD:
            entries[k] = {"value": v}
        else:
            entries[k] = _plan(v, key, leaves, at)
    return {
        "type": type(td),
        "batch_size": list(td._batch_size),
        "device": None if td._device is None else str(td._device),
        "entries": entries,
    }


def _place(v: Tensor, leaves: list[tuple[Tensor, int, int]], at: list[int]) -> list[Any]:
    """The spec ``[dtype, shape, offset, nbytes]`` of dense ``v`` at the next aligned
    offset ``at[0]`` (advanced past it); ``v`` joins ``leaves``."""
    nbytes = v.numel() * v.element_size()
    off = at[0]
    at[0] = off + -(-nbytes // _ALIGN) * _ALIGN
    leaves.append((v, off, nbytes))
    return [_dtype_name(v.dtype), list(v.shape), off, nbytes]


def _copy_in(storage: Tensor, leaf: Tensor, off: int, nbytes: int) -> None:
    if nbytes:
        flat = leaf.detach().contiguous().reshape(-1).view(torch.uint8)
        storage[off : off + nbytes].copy_(flat)
    # the alignment padding is zeroed: the buffer (pickled, compared, written to a file)
    # never carries stale memory, and two consolidations of one tree are byte-equal
    pad_end = off + -(-nbytes // _ALIGN) * _ALIGN
    if pad_end > off + nbytes:
        storage[off + nbytes : pad_end].zero_()


def _view(
    storage: Tensor, spec: list[Any], typed: dict[torch.dtype, Tensor], check: bool
) -> Tensor:
    """The leaf ``spec`` describes, a view of ``storage``; ValueError for a spec that does
    not fit it (a damaged or foreign file; ``check=False`` for a layout this process
    built and checked). ``typed`` caches ``storage`` viewed as each dtype: one
    ``as_strided`` per leaf is several times cheaper than slicing the bytes and viewing
    them twice, which is most of ``to(device)`` and unpickling."""
    dtype_name, shape, off, nbytes = spec
    dtype = DTYPES.get(dtype_name) if type(dtype_name) is str else None
    ok = not check or (
        dtype is not None
        and type(shape) is list
        and all(type(d) is int and d >= 0 for d in shape)
        and type(off) is int
        and type(nbytes) is int
        and off >= 0
        and off % dtype.itemsize == 0
        and off + nbytes <= storage.numel()
        and math.prod(shape) * dtype.itemsize == nbytes
    )
    if not ok:
        raise ValueError(
            f"consolidated layout entry {spec!r} does not fit its {storage.numel()}-byte "
            "storage (dtype, shape, offset and size must agree): the file is damaged"
        )
    assert dtype is not None
    view = typed.get(dtype)
    if view is None:
        usable = storage.numel() - storage.numel() % dtype.itemsize
        view = typed[dtype] = storage[:usable].view(dtype)
    stride, step = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        stride[i] = step
        step *= shape[i]
    return view.as_strided(shape, stride, off // dtype.itemsize)


def _build(
    layout: dict[str, Any],
    storage: Tensor,
    device: Any,
    root_cls: Any = None,
    typed: dict[torch.dtype, Tensor] | None = None,
    check: bool = True,
) -> Any:
    cls = root_cls or layout["type"]
    typed = {} if typed is None else typed
    store: dict[str, Any] = {}
    for k, e in layout["entries"].items():
        if "tensor" in e:
            store[k] = _view(storage, e["tensor"], typed, check)
        elif "jagged" in e:
            values, offsets = (_view(storage, spec, typed, check) for spec in e["jagged"])
            store[k] = from_parts(values, offsets)
        elif "value" in e:
            store[k] = e["value"]
        else:
            store[k] = _build(e, storage, device, None, typed, check)
    dev = layout["device"] if device is None else device
    bs, where = torch.Size(layout["batch_size"]), None if dev is None else torch.device(dev)
    if cls is None:  # a node read from a file: a plain TensorDict
        return new_plain(store, bs, where)
    return cls._new_unsafe(store, bs, where)


def _pack(out: Any, storage: Tensor, layout: dict[str, Any]) -> Any:
    set_locked(out, True)
    out._packed = (storage, layout)
    return out


def is_consolidated(td: Any) -> bool:
    """True while ``td`` holds the leaves of one consolidated storage (until unlocked)."""
    return getattr(td, "_packed", None) is not None


def consolidate(
    td: Any,
    filename: Any = None,
    *,
    num_threads: int = 0,
    device: Any = None,
    non_blocking: bool = False,
    inplace: bool = False,
    return_early: bool = False,
    use_buffer: bool = False,
    share_memory: bool = False,
    pin_memory: bool = False,
    metadata: bool = False,
) -> Any:
    """Every tensor leaf copied into one contiguous storage (a file with ``filename``);
    the result is locked and its leaves are views of that storage.

    ``to(device)`` of the result moves the storage in one copy, and pickling it sends
    one buffer. Unlocking ends the consolidation. ``return_early=True`` returns a
    ``TensorDictFuture`` of the result; ``num_threads`` copies leaves in
    parallel; ``device``, ``share_memory`` and ``pin_memory`` place the storage.

    >>> import torch; from tensorbox import TensorDict
    >>> td = TensorDict({"a": torch.zeros(4), "b": {"c": torch.ones(4, 2)}}, batch_size=[4])
    >>> c = td.consolidate()
    >>> c.is_consolidated(), (c == td).all()
    (True, True)
    """
    del metadata  # tensordict's switch for jagged metadata; the layout is always kept
    if return_early:
        if non_blocking:
            raise NotImplementedError(
                "consolidate(return_early=True) does not take non_blocking=True: the "
                "future already returns before the copies end"
            )
        if use_buffer:
            raise NotImplementedError(
                "consolidate(return_early=True) does not take use_buffer=True; call it "
                "without return_early"
            )
        return run_in_thread(
            lambda: consolidate(
                td,
                filename,
                num_threads=num_threads,
                device=device,
                inplace=inplace,
                share_memory=share_memory,
                pin_memory=pin_memory,
            )
        )
    leaves: list[tuple[Tensor, int, int]] = []
    at = [0]
    layout = _plan(td, (), leaves, at)
    total = at[0]
    if filename is not None:
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(
                f"consolidate(filename={os.fspath(filename)!r}, device={device!r}): a file "
                "is a CPU storage; consolidate to the file, then .to(device)"
            )
        blob = _file_layout(layout, f"consolidate({os.fspath(filename)!r})")
        path = os.fspath(filename)
        with open(path, "wb") as f:
            f.truncate(total)
            f.seek(total)
            f.write(blob)
            f.write(_TRAILER.pack(len(blob)))
        storage = torch.from_file(path, shared=True, size=total, dtype=torch.uint8)
        device = "cpu"
    else:
        dev = torch.device(device) if device is not None else _leaf_device(leaves, td)
        storage = torch.empty(total, dtype=torch.uint8, device=dev)
        if pin_memory:
            storage = storage.pin_memory()
    if num_threads and num_threads > 1 and len(leaves) > 1:
        with ThreadPoolExecutor(num_threads) as pool:
            list(pool.map(lambda job: _copy_in(storage, *job), leaves))
    else:
        for job in leaves:
            _copy_in(storage, *job)
    if non_blocking and storage.device.type == "cuda":
        torch.cuda.synchronize()
    if share_memory and storage.device.type == "cpu" and filename is None:
        storage.share_memory_()  # type: ignore[no-untyped-call]
    dev_arg = None if device is None else str(torch.device(device))
    out = _build(layout, storage, dev_arg, check=False)
    if inplace:
        td._tensordict, td._device = out._tensordict, out._device
        return _pack(td, storage, layout)
    return _pack(out, storage, layout)


def _leaf_device(leaves: list[tuple[Tensor, int, int]], td: Any) -> torch.device:
    if td._device is not None:
        return td._device  # type: ignore[no-any-return]
    devices = {t.device for t, _, _ in leaves}
    return devices.pop() if len(devices) == 1 else torch.device("cpu")


def _json_layout(layout: dict[str, Any], path: tuple[str, ...], what: str) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for k, e in layout["entries"].items():
        if "tensor" in e or "jagged" in e:
            entries[k] = e
        elif "value" in e:
            v: NonTensorData = e["value"]
            data = v.data.tolist() if isinstance(v.data, np.ndarray) else v.data
            try:
                json.dumps(data)
            except (TypeError, ValueError):
                raise TypeError(
                    f"{what}: key {format_key((*path, k))} holds {type(data).__name__} "
                    f"{data!r}, which a consolidated file cannot keep (JSON values only); "
                    "drop it, or consolidate in memory"
                ) from None
            entries[k] = {"value": data, "stacked": v.stacked}
        else:
            entries[k] = _json_layout(e, (*path, k), what)
    return {**layout, "type": layout["type"].__name__, "entries": entries}


def _file_layout(layout: dict[str, Any], what: str) -> bytes:
    return json.dumps(
        {"tensorbox_consolidated": 1, "root": _json_layout(layout, (), what)}
    ).encode()


def _from_json(layout: dict[str, Any]) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for k, e in layout["entries"].items():
        if "tensor" in e or "jagged" in e:
            entries[k] = e
        elif "value" in e:
            data = np.array(e["value"], dtype=object) if e["stacked"] else e["value"]
            entries[k] = {"value": NonTensorData(data, stacked=e["stacked"])}
        else:
            entries[k] = _from_json(e)
    return {**layout, "type": None, "entries": entries}


def from_consolidated(cls: type, filename: Any) -> Any:
    """Map a file written by ``consolidate(filename=...)`` back, as ``cls``."""
    path = os.fspath(filename)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size < _TRAILER.size:
            raise ValueError(f"from_consolidated: {path!r} is too short to be a consolidated file")
        f.seek(size - _TRAILER.size)
        (n,) = _TRAILER.unpack(f.read(_TRAILER.size))
        if n > size - _TRAILER.size:
            raise ValueError(
                f"from_consolidated: {path!r} is not a consolidated file (bad trailer)"
            )
        f.seek(size - _TRAILER.size - n)
        try:
            head = json.loads(f.read(n))
            root = head["root"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(
                f"from_consolidated: {path!r} is not a file written by consolidate(filename=...)"
            ) from None
    total = size - _TRAILER.size - n
    storage = torch.from_file(path, shared=True, size=total, dtype=torch.uint8)
    layout = _from_json(root)
    layout["type"] = cls
    return _pack(_build(layout, storage, None), storage, layout)


def to(td: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``to(device)`` of a consolidated container as one copy; None for any other ``to``
    (a dtype, or options), which goes leaf by leaf."""
    kw = dict(kwargs)
    kw.pop("floating_only", None)
    try:
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kw)
    except (TypeError, RuntimeError):
        return None
    if device is None or dtype is not None or memory_format is not None:
        return None
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if td._device == device:
        return td
    return to_device(td, device, non_blocking)


def to_device(td: Any, device: torch.device, non_blocking: bool) -> Any:
    """``to(device)`` of a consolidated container: one copy of the storage."""
    storage, layout = td._packed
    moved = storage.to(device, non_blocking=non_blocking)
    if non_blocking and device.type == "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()  # a device-to-host copy returns before the bytes land
    return _pack(_build(layout, moved, str(device), check=False), moved, layout)


def packed_reduce(td: Any) -> tuple[Any, ...]:
    """``__reduce__`` of a consolidated container: one buffer and its layout."""
    storage, layout = td._packed
    return (_rebuild_packed, (storage, layout))


def _rebuild_packed(storage: Tensor, layout: dict[str, Any]) -> Any:
    return _pack(_build(layout, storage, None), storage, layout)


def drop(td: Any) -> None:
    """Forget the consolidation (on unlock): the entries may now change."""
    if getattr(td, "_packed", None) is not None:
        td._packed = None
    for v in td._tensordict.values():
        if is_coll(v):
            drop(v)
