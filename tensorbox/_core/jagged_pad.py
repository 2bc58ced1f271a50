"""Padding jagged leaves: ``torch.nested.to_padded_tensor``, written straight into the
padding, for one jagged tensor and for every jagged leaf of a container.

The rows go into a ``[rows, longest, *feature]`` tensor filled with the padding value
in one gather and one scatter (see ``_jagged_gather``); torch 2.13's CPU kernel for
``torch.nested.to_padded_tensor`` takes several times longer on token batches.

>>> import torch
>>> nt = torch.nested.nested_tensor([torch.arange(3), torch.arange(1)], layout=torch.jagged)
>>> to_padded_tensor(nt, -1).tolist()
[[0, 1, 2], [0, -1, -1]]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from tensorbox._core.jagged import NJT, _row_index, parts
from tensorbox._core.jagged_gather import gather_padded, pad_parts
from tensorbox._core.nestedkey import NestedKey, format_key, unravel_key

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

    C = TypeVar("C", bound=TensorCollection)

__all__ = ["pad_rows", "pad_tree", "to_padded_tensor"]


def to_padded_tensor(t: Tensor, padding: float = 0.0) -> Tensor:
    """The rows of jagged tensor ``t`` padded to its longest row with ``padding``:
    ``torch.nested.to_padded_tensor(t, padding)``, faster on the CPU.

    ``t`` is a jagged nested tensor (``layout=torch.jagged``) ragged along dim 1, as a
    container's jagged leaf is; the result is ``[rows, longest, *feature]``, on ``t``'s
    device, in its dtype (``padding`` converted to it as ``torch.full`` converts).
    The mask of real values is ``torch.arange(longest) < lengths[:, None]``, with
    ``lengths = t.offsets().diff()``.

    >>> import torch, tensorbox
    >>> nt = torch.nested.nested_tensor(
    ...     [torch.ones(2, 3), torch.zeros(0, 3)], layout=torch.jagged)
    >>> tensorbox.to_padded_tensor(nt, -1.0)[:, :, 0].tolist()
    [[1.0, 1.0], [-1.0, -1.0]]
    """
    if type(t) is not NJT:
        raise TypeError(
            f"to_padded_tensor pads a jagged nested tensor (layout=torch.jagged), got "
            f"{_describe(t)}; build one with torch.nested.nested_tensor(rows, "
            "layout=torch.jagged)"
        )
    ragged = t._ragged_idx
    if ragged != 1:
        raise ValueError(
            f"to_padded_tensor pads a jagged tensor ragged along dim 1 (right after its "
            f"rows), got one ragged along dim {ragged}; transpose it back first, or use "
            "torch.nested.to_padded_tensor"
        )
    return pad_parts(*parts(t), padding)[0]


def pad_tree(td: C, padding: float = 0.0, mask_key: NestedKey | None = None) -> C:
    """``td`` with every jagged leaf (nested containers too) padded to its longest
    row; other leaves as they are (not copied). With ``mask_key``, the mask of real
    values of the first jagged leaf (``[rows, longest]`` bool) is set there."""
    mask: list[Tensor] | None = None if mask_key is None else []
    out: C = _with_mask(_pad(td, padding, mask), mask, mask_key)
    return out


def _mask(padded: Tensor, lengths: Tensor) -> Tensor:
    """``[rows, longest]``: True where ``padded`` holds a value, False on padding."""
    steps = torch.arange(padded.shape[1], device=lengths.device)
    return (steps < lengths[:, None]).to(padded.device)


def _with_mask(out: Any, mask: list[Tensor] | None, mask_key: NestedKey | None) -> Any:
    if mask is not None and mask_key is not None:
        key = unravel_key(mask_key)
        if not mask:
            raise ValueError(
                f"mask_key={format_key(key)}: the container holds no jagged leaf, so "
                "there is no mask of real values to write; leave mask_key out"
            )
        out.set(key, mask[0])
    return out


def _pad(td: Any, padding: float, mask: list[Tensor] | None) -> Any:
    store: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if type(v) is NJT:
            padded, lengths = pad_parts(*parts(v), padding)
            if mask is not None and not mask:  # wanted, and not yet taken
                mask.append(_mask(padded, lengths))
            store[k] = padded
        elif getattr(type(v), "_is_tensor_collection", False):
            store[k] = _pad(v, padding, mask)
        else:
            store[k] = v
    return td._new_unsafe(store, td._batch_size, td._device)


def _describe(t: Any) -> str:
    if isinstance(t, Tensor):
        return f"a {t.layout} tensor of shape {list(t.shape)}"
    return f"{type(t).__name__} {t!r}"


def pad_rows(td: C, index: Any, padding: float = 0.0, mask_key: NestedKey | None = None) -> C:
    """``td[index].to_padded_tensor(padding, mask_key)``, each jagged leaf's rows
    gathered straight into the padding (no jagged batch in between)."""
    bs = td._batch_size
    if len(bs) != 1:
        picked: C = td[index]
        return pad_tree(picked, padding, mask_key)
    rows = _row_index(index, bs[0])
    if type(rows) is int:
        raise IndexError(
            f"pad_rows selects rows to pad, got the single row index {rows!r}; give a "
            f"list, slice, index tensor or bool mask (td[{rows}] is that row unpadded)"
        )
    if type(rows) is slice:
        rows = torch.arange(rows.start, rows.stop, rows.step)
    assert isinstance(rows, Tensor)
    mask: list[Tensor] | None = None if mask_key is None else []
    out: C = _with_mask(_pad_rows(td, rows, padding, mask), mask, mask_key)
    return out


def _pad_rows(td: Any, rows: Tensor, padding: float, mask: list[Tensor] | None) -> Any:
    store: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if type(v) is NJT:
            padded, lengths = gather_padded(*parts(v), rows, padding)
            if mask is not None and not mask:  # wanted, and not yet taken
                mask.append(_mask(padded, lengths))
            store[k] = padded
        elif isinstance(v, Tensor):
            store[k] = torch.index_select(v, 0, rows.to(v.device))
        elif getattr(type(v), "_is_tensor_collection", False):
            store[k] = _pad_rows(v, rows, padding, mask)
        else:
            store[k] = v[rows]
    return td._new_unsafe(store, torch.Size((rows.shape[0],)), td._device)
