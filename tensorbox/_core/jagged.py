"""Jagged leaves in memory: torch's jagged nested tensors (NJT) as container leaves.

A jagged leaf is ``torch.nested.nested_tensor(rows, layout=torch.jagged)``: row ``i``
is a tensor of shape ``[L_i, *feature]``, stored as one ``values`` tensor of shape
``[sum L_i, *feature]`` and ``offsets`` of length ``B + 1`` (row ``i`` is
``values[offsets[i]:offsets[i + 1]]``). Its ragged dim comes right after the batch
dim, so a container that holds one has exactly one batch dim, of size ``B``.

Torch 2.13 neither slices, ``index_select``\\s, ``cat``\\s nor ``stack``\\s an NJT along
dim 0; this module selects and joins rows over values and offsets, and builds the
result with ``torch.nested.nested_tensor_from_jagged`` (no copy of what it is given).
A selection gathers from the values once (``_jagged_gather``: numpy on the CPU,
``index_select`` elsewhere; a contiguous slice is a view, no copy at all); offsets
keep their dtype (int32 stays int32).

>>> import torch
>>> nt = torch.nested.nested_tensor(
...     [torch.ones(2), torch.zeros(0), torch.arange(3.0)], layout=torch.jagged)
>>> [r.tolist() for r in select_rows(nt, torch.tensor([2, 1, 0])).unbind()]
[[0.0, 1.0, 2.0], [], [1.0, 1.0]]
>>> [len(r) for r in cat_rows([nt, select_rows(nt, slice(0, 1))]).unbind()]
[2, 0, 3, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor
from torch.nested._internal import nested_tensor as _nt
from torch.nested._internal.nested_tensor import NestedTensor

from tensorbox._core import jagged_gather as _jg
from tensorbox._core.nestedkey import format_key
from tensorbox.errors import BatchDimError, BatchSizeError


def _public_from_jagged(values: Any, offsets: Any, lengths: Any, **kw: Any) -> Any:
    kw.pop("ragged_idx")
    return torch.nested.nested_tensor_from_jagged(values, offsets, lengths, **kw)


# What torch.nested.nested_tensor_from_jagged calls after its fx-tracing check, which
# in torch 2.13 logs a deprecation warning on stderr (once per process); the public
# function where a torch lacks it.
_from_jagged: Callable[..., Any] = getattr(
    _nt, "nested_view_from_values_offsets_lengths", _public_from_jagged
)
_store_val_in_tensor: Callable[[int], Tensor] | None = getattr(_nt, "_store_val_in_tensor", None)


if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = [
    "NJT",
    "cat_rows",
    "check_leaf",
    "compare",
    "find_jagged",
    "from_parts",
    "getitem",
    "is_jagged",
    "parts",
    "refuse_shape_op",
    "select_rows",
    "shifted_offsets",
    "split_rows",
    "take",
    "write_rows",
]

#: torch's jagged nested tensor class (``layout=torch.jagged``).
NJT = NestedTensor
_long = torch.int64
_int = torch.int32
_bool = torch.bool
_INT32_MAX = 2**31 - 1


def is_jagged(t: Any) -> bool:
    """True for a jagged nested tensor (``layout=torch.jagged``)."""
    return type(t) is NJT


def parts(t: Tensor) -> tuple[Tensor, Tensor]:
    """``(values, offsets)`` of a jagged leaf, values starting at ``offsets[0] == 0``.

    An NJT may view a window of a larger values tensor (``offsets[0] > 0``, as
    ``nt.values()`` of a narrowed tensor); the window is cut out here, as a view.
    """
    if getattr(t, "_lengths", None) is not None:
        t = t.contiguous()  # a narrowed NJT with holes: its rows packed again
    njt = cast(Any, t)
    try:  # the attributes: values()/offsets() cost a dispatch each (tens of microseconds)
        values, offsets = njt._values, njt._offsets
    except AttributeError:  # pragma: no cover - another torch
        values, offsets = njt.values(), njt.offsets()
    first = int(offsets[0]) if offsets.numel() else 0
    if first:
        end = int(offsets[-1])
        return values[first:end], offsets - first
    return values, offsets


def from_parts(values: Tensor, offsets: Tensor, seqlens: tuple[int, int] | None = None) -> Tensor:
    """The NJT of ``values`` and ``offsets`` (no copy); ``offsets[0]`` must be 0.

    The shortest and longest row lengths (``seqlens``, computed when not given) are
    recorded on it: without them ``torch.nested.to_padded_tensor`` pads every row to
    the length of all the values together.
    """
    if seqlens is None and offsets.shape[0] > 1:
        lo_t, hi_t = torch.aminmax(offsets[1:] - offsets[:-1])
        seqlens = int(lo_t), int(hi_t)
    lo, hi = seqlens if seqlens is not None else (None, None)
    if values.requires_grad or _store_val_in_tensor is None or torch.compiler.is_compiling():
        out: Tensor = _from_jagged(
            values, offsets, None, ragged_idx=1, min_seqlen=lo, max_seqlen=hi
        )
        return out
    # No autograd view to record: the class itself, a third of the cost of the traced op.
    cache = (
        {}
        if seqlens is None
        else {
            "min_seqlen": _store_val_in_tensor(seqlens[0]),
            "max_seqlen": _store_val_in_tensor(seqlens[1]),
        }
    )
    return NJT(values, offsets, _ragged_idx=1, _metadata_cache=cache)


def check_leaf(value: Tensor, path: tuple[str, ...], bs: torch.Size) -> None:
    """Refuse a jagged ``value`` at ``path`` unless the batch size is ``[rows]`` and its
    ragged dim comes right after dim 0."""
    if getattr(value, "_ragged_idx", 1) != 1:
        raise BatchSizeError(
            f"key {format_key(path)} is a jagged nested tensor whose ragged dim is "
            f"{value._ragged_idx}, not 1 (right after the batch dim): a container holds "  # type: ignore[attr-defined]
            "jagged leaves ragged along dim 1 only; transpose it back first"
        )
    rows = value.shape[0]
    if len(bs) != 1 or bs[0] != rows:
        raise BatchSizeError(
            f"key {format_key(path)} is a jagged nested tensor of {rows} rows, but the "
            f"batch_size is {list(bs)}: a container holding a jagged leaf has exactly one "
            f"batch dim, its row count (batch_size=[{rows}])"
        )


def shape_error(value: Tensor, path: tuple[str, ...], err: RuntimeError) -> Exception:
    """The error for a tensor whose ``.shape`` raised ``err``: torch's nested tensors of the
    strided layout have no shape, and a container does not hold them."""
    if not value.is_nested:
        return err
    return TypeError(
        f"key {format_key(path)} is a nested tensor with the torch.strided layout, which a "
        "container does not hold (it has no shape to check against the batch size): use the "
        "jagged layout (torch.nested.nested_tensor(..., layout=torch.jagged), ragged along "
        "dim 1), or pad it into one tensor (torch.nested.to_padded_tensor(t, 0.0))"
    )


def find_jagged(td: Any, prefix: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The key path of the first jagged leaf in ``td`` (nested containers too), or None."""
    for k, v in td._tensordict.items():
        if type(v) is NJT:
            return (*prefix, k)
        if getattr(type(v), "_is_tensor_collection", False):
            found = find_jagged(v, (*prefix, k))
            if found is not None:
                return found
    return None


def refuse_shape_op(td: Any, op: str) -> None:
    """Raise when ``td`` holds a jagged leaf: batch-shape op ``op`` cannot apply to it."""
    if len(td._batch_size) != 1:
        return  # no jagged leaf lives under any other batch size
    key = find_jagged(td)
    if key is not None:
        raise BatchDimError(
            f"{op}: key {format_key(key)} is a jagged nested tensor (rows of different "
            "lengths), so the batch dim cannot be reshaped, stacked or moved; select rows "
            "(td[idx]) or join them (torch.cat), or pad it first with "
            "torch.nested.to_padded_tensor"
        )


# ---------------------------------------------------------------- row selection


def _row_index(index: Any, n: int) -> Tensor | slice | int:
    """``index`` over ``n`` rows as an int, a slice or a 1-D int64 tensor of rows in
    ``[0, n)``; IndexError for anything out of range or not a row index."""
    if type(index) is tuple:
        rest = [p for p in index if p is not Ellipsis]
        if len(rest) > 1 or (len(rest) == 1 and index.count(Ellipsis) > 1):
            raise IndexError(
                f"index {index!r} addresses more than the batch dim; a container with a "
                "jagged leaf has one batch dim: index its rows with one int, slice, "
                "list, index tensor or bool mask"
            )
        index = rest[0] if rest else slice(None)
    if type(index) is int:
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for {n} rows")
        return index + n if index < 0 else index
    if type(index) is slice:
        if index.step is not None and index.step <= 0:
            raise ValueError(f"slice step must be positive (as in torch), got {index!r}")
        return slice(*index.indices(n))
    if type(index) is list or type(index) is range:
        index = _jg.as_rows(index)
    if isinstance(index, Tensor):
        if index.dtype is _bool:
            if index.shape != (n,):
                raise IndexError(
                    f"a bool mask of shape {list(index.shape)} does not match {n} rows"
                )
            return index.nonzero().view(-1)
        if index.ndim == 0 and not index.is_floating_point():
            return _row_index(int(index), n)
        if index.ndim != 1 or index.is_floating_point() or index.is_complex():
            raise IndexError(
                f"cannot select rows of a jagged leaf with a tensor of shape "
                f"{list(index.shape)} and dtype {index.dtype}; use a 1-D int tensor or a "
                "bool mask"
            )
        idx = index.to(_long)
        if idx.numel():
            lo_t, hi_t = torch.aminmax(idx)
            lo, hi = int(lo_t), int(hi_t)
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of range for {n} rows")
            if lo < 0:
                idx = torch.where(idx < 0, idx + n, idx)
        return idx
    raise IndexError(
        f"cannot index the rows of a jagged leaf with {index!r}: use an int, a slice, a list, "
        "a 1-D int tensor or a bool mask"
    )


def select_rows(t: Tensor, index: Any) -> Tensor:
    """``t[index]`` over the rows of jagged ``t``: an int gives the row (a plain tensor),
    anything else an NJT of those rows (one gather from values; a step-1 slice is a view)."""
    values, offsets = parts(t)
    n = offsets.shape[0] - 1
    idx = _row_index(index, n)
    if type(idx) is int:
        return values[int(offsets[idx]) : int(offsets[idx + 1])]
    if type(idx) is slice and idx.step == 1:
        start, stop = idx.start, max(idx.start, idx.stop)
        first = offsets[start]
        return from_parts(
            values[int(first) : int(offsets[stop])], offsets[start : stop + 1] - first
        )
    if type(idx) is slice:
        # through range(): an empty slice (start past stop) is an empty selection, which
        # torch.arange(start, stop, step) refuses
        r = range(idx.start, idx.stop, idx.step)
        idx = torch.arange(len(r), dtype=torch.long) * r.step + r.start
    assert isinstance(idx, Tensor)
    return _gather(values, offsets, idx)


def _gather(values: Tensor, offsets: Tensor, idx: Tensor) -> Tensor:
    """The NJT of rows ``idx`` (in range, non-negative): one gather from values."""
    out_values, new, seqlens = _jg.gather(values, offsets, idx)
    return from_parts(out_values, new, seqlens)


def take(td: TensorCollection, idx: Tensor, done: dict[str, Any]) -> Any:
    """``td[idx]`` for a 1-D index tensor when a leaf is jagged; ``done`` holds the leaves
    already selected by the caller's fast path (with the same, then valid, index)."""
    n = td._batch_size[0]
    rows = _row_index(idx, n)
    out = dict(done)
    for k, v in td._tensordict.items():
        if k in out:
            continue
        if type(v) is NJT:
            out[k] = _gather(*parts(v), rows)  # type: ignore[arg-type]
        elif isinstance(v, Tensor):
            out[k] = torch.index_select(v, 0, rows)  # type: ignore[arg-type]
        else:
            out[k] = v[rows]
    size = rows.shape[0]  # type: ignore[union-attr]
    return td._new_unsafe(out, torch.Size((size,)), td._device)


def getitem(td: TensorCollection, index: Any) -> Any:
    """``td[index]`` for a container with a jagged leaf (one batch dim)."""
    bs = td._batch_size
    rows = _row_index(index, bs[0])
    if type(rows) is int:
        out = {
            k: select_rows(v, rows) if type(v) is NJT else v[rows]
            for k, v in td._tensordict.items()
        }
        return td._new_unsafe(out, torch.Size(()), td._device)
    if type(rows) is slice:
        out = {
            k: select_rows(v, rows) if type(v) is NJT else v[rows]
            for k, v in td._tensordict.items()
        }
        return td._new_unsafe(out, torch.Size((len(range(*rows.indices(bs[0]))),)), td._device)
    return take(td, rows, {})  # type: ignore[arg-type]


def split_rows(t: Tensor, sizes: Sequence[int]) -> list[Tensor]:
    """Consecutive row blocks of ``sizes`` rows (views), as ``Tensor.split`` along dim 0."""
    out, start = [], 0
    for s in sizes:
        out.append(select_rows(t, slice(start, start + s)))
        start += s
    return out


# ---------------------------------------------------------------- joining rows


def _as_parts(t: Tensor, key: str, i: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """``(values, offsets)`` of item ``i``: a jagged tensor, or a dense ``[n, L, *f]`` one
    (``n`` rows of length ``L``)."""
    if type(t) is NJT:
        v, o = parts(t)
    elif isinstance(t, Tensor) and t.ndim >= 2:
        n, length = t.shape[0], t.shape[1]
        v = t.reshape(n * length, *t.shape[2:])
        o = torch.arange(0, (n + 1) * length, max(length, 1), device=t.device)[: n + 1]
        if length == 0:
            o = torch.zeros(n + 1, dtype=_long, device=t.device)
    else:
        raise BatchSizeError(
            f"cat: key {key!r} is jagged in element 0 but element {i} holds "
            f"{type(t).__name__} of shape {list(getattr(t, 'shape', ()))}; give jagged rows "
            "(or a dense [rows, length, *feature] tensor)"
        )
    if v.shape[1:] != like.shape[1:] or v.dtype != like.dtype:
        raise BatchSizeError(
            f"cat: key {key!r}: element {i} has rows of feature shape {list(v.shape[1:])} "
            f"and dtype {v.dtype}, element 0 {list(like.shape[1:])} and {like.dtype}; "
            "jagged rows must share feature shape and dtype"
        )
    return v, o


def cat_rows(items: Sequence[Tensor], key: str = "") -> Tensor:
    """The rows of every item, in order, as one NJT (values concatenated once).

    Offsets stay int32 when every item's are int32 and the total fits.
    """
    first = items[0]
    like = parts(first)[0] if type(first) is NJT else first.reshape(-1, *first.shape[2:])
    vals, offs = [], []
    for i, t in enumerate(items):
        v, o = _as_parts(t, key, i, like)
        vals.append(v)
        offs.append(o)
    total = sum(v.shape[0] for v in vals)
    odt = _int if all(o.dtype is _int for o in offs) and total <= _INT32_MAX else _long
    new = [torch.zeros(1, dtype=odt, device=offs[0].device)]
    base = 0
    for v, o in zip(vals, offs):
        new.append(shifted_offsets(o, base, odt))
        base += v.shape[0]
    return from_parts(torch.cat(vals, 0), torch.cat(new, 0))


def shifted_offsets(offsets: Tensor, base: int, dtype: torch.dtype | None = None) -> Tensor:
    """``offsets[1:] + base``: the offsets an append writes after rows ending at ``base``
    (``offsets`` starts at 0; ``dtype`` defaults to its own)."""
    dtype = offsets.dtype if dtype is None else dtype
    return (offsets[1:].to(_long) + base).to(dtype)


# ---------------------------------------------------------------- comparisons


def compare(a: Tensor, b: Any, op: Any) -> Tensor:
    """``op`` (``torch.eq``/``torch.ne``) of jagged ``a`` with ``b``: row lengths first,
    then values. Rows that differ in length are unequal in every element (``a``'s
    structure is kept, so ``.all()`` answers); a scalar compares with every value."""
    va, oa = parts(a)
    if type(b) is not NJT:
        return from_parts(op(va, b), oa)
    vb, ob = parts(b)
    if oa.shape == ob.shape and va.shape[1:] == vb.shape[1:] and torch.equal(oa, ob.to(oa.dtype)):
        return from_parts(op(va, vb), oa)
    differ = op(torch.zeros((), dtype=_long), torch.ones((), dtype=_long))
    return from_parts(torch.full(va.shape, bool(differ), dtype=_bool, device=va.device), oa)


# ---------------------------------------------------------------- writing rows


def write_rows(t: Tensor, index: Any, value: Any, key: str) -> None:
    """``t[index] = value`` in place, into the values of jagged ``t``.

    Rows keep their lengths: ``value`` is a scalar, a tensor broadcast to the row (an
    int index), a jagged tensor with the same row lengths, or a dense
    ``[rows, length, *feature]`` tensor when every selected row has that length.
    """
    values, offsets = parts(t)
    n = offsets.shape[0] - 1
    idx = _row_index(index, n)
    if type(value) is not NJT and not isinstance(value, Tensor):
        value = torch.as_tensor(value, dtype=values.dtype)
    if type(idx) is int:
        if type(value) is NJT:
            raise BatchSizeError(
                f"cannot write a jagged tensor into row {idx} of key {key!r}; give the row "
                "as a plain tensor"
            )
        try:
            values[int(offsets[idx]) : int(offsets[idx + 1])] = value
        except RuntimeError as err:
            raise BatchSizeError(f"cannot write into row {idx} of key {key!r}: {err}") from None
        return
    if type(idx) is slice:
        idx = torch.arange(idx.start, idx.stop, idx.step)
    assert isinstance(idx, Tensor)
    idx = idx.to(offsets.device)
    starts = offsets.index_select(0, idx).to(_long)
    lengths = offsets.index_select(0, idx + 1).to(_long) - starts
    pos = _jg.positions(starts, lengths).to(values.device)
    if type(value) is NJT:
        src, src_off = parts(value)
        got = src_off[1:].to(_long) - src_off[:-1].to(_long)
        if got.shape != lengths.shape or not torch.equal(got, lengths):
            raise BatchSizeError(
                f"cannot write into key {key!r}: the rows given have lengths "
                f"{got.tolist()[:8]}, the selected rows {lengths.tolist()[:8]}; a write keeps "
                "every row's length (select and rebuild the leaf to change lengths)"
            )
    elif value.ndim >= 2 and value.shape[0] == idx.shape[0] and value.ndim == values.ndim + 1:
        if not bool((lengths == value.shape[1]).all()):
            raise BatchSizeError(
                f"cannot write a dense tensor of shape {list(value.shape)} into key {key!r}: "
                f"the selected rows have lengths {lengths.tolist()[:8]}, not all "
                f"{value.shape[1]}; give a jagged tensor with those lengths"
            )
        src = value.reshape(-1, *value.shape[2:])
    else:
        src = value  # a scalar or a feature-shaped tensor: broadcast to every value
    try:
        values[pos] = src
    except RuntimeError as err:
        raise BatchSizeError(f"cannot write into key {key!r}: {err}") from None
