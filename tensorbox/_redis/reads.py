"""Reads: headers checked against the server's, leaves and rows fetched in one round
trip, adjacent rows in one range."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tensorbox._core.nestedkey import format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData, per_row
from tensorbox._core.tensordict import TensorDict
from tensorbox._redis.scripts import load_script, queue_script
from tensorbox._redis.wire import (
    _GEN,
    _RETRIES,
    _check_text,
    _enc,
    _from_bytes,
    _Header,
    _object_array,
    _redis,
    _rows_of,
    _runs,
    _Server,
    _text,
)
from tensorbox.errors import FormatError, TensorDictKeyError

# past this many ranges of one value, a read asks for them by one script, in one reply
_SCRIPTED = 8


class StoreReads:
    """What a store handle reads from its server."""

    # the state every handle holds (set by TensorDictStore._init)
    _server: _Server
    _path: tuple[str, ...]
    _batch_size: torch.Size
    _device: torch.device | None
    _meta_cache: dict[str, tuple[list[int], torch.dtype]] | None
    _headers: dict[str, _Header]
    _locked: bool

    def _keypath(self, key: Any) -> tuple[str, ...]:
        """The full path of ``key`` under this node, refused when Redis cannot hold it."""
        path = self._path + unravel_key(key)
        _check_text(path, self._server.where())
        return path

    def _header(self, path: tuple[str, ...]) -> _Header | None:
        server = self._server
        gen, raw = server.call(
            f"read the header of {format_key(path)!r}",
            lambda: server.client.hmget(server.index_key, [_GEN, _enc(path)]),
        )
        server.check_gen(gen, path)
        if raw is None:
            return None
        return server.header(raw, path)

    def _remember(self, path: tuple[str, ...], h: _Header) -> None:
        if self._meta_cache is None:
            return
        key = _enc(path)
        self._headers[key] = h
        if h.kind == "tensor":
            self._meta_cache[key] = (list(h.shape), h.dtype)

    def _forget(self, paths: Any) -> None:
        if self._meta_cache is None:
            return
        for p in paths:
            key = _enc(p)
            self._headers.pop(key, None)
            self._meta_cache.pop(key, None)

    def _fetch(
        self, wanted: dict[tuple[str, ...], list[tuple[int, int]] | None]
    ) -> tuple[dict[tuple[str, ...], _Header], dict[tuple[str, ...], list[bytes]]]:
        """Headers and byte ranges of several entries in one round trip when the headers
        are known here: each ``(first row, rows)`` run of a tensor (None: the whole
        value). The headers the server returns are compared with the ones used to plan
        the ranges, and a changed one is re-planned, so a value is never read with
        another's header. Every leaf's length is checked before its bytes are fetched."""
        server = self._server
        headers: dict[tuple[str, ...], _Header] = {}
        for p in wanted:
            h = self._headers.get(_enc(p)) if self._meta_cache is not None else None
            if h is None:
                h = self._header(p)
                if h is None:
                    raise TensorDictKeyError(f"{server.where(p)}: no such key in the store")
            headers[p] = h
        for _ in range(_RETRIES):
            paths = list(wanted)
            pipe = server.client.pipeline(transaction=True)
            pipe.hmget(server.index_key, [_GEN, *(_enc(p) for p in paths)])
            plan = self._plan(pipe, headers, wanted)
            res = self._execute(pipe)
            if res is None:
                continue
            server.check_gen(res[0][0])
            fresh = res[0][1:]
            changed = False
            for p, raw in zip(paths, fresh, strict=True):
                if raw is None:
                    self._forget([p])
                    raise TensorDictKeyError(
                        f"{server.where(p)}: no such key in the store (deleted by another client?)"
                    )
                if _text(raw, server.where(p)) != headers[p].raw:
                    headers[p] = server.header(raw, p)
                    changed = True
            if changed:
                for p, h in headers.items():
                    self._remember(p, h)
                continue
            out = self._unpack(res, plan, headers)
            for p, h in headers.items():
                self._remember(p, h)
            return headers, out
        raise RuntimeError(
            f"{server.where()}: the entries kept changing under {_RETRIES} reads in a row"
        )

    def _read_node(
        self,
        want: Callable[
            [dict[tuple[str, ...], _Header]], dict[tuple[str, ...], list[tuple[int, int]] | None]
        ],
    ) -> tuple[
        dict[tuple[str, ...], _Header],
        dict[tuple[str, ...], _Header],
        dict[tuple[str, ...], list[bytes]],
    ]:
        """Every entry under this node (by relative path), their headers and the byte
        ranges ``want(entries)`` asks for, in ONE round trip when the index is known
        here: the ranges are planned by the index this handle last saw, and the same
        transaction reads the whole index again; an index that changed meanwhile
        (an entry added, removed or re-set by anyone) is taken and the ranges planned
        again, so nothing is ever read by a stale header, and nothing new is missed."""
        server = self._server
        cached = self._meta_cache is not None
        snap = server.snapshot if cached else None
        for _ in range(_RETRIES):
            if snap is None:
                raw = server.call("read the index", lambda: server.client.hgetall(server.index_key))
                snap = (raw, server.parse_index(raw))
            raw, index = snap
            n = len(self._path)
            entries = {p[n:]: h for p, h in index.items() if len(p) > n and p[:n] == self._path}
            wanted = want(entries)
            headers = {p: index[p] for p in wanted}
            pipe = server.client.pipeline(transaction=True)
            pipe.hgetall(server.index_key)
            plan = self._plan(pipe, headers, wanted)
            res = self._execute(pipe)
            if res is None:
                continue
            if res[0] != raw:  # changed since planned: take the new index, plan again
                snap = (res[0], server.parse_index(res[0]))
                continue
            if cached:
                server.snapshot = snap
                for p, h in headers.items():
                    self._remember(p, h)
            return entries, headers, self._unpack(res, plan, headers)
        raise RuntimeError(
            f"{server.where()}: the entries kept changing under {_RETRIES} reads in a row"
        )

    def _execute(self, pipe: Any) -> list[Any] | None:
        """The read's transaction run; None when the server lacked a script (a new or
        restarted server), which is loaded for the caller's next try."""
        server = self._server
        try:
            res: list[Any] = server.call("read entries", pipe.execute)
        except RuntimeError as err:
            if not isinstance(err.__cause__, _redis().exceptions.NoScriptError):
                raise
            load_script(server, "ranges")
            return None
        return res

    def _plan(
        self,
        pipe: Any,
        headers: dict[tuple[str, ...], _Header],
        wanted: dict[tuple[str, ...], list[tuple[int, int]] | None],
    ) -> list[tuple[tuple[str, ...], list[tuple[int, int]]]]:
        """Queue on ``pipe`` each wanted value's length check and byte ranges, planned
        by ``headers``; returns what was queued, for ``_unpack``."""
        server = self._server
        plan: list[tuple[tuple[str, ...], list[tuple[int, int]]]] = []
        for p in wanted:
            h = headers[p]
            if h.kind == "node":
                continue
            dk = server.data_key(p)
            # a zero-byte value's length cannot tell it from a missing one
            pipe.exists(dk) if h.kind == "tensor" and h.nbytes == 0 else pipe.strlen(dk)
            if h.kind == "tensor":
                # rows become bytes by the header read with them: a header another
                # client changed re-plans the ranges too, never reads by the old one
                rb, runs = h.row_bytes, wanted[p]
                ranges = [(0, h.nbytes)] if runs is None else [(s * rb, c * rb) for s, c in runs]
                ranges = [(s, n) for s, n in ranges if n > 0]
                if len(ranges) > _SCRIPTED:  # one reply, not one per range
                    text = " ".join(f"{s} {s + n - 1}" for s, n in ranges)
                    queue_script(pipe, "ranges", [dk], [text])
                    ranges = [(-1, sum(n for _, n in ranges))]
                for s, n in ranges:
                    if s >= 0:
                        pipe.getrange(dk, s, s + n - 1)
            else:
                ranges = [(0, -1)]
                pipe.get(dk)
            plan.append((p, ranges))
        return plan

    def _unpack(
        self,
        res: list[Any],
        plan: list[tuple[tuple[str, ...], list[tuple[int, int]]]],
        headers: dict[tuple[str, ...], _Header],
    ) -> dict[tuple[str, ...], list[bytes]]:
        """The chunks ``_plan`` queued, taken from the replies after the first, each
        value's length checked against its header."""
        server = self._server
        out: dict[tuple[str, ...], list[bytes]] = {}
        pos = 1
        for p, ranges in plan:
            h = headers[p]
            length = res[pos]
            pos += 1
            if h.kind == "tensor" and not length:  # STRLEN (or EXISTS) 0: no value
                raise server.missing(p)
            if h.kind == "tensor" and h.nbytes and length != h.nbytes:
                raise FormatError(
                    f"{server.where(p)}: the value {server.data_key(p)!r} holds {length} "
                    f"bytes, its header ({h.dtype}, shape {h.shape}) promises {h.nbytes}"
                )
            chunks = list(res[pos : pos + len(ranges)])
            pos += len(ranges)
            for (s, n), c in zip(ranges, chunks, strict=True):
                if c is None and h.kind == "nontensor":
                    raise server.missing(p)
                if c is None or (n >= 0 and len(c) != n):
                    what = "the ranges" if s == -1 else f"the range {s}..{s + n}"
                    raise FormatError(
                        f"{server.where(p)}: {what} of {server.data_key(p)!r} came back short"
                    )
            out[p] = chunks
        return out

    def _leaf_value(self, path: tuple[str, ...], h: _Header, chunks: list[bytes]) -> Any:
        if h.kind == "tensor":
            t = _from_bytes(chunks[0] if chunks else b"", h.dtype, h.shape)
            return t if self._device is None else t.to(self._device)
        return self._nontensor(path, h, chunks[0])

    def _nontensor(self, path: tuple[str, ...], h: _Header, raw: bytes | None) -> NonTensorData:
        try:
            value = json.loads(raw) if raw is not None else None
        except ValueError:
            raise FormatError(
                f"{self._server.where(path)}: the non-tensor value is not JSON text"
            ) from None
        if h.rows:
            dims = list(self._server.batch or self._batch_size)
            if not _nests(value, dims):
                raise FormatError(
                    f"{self._server.where(path)}: the per-row values are not nested lists "
                    f"of the store's batch size {dims} (written by another program?)"
                )
            return NonTensorData(_object_array(value), stacked=True)
        return NonTensorData(value)

    def _entries(self) -> dict[tuple[str, ...], _Header]:
        """Every entry under this node, by path relative to it."""
        n = len(self._path)
        return {
            p[n:]: h for p, h in self._server.index().items() if len(p) > n and p[:n] == self._path
        }

    def _rows(self, index: Any) -> TensorDict:
        """``self[index]`` as a local TensorDict, fetching only the selected rows."""
        new_bs = torch.empty(()).expand(self._batch_size)[index].shape
        rows = _rows_of(index, self._batch_size)
        if rows is None:
            out: TensorDict = self.to_local()[index]
            return out
        uniq_t, gather = torch.unique(rows.reshape(-1), sorted=True, return_inverse=True)
        uniq: list[int] = uniq_t.tolist()
        runs = _runs(uniq)
        span = (uniq[-1] - uniq[0] + 1) if uniq else 0
        covering = bool(uniq) and span <= 2 * len(uniq)  # one range wastes at most half

        def want(
            entries: dict[tuple[str, ...], _Header],
        ) -> dict[tuple[str, ...], list[tuple[int, int]] | None]:
            wanted: dict[tuple[str, ...], list[tuple[int, int]] | None] = {}
            for rel, h in entries.items():
                if h.kind == "tensor":
                    wanted[self._path + rel] = [(uniq[0], span)] if covering else runs
                elif h.kind == "nontensor":
                    wanted[self._path + rel] = None
            return wanted

        entries, headers, data = self._read_node(want)
        out = TensorDict(batch_size=new_bs, device=self._device)
        for rel, h in sorted(entries.items(), key=lambda e: len(e[0])):
            path = self._path + rel
            if h.kind == "node":
                out.set(rel, TensorDict(batch_size=rows.shape + h.batch_size[1:]))
                continue
            h = headers[path]
            if h.kind == "tensor":
                rest = h.shape[1:]
                blob = b"".join(data[path])
                if covering:
                    sub = (
                        _from_bytes(blob, h.dtype, [span, *rest])
                        if uniq
                        else torch.empty([0, *rest], dtype=h.dtype)
                    )
                    sub = sub[uniq_t - uniq[0]] if uniq else sub
                else:
                    sub = _from_bytes(blob, h.dtype, [len(uniq), *rest])
                value: Any = sub[gather].reshape([*rows.shape, *rest])
                if self._device is not None:
                    value = value.to(self._device)
            else:
                nt = self._nontensor(path, h, data[path][0])
                if nt.stacked:
                    picked = nt.data[rows.numpy()]
                    value = (
                        NonTensorData(picked)
                        if not isinstance(picked, np.ndarray)
                        else per_row(picked)
                    )
                else:
                    value = nt
            out.set(rel, value)
        return out

    def to_local(self) -> TensorDict:
        """Every entry read now into a local ``TensorDict`` (one round trip when the
        headers are known here)."""
        entries, headers, data = self._read_node(
            lambda entries: {
                self._path + rel: None for rel, h in entries.items() if h.kind != "node"
            }
        )
        out = TensorDict(batch_size=self._batch_size, device=self._device)
        for rel, h in sorted(entries.items(), key=lambda e: len(e[0])):
            path = self._path + rel
            if h.kind == "node":
                out.set(rel, TensorDict(batch_size=h.batch_size, device=self._device))
            else:
                out.set(rel, self._leaf_value(path, headers[path], data[path]))
        return out


def _nests(value: Any, dims: list[int]) -> bool:
    """Whether ``value`` is lists nested ``len(dims)`` deep, ``dims[i]`` long at depth i."""
    level = [value]
    for d in dims:
        if not all(isinstance(v, list) and len(v) == d for v in level):
            return False
        level = [x for v in level for x in v]
    return True
