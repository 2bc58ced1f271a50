"""A leaf behind a URL as a tensor (:class:`RemoteTensor`): its description costs
nothing, reading rows fetches those rows, anything else the whole leaf, after which it
is a plain :class:`MemoryMappedTensor` of the cache; pickled by reference
(:class:`RemoteRef`), never fetched for it; and :func:`prefetch`, rows fetched ahead in
a background thread."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, NamedTuple

import torch
import torch.utils._pytree as _pytree

from tensorbox._core.tree import iter_shaped
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.remote.leaf import _claim, _fetch, _Leaf, ensure
from tensorbox._storage.store import TensorEntry

__all__ = ["RemoteRef", "RemoteTensor", "prefetch"]


# ---------------------------------------------------------------- tensors


def _rows(index: Any, n: int) -> torch.Tensor | None:
    """The rows (dim 0) an index reads, or None when it is not a plain row index."""
    if isinstance(index, tuple):
        if not index or index[0] is Ellipsis or index[0] is None:
            return None
        index = index[0]
    if isinstance(index, bool):
        return None
    if isinstance(index, int):
        return torch.tensor([index % n if n else 0])
    if isinstance(index, slice):
        return _span(index, n)
    if isinstance(index, list):
        index = torch.as_tensor(index)
    if isinstance(index, torch.Tensor) and type(index) is torch.Tensor:
        if index.dtype == torch.bool:
            return (
                index.reshape(index.shape[0], -1).any(1).nonzero().flatten()
                if index.dim()
                else None
            )
        if not index.dtype.is_floating_point and not index.dtype.is_complex:
            return index.flatten().to(torch.int64) % max(n, 1)
    return None


def _span(s: slice, n: int) -> torch.Tensor:
    start, stop, step = s.indices(n)
    if (stop - start) * step <= 0:
        return torch.empty(0, dtype=torch.int64)
    return torch.arange(start, stop, step)


_Tensor = torch.Tensor
#: Functions that read a tensor's description only: answered without fetching.
_META = {
    getattr(_Tensor, name).__get__ if prop else getattr(_Tensor, name)
    for name, prop in (
        *[
            (n, True)
            for n in (
                "shape",
                "dtype",
                "device",
                "ndim",
                "layout",
                "requires_grad",
                "is_cuda",
                "is_sparse",
                "is_nested",
                "is_meta",
                "grad",
                "names",
            )
        ],
        *[
            (n, False)
            for n in (
                "size",
                "dim",
                "numel",
                "nelement",
                "element_size",
                "__len__",
                "is_floating_point",
                "is_complex",
                "get_device",
                "requires_grad_",
            )
        ],
    )
    if hasattr(_Tensor, name)
}


class RemoteTensor(MemoryMappedTensor):
    """A leaf of a tree behind a URL whose bytes arrive on first use (see the module doc).

    Its description (shape, dtype, device) needs nothing; reading rows fetches those
    rows; anything else fetches the whole leaf, after which the tensor is a plain
    :class:`MemoryMappedTensor` of the local cache.
    """

    _tbx_leaf: _Leaf

    @classmethod
    def __torch_function__(  # type: ignore[override]  # the base's is the disabled one
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _META:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        first: Any = args[0] if args else None
        rows = None
        if type(first) is RemoteTensor:
            n = first._tbx_leaf.shape[0] if first._tbx_leaf.shape else 0
            if func is _Tensor.__getitem__ and len(args) == 2:
                rows = _rows(args[1], n)
            elif (
                func in (torch.index_select, _Tensor.index_select)
                and len(args) >= 3
                and args[1] == 0
                and isinstance(args[2], torch.Tensor)
            ):
                rows = args[2].flatten().to(torch.int64)
        if rows is not None:
            ensure([(first._tbx_leaf, rows)])
        else:
            flat, _ = _pytree.tree_flatten((args, kwargs))
            ensure([(t._tbx_leaf, None) for t in flat if type(t) is RemoteTensor])
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    #: pickled by reference (:class:`RemoteRef`), never fetched for it
    _tbx_by_reference = True

    def __reduce_ex__(self, protocol: Any) -> Any:
        from tensorbox._core.pickling import in_torch_save

        if in_torch_save():  # a file written by torch.save holds the bytes themselves
            ensure([(self._tbx_leaf, None)])  # whole now: a mapping of the cache
            return self.__reduce_ex__(protocol)
        return self._tbx_leaf.store.reduce(self._tbx_leaf)  # by reference: RemoteRef


class RemoteRef(NamedTuple):
    """A leaf behind a URL, by reference: what a process needs to read it lazily on its
    own (a spawned DataLoader worker, a process on another machine).

    It carries the ``storage_options`` the tree was opened with, as fsspec's own
    filesystems do when pickled: credentials passed there travel with the pickle. Pass
    them through the environment instead (``AWS_*``...) to keep them out of pickles;
    each process then reads its own. The receiving process uses its own cache
    (``$TENSORBOX_CACHE``): on one machine, the same folder, shared.
    """

    url: str
    storage_options: dict[str, Any] | None
    cache: bool
    entry: TensorEntry
    version: Any  # the object's identity when the reference was made (see stores._attach)


def _wanted(data: Any, rows: Any) -> list[tuple[_Leaf, torch.Tensor | None]]:
    idx = None if rows is None else _rows(rows, 1 << 62)
    if rows is not None and idx is None:
        raise TypeError(
            f"prefetch: rows must be an int, a slice, a list or a 1-D integer or bool "
            f"tensor of row numbers, got {type(rows).__name__}"
        )
    leaves = [data] if isinstance(data, torch.Tensor) else [t for _, t in iter_shaped(data)]
    out: list[tuple[_Leaf, torch.Tensor | None]] = []
    for t in leaves:
        if type(t) is RemoteTensor:
            leaf = t._tbx_leaf
            if isinstance(rows, slice):
                idx = _span(rows, leaf.shape[0] if leaf.shape else 1)
            out.append((leaf, idx))
    return out


def prefetch(data: Any, rows: Any = None) -> concurrent.futures.Future[None]:
    """Fetch rows ``rows`` (all rows when None) of every leaf of ``data`` that lives
    behind a URL, in a background thread; the returned future is done when they are in
    the cache (``.result()`` waits, and raises what the fetch raised). Leaves that are
    local, or already here, cost nothing: for local data the future is done at once.

    All leaves' rows go out together, ranges of one object merged where they are close,
    so a batch of rows of every leaf costs a few requests, not one per leaf.

    >>> import torch, tensorbox
    >>> tensorbox.prefetch(tensorbox.TensorDict(x=torch.arange(4), batch_size=[4]), [0, 2]).done()
    True
    """
    wanted = _wanted(data, rows)
    if not any(leaf.missing for leaf, _ in wanted):
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done
    # Claimed here, in the caller's thread: a read that starts after this call waits for
    # these parts instead of fetching them again (or splitting this call's ranges).
    claimed, _ = _claim(wanted)
    fut: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run() -> None:
        # A thread of its own (not a bounded pool): a fetch waiting for parts that another
        # prefetch claimed must never wait behind it in a queue.
        try:
            _fetch(claimed)
            ensure(wanted)  # parts in flight elsewhere: waited for (fetched if that failed)
        except BaseException as err:
            fut.set_exception(err)
        else:
            fut.set_result(None)

    threading.Thread(target=run, name="tensorbox-prefetch", daemon=True).start()
    return fut
