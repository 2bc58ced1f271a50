"""Hypothesis strategies for containers, batch sizes and batch indices.

The strategies draw structure (keys, nesting, feature dims, dtypes) and a seed;
tensor values come from a seeded generator, so examples shrink well and stay small.
Every index drawn is valid for torch on a tensor shaped like the batch; the tests use
torch itself (``torch.empty(batch_size)[index]``) as the oracle.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from tensorbox import NonTensorData, TensorDict

KEYS = st.sampled_from(["a", "b", "c", "obs", "x_1"])
DTYPES = st.sampled_from([torch.float32, torch.int64, torch.bool])


def batch_sizes(min_dims: int = 0, max_dims: int = 3, max_size: int = 4) -> st.SearchStrategy:
    return st.lists(st.integers(0, max_size), min_size=min_dims, max_size=max_dims).map(torch.Size)


def make_tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    # Small integers (also as floats) compare exactly after any op.
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


@st.composite
def leaves(draw: st.DrawFn, batch_size: torch.Size) -> torch.Tensor:
    feature = draw(st.lists(st.integers(1, 3), max_size=2))
    return make_tensor((*batch_size, *feature), draw(DTYPES), draw(st.integers(0, 2**16)))


@st.composite
def tensordicts(
    draw: st.DrawFn,
    batch_size: torch.Size | None = None,
    depth: int = 2,
    nontensor: bool = False,
    min_leaves: int = 1,
) -> TensorDict:
    """A TensorDict with 1-4 entries per level, nested ``depth`` levels at most.

    A nested level sometimes has more batch dims than its parent (a valid layout).
    With ``nontensor`` some entries are plain Python values shared by the batch.
    """
    bs = draw(batch_sizes()) if batch_size is None else torch.Size(batch_size)
    keys = draw(st.lists(KEYS, min_size=min_leaves, max_size=4, unique=True))
    out: dict[str, Any] = {}
    for k in keys:
        kind = draw(
            st.sampled_from(
                ["leaf", "leaf", "node", "text"] if nontensor else ["leaf", "leaf", "node"]
            )
        )
        if kind == "node" and depth > 0:
            extra = draw(st.lists(st.integers(1, 3), max_size=1))
            out[k] = draw(tensordicts(torch.Size((*bs, *extra)), depth - 1, nontensor, 1))
        elif kind == "text":
            # A number becomes a tensor on set: NonTensorData keeps it a Python value.
            out[k] = draw(st.sampled_from(["red", "green", NonTensorData(3), None]))
        else:
            out[k] = draw(leaves(bs))
    return TensorDict(out, batch_size=bs)


def labelled(batch_size: torch.Size) -> TensorDict:
    """``x`` numbers the batch elements; ``label`` holds ``str(x)`` per element as
    stacked non-tensor data, so after any op ``label`` must still match ``x``."""
    n = int(np.prod(batch_size)) if len(batch_size) else 1
    x = torch.arange(n).reshape(batch_size)
    labels = np.array([f"e{i}" for i in range(n)], dtype=object).reshape(tuple(batch_size))
    return TensorDict({"x": x, "label": NonTensorData(labels, stacked=True)}, batch_size=batch_size)


def labels_match(td: TensorDict) -> bool:
    expected = np.vectorize(lambda i: f"e{i}", otypes=[object])(td["x"].numpy())
    got = td._tensordict["label"]
    if got.stacked:
        return got.data.shape == expected.shape and (got.data == expected).all()
    return expected.size > 0 and bool((expected == got.data).all())


# ------------------------------------------------------------------ indices


def _int(size: int) -> st.SearchStrategy:
    return st.integers(-size, size - 1)


def _slice(size: int) -> st.SearchStrategy:
    bound = st.none() | st.integers(-size - 1, size + 1)
    return st.builds(slice, bound, bound, st.none() | st.integers(1, 3))


def _index_tensor(size: int, length: int, as_list: bool) -> st.SearchStrategy:
    if size == 0:
        values = st.just([])
    else:
        values = st.lists(_int(size), min_size=length, max_size=length)
    if as_list:
        return values.filter(bool) if size else st.nothing()
    return values.map(lambda v: torch.tensor(v, dtype=torch.long))


@st.composite
def indices(draw: st.DrawFn, batch_size: torch.Size, allow_none: bool = True) -> Any:
    """One valid batch index for ``batch_size``: a single component or a tuple of them.

    Components: int, slice, index tensor or list (all of one length, so they
    broadcast), a bool mask over 1-2 dims (alone among advanced indices), ``None``
    and one ``...``. After ``...`` only slices and ``None`` follow: they are valid
    whatever size the dims they land on have.
    """
    bs = list(batch_size)
    parts: list[Any] = []
    dim = 0  # batch dims consumed so far
    adv_len = draw(st.integers(0, 3))
    advanced = 0
    ellipsis = False
    while len(parts) < 4:
        room = dim < len(bs)
        choices = ["stop"] if parts else []
        if room:
            choices += ["slice", "slice"]
            if not ellipsis:
                choices += ["int", "int", "tensor", "tensor", "mask", "mask", "list"]
        if allow_none:
            choices.append("none")
        if not ellipsis:
            choices.append("ellipsis")
        if not choices:
            break
        kind = draw(st.sampled_from(choices))
        if kind == "stop":
            break
        size = bs[dim] if room else 0
        if kind == "int" and size > 0:
            parts.append(draw(_int(size)))
            dim += 1
        elif kind == "slice":
            parts.append(draw(_slice(size)))
            dim += 1
        elif kind == "tensor" and advanced < 2 and (size > 0 or adv_len == 0):
            parts.append(draw(_index_tensor(size, adv_len, False)))
            advanced += 1
            dim += 1
        elif kind == "list" and advanced < 2 and size > 0:
            parts.append(draw(_index_tensor(size, max(adv_len, 1), True)))
            adv_len = max(adv_len, 1)
            advanced += 1
            dim += 1
        elif kind == "mask" and advanced == 0:
            k = draw(st.integers(1, min(2, len(bs) - dim)))
            seed = draw(st.integers(0, 2**16))
            parts.append(make_tensor(tuple(bs[dim : dim + k]), torch.bool, seed))
            advanced += 2  # a mask does not broadcast with other advanced indices
            dim += k
        elif kind == "none":
            parts.append(None)
        elif kind == "ellipsis":
            parts.append(Ellipsis)
            ellipsis = True
    if len(parts) == 1 and draw(st.integers(0, 3)):
        return parts[0]
    return tuple(parts)


def _dims_used(part: Any) -> int:
    if part is None or part is Ellipsis:
        return 0
    if isinstance(part, torch.Tensor) and part.dtype is torch.bool:
        return part.ndim
    return 1


def expand_ellipsis(index: Any, batch_dims: int) -> Any:
    """The index a leaf with feature dims needs to match ``td[index]``: ``...`` stands
    for the remaining *batch* dims only (written independently of tensorbox's code)."""
    parts = index if isinstance(index, tuple) else (index,)
    if not any(p is Ellipsis for p in parts):
        return index
    used = sum(_dims_used(p) for p in parts)
    out: list[Any] = []
    for p in parts:
        out.extend([slice(None)] * (batch_dims - used) if p is Ellipsis else [p])
    return tuple(out)
