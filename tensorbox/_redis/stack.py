"""``LazyStackedTensorDictStore``: a stack of stores on one server, one per element.

Elements may differ in their feature shapes (a heterogeneous stack, as tensordict's
lazy stacks allow); ``stack[i]`` is element ``i``'s own ``TensorDictStore``, so
writes through it reach the server. Reading a key across elements stacks densely
and needs equal shapes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import torch

from tensorbox._core.functional import stack
from tensorbox._core.nestedkey import NestedKey
from tensorbox._core.tensordict import TensorDict, is_tensor_collection
from tensorbox._redis.store import TensorDictStore
from tensorbox._redis.wire import _Server
from tensorbox.errors import FormatError

__all__ = ["LazyStackedTensorDictStore"]

_FORMAT = "tensorbox.store-stack"


def _is_key(index: Any) -> bool:
    return isinstance(index, str) or (
        isinstance(index, tuple) and bool(index) and all(isinstance(k, (str, tuple)) for k in index)
    )


class LazyStackedTensorDictStore:
    """``count`` stores stacked along dim 0, kept on one server under one id.

    Build one with ``from_lazy_stack(containers, **store_kwargs)`` (a sequence of
    TensorDicts or tensorclass instances of the same batch size; tensorbox has no lazy
    stack type, so a list stands for one) and attach elsewhere with
    ``from_store(td_id=..., **store_kwargs)``. Keyword arguments are
    ``TensorDictStore``'s (``host``, ``port``, ``db``, ``url``, ``prefix``...).
    Runnable example: docs/remote.md.
    """

    def __init__(self, elements: list[TensorDictStore], td_id: str, server: _Server) -> None:
        self._elements = elements
        self._td_id = td_id
        self._server = server
        self._stack_dim = 0

    # ---- construction ----------------------------------------------------------

    @staticmethod
    def _meta_key(server: _Server, td_id: str) -> str:
        return f"{server.namespace}:{{{td_id}}}:stack"

    @classmethod
    def from_lazy_stack(
        cls, containers: Sequence[Any], td_id: str | None = None, **kwargs: Any
    ) -> LazyStackedTensorDictStore:
        """A new stack holding a copy of each container (same batch size each)."""
        items = list(getattr(containers, "tensordicts", containers))
        if not items or not all(is_tensor_collection(c) for c in items):
            raise TypeError(
                "LazyStackedTensorDictStore.from_lazy_stack takes a non-empty sequence of "
                "TensorDicts or tensorclass instances"
            )
        inner = torch.Size(items[0].batch_size)
        for i, c in enumerate(items):
            if torch.Size(c.batch_size) != inner:
                raise ValueError(
                    f"from_lazy_stack: element {i} has batch size {list(c.batch_size)}, "
                    f"element 0 {list(inner)}; a stack needs one batch size"
                )
        stack_id = td_id or str(uuid.uuid4())
        first = TensorDictStore(batch_size=inner, td_id=f"{stack_id}.0", **kwargs)
        server = first._server
        elements = [first]
        elements += [cls._element(server, f"{stack_id}.{i}", inner) for i in range(1, len(items))]
        for e, c in zip(elements, items, strict=True):
            e.update(c)
        meta = {
            "format": _FORMAT,
            "version": 1,
            "count": len(items),
            "inner_batch_size": list(inner),
        }
        server.call(
            "write the stack's metadata",
            lambda: server.client.set(cls._meta_key(server, stack_id), json.dumps(meta)),
        )
        return cls(elements, stack_id, server)

    @staticmethod
    def _element(server: _Server, td_id: str, inner: torch.Size) -> TensorDictStore:
        return TensorDictStore(
            client=server.client,
            backend=server.backend,
            prefix=server.namespace,
            td_id=td_id,
            batch_size=inner,
        )

    @classmethod
    def from_store(cls, *, td_id: str, **kwargs: Any) -> LazyStackedTensorDictStore:
        """Attach to the existing stack ``td_id``."""
        probe = TensorDictStore.from_store(td_id=f"{td_id}.0", **kwargs)
        server = probe._server
        raw = server.call(
            "read the stack's metadata", lambda: server.client.get(cls._meta_key(server, td_id))
        )
        try:
            meta = json.loads(raw) if raw is not None else None
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise FormatError(f"{server.where()}: no stack metadata for {td_id!r} (not a stack?)")
        inner = torch.Size(meta["inner_batch_size"])
        elements = [probe] + [
            cls._element(server, f"{td_id}.{i}", inner) for i in range(1, int(meta["count"]))
        ]
        return cls(elements, td_id, server)

    # ---- shape -------------------------------------------------------------------

    @property
    def _count(self) -> int:
        return len(self._elements)

    @property
    def _inner_batch_size(self) -> torch.Size:
        return self._elements[0].batch_size

    @property
    def _backend(self) -> str:
        return self._server.backend

    @property
    def td_id(self) -> str:
        """The id ``from_store`` takes."""
        return self._td_id

    @property
    def batch_size(self) -> torch.Size:
        """``[count, *element batch size]``."""
        return torch.Size([self._count, *self._inner_batch_size])

    def __len__(self) -> int:
        return self._count

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        """The keys of element 0."""
        return self._elements[0].keys(include_nested, leaves_only)

    # ---- reads and writes ----------------------------------------------------------

    def _picked(self, index: Any) -> list[int] | int:
        rows = torch.arange(self._count)[index]
        return int(rows) if rows.ndim == 0 else rows.tolist()

    def __getitem__(self, index: Any) -> Any:
        if _is_key(index):
            return torch.stack([e.get(index) for e in self._elements])
        picked = self._picked(index)
        if isinstance(picked, int):
            return self._elements[picked]  # the element's own store: writes reach the server
        return stack([self._elements[i].to_local() for i in picked])

    def get(self, key: NestedKey) -> Any:
        """The leaf ``key`` of every element, stacked (equal shapes needed)."""
        return self[key]

    def __setitem__(self, index: Any, value: Any) -> None:
        if _is_key(index):
            for e, v in zip(self._elements, value.unbind(0), strict=True):
                e.set(index, v)
            return
        picked = self._picked(index)
        if isinstance(picked, int):
            self._elements[picked].update(value)
            return
        for i, v in zip(picked, value.unbind(0), strict=True):
            self._elements[i].update(v)

    def to_local(self) -> TensorDict:
        """Every element read now, stacked densely into a local ``TensorDict``."""
        out: TensorDict = stack([e.to_local() for e in self._elements])
        return out

    def to_tensordict(self) -> TensorDict:
        """As ``to_local``."""
        return self.to_local()

    # ---- lifetime ----------------------------------------------------------------

    def clear_redis(self) -> None:
        """Delete every element and the stack's metadata from the server."""
        for e in self._elements:
            e.clear_redis()
        key = self._meta_key(self._server, self._td_id)
        self._server.call("delete the stack", lambda: self._server.client.delete(key))

    def close(self) -> None:
        """Close the connections (one, shared by the elements, unless unpickled)."""
        for e in self._elements:
            e.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_attach_stack, (self._td_id, self._elements))

    def __repr__(self) -> str:
        return (
            f"LazyStackedTensorDictStore(count={self._count}, batch_size={list(self.batch_size)}, "
            f"keys={self.keys()}, backend={self._backend!r}, url={self._server.url!r}, "
            f"td_id={self._td_id!r})"
        )


def _attach_stack(td_id: str, elements: list[TensorDictStore]) -> LazyStackedTensorDictStore:
    """Unpickle a stack: its elements unpickle as handles on the same keys."""
    return LazyStackedTensorDictStore(elements, td_id, elements[0]._server)
