"""Reads: headers checked against the server's, leaves and rows fetched in one round
trip by one read-only script, adjacent rows in one range, each value in one reply."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tensorbox._core.nestedkey import format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData, per_row
from tensorbox._core.tensordict import TensorDict
from tensorbox._redis.scripts import run_script
from tensorbox._redis.wire import (
    _GEN,
    _RETRIES,
    _check_text,
    _enc,
    _from_bytes,
    _Header,
    _object_array,
    _rows_of,
    _runs,
    _Server,
    _text,
)
from tensorbox.errors import FormatError, TensorDictKeyError


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
        what = f"read the header of {format_key(path)!r}"
        gen, raw = server.reply(
            what,
            server.call(what, lambda: server.client.hmget(server.index_key, [_GEN, _enc(path)])),
            2,
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
        paths = list(wanted)
        for _ in range(_RETRIES):
            fields = [_GEN, *(_enc(p) for p in paths)]
            res, plan = self._run_fetch([len(fields), *fields], headers, wanted)
            fresh = server.reply("read entries", res[0], len(paths) + 1)
            server.check_gen(fresh[0])
            changed = False
            for p, raw in zip(paths, fresh[1:], strict=True):
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
        script reads the whole index again; an index that changed meanwhile (an entry
        added, removed or re-set by anyone) is taken and the ranges planned again, so
        nothing is ever read by a stale header, and nothing new is missed."""
        server = self._server
        cached = self._meta_cache is not None
        snap = server.snapshot if cached else None
        for _ in range(_RETRIES):
            if snap is None:
                raw = server.call("read the index", lambda: server.client.hgetall(server.index_key))
                if not isinstance(raw, dict):
                    raise server.garbled("read the index", f"{raw!r:.100} where a hash was due")
                snap = (raw, server.parse_index(raw))
            raw, index = snap
            entries = self._under(index)
            wanted = want(entries)
            headers = {p: index[p] for p in wanted}
            res, plan = self._run_fetch([-1], headers, wanted)
            flat = server.reply("read the index", res[0])
            if len(flat) % 2:
                raise server.garbled("read the index", f"{len(flat)} items where pairs were due")
            now = dict(zip(flat[::2], flat[1::2], strict=True))
            if now != raw:  # changed since planned: take the new index, plan again
                snap = (now, server.parse_index(now))
                continue
            if cached:
                server.snapshot = snap
                for p, h in headers.items():
                    self._remember(p, h)
            return entries, headers, self._unpack(res, plan, headers)
        raise RuntimeError(
            f"{server.where()}: the entries kept changing under {_RETRIES} reads in a row"
        )

    def _run_fetch(
        self,
        head: list[Any],
        headers: dict[tuple[str, ...], _Header],
        wanted: dict[tuple[str, ...], list[tuple[int, int]] | None],
    ) -> tuple[list[Any], list[tuple[tuple[str, ...], int]]]:
        """Run the read script: ``head`` (the index fields to return, or ``[-1]``: the
        whole index), then each wanted value's length and bytes, planned by ``headers``.
        Returns the replies and, per value read, its path and the bytes due (-1: any)."""
        server = self._server
        keys: list[str] = [server.index_key]
        args: list[Any] = list(head)
        plan: list[tuple[tuple[str, ...], int]] = []
        for p in wanted:
            h = headers[p]
            if h.kind == "node":
                continue
            keys.append(server.data_key(p))
            # a zero-byte value's length cannot tell it from a missing one
            args.append("exists" if h.kind == "tensor" and h.nbytes == 0 else "strlen")
            if h.kind == "tensor":
                # rows become bytes by the header read with them: a header another
                # client changed re-plans the ranges too, never reads by the old one
                rb, runs = h.row_bytes, wanted[p]
                ranges = [(0, h.nbytes)] if runs is None else [(s * rb, c * rb) for s, c in runs]
                ranges = [(s, n) for s, n in ranges if n > 0]
                args.append(" ".join(f"{s} {s + n - 1}" for s, n in ranges))
                plan.append((p, sum(n for _, n in ranges)))
            else:
                args.append("-")  # GET
                plan.append((p, -1))
        res = server.reply(
            "read entries",
            server.call(
                "read entries",
                lambda: run_script(server.client, "fetch", keys, args),
            ),
            1 + 2 * len(plan),
        )
        return res, plan

    def _unpack(
        self,
        res: list[Any],
        plan: list[tuple[tuple[str, ...], int]],
        headers: dict[tuple[str, ...], _Header],
    ) -> dict[tuple[str, ...], list[bytes]]:
        """Each value's bytes from the read script's replies, its length checked against
        its header."""
        server = self._server
        out: dict[tuple[str, ...], list[bytes]] = {}
        for i, (p, due) in enumerate(plan):
            h = headers[p]
            length, data = res[1 + 2 * i], res[2 + 2 * i]
            if h.kind == "tensor" and not length:  # STRLEN (or EXISTS) 0: no value
                raise server.missing(p)
            if h.kind == "tensor" and h.nbytes and length != h.nbytes:
                raise FormatError(
                    f"{server.where(p)}: the value {server.data_key(p)!r} holds {length} "
                    f"bytes, its header ({h.dtype}, shape {h.shape}) promises {h.nbytes}"
                )
            if data is None and h.kind == "nontensor":
                raise server.missing(p)
            if not isinstance(data, bytes) or (due >= 0 and len(data) != due):
                raise FormatError(
                    f"{server.where(p)}: the rows of {server.data_key(p)!r} came back short "
                    f"({len(data) if isinstance(data, bytes) else repr(data)[:40]} of {due} "
                    "bytes)"
                )
            out[p] = [data]
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
        """Every entry under this node, by path relative to it (the index read now)."""
        return self._under(self._server.index())

    def _under(self, index: dict[tuple[str, ...], _Header]) -> dict[tuple[str, ...], _Header]:
        """The entries of ``index`` under this node, by path relative to it."""
        n = len(self._path)
        return {p[n:]: h for p, h in index.items() if len(p) > n and p[:n] == self._path}

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
