"""Data entering a container: validation and conversion of the values users set.

The constructor's loop (:func:`fill_entries`), one value for one level
(:func:`prepare_entry`, behind ``set`` and ``__setitem__``) and in-place copies into
existing leaves (:func:`copy_leaf`, bounded by the chunked copy). Only here do user
values get checked against the batch size and moved to the container's device; every
other operation builds its result from entries that are valid already.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(batch_size=[2])
>>> type(prepare_entry(td, "m", {"a": torch.zeros(2)}, ("m",))).__name__
'TensorDict'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core import chunks as _chunks
from tensorbox._core import jagged as _jagged
from tensorbox._core import liststack as _liststack
from tensorbox._core import ports as _ports
from tensorbox._core.linkedlist import LinkedList
from tensorbox._core.nestedkey import check_str_key, format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.shape import check_leaf_shape, leads_with
from tensorbox._core.tree import is_coll, new_plain
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox.errors import BatchSizeError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["copy_leaf", "fill_entries", "prepare_entry"]

_NTD = NonTensorData
_NJT = _jagged.NJT
#: Tensor classes stored otherwise than a batched leaf (prepare_entry handles them).
_SPECIAL = frozenset({_NJT, UnbatchedTensor})


def fill_entries(td: TensorCollection, source: Mapping[Any, Any], prefix: tuple[str, ...]) -> None:
    """Validate and store every entry of ``source`` into ``td`` (the constructor's loop).

    The common case is inlined: str keys, tensors and plain dicts; anything else
    goes through ``prepare_entry``. With one batch dim, comparing ``shape[0]``
    avoids slicing a ``torch.Size``, which costs as much as the rest of the check.
    """
    bs = td._batch_size
    dev = td._device
    store = td._tensordict
    nbd = len(bs)
    b0 = bs[0] if nbd == 1 else None
    for key, value in source.items():
        if type(key) is not str:
            if type(key) is tuple and len(key) > 1:  # ("a", "b"): a nested entry
                td.set(key, value)
                continue
            key = check_str_key(key, prefix)
        if isinstance(value, Tensor):
            try:
                shape = value.shape
            except RuntimeError as err:  # no cost unless raised
                raise _jagged.shape_error(value, (*prefix, key), err) from None
            if type(value) is not Tensor and type(value) in _SPECIAL:  # one test for plain ones
                store[key] = prepare_entry(td, key, value, (*prefix, key))
                continue
            if nbd and ((shape[0] != b0) if (b0 is not None and shape) else (shape[:nbd] != bs)):
                check_leaf_shape(format_key((*prefix, key)), shape, bs)
            if dev is not None and value.device != dev:
                value = value.to(dev)
            store[key] = value
        elif type(value) is dict:
            sub = new_plain({}, bs, dev)
            fill_entries(sub, value, (*prefix, key))
            store[key] = sub
        else:
            store[key] = prepare_entry(td, key, value, (*prefix, key))


def prepare_entry(td: TensorCollection, key: str, value: Any, path: tuple[str, ...]) -> Any:
    """Validate ``value`` for a level of ``td`` and convert it to a stored entry.

    Tensors must start with the batch size and move to ``td``'s device; mappings
    become nested TensorDicts; numpy arrays become tensors; other Python values
    become ``NonTensorData``.
    """
    bs = td._batch_size
    dev = td._device
    if isinstance(value, Tensor):
        try:
            shape = value.shape
        except RuntimeError as err:  # no cost unless raised
            raise _jagged.shape_error(value, path, err) from None
        kind = type(value)
        if kind is not Tensor and kind in _SPECIAL:  # plain tensors pay one test
            if kind is UnbatchedTensor:  # one value for the whole batch
                if dev is not None and value.device != dev:
                    value = UnbatchedTensor(value.to(dev))
                return NonTensorData(value)
            _jagged.check_leaf(value, path, bs)
        elif not leads_with(shape, bs):
            check_leaf_shape(format_key(path), shape, bs)
        if dev is not None and value.device != dev:
            value = value.to(dev)
        return value
    if is_coll(value):
        if value.batch_size[: len(bs)] != bs and _fits_under(value, bs):
            value = value.copy()  # a shallow copy takes the parent's batch dims, as tensordict
            value.batch_size = bs
        if value.batch_size[: len(bs)] != bs:
            raise BatchSizeError(
                f"key {format_key(path)} holds a {type(value).__name__} with batch_size "
                f"{tuple(value.batch_size)}, which does not start with batch_size {tuple(bs)}"
            )
        if dev is not None and value.device != dev:
            value = value.to(dev)
        return value
    if isinstance(value, Mapping):
        sub = new_plain({}, bs, dev)
        fill_entries(sub, value, path)
        return sub
    if type(value) is _NTD:
        if value.stacked and tuple(value.data.shape) != tuple(bs):
            raise BatchSizeError(
                f"key {format_key(path)} holds stacked values for batch_size "
                f"{tuple(value.data.shape)} but batch_size is {tuple(bs)}"
            )
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return prepare_entry(td, key, torch.from_numpy(value), path)
    if type(value) is LinkedList:  # read from another entry: a plain list, linked to nothing
        value = value.tolist()
    number = _as_number_tensor(value)
    if number is not None:  # as tensordict: Python numbers become tensors on set
        if not leads_with(number.shape, bs):
            raise BatchSizeError(
                f"key {format_key(path)}: the value {_short(value)} becomes a tensor of shape "
                f"{tuple(number.shape)}, which does not start with batch_size {tuple(bs)}; "
                "give one value per row, or wrap it in NonTensorData to keep it as a Python value"
            )
        return prepare_entry(td, key, number, path)
    if type(value) is list and _liststack.STATE[0]:  # set_list_to_stack(True): one item per row
        entry = _liststack.from_list(value, bs, path)
        return prepare_entry(td, key, entry, path) if isinstance(entry, Tensor) else entry
    return NonTensorData(value)


_NUMBER_TYPES = (bool, int, float, complex, np.number, np.bool_)


def replace_value(td: TensorCollection, key: str, value: Any, path: tuple[str, ...]) -> Any:
    """The entry that ``set_``/``update_`` of ``value`` puts in place of the non-tensor
    entry ``key``: a ``MetaData`` stays one, as in tensordict (and so in a saved tree).

    >>> from tensorbox import MetaData, TensorDict
    >>> isinstance(TensorDict(run=MetaData("a")).set_("run", "b").get("run"), MetaData)
    True
    """
    new = prepare_entry(td, key, value, path)
    if td._tensordict[key].meta and type(new) is NonTensorData and not (new.meta or new.stacked):
        # a new value, never the caller's object changed
        new = NonTensorData(new.data, batch_size=new._batch_size, device=new.device, meta=True)
    return new


def _as_number_tensor(value: Any) -> Tensor | None:
    """A tensor of ``value`` when it is a number, a bool or a (nested) list of them."""
    if isinstance(value, _NUMBER_TYPES):
        return torch.as_tensor(value)
    if type(value) is list and value and _all_numbers(value):
        try:
            return torch.tensor(value)
        except (TypeError, ValueError, RuntimeError):  # ragged lists stay Python values
            return None
    return None


def _all_numbers(items: list[Any]) -> bool:
    return all(
        isinstance(v, _NUMBER_TYPES) or (type(v) is list and v and _all_numbers(v)) for v in items
    )


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def _fits_under(value: Any, bs: torch.Size) -> bool:
    """True when ``value`` has fewer batch dims than ``bs`` and every leaf starts with ``bs``."""
    from tensorbox._core.tree import iter_shaped

    n = len(bs)
    return len(value.batch_size) < n and all(
        tuple(t.shape[:n]) == tuple(bs) for _, t in iter_shaped(value)
    )


def copy_leaf(dst: Tensor, src: Any, key: tuple[str, ...] = ()) -> None:
    """``dst.copy_(src)`` for in-place writes (``set_``, ``update_``, ``set(inplace=True)``).

    A large copy (over ``CHUNK_BYTES``) goes in slices through ``copy_chunked``, so converting dtypes or filling a memory-mapped
    leaf never materializes a whole second tensor. Small copies, broadcasting copies
    and copies autograd must record take the plain ``copy_``.
    """
    if not isinstance(src, Tensor):
        src = torch.as_tensor(src)
    if type(dst) is not Tensor:  # maybe a mapped leaf: its file's bytes reserved first
        _ports.reserve(dst, key)
    if (
        dst.nbytes > _chunks.CHUNK_BYTES
        and src.shape == dst.shape
        and not (dst.requires_grad or src.requires_grad)
    ):
        _chunks.copy_chunked(dst, src)
    else:
        dst.copy_(src)
