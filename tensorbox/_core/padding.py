"""Padding along batch dims: ``pad(td, sizes)`` and ``pad_sequence(tds)``, as tensordict's.

``pad`` grows (or, with negative sizes, crops) the batch dims of every leaf, one
``(before, after)`` pair per batch dim from the first, filling with ``value``.
``pad_sequence`` stacks containers whose leaves differ in length along ``pad_dim``,
padding each leaf to the longest, with an optional mask of the real entries.

>>> import torch
>>> from tensorbox import TensorDict, pad, pad_sequence
>>> td = TensorDict(a=torch.ones(2, 3), batch_size=[2])
>>> pad(td, [1, 0])["a"][:, 0].tolist()
[0.0, 1.0, 1.0]
>>> out = pad_sequence([td, TensorDict(a=torch.ones(4, 3), batch_size=[4])], return_mask=True)
>>> out.batch_size, out["masks", "a"].sum().item()
(torch.Size([2, 4]), 6)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData, pad_values
from tensorbox._core.tree import new_plain
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox.errors import BatchDimError, BatchSizeError

if TYPE_CHECKING:
    from tensorbox._core.methods.base import MixinBase

__all__ = ["pad", "pad_sequence", "padded"]

_NTD = NonTensorData


def pad(
    td: Any,
    pad_size: Sequence[int],
    value: float = 0.0,
    *,
    inplace: bool = False,
    safe: bool = True,
) -> Any:
    """``td`` with its batch dims padded: ``pad_size`` is ``[before0, after0, before1, ...]``
    from the first batch dim on; negative sizes crop. ``inplace=True`` makes ``td`` the
    result. Same as ``td.pad(pad_size, value, inplace=...)``.

    Raises ``BatchDimError`` for an odd number of sizes or more pairs than batch dims,
    and ``BatchSizeError`` when a dim would get a negative size, before anything changes
    (``safe`` is accepted for tensordict's signature: the sizes are always checked).

    >>> import torch
    >>> from tensorbox import TensorDict, pad
    >>> pad(TensorDict(a=torch.ones(2, 2), batch_size=[2, 2]), [0, 1, 1, 0]).batch_size
    torch.Size([3, 3])
    """
    return td.pad(pad_size, value, inplace=inplace, safe=safe)


def padded(td: MixinBase, pad_size: Sequence[int], value: float) -> Any:
    """The new container of ``pad`` (see there)."""
    sizes = [int(p) for p in pad_size]
    bs = td._batch_size
    if len(sizes) % 2 or len(sizes) // 2 > len(bs):
        raise BatchDimError(
            f"pad: pad_size {sizes} must hold one (before, after) pair per padded batch dim; "
            f"the batch size {tuple(bs)} has {len(bs)} dim(s)"
        )
    pairs = [(sizes[2 * i], sizes[2 * i + 1]) for i in range(len(sizes) // 2)]
    new = [n + a + b for n, (a, b) in zip(bs, pairs, strict=False)]
    if any(n < 0 for n in new):
        raise BatchSizeError(
            f"pad: pad_size {sizes} gives a negative output size for batch_size {tuple(bs)}"
        )
    return _pad_node(td, pairs, value, torch.Size((*new, *bs[len(new) :])))


def _pad_node(node: Any, pairs: list[tuple[int, int]], value: float, bs: torch.Size) -> Any:
    out: dict[str, Any] = {}
    nb = len(pairs)
    for k, v in node._tensordict.items():
        if isinstance(v, Tensor):
            flat: list[int] = []
            for d in reversed(range(v.ndim)):  # F.pad takes the last dim first
                flat += list(pairs[d]) if d < nb else [0, 0]
            out[k] = F.pad(v, flat, value=value)
        elif type(v) is _NTD:
            # one value per row: new rows hold None (as tensordict), a shared value too once
            # rows are added; cropping keeps it one value
            if not v.stacked and type(v.data) is not UnbatchedTensor and _adds_rows(pairs):
                v = NonTensorData(v.full(node._batch_size), stacked=True, device=v.device)
            out[k] = pad_values(v, pairs) if v.stacked else v
        else:
            out[k] = _pad_node(v, pairs, value, torch.Size((*bs, *v._batch_size[len(bs) :])))
    return node._new_unsafe(out, bs, node._device)


def _adds_rows(pairs: list[tuple[int, int]]) -> bool:
    return any(b > 0 or a > 0 for b, a in pairs)


def pad_sequence(
    list_of_tensordicts: Sequence[Any],
    pad_dim: int = 0,
    padding_value: float = 0.0,
    *,
    batch_first: bool = True,
    return_mask: bool | str = False,
    device: Any = None,
) -> Any:
    """Stack ``list_of_tensordicts`` along a new first dim, each leaf padded with
    ``padding_value`` to the longest along its dim ``pad_dim``. The batch size is the
    longest along each batch dim. ``return_mask=True`` (or a key name) adds, under
    ``"masks"`` (or that key), a boolean leaf per leaf that is true on real entries
    (shaped like the leaf up to ``pad_dim``).

    >>> import torch
    >>> from tensorbox import TensorDict, pad_sequence
    >>> tds = [TensorDict(a=torch.ones(n), batch_size=[n]) for n in (1, 3)]
    >>> pad_sequence(tds)["a"].tolist()
    [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    """
    if not batch_first:
        raise ValueError("pad_sequence: batch_first=False is not supported (as in tensordict)")
    tds = list(list_of_tensordicts)
    if not tds:
        raise ValueError("pad_sequence: got an empty list of containers")
    first = tds[0]
    nbd = len(first._batch_size)
    if pad_dim < 0:
        raise BatchDimError(
            f"pad_sequence: pad_dim must be >= 0 (a dim of the leaves), got {pad_dim}"
        )
    bs = [max(td._batch_size[i] for td in tds) for i in range(nbd)]
    masks: dict[Any, Any] = {}
    out = _sequence_node(tds, pad_dim, padding_value, torch.Size([len(tds), *bs]), (), masks)
    if return_mask:
        key = "masks" if return_mask is True else return_mask
        mask_td = new_plain({}, out._batch_size, out._device)
        for path, m in masks.items():
            mask_td.set(path, m)
        out.set(key, mask_td)
    if device is not None:
        out = out.to(device)
    return out


def _sequence_node(
    tds: list[Any],
    pad_dim: int,
    value: float,
    bs: torch.Size,
    prefix: tuple[str, ...],
    masks: dict[Any, Any],
) -> Any:
    first = tds[0]
    out: dict[str, Any] = {}
    for k, v in first._tensordict.items():
        items = [td._tensordict[k] for td in tds]
        if isinstance(v, Tensor):
            longest = max(t.shape[pad_dim] for t in items)
            padded = []
            for t in items:
                flat = [0, 0] * (t.ndim - pad_dim - 1) + [0, longest - t.shape[pad_dim]]
                padded.append(F.pad(t, flat, value=value))
            out[k] = torch.stack(padded)
            mask = torch.zeros((len(items), *out[k].shape[1 : pad_dim + 2]), dtype=torch.bool)
            for i, t in enumerate(items):
                rows: Any = (i, *(slice(0, n) for n in t.shape[: pad_dim + 1]))
                mask[rows] = True
            masks[(*prefix, k)] = mask.to(out[k].device)
        elif type(v) is _NTD:
            out[k] = NonTensorData.stack(items, 0, first._batch_size) if items else v
        else:
            sub_bs = torch.Size((*bs, *v._batch_size[len(bs) - 1 :]))
            out[k] = _sequence_node(items, pad_dim, value, sub_bs, (*prefix, k), masks)
    return first._new_unsafe(out, bs, first._device)
