"""``TensorDictStore``: a container whose leaves live in a Redis server.

Processes on many machines that reach the same server share one container: one
writes ``store["obs"] = x`` and every other sees it; a handle pickles by
reference (the server's address and the store's id), so DataLoader workers and
``torch.distributed`` ranks attach to the same keys. Names and semantics follow
tensordict's ``tensordict.store.TensorDictStore``; any server that speaks the
Redis protocol (Redis, Valkey, Dragonfly, KeyDB) works through ``redis-py``,
which is the ``redis`` extra (``pip install tensorbox[redis]``).

Layout on the server, all under ``{prefix}:{<td_id>}:`` (the braces keep one
store in one cluster slot):

- ``meta``: a JSON object, ``{"format": "tensorbox.store", "version": 1,
  "batch_size": [...], "device": ..., "tensorclass": ...}``;
- ``index``: a hash from each entry's path (a JSON list of its keys) to its
  JSON header: ``{"kind": "tensor", "dtype": "float32", "shape": [...]}``,
  ``{"kind": "nontensor", "rows": false}`` or ``{"kind": "node",
  "batch_size": [...]}`` for a nested container;
- ``data:<path>``: the leaf's bytes, C order, little-endian as in memory; a
  non-tensor value is its JSON text. Nothing is pickled, so a store read from
  a server never runs code.

Every write of whole entries is one ``MULTI``/``EXEC`` transaction watched on
the index, so a reader sees an entry either before or after a write, never
half of it; row writes (``store[i] = row``) are ``SETRANGE`` calls in one
transaction as well. Reads check each leaf's size against its header before
anything is allocated, and name the key and the server's URL when the data
is not what the header promises.

>>> from tensorbox import TensorDictStore  # doctest: +SKIP
>>> store = TensorDictStore(batch_size=[100], port=6379)  # doctest: +SKIP
>>> store["obs"] = torch.randn(100, 84)  # doctest: +SKIP
>>> store[3:5]["obs"].shape  # only rows 3 and 4 are fetched  # doctest: +SKIP
torch.Size([2, 84])
"""

from __future__ import annotations

import importlib
import json
import math
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tensorbox._core.keys import NestedKey, format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData, per_row
from tensorbox._core.shape import as_batch_size
from tensorbox._core.tensordict import TensorDict, is_tensor_collection
from tensorbox.errors import BatchSizeError, FormatError, LockedError, TensorDictKeyError

if TYPE_CHECKING:
    import redis

__all__ = ["TensorDictStore"]

_FORMAT = "tensorbox.store"
_VERSION = 1
# A header promising more than this many bytes is refused before anything is allocated:
# a Redis string holds at most 512 MiB by default (proto-max-bulk-len), 2**40 is far above
# any value a server can hold and far below what would overflow the byte arithmetic.
_MAX_LEAF_BYTES = 1 << 40
_MAX_DIMS = 64
_RETRIES = 5  # optimistic-transaction retries when another client changes the index

_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    )
}
_SHAPE_OPS = (
    "view",
    "reshape",
    "permute",
    "transpose",
    "unsqueeze",
    "squeeze",
    "flatten",
    "unflatten",
    "expand",
    "split",
    "chunk",
    "unbind",
)


def _redis() -> Any:
    try:
        import redis
    except ImportError as err:
        raise ImportError(
            "TensorDictStore needs the redis client: pip install 'tensorbox[redis]'"
        ) from err
    return redis


def _enc(path: tuple[str, ...]) -> str:
    return json.dumps(list(path), separators=(",", ":"), ensure_ascii=False)


def _dec(field: bytes | str) -> tuple[str, ...]:
    text = field.decode() if isinstance(field, bytes) else field
    value = json.loads(text)
    if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
        raise ValueError(f"not a key path: {text!r}")
    return tuple(value)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


class _Header:
    """One entry's parsed header: kind, and dtype/shape (tensors) or batch size (nodes)."""

    __slots__ = ("batch_size", "dtype", "kind", "nbytes", "raw", "rows", "shape")

    def __init__(self, raw: str, where: str) -> None:
        self.raw = raw
        try:
            obj = json.loads(raw)
            kind = obj["kind"]
        except (ValueError, TypeError, KeyError):
            raise FormatError(f"{where}: the header {raw[:200]!r} is not a store header") from None
        self.kind = kind
        self.dtype = torch.uint8
        self.shape: list[int] = []
        self.nbytes = 0
        self.rows = False
        self.batch_size = torch.Size(())
        if kind == "tensor":
            dtype, shape = obj.get("dtype"), obj.get("shape")
            if dtype not in _DTYPES:
                raise FormatError(f"{where}: unknown dtype {dtype!r} in the header")
            if (
                not isinstance(shape, list)
                or len(shape) > _MAX_DIMS
                or not all(type(s) is int and s >= 0 for s in shape)
            ):
                raise FormatError(f"{where}: the shape {shape!r} in the header is not a shape")
            self.dtype = _DTYPES[dtype]
            self.shape = shape
            self.nbytes = math.prod(shape) * self.dtype.itemsize
            if self.nbytes > _MAX_LEAF_BYTES:
                raise FormatError(
                    f"{where}: the header promises {self.nbytes} bytes, more than any "
                    "server holds; refusing to allocate"
                )
        elif kind == "nontensor":
            self.rows = bool(obj.get("rows", False))
        elif kind == "node":
            bs = obj.get("batch_size")
            if not isinstance(bs, list) or not all(type(s) is int and s >= 0 for s in bs):
                raise FormatError(f"{where}: the batch size {bs!r} in the header is not one")
            self.batch_size = torch.Size(bs)
        else:
            raise FormatError(f"{where}: unknown entry kind {kind!r} in the header")

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize


def _tensor_header(t: torch.Tensor) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise TypeError(f"TensorDictStore cannot hold tensors of dtype {t.dtype}")
    return json.dumps({"kind": "tensor", "dtype": dtype, "shape": list(t.shape)})


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    return t.view(-1).view(torch.uint8).numpy().tobytes()


def _from_bytes(data: bytes | bytearray, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
    if not data:
        return torch.empty(list(shape), dtype=dtype)
    buf = data if isinstance(data, bytearray) else bytearray(data)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(list(shape))


def _json_value(value: Any, where: str) -> str:
    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{where}: a non-tensor value of type {type(value).__name__} is not "
            f"JSON-serialisable ({err}); the store keeps no pickles, so it holds only "
            "str, numbers, bool, None and lists/dicts of them"
        ) from None


def _rows_of(index: Any, batch_size: torch.Size) -> torch.Tensor | None:
    """The rows of the first batch dim that ``index`` selects (a 0-d tensor when the dim
    is dropped), or None when the index reaches beyond that dim (fetched whole)."""
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    if not batch_size:
        return None
    n = batch_size[0]
    if index is Ellipsis:
        return torch.arange(n)
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for the batch size {list(batch_size)}")
        return torch.tensor(i % n)
    if isinstance(index, slice):
        return torch.arange(n)[index]
    if isinstance(index, (list, range)):
        index = torch.as_tensor(list(index))
    if isinstance(index, np.ndarray):
        index = torch.from_numpy(index)
    if isinstance(index, torch.Tensor):
        if index.dtype == torch.bool:
            if index.ndim != 1:
                return None
            if index.shape[0] != n:
                raise IndexError(
                    f"a boolean index of length {index.shape[0]} does not fit the batch "
                    f"size {list(batch_size)}"
                )
            return torch.arange(n)[index.cpu()]
        if index.dtype.is_floating_point or index.dtype.is_complex:
            raise IndexError(f"tensors used as indices must be integer or bool, not {index.dtype}")
        return torch.arange(n)[index.cpu().long()]
    return None


def _runs(uniq: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct rows as ``(first, count)`` runs of adjacent rows."""
    out: list[tuple[int, int]] = []
    for r in uniq:
        if out and out[-1][0] + out[-1][1] == r:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((r, 1))
    return out


class _Server:
    """The connection one store and its nested views share, with the names of its keys."""

    def __init__(
        self,
        client: redis.Redis,
        url: str,
        namespace: str,
        td_id: str,
        backend: str,
        owns_client: bool,
        connect: dict[str, Any],
    ) -> None:
        self.client = client
        self.url = url
        self.namespace = namespace
        self.td_id = td_id
        self.backend = backend
        self.owns_client = owns_client
        self.connect = connect
        self.base = f"{namespace}:{{{td_id}}}:"
        self.meta_key = self.base + "meta"
        self.index_key = self.base + "index"

    def data_key(self, path: tuple[str, ...]) -> str:
        return self.base + "data:" + _enc(path)

    def where(self, path: tuple[str, ...] | None = None) -> str:
        entry = "" if path is None else f" entry {format_key(path)}"
        return f"TensorDictStore {self.td_id!r} at {self.url}{entry}"

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (redis calls), turning the client's errors into ones that name the
        server and what was being done."""
        r = _redis()
        try:
            return fn()
        except r.exceptions.ResponseError as err:
            if "WRONGTYPE" in str(err):
                raise FormatError(
                    f"{self.where()}: {what}: the server holds keys under {self.base!r} of "
                    f"another type (foreign data, not a tensorbox store): {err}"
                ) from err
            raise RuntimeError(f"{self.where()}: {what}: the server refused: {err}") from err
        except (r.exceptions.ConnectionError, r.exceptions.TimeoutError) as err:
            raise ConnectionError(
                f"{self.where()}: {what}: cannot reach the server ({type(err).__name__}: {err})"
            ) from err
        except r.exceptions.AuthenticationError as err:  # pragma: no cover - a subclass above
            raise PermissionError(f"{self.where()}: {what}: {err}") from err

    def index(self) -> dict[tuple[str, ...], _Header]:
        raw = self.call("read the index", lambda: self.client.hgetall(self.index_key))
        return self.parse_index(raw)

    def parse_index(self, raw: Mapping[bytes, bytes]) -> dict[tuple[str, ...], _Header]:
        out: dict[tuple[str, ...], _Header] = {}
        for field, value in raw.items():
            try:
                path = _dec(field)
            except ValueError:
                raise FormatError(
                    f"{self.where()}: the index {self.index_key!r} holds the field "
                    f"{field[:100]!r}, not a key path (foreign data?)"
                ) from None
            out[path] = _Header(_text(value), self.where(path))
        return out


def _parse_meta(raw: bytes | None, server: _Server) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise FormatError(
            f"{server.where()}: the key {server.meta_key!r} holds {bytes(raw)[:100]!r}, not "
            "a tensorbox store's metadata (foreign data under the same prefix and id?)"
        )
    if meta.get("version") != _VERSION:
        raise FormatError(
            f"{server.where()}: store format version {meta.get('version')!r}; this tensorbox "
            f"reads version {_VERSION}"
        )
    return meta


def _connect(
    *,
    url: str | None,
    host: str,
    port: int,
    db: int,
    unix_socket_path: str | None,
    client: Any,
    redis_kwargs: dict[str, Any],
) -> tuple[Any, str, bool, dict[str, Any]]:
    r = _redis()
    if client is not None:
        kw = dict(client.connection_pool.connection_kwargs)
        owns = False
    elif url is not None:
        client = r.Redis.from_url(url, **redis_kwargs)
        kw = dict(client.connection_pool.connection_kwargs)
        owns = True
    else:
        kw = dict(redis_kwargs)
        kw.setdefault("socket_connect_timeout", 10)
        kw.setdefault("socket_timeout", 60)
        if unix_socket_path is not None:
            kw["unix_socket_path"] = unix_socket_path
        else:
            kw["host"], kw["port"] = host, port
        kw["db"] = db
        client = r.Redis(**kw)
        owns = True
    if "path" in kw or "unix_socket_path" in kw:
        shown = f"unix://{kw.get('path') or kw.get('unix_socket_path')}?db={kw.get('db', 0)}"
    else:
        shown = f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
    plain = {
        k: v for k, v in kw.items() if isinstance(v, (str, int, float, bool)) or v is None
    }
    return client, shown, owns, plain


class TensorDictStore:
    """A container whose leaves live in a Redis (or Redis-protocol) server.

    Keyword Args:
        backend: the server's kind, for display (``"redis"``, ``"dragonfly"``,
            ``"keydb"``...): every one speaks the same protocol.
        host, port, db: where the server is (default ``localhost:6379``, db 0).
        url: a ``redis://``/``rediss://``/``unix://`` URL instead of host/port/db.
        unix_socket_path: a Unix socket instead of host/port.
        prefix: the namespace of every key the store writes (default ``"tensordict"``).
        batch_size: the leading dims every leaf shares.
        device: the device leaves are moved to when read (data is kept as CPU bytes).
        client: an existing ``redis.Redis`` client to use (it is not closed by ``close()``).
        td_id: the id of an existing store to attach to (default: a new one).
        cache_metadata: keep each leaf's header here, so that row reads take one
            round trip (every read still checks the header against the server's).
        **redis_kwargs: passed to ``redis.Redis``.

    Reads fetch from the server on every access (``store["obs"]`` is a new tensor),
    row reads (``store[3:7]``) fetch only the rows' bytes, adjacent rows in one range,
    and return a local ``TensorDict``. Shape operations are refused: call
    ``to_local()`` first.
    """

    _is_tensor_collection = False  # a handle on a server, not a local container

    def __init__(
        self,
        *,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        url: str | None = None,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        batch_size: Sequence[int] | int | torch.Size | None = None,
        device: torch.device | str | int | None = None,
        client: Any = None,
        td_id: str | None = None,
        cache_metadata: bool = True,
        **redis_kwargs: Any,
    ) -> None:
        cl, shown, owns, plain = _connect(
            url=url,
            host=host,
            port=port,
            db=db,
            unix_socket_path=unix_socket_path,
            client=client,
            redis_kwargs=redis_kwargs,
        )
        server = _Server(cl, shown, prefix, td_id or str(uuid.uuid4()), backend, owns, plain)
        bs = as_batch_size(batch_size)
        dev = None if device is None else torch.device(device)
        meta = _parse_meta(server.call("read the metadata", lambda: cl.get(server.meta_key)), server)
        if meta is None:
            new = {
                "format": _FORMAT,
                "version": _VERSION,
                "batch_size": list(bs),
                "device": None if dev is None else str(dev),
                "tensorclass": None,
            }
            created = server.call(
                "write the metadata", lambda: cl.set(server.meta_key, json.dumps(new), nx=True)
            )
            if not created:  # another process created it between the two calls
                meta = _parse_meta(server.call("read the metadata", lambda: cl.get(server.meta_key)), server)
        if meta is not None:
            stored = torch.Size(meta.get("batch_size", []))
            if batch_size is not None and stored != bs:
                raise BatchSizeError(
                    f"{server.where()}: the store has batch size {list(stored)}, not {list(bs)}"
                )
            bs = stored
            if dev is None and meta.get("device"):
                dev = torch.device(meta["device"])
        self._init(server, (), bs, dev, cache_metadata, None, False)
        if meta is not None:
            self._tensorclass_cls = meta.get("tensorclass")

    def _init(
        self,
        server: _Server,
        path: tuple[str, ...],
        batch_size: torch.Size,
        device: torch.device | None,
        cache: bool | dict[str, tuple[list[int], torch.dtype]] | None,
        headers: dict[str, _Header] | None,
        locked: bool,
    ) -> None:
        self._server = server
        self._path = path
        self._batch_size = batch_size
        self._device = device
        if isinstance(cache, dict) or cache is None:
            self._meta_cache = cache
            self._headers = headers if headers is not None else {}
        else:
            self._meta_cache = {} if cache else None
            self._headers = {}
        self._locked = locked
        self._tensorclass_cls: str | None = None

    # ---- identity ----------------------------------------------------------------

    @property
    def _td_id(self) -> str:
        return self._server.td_id

    @property
    def _backend(self) -> str:
        return self._server.backend

    @property
    def url(self) -> str:
        """The server's address, ``redis://host:port/db``."""
        return self._server.url

    @property
    def td_id(self) -> str:
        """The id another process passes to ``from_store`` to attach to this store."""
        return self._server.td_id

    def _full_key_path(self, key: NestedKey) -> str:
        return _enc(self._path + unravel_key(key))

    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        raise RuntimeError(
            f"{self._server.where()}: the batch size of a store is fixed; to_local() first"
        )

    @property
    def shape(self) -> torch.Size:
        return self._batch_size

    @property
    def batch_dims(self) -> int:
        return len(self._batch_size)

    def ndimension(self) -> int:
        return len(self._batch_size)

    ndim = batch_dims

    def dim(self) -> int:
        return len(self._batch_size)

    def numel(self) -> int:
        return math.prod(self._batch_size)

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    @property
    def device(self) -> torch.device | None:
        return self._device

    @property
    def is_locked(self) -> bool:
        return self._locked

    def lock_(self) -> TensorDictStore:
        """Refuse new keys through this handle (values of existing keys still change)."""
        self._locked = True
        return self

    def unlock_(self) -> TensorDictStore:
        self._locked = False
        return self

    def is_contiguous(self) -> bool:
        return False

    def is_memmap(self) -> bool:
        return False

    def is_shared(self) -> bool:
        return False

    # ---- server reads ------------------------------------------------------------

    def _header(self, path: tuple[str, ...]) -> _Header | None:
        raw = self._server.call(
            f"read the header of {format_key(path)!r}",
            lambda: self._server.client.hget(self._server.index_key, _enc(path)),
        )
        if raw is None:
            return None
        return _Header(_text(raw), self._server.where(path))

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
        are known here: each ``(start, length)`` range of a tensor (None: the whole
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
            pipe.hmget(server.index_key, [_enc(p) for p in paths])
            plan: list[tuple[tuple[str, ...], list[tuple[int, int]]]] = []
            for p in paths:
                h = headers[p]
                if h.kind == "node":
                    continue
                dk = server.data_key(p)
                pipe.strlen(dk)
                if h.kind == "tensor":
                    ranges = wanted[p]
                    ranges = [(0, h.nbytes)] if ranges is None else ranges
                    ranges = [(s, n) for s, n in ranges if n > 0]
                    for s, n in ranges:
                        pipe.getrange(dk, s, s + n - 1)
                else:
                    ranges = [(0, -1)]
                    pipe.get(dk)
                plan.append((p, ranges))
            res = server.call("read entries", pipe.execute)
            fresh = res[0]
            changed = False
            for p, raw in zip(paths, fresh, strict=True):
                if raw is None:
                    self._forget([p])
                    raise TensorDictKeyError(
                        f"{server.where(p)}: no such key in the store (deleted by another client?)"
                    )
                if _text(raw) != headers[p].raw:
                    headers[p] = _Header(_text(raw), server.where(p))
                    changed = True
            if changed:
                for p, h in headers.items():
                    self._remember(p, h)
                continue
            out: dict[tuple[str, ...], list[bytes]] = {}
            pos = 1
            for p, ranges in plan:
                h = headers[p]
                length = res[pos]
                pos += 1
                if h.kind == "tensor" and length != h.nbytes:
                    raise FormatError(
                        f"{server.where(p)}: the value {server.data_key(p)!r} holds {length} "
                        f"bytes, its header ({h.dtype}, shape {h.shape}) promises {h.nbytes}"
                    )
                chunks = list(res[pos : pos + len(ranges)])
                pos += len(ranges)
                for (s, n), c in zip(ranges, chunks, strict=True):
                    if c is None or (n >= 0 and len(c) != n):
                        raise FormatError(
                            f"{server.where(p)}: the range {s}..{s + n} of "
                            f"{server.data_key(p)!r} came back short"
                        )
                out[p] = chunks
            for p, h in headers.items():
                self._remember(p, h)
            return headers, out
        raise RuntimeError(
            f"{server.where()}: the entries kept changing under {_RETRIES} reads in a row"
        )

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
            return NonTensorData(_object_array(value), stacked=True)
        return NonTensorData(value)

    # ---- mapping access ----------------------------------------------------------

    def _entries(self) -> dict[tuple[str, ...], _Header]:
        """Every entry under this node, by path relative to it."""
        n = len(self._path)
        return {
            p[n:]: h
            for p, h in self._server.index().items()
            if len(p) > n and p[:n] == self._path
        }

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable[[type], bool] | None = None,
        *,
        sort: bool = False,
    ) -> list[NestedKey]:
        """The keys of this level (a list, read from the server now)."""
        del is_leaf
        out: list[NestedKey] = []
        for rel, h in self._entries().items():
            if len(rel) > 1 and not include_nested:
                continue
            if leaves_only and h.kind == "node":
                continue
            out.append(rel[0] if len(rel) == 1 else rel)
        if sort:
            out.sort(key=lambda k: (k,) if isinstance(k, str) else k)
        return out

    def __iter__(self) -> Iterator[TensorDict]:
        for i in range(len(self)):
            yield self[i]

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> Iterator[tuple[NestedKey, Any]]:
        for k in self.keys(include_nested, leaves_only):
            yield k, self.get(k)

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> Iterator[Any]:
        for _, v in self.items(include_nested, leaves_only):
            yield v

    def __contains__(self, key: object) -> bool:
        try:
            path = self._path + unravel_key(key)
        except TensorDictKeyError:
            return False
        return self._header(path) is not None

    def entry_class(self, key: NestedKey) -> type:
        path = self._path + unravel_key(key)
        h = self._header(path)
        if h is None:
            raise TensorDictKeyError(f"{self._server.where(path)}: no such key in the store")
        return {"tensor": torch.Tensor, "node": TensorDictStore, "nontensor": NonTensorData}[
            h.kind
        ]

    def _node(self, path: tuple[str, ...], h: _Header) -> TensorDictStore:
        out = TensorDictStore.__new__(TensorDictStore)
        out._init(
            self._server, path, h.batch_size, self._device, self._meta_cache, self._headers, self._locked
        )
        return out

    def get(self, key: NestedKey, default: Any = KeyError) -> Any:
        """The entry ``key`` read now: a tensor, a nested store, or a non-tensor value."""
        path = self._path + unravel_key(key)
        h = self._header(path)
        if h is None:
            if default is KeyError:
                raise TensorDictKeyError(
                    f"{self._server.where(path)}: no such key in the store "
                    f"(keys here: {self.keys()})"
                )
            return default
        if h.kind == "node":
            return self._node(path, h)
        self._remember(path, h)
        headers, data = self._fetch({path: None})
        value = self._leaf_value(path, headers[path], data[path])
        return value.tolist() if isinstance(value, NonTensorData) and value.stacked else (
            value.data if isinstance(value, NonTensorData) else value
        )

    def get_non_tensor(self, key: NestedKey, default: Any = KeyError) -> Any:
        return self.get(key, default)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, (str, tuple)) for k in index)
        ):
            return self.get(index)
        return self._rows(index)

    def _rows(self, index: Any) -> TensorDict:
        """``self[index]`` as a local TensorDict, fetching only the selected rows."""
        new_bs = torch.empty(()).expand(self._batch_size)[index].shape
        rows = _rows_of(index, self._batch_size)
        if rows is None:
            return self.to_local()[index]
        flat = rows.reshape(-1).tolist()
        uniq = sorted(set(flat))
        pos = {r: i for i, r in enumerate(uniq)}
        gather = torch.tensor([pos[r] for r in flat], dtype=torch.long)
        entries = self._entries()
        wanted: dict[tuple[str, ...], list[tuple[int, int]] | None] = {}
        runs = _runs(uniq)
        span = (uniq[-1] - uniq[0] + 1) if uniq else 0
        covering = bool(uniq) and span <= 2 * len(uniq)  # one range wastes at most half
        for rel, h in entries.items():
            if h.kind == "tensor":
                rb = h.row_bytes
                if covering:
                    wanted[self._path + rel] = [(uniq[0] * rb, span * rb)]
                else:
                    wanted[self._path + rel] = [(s * rb, c * rb) for s, c in runs]
            elif h.kind == "nontensor":
                wanted[self._path + rel] = None
        headers, data = self._fetch(wanted) if wanted else ({}, {})
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
                    sub = _from_bytes(blob, h.dtype, [span, *rest]) if uniq else torch.empty(
                        [0, *rest], dtype=h.dtype
                    )
                    sub = sub[torch.tensor(uniq, dtype=torch.long) - uniq[0]] if uniq else sub
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

    # ---- writes ------------------------------------------------------------------

    def _transaction(self, what: str, plan: Callable[[Any, dict[tuple[str, ...], _Header]], Any]) -> None:
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
        if isinstance(value, TensorDictStore):
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

    def _node_batch(self, path: tuple[str, ...], index: dict[tuple[str, ...], _Header]) -> torch.Size:
        parent = path[:-1]
        if len(parent) <= len(self._path):
            return self._batch_size
        h = index.get(parent)
        return h.batch_size if h is not None else self._batch_size

    def set(self, key: NestedKey, value: Any, *, inplace: bool = False, **kwargs: Any) -> TensorDictStore:
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

    def set_non_tensor(self, key: NestedKey, value: Any) -> TensorDictStore:
        return self.set(key, NonTensorData(value))

    def set_(self, key: NestedKey, value: Any) -> TensorDictStore:
        return self.set(key, value, inplace=True)

    def update(self, source: Any, *, inplace: bool = False, **kwargs: Any) -> TensorDictStore:
        """Write every entry of ``source`` (a mapping or a container) here."""
        del kwargs
        items = source._tensordict.items() if is_tensor_collection(source) else dict(source).items()
        for k, v in items:
            self.set(k, v, inplace=inplace)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, (str, tuple)) for k in index)
        ):
            self.set(index, value)
            return
        self._write_rows(index, value)

    def set_at_(self, key: NestedKey, value: Any, index: Any) -> TensorDictStore:
        """Write ``value`` into the rows ``index`` of the leaf ``key`` (only those bytes)."""
        self._write_rows(index, {key: value}, keyed=True)
        return self

    def _write_rows(self, index: Any, value: Any, keyed: bool = False) -> None:
        if isinstance(value, TensorDictStore):
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
                        cur = self._nontensor(path, h, self._get_now(path, h))
                        arr = cur.full(node_bs)
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
            raise FormatError(f"{self._server.where(path)}: the index names a value that is missing")
        if h.kind == "tensor" and len(raw) != h.nbytes:
            raise FormatError(
                f"{self._server.where(path)}: the value holds {len(raw)} bytes, its header "
                f"promises {h.nbytes}"
            )
        return bytes(raw)

    def fill_(self, key: NestedKey, value: float | bool) -> TensorDictStore:
        """Set every element of the leaf ``key`` to ``value``."""
        path = self._path + unravel_key(key)
        h = self._header(path)
        if h is None or h.kind != "tensor":
            raise TensorDictKeyError(f"{self._server.where(path)}: no tensor leaf to fill")
        return self.set(key, torch.full(h.shape, value, dtype=h.dtype))

    def zero_(self) -> TensorDictStore:
        for k in self.keys(include_nested=True, leaves_only=True):
            path = self._path + unravel_key(k)
            h = self._header(path)
            if h is not None and h.kind == "tensor":
                self.fill_(k, 0)
        return self

    def del_(self, key: NestedKey) -> TensorDictStore:
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

    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    def pop(self, key: NestedKey, default: Any = KeyError) -> Any:
        try:
            value = self.get(key)
        except KeyError:
            if default is KeyError:
                raise
            return default
        if isinstance(value, TensorDictStore):
            value = value.to_local()
        self.del_(key)
        return value

    def popitem(self) -> tuple[str, Any]:
        keys = self.keys()
        if not keys:
            raise KeyError(f"{self._server.where()}: popitem() on an empty store")
        key = keys[-1]
        assert isinstance(key, str)
        return key, self.pop(key)

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> TensorDictStore:
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

    # ---- conversions -------------------------------------------------------------

    def to_local(self) -> TensorDict:
        """Every entry read now into a local ``TensorDict`` (one round trip when the
        headers are known here)."""
        entries = self._entries()
        wanted = {self._path + rel: None for rel, h in entries.items() if h.kind != "node"}
        headers, data = self._fetch(wanted) if wanted else ({}, {})
        out = TensorDict(batch_size=self._batch_size, device=self._device)
        for rel, h in sorted(entries.items(), key=lambda e: len(e[0])):
            path = self._path + rel
            if h.kind == "node":
                out.set(rel, TensorDict(batch_size=h.batch_size, device=self._device))
            else:
                out.set(rel, self._leaf_value(path, headers[path], data[path]))
        return out

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        del retain_none
        return self.to_local()

    def contiguous(self) -> TensorDict:
        return self.to_local()

    def empty(self, recurse: bool = False, *, batch_size: Any = None, device: Any = None) -> TensorDict:
        """A local empty ``TensorDict`` of the same batch size and device."""
        out = TensorDict(
            batch_size=self._batch_size if batch_size is None else batch_size,
            device=self._device if device is None else device,
        )
        if recurse:
            for rel, h in sorted(self._entries().items(), key=lambda e: len(e[0])):
                if h.kind == "node":
                    out.set(rel, TensorDict(batch_size=h.batch_size))
        return out

    def to_store(self, **kwargs: Any) -> TensorDictStore:
        return TensorDictStore.from_tensordict(self.to_local(), **kwargs)

    def clone(self, recurse: bool = True) -> TensorDictStore:
        """``recurse=True``: a new store on the same server holding a copy (copied by the
        server); ``recurse=False``: another handle on the same keys."""
        server = self._server
        if not recurse:
            out = TensorDictStore.__new__(TensorDictStore)
            out._init(server, self._path, self._batch_size, self._device, self._meta_cache is not None, None, self._locked)
            out._tensorclass_cls = self._tensorclass_cls
            return out
        local = self.to_local()
        out = TensorDictStore.from_tensordict(
            local,
            client=server.client,
            backend=server.backend,
            prefix=server.namespace,
            cache_metadata=self._meta_cache is not None,
        )
        out._server.owns_client = False
        out._server.connect = server.connect
        out._adopt_client()
        return out

    def _adopt_client(self) -> None:
        """Give this handle a client of its own (so ``close()`` on one of two handles
        leaves the other working)."""
        server = self._server
        r = _redis()
        server.client = r.Redis(**server.connect)
        server.owns_client = True

    @classmethod
    def from_dict(
        cls,
        input_dict: Mapping[str, Any] | Any,
        *,
        batch_size: Any = None,
        device: Any = None,
        **kwargs: Any,
    ) -> TensorDictStore:
        """A new store holding ``input_dict`` (a dict or a container)."""
        if is_tensor_collection(input_dict):
            if batch_size is None:
                batch_size = input_dict.batch_size
            if device is None:
                device = input_dict.device
        else:
            input_dict = TensorDict(dict(input_dict), batch_size=batch_size)
        store = cls(batch_size=batch_size, device=device, **kwargs)
        store.update(input_dict)
        return store

    @classmethod
    def from_tensordict(cls, td: Any, *, device: Any = None, **kwargs: Any) -> TensorDictStore:
        """A new store holding the entries of ``td`` (a TensorDict or a tensorclass
        instance, whose class path is recorded for ``from_store(tensorclass_cls=...)``)."""
        from tensorbox._tensorclass import is_tensorclass

        store = cls.from_dict(td, batch_size=td.batch_size, device=device or td.device, **kwargs)
        if is_tensorclass(td):
            tc = type(td)
            store._tensorclass_cls = f"{tc.__module__}.{tc.__qualname__}"
            store._write_meta(tensorclass=store._tensorclass_cls)
        return store

    def _write_meta(self, **changes: Any) -> None:
        server = self._server
        raw = server.call("read the metadata", lambda: server.client.get(server.meta_key))
        meta = _parse_meta(raw, server) or {}
        meta.update(changes)
        server.call("write the metadata", lambda: server.client.set(server.meta_key, json.dumps(meta)))

    @classmethod
    def from_store(
        cls,
        *,
        td_id: str,
        backend: str = "redis",
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        url: str | None = None,
        unix_socket_path: str | None = None,
        prefix: str = "tensordict",
        device: Any = None,
        tensorclass_cls: type | str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Attach to the existing store ``td_id`` (from another process or machine).

        The batch size and device come from the server. ``tensorclass_cls`` (a class, or
        its dotted path, imported here because you named it) returns a local instance of
        that tensorclass holding the store's current values; a class path recorded by
        the writer is never imported on its own.
        """
        cl, shown, owns, plain = _connect(
            url=url,
            host=host,
            port=port,
            db=db,
            unix_socket_path=unix_socket_path,
            client=kwargs.pop("client", None),
            redis_kwargs=kwargs,
        )
        server = _Server(cl, shown, prefix, td_id, backend, owns, plain)
        meta = _parse_meta(server.call("read the metadata", lambda: cl.get(server.meta_key)), server)
        if meta is None:
            if owns:
                cl.close()
            raise KeyError(
                f"No TensorDictStore with td_id={td_id!r} at {shown} (prefix={prefix!r})"
            )
        dev = torch.device(device) if device is not None else (
            torch.device(meta["device"]) if meta.get("device") else None
        )
        store = cls.__new__(cls)
        store._init(server, (), torch.Size(meta["batch_size"]), dev, kwargs.pop("cache_metadata", True), None, False)
        store._tensorclass_cls = meta.get("tensorclass")
        if tensorclass_cls is None:
            return store
        if isinstance(tensorclass_cls, str):
            module, _, name = tensorclass_cls.rpartition(".")
            obj: Any = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
            tensorclass_cls = obj
        return tensorclass_cls.from_tensordict(store.to_local())  # type: ignore[union-attr]

    # ---- lifetime and pickling ---------------------------------------------------

    def close(self) -> None:
        """Close this handle's connection (the data stays on the server)."""
        if self._server.owns_client:
            self._server.client.close()

    def clear_redis(self) -> None:
        """Delete every key of this store from the server."""
        server = self._server
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in server.base) + "*"

        def run() -> None:
            batch = []
            for k in server.client.scan_iter(match=pattern, count=500):
                batch.append(k)
                if len(batch) >= 500:
                    server.client.delete(*batch)
                    batch = []
            if batch:
                server.client.delete(*batch)

        server.call("delete the store", run)
        if self._meta_cache is not None:
            self._meta_cache.clear()
            self._headers.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        s = self._server
        spec = {
            "connect": s.connect,
            "url": s.url,
            "namespace": s.namespace,
            "td_id": s.td_id,
            "backend": s.backend,
            "path": list(self._path),
            "batch_size": list(self._batch_size),
            "device": None if self._device is None else str(self._device),
            "cache": self._meta_cache is not None,
            "tensorclass": self._tensorclass_cls,
            "locked": self._locked,
        }
        return (_attach, (spec,))

    def __repr__(self) -> str:
        try:
            entries = self._entries()
            fields = _fields_repr(entries, ())
        except (ConnectionError, FormatError) as err:
            fields = f"<unreadable: {err}>"
        return (
            f"TensorDictStore(fields={fields}, batch_size={list(self._batch_size)}, "
            f"device={self._device}, backend={self._backend!r}, url={self.url!r}, "
            f"td_id={self._td_id!r})"
        )

    # ---- refused operations ------------------------------------------------------

    def share_memory_(self) -> TensorDictStore:
        raise NotImplementedError(
            f"{self._server.where()}: a store's leaves live in the server, not in shared "
            "memory; to_local().share_memory_() makes a shared local copy"
        )

    def memmap_(self, *args: Any, **kwargs: Any) -> TensorDictStore:
        raise NotImplementedError(
            f"{self._server.where()}: a store cannot become memory-mapped in place; "
            "to_local().memmap(path) saves a copy"
        )

    def __getattr__(self, name: str) -> Any:
        if name in _SHAPE_OPS:
            where = self._server.where() if "_server" in self.__dict__ else "TensorDictStore"

            def refused(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError(
                    f"{where}: {name}() changes the shape of the batch, which a store on a "
                    f"server cannot do in place; call to_local().{name}(...) instead"
                )

            return refused
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _np_index(index: Any) -> Any:
    if isinstance(index, torch.Tensor):
        return index.cpu().numpy()
    if isinstance(index, tuple):
        return tuple(_np_index(i) for i in index)
    return index


def _leaves_of(value: Any, prefix: tuple[str, ...], out: dict[tuple[str, ...], Any]) -> None:
    for k, v in value._tensordict.items():
        if is_tensor_collection(v):
            _leaves_of(v, (*prefix, k), out)
        else:
            out[(*prefix, k)] = v


def _object_array(value: Any) -> np.ndarray:
    """A nested list of per-row values (as stored) as a numpy object array of the batch
    shape: lists inside a row stay lists."""
    if not isinstance(value, list):
        arr = np.empty((), dtype=object)
        arr[()] = value
        return arr
    depth, probe = 0, value
    shape: list[int] = []
    while isinstance(probe, list):
        shape.append(len(probe))
        depth += 1
        if not probe:
            break
        probe = probe[0]
    # the batch depth is given by the writer's shape; lists of equal length below it
    # (a row that is itself a list) are cut back by building row by row
    arr = np.empty(tuple(shape), dtype=object)
    for idx in np.ndindex(*shape):
        v: Any = value
        try:
            for i in idx:
                v = v[i]
        except (IndexError, TypeError):
            v = None
        arr[idx] = v
    return arr


def _fields_repr(entries: dict[tuple[str, ...], _Header], at: tuple[str, ...]) -> str:
    parts = []
    for rel, h in entries.items():
        if rel[:-1] != at:
            continue
        if h.kind == "tensor":
            parts.append(f"{rel[-1]}: {str(h.dtype).removeprefix('torch.')}{h.shape}")
        elif h.kind == "node":
            parts.append(f"{rel[-1]}: {_fields_repr(entries, rel)}")
        else:
            parts.append(f"{rel[-1]}: <non-tensor>")
    return "{" + ", ".join(parts) + "}"


def _attach(spec: dict[str, Any]) -> TensorDictStore:
    """Unpickle a store handle: a new connection to the same server and keys."""
    r = _redis()
    client = r.Redis(**spec["connect"])
    server = _Server(
        client, spec["url"], spec["namespace"], spec["td_id"], spec["backend"], True, spec["connect"]
    )
    out = TensorDictStore.__new__(TensorDictStore)
    out._init(
        server,
        tuple(spec["path"]),
        torch.Size(spec["batch_size"]),
        None if spec["device"] is None else torch.device(spec["device"]),
        spec["cache"],
        None,
        spec["locked"],
    )
    out._tensorclass_cls = spec["tensorclass"]
    return out

