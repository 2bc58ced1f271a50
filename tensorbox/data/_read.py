"""How one batch is read out of a dataset into reused buffers (the loader's inner loop).

A :class:`ReadPlan` is built once per loader from the dataset (a ``TensorDict`` or a
tensorclass instance, memory-mapped or not). For each batch it fills a :class:`Slot`,
a set of buffers allocated once and reused for every batch that slot carries:

- every ordinary tensor leaf is read with one gather into its buffer (``np.take`` with
  ``out=`` on CPU, ``torch.index_select(..., out=)`` elsewhere), indices sorted by the
  caller so that reads walk the file forward;
- the image leaf can be cropped while it is read (random or centre window, per
  sample), so bytes that would be cropped away are never copied, flipped per sample,
  and, on CPU, converted to float and normalised in the same pass: each image goes
  memmap -> float buffer -> ``x * scale + bias`` while it is in cache.

Why buffers are reused: on this class of VM, memory freed a couple of seconds ago comes
back about 10x slower than reused memory, and a fresh float batch is 38 MB.

Why the per-row work is numpy: these loops run in the loader's threads, and a torch op
on an image-sized tensor starts an OpenMP team of ``torch.get_num_threads()`` threads
from *each* calling thread. With 2 reader threads x 2 intra-op threads on 2 busy cores,
a 150 KB copy took 6 ms instead of 20 us (threads wait for a descheduled team mate).
numpy's copies and ufuncs are single-threaded and release the GIL, so reader threads are
the only parallelism and scale without that cliff.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"images": torch.arange(4 * 3 * 6 * 6, dtype=torch.uint8).view(4, 3, 6, 6),
...                  "targets": torch.arange(4)}, batch_size=[4])
>>> plan = ReadPlan(td, ReadOptions(crop=(4, 4), crop_mode="center"))
>>> slot = plan.new_slot(2)
>>> idx = torch.tensor([1, 3])
>>> batch = plan.build(plan.read(slot, idx, torch.Generator().manual_seed(0)), idx)
>>> tuple(batch["images"].shape), batch["targets"].tolist()
((2, 3, 4, 4), [1, 3])
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox import MemoryMappedTensor, is_tensor_collection, prefetch, unravel_key
from tensorbox.data.transforms import BatchTransform, Compose, Normalize

__all__ = ["ReadOptions", "ReadPlan", "Slot", "SlotPool", "as_numpy", "gather_rows"]


@dataclass
class ReadOptions:
    """What happens to the image leaf while it is read (see ``BatchLoader``)."""

    image_key: tuple[str, ...] = ("images",)
    crop: tuple[int, int] | None = None
    crop_mode: str = "random"
    flip: float = 0.0
    normalize: Normalize | None = None
    transform: Any = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    pin: bool = False


def takes_generator(fn: Any) -> bool:
    """Whether ``fn(x, generator=g)`` is accepted: tensorbox transforms, and any callable
    (or module ``forward``) with a ``generator`` parameter, get each batch's generator."""
    if fn is None:
        return False
    if isinstance(fn, (BatchTransform, Compose)):
        return True
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        return "generator" in inspect.signature(target).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def _leaves(data: Any) -> list[tuple[tuple[str, ...], Tensor]]:
    """``(key path, tensor)`` for every tensor leaf, nested ones included."""
    out = []
    for k, v in data.items(include_nested=True, leaves_only=True):
        if isinstance(v, Tensor):  # non-tensor entries (class names...) are not read per batch
            out.append((k if isinstance(k, tuple) else (k,), v))
    return out


def as_numpy(t: Tensor) -> np.ndarray | None:
    """A numpy view of a CPU tensor, or None where numpy lacks the dtype (bfloat16...)."""
    if t.device.type != "cpu" or t.dtype in _NO_NUMPY:
        return None
    return t.detach().numpy()


#: Leaf types read in place; any other tensor type (a leaf of a tree behind a URL, whose
#: bytes arrive on first use) is read by row indexing.
_PLAIN = (Tensor, MemoryMappedTensor)

_NO_NUMPY = {torch.bfloat16, torch.complex32, torch.float8_e4m3fn, torch.float8_e5m2}


def gather_rows(src: Tensor, idx: Tensor, out: Tensor) -> Tensor:
    """``torch.index_select(src, 0, idx, out=out)``: one gather into a reused buffer.

    On CPU it is numpy's ``take(..., out=, mode="clip")``: one C loop of row copies that
    releases the GIL and starts no OpenMP team (see the module docstring). ``mode="clip"``
    matters: the default ``"raise"`` first copies ``out`` aside (3x slower here); the
    indices come from the loader's own permutation, so they are always in range.
    """
    src_np, out_np = as_numpy(src), as_numpy(out)
    if src_np is None or out_np is None:
        if src.device != out.device:  # a dataset living on a GPU: gather there, then copy
            return out.copy_(torch.index_select(src, 0, idx.to(src.device)))
        return torch.index_select(src, 0, idx, out=out)
    np.take(src_np, idx.numpy(), axis=0, out=out_np, mode="clip")
    return out


class Slot:
    """Buffers for one batch in flight: one per leaf, allocated on first use, then reused."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buffers: dict[Any, Tensor] = {}
        self.event: Any = None  # CUDA event: the pinned buffers are still being copied from
        self.busy = False  # claimed by a reader thread (see SlotPool)

    def buffer(self, name: Any, shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> Tensor:
        """A ``[capacity, *shape]`` buffer (reallocated only if ``shape``/``dtype`` change)."""
        buf = self.buffers.get(name)
        full = (self.capacity, *shape)
        if buf is None or tuple(buf.shape) != full or buf.dtype != dtype:
            buf = torch.empty(full, dtype=dtype, pin_memory=pin)
            self.buffers[name] = buf
        return buf

    def unreferenced(self) -> bool:
        """True when no tensor but the slot's own buffers uses their memory: no batch made
        from this slot is still held anywhere (a view, a numpy array, an autograd graph)."""
        if _UNSHARED is None:
            return False  # cannot tell: never reuse (correct, only slower)
        # _owners gives an int whenever _UNSHARED is one
        return all(_owners(b) <= _UNSHARED for b in self.buffers.values())  # type: ignore[operator]


# ``torch._C._storage_Use_Count`` is private but present since torch 2.0; without it,
# buffers are simply never reused.
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _owners(t: Tensor) -> int | None:
    """How many tensors (views included) and storage objects share ``t``'s memory, or None
    where torch cannot tell."""
    if _use_count is None:
        return None
    storage = t.untyped_storage()  # kept alive: the count reads the storage it points to
    return int(_use_count(storage._cdata))


# What a buffer nobody else uses reports: itself and the storage object of the query.
_UNSHARED = _owners(torch.empty(1))


class SlotPool:
    """Slots kept across batches and epochs, handed out only when no batch uses them.

    Reusing buffers matters: a fresh 38 MB float batch pays first-touch page faults
    (measured: 25-40% of the loader's CPU). But a batch the caller still holds
    (``list(loader)``, a batch kept for logging) is never overwritten: its slot stays
    out of rotation until every tensor made from it is gone. At most ``capacity``
    slots are kept; when all of them are in flight or held, the oldest held one is left
    to the caller (dropped from the pool) and a fresh slot takes its place.

    >>> pool = SlotPool(batch_size=2, capacity=2)
    >>> a = pool.acquire(); view = a.buffer("x", (3,), torch.float32, False)[:1]
    >>> pool.release(a); pool.acquire() is a      # `view` still uses a's memory
    False
    >>> del view; pool.acquire() is a
    True
    """

    def __init__(self, batch_size: int, capacity: int) -> None:
        self.batch_size = batch_size
        self.capacity = capacity
        self.slots: list[Slot] = []
        self._lock = threading.Lock()

    def acquire(self) -> Slot:
        """A slot for one batch, claimed until ``release``."""
        with self._lock:
            idle = [slot for slot in self.slots if not slot.busy]
        # Checked without the lock, so that the other readers need not wait; checked again
        # with it, as another reader may have filled and released the slot meanwhile.
        free = next((slot for slot in idle if slot.unreferenced()), None)
        with self._lock:
            if free is not None and not free.busy and free.unreferenced():
                free.busy = True
                return free
            if len(self.slots) >= self.capacity:
                for i, slot in enumerate(self.slots):
                    if not slot.busy:  # held by the caller: theirs now
                        del self.slots[i]
                        break
            slot = Slot(self.batch_size)
            slot.busy = True
            if len(self.slots) < self.capacity:
                self.slots.append(slot)
            return slot

    def release(self, slot: Slot) -> None:
        """The reader is done filling ``slot``: from now on the batch's tensors guard it."""
        with self._lock:
            slot.busy = False


class ReadPlan:
    """Reads batches of ``data`` as ``options`` says; see the module docstring."""

    def __init__(self, data: Any, options: ReadOptions) -> None:
        if not is_tensor_collection(data):
            raise TypeError(
                f"expected a TensorDict or a tensorclass instance, got {type(data).__name__}"
            )
        if not data.batch_size:
            raise ValueError("cannot load batches from a container with batch_size [] (no rows)")
        self.data = data
        self.opts = options
        self.leaves = _leaves(data)
        self.length = int(data.batch_size[0])
        paths = [p for p, _ in self.leaves]
        # The dataset's structure with empty tensors (nested nodes, their types, batch dims
        # and key order, non-tensor entries): indexing it per batch is cheap, and the
        # batch's tensors then take the places of the empty ones.
        dims = {p: (data.get(p[:-1]) if len(p) > 1 else data).batch_dims for p in paths}

        def hollow(key: Any, t: Tensor) -> Tensor:
            return torch.empty((*t.shape[: dims[unravel_key(key)]], 0), dtype=t.dtype)

        self.skeleton = data.named_apply(hollow, nested_keys=True)
        if data.device is not None or options.device.type != "cpu":
            self.skeleton = self.skeleton.to(options.device)
        self.image: Tensor | None = None
        needs_image = bool(options.flip) or any(
            v is not None for v in (options.crop, options.normalize, options.transform)
        )
        if options.image_key in paths:
            self.image = dict(self.leaves)[options.image_key]
            if self.image.dim() < 4:
                raise ValueError(
                    f"image leaf {options.image_key!r} must be [N, C, H, W], got shape "
                    f"{tuple(self.image.shape)!r}"
                )
        elif needs_image:
            raise KeyError(
                f"image_key {options.image_key!r} is not a tensor leaf of the dataset "
                f"(tensor leaves: {paths!r}); crop/flip/normalize/transform act on it"
            )
        if self.image is not None and options.crop is not None:
            h, w = self.image.shape[-2:]
            if options.crop[0] > h or options.crop[1] > w:
                raise ValueError(
                    f"crop {options.crop!r} is larger than the images ({h}, {w}) of leaf "
                    f"{options.image_key!r}"
                )
        self.pass_generator = takes_generator(options.transform)
        on_cpu = options.device.type == "cpu"
        # Normalising while reading is the fused fast path; it needs no transform in between
        # and a CPU target (for an accelerator, uint8 crosses the bus: 4x fewer bytes).
        self.fuse_normalize = options.normalize is not None and options.transform is None and on_cpu

    def lazy(self) -> bool:
        """Whether some leaf's bytes arrive on first use (a tree behind a URL)."""
        return any(type(src) not in _PLAIN for _, src in self.leaves)

    def new_slot(self, capacity: int) -> Slot:
        return Slot(capacity)

    # -------------------------------------------------------------- per batch

    def read(self, slot: Slot, idx: Tensor, gen: torch.Generator) -> dict[tuple[str, ...], Tensor]:
        """Fill ``slot`` with rows ``idx`` (int64, CPU); return ``{leaf path: tensor}``.

        Randomness comes from ``gen`` in a fixed order (crop offsets, flips, then the
        transform), so a batch is a function of its indices and its generator.
        """
        n = int(idx.shape[0])
        pin = self.opts.pin
        leaves, image = self.leaves, self.image
        if self.lazy():
            # Leaves whose bytes arrive on first use (a tree behind a URL): this batch's
            # rows of every leaf are fetched in one call, then read by row indexing, which
            # touches those rows only (a numpy view of the whole leaf would fetch it all).
            prefetch(self.data, idx).result()
            leaves = [(path, src[idx]) for path, src in leaves]
            if image is not None:
                image = dict(leaves)[self.opts.image_key]
            idx = torch.arange(n)
        values: dict[tuple[str, ...], Tensor] = {}
        for path, src in leaves:
            if image is not None and path == self.opts.image_key:
                continue
            buf = slot.buffer(path, tuple(src.shape[1:]), src.dtype, pin)[:n]
            values[path] = gather_rows(src, idx, buf)
        if image is not None:
            values[self.opts.image_key] = self._read_image(slot, idx, gen, image)
        return values

    def _read_image(
        self, slot: Slot, idx: Tensor, gen: torch.Generator, src: Tensor | None = None
    ) -> Tensor:
        src, opts = self.image if src is None else src, self.opts
        assert src is not None
        n = int(idx.shape[0])
        h, w = src.shape[-2:]
        ch, cw = opts.crop if opts.crop is not None else (h, w)
        if opts.crop is None:
            tops = lefts = [0] * n
        elif opts.crop_mode == "center":
            tops, lefts = [round((h - ch) / 2.0)] * n, [round((w - cw) / 2.0)] * n
        else:
            u = torch.rand((2, n), generator=gen)
            tops = (u[0] * (h - ch + 1)).long().tolist()
            lefts = (u[1] * (w - cw + 1)).long().tolist()
        flips = (torch.rand(n, generator=gen) < opts.flip).tolist() if opts.flip else [False] * n
        shape = (*src.shape[1:-2], ch, cw)
        rows = idx.tolist()
        view: Any  # a tensor or an ndarray, by branch
        src_np = as_numpy(src)
        if self.fuse_normalize:
            norm = opts.normalize
            assert norm is not None
            out = slot.buffer("image:float", shape, norm.dtype, False)[:n]
            out_np = as_numpy(out)
            scale = norm._scale_u8 if src.dtype == torch.uint8 else norm._scale
            if src_np is None or out_np is None:  # e.g. bfloat16: torch ops, same maths
                for k, (i, t, le, f) in enumerate(zip(rows, tops, lefts, flips)):
                    view = src[i, ..., t : t + ch, le : le + cw]
                    out[k].copy_(view.flip(-1) if f else view).mul_(scale).add_(norm._bias)
                return out
            scale_np, bias_np = as_numpy(scale), as_numpy(norm._bias)
            assert scale_np is not None and bias_np is not None  # out's dtype and device
            for k, (i, t, le, f) in enumerate(zip(rows, tops, lefts, flips)):
                view = src_np[i, ..., t : t + ch, le : le + cw]
                o = out_np[k]
                # uint8 -> float while copying (a flip is just a negative stride), then
                # the affine map in place, while the image is still in cache.
                np.copyto(o, view[..., ::-1] if f else view, casting="unsafe")
                np.multiply(o, scale_np, out=o)
                np.add(o, bias_np, out=o)
            return out
        raw = slot.buffer("image:raw", shape, src.dtype, opts.pin)[:n]
        raw_np = as_numpy(raw)
        if opts.crop is None and not any(flips):
            gather_rows(src, idx, raw)  # whole rows: one gather
        elif src_np is None or raw_np is None:
            for k, (i, t, le, f) in enumerate(zip(rows, tops, lefts, flips)):
                view = src[i, ..., t : t + ch, le : le + cw]
                raw[k].copy_(view.flip(-1) if f else view)
        else:
            for k, (i, t, le, f) in enumerate(zip(rows, tops, lefts, flips)):
                view = src_np[i, ..., t : t + ch, le : le + cw]
                np.copyto(raw_np[k], view[..., ::-1] if f else view)
        if opts.device.type != "cpu":
            return raw  # transform and normalize run on the device, after the copy
        return self.finish_image(slot, raw, gen)

    def finish_image(self, slot: Slot | None, x: Tensor, gen: torch.Generator) -> Tensor:
        """Transform then normalize ``x`` where it is (CPU in the reader, else on device)."""
        opts = self.opts
        if opts.transform is not None:
            x = opts.transform(x, generator=gen) if self.pass_generator else opts.transform(x)
        if opts.normalize is not None:
            out = None
            if slot is not None and x.device.type == "cpu":
                buf = slot.buffer("image:norm", tuple(x.shape[1:]), opts.normalize.dtype, False)
                out = buf[: x.shape[0]]
            x = opts.normalize(x, out=out)
        return x

    def build(self, values: dict[tuple[str, ...], Any], idx: Tensor) -> Any:
        """A container of ``data``'s type and structure holding ``values`` (batch ``[n]``)."""
        out = self.skeleton[idx]  # non-tensor entries: per-row ones indexed, others kept
        for path, v in values.items():
            out.set(path[0] if len(path) == 1 else path, v)
        return out
