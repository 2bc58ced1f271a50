"""Writes: whole entries in one MULTI/EXEC watched on the index; row writes as
SETRANGE of the rows' bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Self

import numpy as np
import torch

from tensorbox._core.keys import NestedKey, format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tensordict import TensorDict, is_tensor_collection
from tensorbox._redis.reads import StoreReads
from tensorbox._redis.wire import (
    _RETRIES,
    _enc,
    _from_bytes,
    _Header,
    _json_value,
    _leaves_of,
    _np_index,
    _redis,
    _rows_of,
    _runs,
    _tensor_bytes,
    _tensor_header,
)
from tensorbox.errors import BatchSizeError, FormatError, LockedError, TensorDictKeyError


class StoreWrites(StoreReads):
    """What a store handle writes to its server."""

    def _transaction(
        self, what: str, plan: Callable[[Any, dict[tuple[str, ...], _Header]], Any]
    ) -> None:
        """Run ``plan(pipe, index)`` inside MULTI/EXEC, watched on the index so that a
        concurrent change to it replays the plan against the new index."""
        server = self._server
        r = _redis()

        def run(pipe: Any) -> None:
            index = server.parse_index(pipe.hgetall(server.index_key))
            pipe.multi()
            plan(pipe, index)

        for _ in range(_RETRIES):
            try:
                server.call(what, lambda: server.client.transaction(run, server.index_key))
                return
            except r.exceptions.WatchError:
                continue
        raise RuntimeError(
            f"{server.where()}: {what}: the index kept changing under {_RETRIES} attempts"
        )

    def _check_new(self, path: tuple[str, ...], index: dict[tuple[str, ...], _Header]) -> None:
        for i in range(len(self._path) + 1, len(path)):
            h = index.get(path[:i])
            if h is not None and h.kind != "node":
                raise TensorDictKeyError(
                    f"{self._server.where(path)}: {format_key(path[:i])!r} is a leaf, not a "
                    "nested container"
                )
        if self._locked and path not in index:
            raise LockedError(
                f"{self._server.where(path)}: the store is locked: no new keys (unlock_() first)"
            )

    def _ops_for(
        self,
        pipe: Any,
        index: dict[tuple[str, ...], _Header],
        path: tuple[str, ...],
        value: Any,
        node_bs: torch.Size,
    ) -> None:
        """Queue the commands that make ``path`` hold ``value`` (replacing what is there)."""
        server = self._server
        where = server.where(path)
        # intermediate nodes (created with the batch size of the level that holds them)
        for i in range(len(self._path) + 1, len(path)):
            if path[:i] not in index:
                bs = self._batch_size
                hdr = json.dumps({"kind": "node", "batch_size": list(bs)})
                pipe.hset(server.index_key, _enc(path[:i]), hdr)
                index[path[:i]] = _Header(hdr, where)
        # whatever is there goes first
        gone = [p for p in index if p[: len(path)] == path]
        for p in gone:
            pipe.hdel(server.index_key, _enc(p))
            pipe.delete(server.data_key(p))
            del index[p]
        self._forget(gone)
        if isinstance(value, StoreReads):
            value = value.to_local()
        if isinstance(value, Mapping) and not is_tensor_collection(value):
            value = TensorDict(dict(value), batch_size=node_bs)
        if is_tensor_collection(value):
            bs = torch.Size(value.batch_size)
            if bs[: len(node_bs)] != node_bs:
                raise BatchSizeError(
                    f"{where}: a container of batch size {list(bs)} does not fit under the "
                    f"batch size {list(node_bs)}"
                )
            hdr = json.dumps({"kind": "node", "batch_size": list(bs)})
            pipe.hset(server.index_key, _enc(path), hdr)
            index[path] = _Header(hdr, where)
            for k, v in value._tensordict.items():
                self._ops_for(pipe, index, (*path, k), v, bs)
            return
        if isinstance(value, torch.Tensor):
            if getattr(value, "is_nested", False) or value.layout != torch.strided:
                raise TypeError(f"{where}: only dense tensors go into a store, not {value.layout}")
            if value.shape[: len(node_bs)] != node_bs:
                raise BatchSizeError(
                    f"{where}: a tensor of shape {list(value.shape)} does not start with the "
                    f"batch size {list(node_bs)}"
                )
            hdr = _tensor_header(value)
            pipe.set(server.data_key(path), _tensor_bytes(value))
            pipe.hset(server.index_key, _enc(path), hdr)
            h = _Header(hdr, where)
            index[path] = h
            self._remember(path, h)
            return
        nt = value if isinstance(value, NonTensorData) else NonTensorData(value)
        if nt.stacked:
            if tuple(nt.data.shape) != tuple(node_bs):
                raise BatchSizeError(
                    f"{where}: per-row values of shape {list(nt.data.shape)} under the batch "
                    f"size {list(node_bs)}"
                )
            text = _json_value(nt.data.tolist(), where)
        else:
            text = _json_value(nt.data, where)
        hdr = json.dumps({"kind": "nontensor", "rows": bool(nt.stacked)})
        pipe.set(server.data_key(path), text)
        pipe.hset(server.index_key, _enc(path), hdr)
        index[path] = _Header(hdr, where)

    def _node_batch(
        self, path: tuple[str, ...], index: dict[tuple[str, ...], _Header]
    ) -> torch.Size:
        parent = path[:-1]
        if len(parent) <= len(self._path):
            return self._batch_size
        h = index.get(parent)
        return h.batch_size if h is not None else self._batch_size

    def set(self, key: NestedKey, value: Any, *, inplace: bool = False, **kwargs: Any) -> Self:
        """Write ``value`` (a tensor, a container, a dict or a JSON-able value) under
        ``key``, replacing what was there, in one transaction."""
        del kwargs
        path = self._path + unravel_key(key)
        if inplace and isinstance(value, torch.Tensor):
            h = self._header(path)
            if h is not None and h.kind == "tensor":
                if list(value.shape) != h.shape:
                    raise RuntimeError(
                        f"{self._server.where(path)}: an in-place write of shape "
                        f"{list(value.shape)} into an entry of shape {h.shape}"
                    )
                value = value.to(h.dtype)

        def plan(pipe: Any, index: dict[tuple[str, ...], _Header]) -> None:
            self._check_new(path, index)
            self._ops_for(pipe, index, path, value, self._node_batch(path, index))

        self._transaction(f"write {format_key(path)!r}", plan)
        return self

    def set_non_tensor(self, key: NestedKey, value: Any) -> Self:
        """Store the JSON-able value ``value`` under ``key``."""
        return self.set(key, NonTensorData(value))

    def set_(self, key: NestedKey, value: Any) -> Self:
        """Overwrite the existing tensor ``key`` with ``value`` (same shape; cast to its dtype)."""
        return self.set(key, value, inplace=True)

    def update(self, source: Any, *, inplace: bool = False, **kwargs: Any) -> Self:
        """Write every entry of ``source`` (a mapping or a container) here."""
        del kwargs
        items = source._tensordict.items() if is_tensor_collection(source) else dict(source).items()
        for k, v in items:
            self.set(k, v, inplace=inplace)
        return self

    def set_at_(self, key: NestedKey, value: Any, index: Any) -> Self:
        """Write ``value`` into the rows ``index`` of the leaf ``key`` (only those bytes)."""
        self._write_rows(index, {key: value}, keyed=True)
        return self

    def _write_rows(self, index: Any, value: Any, keyed: bool = False) -> None:
        if isinstance(value, StoreReads):
            value = value.to_local()
        leaves: dict[tuple[str, ...], Any] = {}
        if keyed:
            for k, v in value.items():
                leaves[unravel_key(k)] = v
        else:
            if not is_tensor_collection(value):
                if not isinstance(value, Mapping):
                    raise TypeError(
                        f"{self._server.where()}: store[index] = value takes a TensorDict or a "
                        f"dict, not {type(value).__name__}"
                    )
                value = TensorDict(dict(value), batch_size=[])
            _leaves_of(value, (), leaves)
        rows = _rows_of(index, self._batch_size)
        sel = torch.empty(()).expand(self._batch_size)[index].shape
        server = self._server

        def plan(pipe: Any, idx: dict[tuple[str, ...], _Header]) -> None:
            # the current values are read with the index (the index is watched: a change
            # anywhere replays this plan)
            for rel, v in leaves.items():
                path = self._path + rel
                self._check_new(path, idx)
                h = idx.get(path)
                where = server.where(path)
                if isinstance(v, torch.Tensor):
                    if h is None:
                        # a new leaf: zeros except the rows written
                        node_bs = self._node_batch(path, idx)
                        inner = len(node_bs) - len(self._batch_size)
                        feat = list(v.shape[len(sel) + inner :])
                        full = torch.zeros([*node_bs, *feat], dtype=v.dtype)
                        full[index] = v
                        self._ops_for(pipe, idx, path, full, node_bs)
                        continue
                    if h.kind != "tensor":
                        raise TypeError(f"{where}: a tensor row written into a {h.kind} entry")
                    if rows is None:
                        cur = _from_bytes(self._get_now(path, h), h.dtype, h.shape)
                        cur[index] = v.to(h.dtype)
                        pipe.set(server.data_key(path), _tensor_bytes(cur))
                        continue
                    rest = h.shape[1:]
                    try:
                        want = [*rows.shape, *rest]
                        v = v.to(h.dtype)
                        # as torch's row writes: a value of as many elements fits as well
                        v = v.reshape(want) if v.numel() == math.prod(want) else v.expand(want)
                    except RuntimeError:
                        raise BatchSizeError(
                            f"{where}: rows of shape {list(v.shape)} do not fit the entry's "
                            f"rows {rest} at {list(rows.shape)} positions"
                        ) from None
                    flat_rows = rows.reshape(-1).tolist()
                    flat_v = v.reshape([len(flat_rows), *rest])
                    last = {r: i for i, r in enumerate(flat_rows)}  # the last write wins
                    uniq = sorted(last)
                    rb = h.row_bytes
                    for s, c in _runs(uniq):
                        chunk = flat_v[[last[r] for r in range(s, s + c)]]
                        pipe.setrange(server.data_key(path), s * rb, _tensor_bytes(chunk))
                else:
                    node_bs = self._node_batch(path, idx)
                    nt = v if isinstance(v, NonTensorData) else NonTensorData(v)
                    if h is None:
                        arr = np.empty(tuple(node_bs), dtype=object)
                    elif h.kind != "nontensor":
                        raise TypeError(f"{where}: a non-tensor row written into a {h.kind} entry")
                    else:
                        cur_nt = self._nontensor(path, h, self._get_now(path, h))
                        arr = cur_nt.full(node_bs)
                    np_index = _np_index(index)
                    picked = arr[np_index]
                    if isinstance(picked, np.ndarray) and picked.ndim:
                        arr[np_index] = nt.full(picked.shape)
                    else:
                        arr[np_index] = nt.value
                    text = _json_value(arr.tolist(), where)
                    hdr = json.dumps({"kind": "nontensor", "rows": True})
                    pipe.set(server.data_key(path), text)
                    pipe.hset(server.index_key, _enc(path), hdr)
                    idx[path] = _Header(hdr, where)

        self._transaction("write rows", plan)

    def _get_now(self, path: tuple[str, ...], h: _Header) -> bytes:
        raw = self._server.client.get(self._server.data_key(path))
        if raw is None:
            raise FormatError(
                f"{self._server.where(path)}: the index names a value that is missing"
            )
        if h.kind == "tensor" and len(raw) != h.nbytes:
            raise FormatError(
                f"{self._server.where(path)}: the value holds {len(raw)} bytes, its header "
                f"promises {h.nbytes}"
            )
        return raw if isinstance(raw, bytes) else raw.encode()

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Set every element of the leaf ``key`` to ``value``."""
        path = self._path + unravel_key(key)
        h = self._header(path)
        if h is None or h.kind != "tensor":
            raise TensorDictKeyError(f"{self._server.where(path)}: no tensor leaf to fill")
        return self.set(key, torch.full(h.shape, value, dtype=h.dtype))

    def del_(self, key: NestedKey) -> Self:
        """Remove ``key`` (and everything under it) from the server."""
        path = self._path + unravel_key(key)

        def plan(pipe: Any, index: dict[tuple[str, ...], _Header]) -> None:
            if path not in index:
                raise TensorDictKeyError(f"{self._server.where(path)}: no such key to delete")
            gone = [p for p in index if p[: len(path)] == path]
            for p in gone:
                pipe.hdel(self._server.index_key, _enc(p))
                pipe.delete(self._server.data_key(p))
            self._forget(gone)

        self._transaction(f"delete {format_key(path)!r}", plan)
        return self

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> Self:
        """Move an entry (and everything under it) to a new key, on the server."""
        old = self._path + unravel_key(old_key)
        new = self._path + unravel_key(new_key)
        server = self._server

        def plan(pipe: Any, index: dict[tuple[str, ...], _Header]) -> None:
            if old not in index:
                raise TensorDictKeyError(f"{server.where(old)}: no such key to rename")
            if new in index and safe:
                raise KeyError(f"{server.where(new)}: the key exists already (safe=True)")
            self._check_new(new, index)
            for p in [p for p in index if p[: len(new)] == new]:
                pipe.hdel(server.index_key, _enc(p))
                pipe.delete(server.data_key(p))
            moved = [p for p in index if p[: len(old)] == old]
            for p in moved:
                q = new + p[len(old) :]
                pipe.hdel(server.index_key, _enc(p))
                pipe.hset(server.index_key, _enc(q), index[p].raw)
                if index[p].kind != "node":
                    pipe.rename(server.data_key(p), server.data_key(q))
            self._forget(moved)

        self._transaction(f"rename {format_key(old)!r}", plan)
        return self
