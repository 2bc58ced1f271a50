"""Reductions with tensordict's semantics: over batch dims, over each leaf's feature dims,
or into one tensor (``reduce=True``); ``min``/``max``/``cummin``/``cummax`` with indices;
``logsumexp``, ``softmax`` and the elementwise losses.

``dim`` says what is reduced:

- not given (``None``): each leaf to one value; the result has batch size ``[]``;
- batch dim(s) (an int or a tuple of ints): those dims of every leaf, removed from the
  batch size (kept as 1 with ``keepdim=True``);
- ``"feature"``: every dim of each leaf after the batch dims; the batch size stays.

``reduce=True`` reduces across leaves too and returns one tensor: the leaves are
flattened (over their feature dims for ``"feature"``), concatenated and reduced.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.ones(2, 3), b=torch.zeros(2), batch_size=[2])
>>> reduction(td, "sum", "feature", False, False)["a"].tolist()
[3.0, 3.0]
>>> reduction(td, "sum", None, False, True)
tensor(6.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import tensor_leaves

__all__ = [
    "LOSS_FUNCTIONS",
    "REDUCTIONS",
    "cumulative",
    "extreme",
    "logsumexp",
    "reduction",
    "softmax",
]

FEATURE = "feature"

#: The reductions whose torch function (``torch.mean(td, 0)``) calls the container method.
REDUCTIONS = (
    "sum",
    "nansum",
    "prod",
    "mean",
    "nanmean",
    "std",
    "var",
    "quantile",
    "amax",
    "amin",
    "max",
    "min",
    "cummax",
    "cummin",
)
_NTD = NonTensorData


def _norm_dims(dim: Any, ndim: int, what: str) -> tuple[int, ...]:
    seq = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in seq:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(
                f"{what}: dim {dim!r} must be an int, a tuple of ints, None or 'feature'"
            )
        if not -ndim <= d < ndim:
            raise IndexError(
                f"{what}: dim {d} is out of range for {ndim} batch dim(s) "
                f"(expected a value in [{-ndim}, {ndim - 1}], or dim='feature' to reduce "
                "the dims after the batch dims)"
            )
        out.append(d + ndim if d < 0 else d)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{what}: repeated dim in {dim!r}")
    return tuple(out)


def _walk(
    td: Any,
    leaf: Callable[[Tensor], Tensor],
    new_bs: Callable[[torch.Size], torch.Size],
) -> Any:
    """``leaf`` on every tensor leaf; each container's batch size through ``new_bs``.

    A non-tensor entry holding one value per batch element cannot follow a batch
    reduction, so it is left out when the batch size changes.
    """
    bs = new_bs(td._batch_size)
    same = bs == td._batch_size
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            out[k] = leaf(v)
        elif type(v) is _NTD:
            if same or not v.stacked:
                out[k] = v
        else:
            out[k] = _walk(v, leaf, new_bs)
    return td._new_unsafe(out, torch.Size(bs), td._device)


def _call(name: str, t: Tensor, q: Any, **kw: Any) -> Tensor:
    fn: Any = getattr(torch, name)
    if name == "quantile":
        out: Tensor = fn(t, q, **kw)
        return out
    if name == "prod" and isinstance(kw.get("dim"), tuple):
        # torch.prod takes one dim: reduce them one at a time, the last first
        dims, keepdim = kw.pop("dim"), kw.pop("keepdim", False)
        for d in sorted(dims, reverse=True):
            t = fn(t, dim=d, keepdim=keepdim, **kw)
        return t
    res: Tensor = fn(t, **kw)
    return res


def _agglomerate(td: Any, name: str, dim: Any, keepdim: bool, q: Any, kw: dict[str, Any]) -> Tensor:
    """``reduce=True``: one tensor reduced over every leaf."""
    leaves = tensor_leaves(td)
    if not leaves:
        raise ValueError(f"{name}(reduce=True): the container holds no tensor to reduce")
    if dim is None:
        flat = torch.cat([t.reshape(-1) for t in leaves])
        return _call(name, flat, q, **kw)
    ndim = len(td._batch_size)
    if dim == FEATURE:
        flat = torch.cat(
            [t.flatten(ndim, -1) if t.ndim > ndim else t.unsqueeze(-1) for t in leaves], -1
        )
        return _call(name, flat, q, dim=-1, **kw)
    # along batch dims, as tensordict: the leaves are concatenated along the (first) dim,
    # so they must agree on every other dim
    dims = _norm_dims(dim, ndim, name)
    flat = torch.cat(leaves, dims[0])
    return _call(name, flat, q, dim=dims if len(dims) > 1 else dims[0], keepdim=keepdim, **kw)


def reduction(
    td: Any,
    name: str,
    dim: Any,
    keepdim: bool,
    reduce: bool | None,
    q: Any = None,
    **kw: Any,
) -> Any:
    """``torch.<name>`` over ``dim`` of every leaf (see the module doc for ``dim``)."""
    kw = {k: v for k, v in kw.items() if v is not None}
    if reduce:
        return _agglomerate(td, name, dim, keepdim, q, kw)
    if dim == FEATURE:
        if keepdim:
            raise TypeError(
                f"{name}(dim='feature') reduces every feature dim and keeps the batch size; "
                "keepdim=True is not supported with it"
            )

        def feature(t: Tensor, nd: int) -> Tensor:
            flat = t.flatten(nd, -1) if t.ndim > nd else t.unsqueeze(-1)
            return _call(name, flat, q, dim=-1, **kw)

        return _walk_feature(td, feature)
    if dim is None:
        if keepdim:
            return _walk(
                td,
                lambda t: (
                    _call(name, t, q, dim=tuple(range(t.ndim)), keepdim=True, **kw) if t.ndim else t
                ),
                lambda bs: torch.Size([1] * len(bs)),
            )
        return _walk(td, lambda t: _call(name, t, q, **kw), lambda bs: torch.Size([]))
    dims = _norm_dims(dim, len(td._batch_size), name)
    one: Any = dims[0] if len(dims) == 1 else dims
    if name == "quantile" and len(dims) > 1:
        raise TypeError("quantile: dim must be one batch dim (an int), as torch.quantile")
    return _walk(
        td,
        lambda t: _call(name, t, q, dim=one, keepdim=keepdim, **kw),
        lambda bs: _reduced_size(bs, dims, keepdim),
    )


def _walk_feature(td: Any, leaf: Callable[[Tensor, int], Tensor]) -> Any:
    """Each container's leaves reduced over the dims after its own batch dims."""
    nd = len(td._batch_size)
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            out[k] = leaf(v, nd)
        elif type(v) is _NTD:
            out[k] = v
        else:
            out[k] = _walk_feature(v, leaf)
    return td._new_unsafe(out, td._batch_size, td._device)


def _reduced_size(bs: torch.Size, dims: tuple[int, ...], keepdim: bool) -> torch.Size:
    if keepdim:
        return torch.Size([1 if i in dims else s for i, s in enumerate(bs)])
    return torch.Size([s for i, s in enumerate(bs) if i not in dims])


def _values_and_indices(td: Any, fn: Callable[[Tensor], Any], new_bs: Any) -> tuple[Any, Any]:
    """Two containers from one call per leaf of a torch function returning (values, indices)."""
    indices: list[Tensor] = []

    def values(t: Tensor) -> Tensor:
        r = fn(t)
        indices.append(r.indices)
        return r.values  # type: ignore[no-any-return]

    vals = _walk(td, values, new_bs)
    it = iter(indices)
    return vals, _walk(td, lambda t: next(it), new_bs)


def extreme(
    td: Any,
    name: str,
    dim: Any,
    keepdim: bool,
    reduce: bool | None,
    return_indices: bool,
) -> Any:
    """``min``/``max``: values only without ``dim`` (as ``amin``/``amax`` of each whole leaf);
    with a batch ``dim``, ``torch.return_types.min/max`` of two containers (values,
    indices), or the values only with ``return_indices=False``."""
    if reduce:
        return _agglomerate(td, f"a{name}" if dim is not None else name, dim, keepdim, None, {})
    if dim is None or dim == FEATURE:
        if dim is None and keepdim:
            return reduction(td, f"a{name}", None, True, False)
        return reduction(td, f"a{name}" if dim == FEATURE else name, dim, keepdim, False)
    (d,) = _norm_dims(dim, len(td._batch_size), name) if isinstance(dim, int) else (None,)
    if d is None:
        raise TypeError(f"{name}: dim must be one batch dim (an int), got {dim!r}")
    fn = getattr(torch, name)
    if not return_indices:
        return reduction(td, f"a{name}", d, keepdim, False)
    vals, idx = _values_and_indices(
        td, lambda t: fn(t, dim=d, keepdim=keepdim), lambda bs: _reduced_size(bs, (d,), keepdim)
    )
    return getattr(torch.return_types, name)([vals, idx])


def cumulative(td: Any, name: str, dim: Any, reduce: bool | None, return_indices: bool) -> Any:
    """``cummin``/``cummax`` along batch dim ``dim``: the batch size stays."""
    (d,) = _norm_dims(dim, len(td._batch_size), name)
    fn = getattr(torch, name)
    if reduce:
        leaves = tensor_leaves(td)
        nd = len(td._batch_size)
        flat = torch.cat(
            [t.flatten(nd, -1) if t.ndim > nd else t.unsqueeze(-1) for t in leaves], -1
        )
        r = fn(flat, dim=d)
        return r if return_indices else r.values
    if not return_indices:
        return _walk(td, lambda t: fn(t, dim=d).values, lambda bs: bs)
    vals, idx = _values_and_indices(td, lambda t: fn(t, dim=d), lambda bs: bs)
    return getattr(torch.return_types, name)([vals, idx])


def logsumexp(td: Any, dim: Any, keepdim: bool, out: Any) -> Any:
    """``torch.logsumexp`` over batch dim(s) ``dim`` (all of them when None), into ``out``."""
    ndim = len(td._batch_size)
    dims = tuple(range(ndim)) if dim is None else _norm_dims(dim, ndim, "logsumexp")
    new_bs = _reduced_size(td._batch_size, dims, keepdim)
    if out is None:
        return _walk(
            td,
            lambda t: torch.logsumexp(t, dim=dims, keepdim=keepdim),
            lambda bs: _reduced_size(bs, dims, keepdim),
        )
    if out.batch_size != new_bs:
        raise ValueError(
            f"logsumexp: out= has batch_size {tuple(out.batch_size)}, the result has "
            f"{tuple(new_bs)}"
        )
    result = td.named_apply(
        lambda key, t: torch.logsumexp(t, dim=dims, keepdim=keepdim, out=_out_leaf(out, key)),
        nested_keys=True,
        batch_size=new_bs,
    )
    out.update(result)
    return out


def _out_leaf(out: Any, key: Any) -> Tensor | None:
    v = out.get(key)
    return v if isinstance(v, Tensor) else None


def softmax(td: Any, name: str, dim: Any, dtype: torch.dtype | None) -> Any:
    """``torch.softmax``/``log_softmax`` along batch dim ``dim`` of every leaf."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ValueError(f"{name}: dim must be a batch dim (an int), got {dim!r}")
    (d,) = _norm_dims(dim, len(td._batch_size), name)
    fn = getattr(torch, name)
    return _walk(td, lambda t: fn(t, dim=d, dtype=dtype), lambda bs: bs)


def _loss(name: str) -> Callable[..., Any]:
    fn = getattr(torch.nn.functional, name)

    def loss(input: Any, target: Any, *args: Any, reduction: str = "mean", **kw: Any) -> Any:
        """``torch.nn.functional.<name>`` on matching leaves: a container of losses
        (batch size ``[]`` when reduced, the input's when ``reduction='none'``)."""
        if not hasattr(input, "batch_size"):  # a tensor against a container
            input = target.apply(lambda t: torch.as_tensor(input).expand_as(t))
        bs = input.batch_size if reduction == "none" else []

        def one(i: Tensor, t: Any) -> Tensor:
            return fn(i, t, *args, reduction=reduction, **kw)  # type: ignore[no-any-return]

        if hasattr(target, "batch_size"):
            return input.apply(one, target, batch_size=bs)
        return input.apply(lambda i: one(i, target), batch_size=bs)

    loss.__name__ = name
    return loss


#: ``torch.nn.functional`` losses routed to containers by ``__torch_function__``.
LOSS_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    getattr(torch.nn.functional, n): _loss(n)
    for n in ("l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss")
}
