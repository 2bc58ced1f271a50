"""``apply`` and the leaf-wise operations built like it: ``to``, casts, ``pin_memory``, ``clone``.

Each walks the entries once and builds its result with ``_new_unsafe`` of the
input's own type, so a tensorclass gets a tensorclass back and the cost stays
near a dict comprehension over the leaves. Results of a user's function are
checked against the batch size; results of torch's own shape-preserving
functions (``map_leaves``) are not.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"x": torch.zeros(2, 3), "n": {"y": torch.ones(2)}}, batch_size=[2])
>>> apply(td, lambda t: t + 1, (), None, KEEP, False, False)["n", "y"].tolist()
[2.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from tensorbox._core.nestedkey import format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.shape import as_batch_size, check_leaf_shape, leads_with
from tensorbox._core.tree import KEEP, as_device, store_of, tensor_leaves
from tensorbox.errors import BatchSizeError, LockedError, TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.methods.base import MixinBase

__all__ = ["apply", "clone", "map_leaves", "pin_memory", "to"]

_NTD = NonTensorData


def apply(
    td: MixinBase,
    fn: Callable[..., Any],
    others: Sequence[Any],
    batch_size: Any,
    device: Any,
    inplace: bool,
    named: bool,
    nested_keys: bool = False,
    prefix: tuple[str, ...] = (),
    default: Any = KEEP,
    filter_empty: bool | None = None,
    held: list[tuple[dict[str, Any], str, Tensor]] | None = None,
) -> Any:
    """``fn`` on every tensor leaf (with the matching entries of ``others``).

    A ``None`` result drops the leaf (and a nested container left empty by that);
    results must keep the batch size (or ``batch_size``, when given).
    ``device`` is ``KEEP`` to keep each container's device. ``held`` (in place): the
    copies into existing leaves are listed there instead of made (:func:`apply_held`).
    """
    if not (others or named or inplace or prefix) and batch_size is None and filter_empty is None:
        return _apply_simple(td, fn, device)
    bs = td._batch_size if batch_size is None else as_batch_size(batch_size)
    dev = td._device if device is KEEP else (None if device is None else as_device(device))
    # An entry missing from an other (with ``default``) may be a whole nested level: its
    # leaves all get ``default``.
    stores = [{} if (o is default and default is not KEEP) else store_of(o) for o in others]
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        try:
            ovs = [s[k] if default is KEEP else s.get(k, default) for s in stores]
        except KeyError:
            raise TensorDictKeyError(
                f"apply: key {format_key((*prefix, k))} is missing from one of the other inputs"
            ) from None
        if isinstance(v, Tensor):
            if named:
                key: Any = (*prefix, k) if (nested_keys and prefix) else k
                r = fn(key, v, *ovs)
            else:
                r = fn(v, *ovs)
            if r is None:
                continue
            if not leads_with(r.shape, bs):
                check_leaf_shape(f"{format_key((*prefix, k))} (result of fn)", r.shape, bs)
            out[k] = r
        elif type(v) is _NTD:
            if v.stacked and batch_size is not None and v.data.shape != tuple(bs):
                raise BatchSizeError(
                    f"apply: key {format_key((*prefix, k))} holds one value per batch element "
                    f"for batch_size {v.data.shape}; cannot change it to {tuple(bs)}"
                )
            out[k] = v
        else:
            sub_bs = None if batch_size is None else bs
            path = (*prefix, k)
            r = apply(
                v,
                fn,
                ovs,
                sub_bs,
                device,
                inplace,
                named,
                nested_keys,
                path,
                default,
                filter_empty,
                held,
            )
            if filter_empty is None:  # drop only what fn emptied (every leaf gave None)
                keep = r is v or bool(r._tensordict) or not v._tensordict
            else:
                keep = not filter_empty or bool(r._tensordict)
            if keep:
                out[k] = r
    if inplace:
        store = td._tensordict
        for k, r in out.items():
            cur = store.get(k)
            if cur is r:
                continue
            if (
                isinstance(cur, Tensor)
                and isinstance(r, Tensor)
                and cur.shape == r.shape
                and cur.device == r.device
                and (cur.dtype == r.dtype or td._locked)
            ):
                # Written into the existing tensor (and so into its file), as tensordict;
                # a locked container keeps its dtypes, so the result is cast.
                if held is None:
                    cur.copy_(r)
                else:
                    held.append((store, k, r))
                continue
            if td._locked:
                raise LockedError(
                    f"apply(inplace=True) would replace {format_key((*prefix, k))} of a "
                    "locked TensorDict by a result of another shape or device "
                    "(unlock_() first)"
                )
            store[k] = r
        for k in [k for k in store if k not in out]:
            if td._locked:
                raise LockedError(f"apply(inplace=True) would drop {k!r} of a locked TensorDict")
            del store[k]
        td._batch_size = bs
        td._device = dev
        return td
    return td._new_unsafe(out, bs, dev)


def apply_held(td: Any, args: tuple[Any, ...], write: Callable[..., Any]) -> Any:
    """``apply(td, *args)`` in place on a node of a saved tree, run by ``write`` (which
    commits what the apply changes in ``meta.json``: a replaced or dropped leaf). The
    copies into the existing leaves (into their files) are made only once it returned,
    so an ``apply_`` that raises (``fn``, a locked entry, a failed commit) writes no
    byte. Each copy goes to the leaf at its key then (the commit may have mapped it
    anew), and the results are held until then: the whole tree's, not one level's."""
    held: list[tuple[dict[str, Any], str, Tensor]] = []
    out = write(apply, td, *args, held)
    for store, key, r in held:
        store[key].copy_(r)
    return out


def _apply_simple(td: MixinBase, fn: Callable[[Tensor], Any], device: Any) -> Any:
    """``apply(fn)`` with no others, names, new batch size or in-place: the common case."""
    bs = td._batch_size
    nbd = len(bs)
    b0 = bs[0] if nbd == 1 else None
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            r = fn(v)
            if r is None:
                continue
            shape = r.shape  # the check of leads_with(), inlined for the common cases
            if nbd and ((shape[0] != b0) if (b0 is not None and shape) else (shape[:nbd] != bs)):
                check_leaf_shape(f"{k!r} (result of fn)", shape, bs)
            out[k] = r
        elif type(v) is _NTD:
            out[k] = v
        else:
            try:
                r = _apply_simple(v, fn, device)
            except BatchSizeError as err:
                raise BatchSizeError(f"under {k!r}: {err}") from None
            if r._tensordict or not v._tensordict:
                out[k] = r
    dev = td._device if device is KEEP else (None if device is None else as_device(device))
    return td._new_unsafe(out, bs, dev)


def map_leaves(td: MixinBase, fn: Callable[[Tensor], Tensor], device: Any = KEEP) -> Any:
    """``fn`` on every tensor leaf when ``fn`` cannot change the shape (to, clone, detach)."""
    out = {
        k: (fn(v) if isinstance(v, Tensor) else v if type(v) is _NTD else map_leaves(v, fn, device))
        for k, v in td._tensordict.items()
    }
    return td._new_unsafe(out, td._batch_size, td._device if device is KEEP else device)


def to(td: MixinBase, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    floating_only = kwargs.pop("floating_only", False)
    if len(args) == 1 and not kwargs and type(args[0]) is torch.dtype:
        return _cast(td, args[0], floating_only)  # the common case, without parsing
    device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    if memory_format is not None:
        raise TypeError("to(memory_format=...) is not supported: use apply(lambda t: t.to(...))")
    if device is not None:
        device = as_device(device)
    if dtype is None and (device is None or device == td._device):
        return td
    if device is None:
        return _cast(td, dtype, floating_only)
    cast = dtype
    if dtype is None:

        def fn(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

    else:

        def fn(t: Tensor) -> Tensor:
            if not floating_only or t.is_floating_point():
                return t.to(device, cast, non_blocking=non_blocking)
            return t.to(device, non_blocking=non_blocking)

    out = map_leaves(td, fn, device)
    if non_blocking and device is not None and device.type == "cpu" and torch.cuda.is_available():
        # A device-to-host copy with non_blocking returns before the bytes land.
        torch.cuda.synchronize()
    return out


def _cast(td: MixinBase, dtype: torch.dtype, floating_only: bool) -> Any:
    """``to(dtype)``: every leaf, as tensordict; floating-point leaves only if ``floating_only``."""
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            out[k] = v.to(dtype) if (not floating_only or v.is_floating_point()) else v
        elif type(v) is _NTD:
            out[k] = v
        else:
            out[k] = _cast(v, dtype, floating_only)
    return td._new_unsafe(out, td._batch_size, td._device)


def pin_memory(td: MixinBase, num_threads: int | None) -> Any:
    if not torch.cuda.is_available() and not _has_accelerator():
        raise RuntimeError(
            "pin_memory() needs an accelerator (CUDA or another torch accelerator) and none "
            "is available; skip pinning on CPU-only machines"
        )

    def pin(t: Tensor) -> Tensor:
        return t if t.is_pinned() else t.pin_memory()

    if num_threads and num_threads > 1:
        leaves = tensor_leaves(td)
        with ThreadPoolExecutor(num_threads) as pool:
            pinned = dict(zip(map(id, leaves), pool.map(pin, leaves)))
        return map_leaves(td, lambda t: pinned[id(t)])
    return map_leaves(td, pin)


def _has_accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    return bool(acc and acc.is_available())


def clone(td: MixinBase, recurse: bool) -> Any:
    if recurse:
        return map_leaves(td, Tensor.clone)
    out = {
        k: (v if isinstance(v, Tensor) or type(v) is _NTD else clone(v, False))
        for k, v in td._tensordict.items()
    }
    return td._new_unsafe(out, td._batch_size, td._device)
