"""Writes: whole entries in one MULTI/EXEC watched on the index; row writes as
SETRANGE of the rows' bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Self

import numpy as np
import torch

from tensorbox._core.nestedkey import NestedKey, format_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tensordict import TensorDict, is_tensor_collection
from tensorbox._redis.reads import StoreReads
from tensorbox._redis.scripts import run_script, transaction
from tensorbox._redis.wire import (
    _GEN,
    _cell_runs,
    _cell_values,
    _cells,
    _check_text,
    _enc,
    _Header,
    _json_value,
    _leaves_of,
    _np_index,
    _tensor_bytes,
    _tensor_header,
    _text,
)
from tensorbox.errors import BatchSizeError, FormatError, LockedError, TensorDictKeyError


class StoreWrites(StoreReads):
    """What a store handle writes to its server."""

    def _transaction(
        self,
        what: str,
        plan: Callable[[Any, dict[tuple[str, ...], _Header], dict[tuple[str, ...], Any]], Any],
        data: Mapping[tuple[str, ...], str] | None = None,
    ) -> None:
        """Run ``plan(pipe, index, state)`` inside MULTI/EXEC, watched on the index and on
        the values ``data`` names (``"len"``: a tensor's length, ``"get"``: a non-tensor's
        text, read into ``state``), so that a concurrent change to any of them replays the
        plan against the new state. The index, the store's generation and ``state`` are
        read in one round trip."""
        server = self._server
        paths = list(data or {})
        keys = [server.index_key, *(server.data_key(p) for p in paths)]
        kinds = [data[p] for p in paths] if data else []

        def read(pipe: Any) -> tuple[dict[tuple[str, ...], _Header], dict[tuple[str, ...], Any]]:
            reply = server.reply(what, run_script(pipe, "state", keys, kinds), len(keys))
            flat = server.reply(what, reply[0])
            for item in reply[1:]:
                server.reply(what, item)
            index = server.parse_index(dict(zip(flat[::2], flat[1::2], strict=True)))
            state = {p: r for p, r in zip(paths, reply[1:], strict=True)}
            return index, state

        server.write(
            what,
            lambda: transaction(server, what, keys, read, lambda pipe, st: plan(pipe, *st)),
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
        _check_text(path, where)
        h = index.get(path)
        if (
            h is not None
            and h.kind == "tensor"
            and isinstance(value, torch.Tensor)
            and value.layout == torch.strided
            and not getattr(value, "is_nested", False)
            and h.raw == _tensor_header(value)
        ):
            # the same dtype and shape: only the bytes change and the index is left
            # alone, so that transactions of other writers (watching it) need not retry
            server.check_size(path, value.numel() * value.element_size())
            pipe.set(server.data_key(path), _tensor_bytes(value))
            self._remember(path, h)
            return
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
            server.check_size(path, value.numel() * value.element_size())
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
        server.check_size(path, len(text.encode()))
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
        path = self._keypath(key)
        if inplace and isinstance(value, torch.Tensor):
            h = self._header(path)
            if h is not None and h.kind == "tensor":
                if list(value.shape) != h.shape:
                    raise RuntimeError(
                        f"{self._server.where(path)}: an in-place write of shape "
                        f"{list(value.shape)} into an entry of shape {h.shape}"
                    )
                value = value.to(h.dtype)

        def plan(pipe: Any, index: dict[tuple[str, ...], _Header], _: Any) -> None:
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
        """``self[index] = value``: only the selected cells' bytes are sent. Into existing
        tensor leaves whose headers this handle knows, one script checks the store's
        generation, each header and each value's length, then writes every range: one
        round trip, atomic. Anything else (a new leaf, non-tensor rows, a header that
        changed) runs as a transaction watched on the index and on the values it reads."""
        if isinstance(value, StoreReads):
            value = value.to_local()
        leaves: dict[tuple[str, ...], Any] = {}
        if keyed:
            for k, v in value.items():
                leaves[self._keypath(k)] = v
        else:
            if not is_tensor_collection(value):
                if not isinstance(value, Mapping):
                    raise TypeError(
                        f"{self._server.where()}: store[index] = value takes a TensorDict or a "
                        f"dict, not {type(value).__name__}"
                    )
                value = TensorDict(dict(value), batch_size=[])
            flat: dict[tuple[str, ...], Any] = {}
            _leaves_of(value, (), flat)
            leaves = {self._path + rel: v for rel, v in flat.items()}
        for path in leaves:
            _check_text(path, self._server.where())
        cells = _cells(index, self._batch_size)
        if all(isinstance(v, torch.Tensor) for v in leaves.values()) and self._rows_by_script(
            leaves, cells
        ):
            return
        self._rows_by_transaction(index, leaves, cells)

    def _known_tensor_headers(
        self, paths: list[tuple[str, ...]]
    ) -> dict[tuple[str, ...], _Header] | None:
        """The headers of ``paths`` (cached, else read in one round trip), or None where
        one is not an existing tensor leaf."""
        server = self._server
        got: dict[tuple[str, ...], _Header] = {}
        unknown = []
        for p in paths:
            h = self._headers.get(_enc(p)) if self._meta_cache is not None else None
            if h is None:
                unknown.append(p)
            else:
                got[p] = h
        if unknown:
            reply = server.reply(
                "read headers",
                server.call(
                    "read headers",
                    lambda: server.client.hmget(server.index_key, [_GEN, *map(_enc, unknown)]),
                ),
                len(unknown) + 1,
            )
            server.check_gen(reply[0])
            for p, raw in zip(unknown, reply[1:], strict=True):
                if raw is None:
                    return None
                got[p] = h = server.header(raw, p)
                self._remember(p, h)
        return got if all(h.kind == "tensor" for h in got.values()) else None

    def _rows_by_script(
        self, leaves: dict[tuple[str, ...], Any], cells: tuple[torch.Tensor, int]
    ) -> bool:
        """Row writes into existing tensor leaves in one atomic script; False where the
        transaction must do it (a leaf is new, not a tensor, or its header changed)."""
        server = self._server
        headers = self._known_tensor_headers(list(leaves))
        if headers is None:
            return False
        keys = [server.index_key]
        args: list[Any] = [server.gen or "", _GEN]
        total = 0
        for path, v in leaves.items():
            h = headers[path]
            runs = _cell_runs(h, v, cells, server.where(path))
            keys.append(server.data_key(path))
            args += [_enc(path), h.raw, h.nbytes, len(runs)]
            for off, blob in runs:
                server.check_size(path, len(blob))
                total += len(blob)
                args += [off, blob]
        server.check_size(next(iter(leaves), ()), 0, total)
        what = _rows_what(leaves)
        reply = server.write(what, lambda: run_script(server.client, "rows", keys, args))
        reply = server.reply(what, reply)
        status = _text(reply[0]) if reply and isinstance(reply[0], bytes) else None
        if status not in ("ok", "gen", "header", "length") or (
            status == "length"
            and (len(reply) != 3 or type(reply[1]) is not int or not 0 < reply[1] <= len(leaves))
        ):
            raise server.garbled(what, f"{reply!r:.100} where the script's status was due")
        if status == "ok":
            return True
        paths = list(leaves)
        if status == "gen":
            server.check_gen(reply[1] if len(reply) > 1 else None)
            self._forget(paths)  # (a handle that never learned its generation)
            return False
        if status == "length":
            bad, n = paths[reply[1] - 1], reply[2]
            if n == 0:
                raise server.missing(bad)
            raise FormatError(
                f"{server.where(bad)}: the value {server.data_key(bad)!r} holds {n} bytes, "
                f"its header promises {headers[bad].nbytes}"
            )
        self._forget(paths)  # a header changed: the transaction reads them again
        return False

    def _rows_by_transaction(
        self, index: Any, leaves: dict[tuple[str, ...], Any], cells: tuple[torch.Tensor, int]
    ) -> None:
        server = self._server
        data = {p: "len" if isinstance(v, torch.Tensor) else "get" for p, v in leaves.items()}

        def plan(
            pipe: Any, idx: dict[tuple[str, ...], _Header], state: dict[tuple[str, ...], Any]
        ) -> None:
            for path, v in leaves.items():
                self._check_new(path, idx)
                h = idx.get(path)
                where = server.where(path)
                if h is not None and h.kind != ("tensor" if data[path] == "len" else "nontensor"):
                    kind = "tensor" if data[path] == "len" else "non-tensor"
                    raise TypeError(f"{where}: a {kind} row written into a {h.kind} entry")
                if isinstance(v, torch.Tensor):
                    if h is None:  # a new leaf: zeros except the rows written
                        node_bs = self._node_batch(path, idx)
                        self._ops_for(pipe, idx, path, self._new_leaf(v, cells, node_bs), node_bs)
                        continue
                    length, exists = (int(x) for x in state[path])
                    if not exists:
                        raise server.missing(path)
                    if length != h.nbytes:
                        raise FormatError(
                            f"{where}: the value {server.data_key(path)!r} holds {length} "
                            f"bytes, its header promises {h.nbytes}"
                        )
                    for off, blob in _cell_runs(h, v, cells, where):
                        server.check_size(path, len(blob))
                        pipe.setrange(server.data_key(path), off, blob)
                    continue
                raw = state[path][0]
                if h is not None and raw == 0:
                    raise server.missing(path)
                self._nontensor_rows(pipe, idx, path, h, v, index, raw)

        self._transaction(_rows_what(leaves), plan, data)

    def _new_leaf(
        self, v: torch.Tensor, cells: tuple[torch.Tensor, int], node_bs: torch.Size
    ) -> torch.Tensor:
        """A new leaf of zeros holding ``v`` at the cells written."""
        pos, ncell = cells
        bs = self._batch_size
        sel = [*pos.shape, *bs[ncell:]]
        inner = len(node_bs) - len(bs)
        feat = list(v.shape[len(sel) + inner :])
        full = torch.zeros([*node_bs, *feat], dtype=v.dtype)
        cell_shape = list(full.shape[ncell:])
        uniq, picked = _cell_values(v, pos, cell_shape, server_where=self._server.where())
        total = math.prod(full.shape[:ncell])
        full.reshape(total, math.prod(cell_shape))[uniq] = picked
        return full

    def _nontensor_rows(
        self,
        pipe: Any,
        idx: dict[tuple[str, ...], _Header],
        path: tuple[str, ...],
        h: _Header | None,
        v: Any,
        index: Any,
        raw: Any,
    ) -> None:
        """Queue the new text of the non-tensor leaf ``path`` with the rows ``index`` set
        to ``v`` (its current text ``raw`` was read under WATCH)."""
        server = self._server
        where = server.where(path)
        node_bs = self._node_batch(path, idx)
        nt = v if isinstance(v, NonTensorData) else NonTensorData(v)
        if h is None:
            arr = np.empty(tuple(node_bs), dtype=object)
        else:
            arr = self._nontensor(path, h, raw).full(node_bs)
        np_index = _np_index(index)
        picked = arr[np_index]
        if isinstance(picked, np.ndarray) and picked.ndim:
            arr[np_index] = nt.full(picked.shape)
        else:
            arr[np_index] = nt.value
        text = _json_value(arr.tolist(), where)
        server.check_size(path, len(text.encode()))
        hdr = json.dumps({"kind": "nontensor", "rows": True})
        pipe.set(server.data_key(path), text)
        pipe.hset(server.index_key, _enc(path), hdr)
        idx[path] = _Header(hdr, where)

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Set every element of the leaf ``key`` to ``value``."""
        path = self._keypath(key)
        h = self._header(path)
        if h is None or h.kind != "tensor":
            raise TensorDictKeyError(f"{self._server.where(path)}: no tensor leaf to fill")
        return self.set(key, torch.full(h.shape, value, dtype=h.dtype))

    def del_(self, key: NestedKey) -> Self:
        """Remove ``key`` (and everything under it) from the server."""
        path = self._keypath(key)

        def plan(pipe: Any, index: dict[tuple[str, ...], _Header], _: Any) -> None:
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
        old = self._keypath(old_key)
        new = self._keypath(new_key)
        server = self._server

        def plan(pipe: Any, index: dict[tuple[str, ...], _Header], _: Any) -> None:
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


def _rows_what(leaves: Mapping[tuple[str, ...], Any]) -> str:
    """What a row write is doing, naming its leaves (the first few)."""
    names = [format_key(p) for p in list(leaves)[:4]]
    more = f" and {len(leaves) - 4} more" if len(leaves) > 4 else ""
    return f"write rows of {', '.join(names)}{more}"
