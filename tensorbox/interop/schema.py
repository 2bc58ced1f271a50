"""``from_schema``: a zero-filled container allocated straight into the storage that will
hold it, from a table of ``key -> (element shape, dtype)``.

A buffer of a million observations should not be built in memory only to be copied to
disk or to a server. Each leaf starts as one zero broadcast to its full shape (no
memory), and the chosen storage materialises it: sparse files for ``"memmap"``
(``memmap_like``), datasets for ``"h5"``/``"zarr"`` (``PersistentTensorDict``), keys for
``"redis"`` (``TensorDictStore``). Only the default, in memory, allocates the zeros.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict.from_schema(
...     {"obs": ([4], torch.float32), ("next", "reward"): ([], torch.int64)},
...     batch_size=[8],
... )
>>> td["obs"].shape, td["next", "reward"].dtype
(torch.Size([8, 4]), torch.int64)
>>> TensorDict.from_schema({"a": ([1], torch.float32)}, storage="nope")
Traceback (most recent call last):
ValueError: from_schema: unknown storage 'nope'; expected one of None (in memory), 'memory', 'shared', 'memmap', 'h5', 'zarr', 'redis', 'dragonfly'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["STORAGES", "from_schema"]

#: The storages ``from_schema`` knows, in the order its error lists them.
STORAGES = ("memory", "shared", "memmap", "h5", "zarr", "redis", "dragonfly")


def _shapes(schema: Any, batch_size: torch.Size) -> list[tuple[Any, torch.Size, torch.dtype]]:
    """Each entry checked and made ``(key, full shape, dtype)``, with the key named on error."""
    if not isinstance(schema, Mapping):
        raise TypeError(
            f"from_schema: the schema must be a mapping of key -> (shape, dtype), "
            f"got {type(schema).__name__}"
        )
    out = []
    for key, spec in schema.items():
        if not (isinstance(key, str) or (isinstance(key, tuple) and key)):
            raise TypeError(f"from_schema: key {key!r} must be a str or a tuple of str")
        try:
            shape, dtype = spec
            shape = torch.Size(shape)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"from_schema: key {key!r}: expected a pair (element shape, dtype), "
                f"such as ([4], torch.float32), got {spec!r}"
            ) from err
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"from_schema: key {key!r}: {dtype!r} is not a torch.dtype")
        if any(n < 0 for n in shape):
            raise ValueError(f"from_schema: key {key!r}: negative size in shape {list(shape)}")
        out.append((key, torch.Size([*batch_size, *shape]), dtype))
    return out


def from_schema(
    schema: Mapping[Any, tuple[Sequence[int], torch.dtype]],
    *,
    batch_size: Sequence[int] | None = None,
    storage: str | None = None,
    device: Any = None,
    **kwargs: Any,
) -> Any:
    """A zero-filled container of ``[*batch_size, *shape]`` leaves, held by ``storage``.

    ``storage``: ``None``/``"memory"`` (a ``TensorDict``), ``"shared"`` (the same, in
    shared memory: ``share_memory_``),
    ``"memmap"`` (``prefix=`` a folder; other keywords go to ``memmap_like``; files are
    sparse), ``"h5"``/``"zarr"`` (``filename=``; a ``PersistentTensorDict``, opened
    ``"r+"``), ``"redis"``/``"dragonfly"`` (a ``TensorDictStore``; ``host``, ``port`` and
    the like go to it). Keys may be nested tuples.
    """
    from tensorbox._core.tensordict import TensorDict

    if storage is not None and storage not in STORAGES:
        raise ValueError(
            f"from_schema: unknown storage {storage!r}; expected one of None (in memory), "
            + ", ".join(repr(s) for s in STORAGES)
        )
    bs = torch.Size(batch_size if batch_size is not None else ())
    entries = _shapes(schema, bs)
    if storage in (None, "memory", "shared"):
        if kwargs:
            raise TypeError(
                f"from_schema: unexpected arguments {sorted(kwargs)} for storage in memory"
            )
        out = TensorDict({}, batch_size=bs, device=device)
        for key, shape, dtype in entries:
            out.set(key, torch.zeros(shape, dtype=dtype, device=device))
        # "shared": in shared memory, so that worker processes see one buffer
        return out.share_memory_() if storage == "shared" else out
    # One zero broadcast to the full shape: the storage below materialises it.
    lazy = TensorDict({}, batch_size=bs)
    for key, shape, dtype in entries:
        lazy.set(key, torch.zeros((), dtype=dtype).expand(shape))
    if storage == "memmap":
        prefix = kwargs.pop("prefix", None)
        return lazy.memmap_like(prefix, **kwargs)
    if storage in ("h5", "zarr"):
        from tensorbox.interop.hierarchical import PersistentTensorDict

        if "filename" not in kwargs:
            raise TypeError(f"from_schema(storage={storage!r}) needs filename=, the file to create")
        filename = kwargs.pop("filename")
        return PersistentTensorDict.from_dict(
            lazy, filename, batch_size=bs, device=device, backend=storage, **kwargs
        )
    from tensorbox._redis import TensorDictStore

    return TensorDictStore.from_dict(lazy, batch_size=bs, device=device, backend=storage, **kwargs)
