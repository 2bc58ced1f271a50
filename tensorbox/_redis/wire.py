"""The store's layout on the server: names of keys, headers, the connection, and the
helpers that turn tensors and values into bytes and back (no pickles).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tensorbox._core.encoding import DTYPES
from tensorbox._core.nestedkey import format_key
from tensorbox._core.shape import list_shape
from tensorbox._core.tensordict import is_tensor_collection
from tensorbox.errors import BatchSizeError, FormatError, TensorDictKeyError

if TYPE_CHECKING:
    import redis

_FORMAT = "tensorbox.store"
_VERSION = 1
# A header promising more than this many bytes is refused before anything is allocated:
# a Redis string holds at most 512 MiB by default (proto-max-bulk-len), 2**40 is far above
# any value a server can hold and far below what would overflow the byte arithmetic.
_MAX_LEAF_BYTES = 1 << 40
_MAX_DIMS = 64
_RETRIES = 8  # optimistic-transaction retries when another client changes the index
# The index hash's field holding the store's generation: a token written when the store is
# created. Every read and write checks it in the same round trip as its own commands, so a
# store the server lost (eviction, FLUSHALL, a restart without persistence) or that was
# deleted and created again is an error, never an empty or zero-filled container. (Key
# paths are JSON lists, so no path is spelt "#gen".)
_GEN = "#gen"
# What a server takes when CONFIG GET is refused (managed services): Redis's defaults.
_DEFAULT_MAX_BULK = 512 * 1024 * 1024
_DEFAULT_MAX_QUERY = 1024 * 1024 * 1024
_GONE_WHY = (
    "evicted under maxmemory, FLUSHALL/FLUSHDB, a restart without persistence, "
    "clear_redis() or another client's DEL"
)

#: The dtypes a store holds (by their names in :data:`~tensorbox._core.encoding.DTYPES`).
_DTYPES_TEXT = (
    "bool uint8 int8 int16 int32 int64 uint16 uint32 uint64 "
    "float16 bfloat16 float32 float64 complex64 complex128"
)
_DTYPES: dict[str, torch.dtype] = {name: DTYPES[name] for name in _DTYPES_TEXT.split()}
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


def _retry() -> Any:
    """The retry policy of the clients a store makes: one more try after a dropped
    connection (a pooled socket the server closed, a restart), none after a timeout.
    redis-py's default retries a timeout 3 times with growing pauses, so a silent server
    (stopped, overloaded) held every call for 4 socket timeouts and more; here
    ``socket_timeout`` bounds each try, and a call makes at most two."""
    r = _redis()
    from redis.backoff import ConstantBackoff
    from redis.retry import Retry

    return Retry(ConstantBackoff(0.1), 1, supported_errors=(r.exceptions.ConnectionError,))


def _client_error(err: BaseException) -> bool:
    """Whether ``err`` (a TypeError, ValueError...) was raised inside the redis client:
    the client failed to make sense of the server's reply."""
    tb = err.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return False
    name = last.tb_frame.f_code.co_filename.replace("\\", "/")
    return "/redis/" in name


def _enc(path: tuple[str, ...]) -> str:
    return json.dumps(list(path), separators=(",", ":"), ensure_ascii=False)


def _dec(field: bytes | str) -> tuple[str, ...]:
    text = field.decode() if isinstance(field, bytes) else field
    value = json.loads(text)
    if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
        raise ValueError(f"not a key path: {text!r}")
    return tuple(value)


def _text(raw: bytes | str, where: str = "TensorDictStore", what: str = "a header") -> str:
    if not isinstance(raw, bytes):
        return raw
    try:
        return raw.decode()
    except UnicodeDecodeError as err:
        raise FormatError(
            f"{where}: {what} from the server is not UTF-8 text ({err.reason} at byte "
            f"{err.start}: {raw[max(0, err.start - 20) : err.start + 20]!r}); foreign or "
            "damaged data"
        ) from None


def _check_text(path: tuple[str, ...], where: str) -> None:
    """Refuse a key that Redis cannot hold: keys travel as UTF-8, which a lone surrogate
    (``"\\ud800"``, from ``os.fsdecode`` of undecodable bytes) is not."""
    for part in path:
        try:
            part.encode()
        except UnicodeEncodeError as err:
            raise TensorDictKeyError(
                f"{where}: the key {part!r} is not valid Unicode text ({err.reason} at "
                f"position {err.start}); a store keeps its keys as UTF-8"
            ) from None


class _Header:
    """One entry's parsed header: kind, and dtype/shape (tensors) or batch size (nodes)."""

    __slots__ = ("batch_size", "dtype", "kind", "nbytes", "raw", "rows", "shape")

    def __init__(self, raw: str, where: str, batch: torch.Size | None = None) -> None:
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
        dims = self.shape if kind == "tensor" else list(self.batch_size)
        if batch is not None and kind != "nontensor" and dims[: len(batch)] != list(batch):
            raise FormatError(
                f"{where}: the {'shape' if kind == 'tensor' else 'batch size'} {dims} in "
                f"the header does not start with the store's batch size {list(batch)} "
                "(written by another program?)"
            )

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize


def _tensor_header(t: torch.Tensor) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise TypeError(f"TensorDictStore cannot hold tensors of dtype {t.dtype}")
    return json.dumps({"kind": "tensor", "dtype": dtype, "shape": list(t.shape)})


def _tensor_bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().to("cpu").reshape(-1)
    if flat.numel() == 0:
        return b""
    if flat.stride(0) != 1:
        # torch calls a one-element expanded tensor contiguous with stride 0, and a byte
        # view of it is refused: copy into a fresh buffer
        flat = torch.empty_like(flat, memory_format=torch.contiguous_format).copy_(flat)
    return flat.view(torch.uint8).numpy().tobytes()


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
        # an empty list selects no rows, as in torch (as_tensor would make it float)
        index = torch.as_tensor(list(index)) if len(index) else torch.zeros(0, dtype=torch.long)
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


def _cells(index: Any, batch_size: torch.Size) -> tuple[torch.Tensor, int]:
    """The cells ``index`` selects: ``(positions, dims)``, where a leaf's first ``dims``
    dims, flattened, are numbered by ``positions`` (of the indexed batch's shape) and
    each cell is the block of the leaf's remaining dims, contiguous in its bytes. An
    index on the first dim alone numbers its rows; any other (``[:, 2]``, a 2-d mask,
    ``[..., 0]``) numbers the elements of the batch, so that a write indexed beyond the
    first dim still sends only its own bytes."""
    rows = _rows_of(index, batch_size)
    if rows is not None:
        return rows, 1
    return torch.arange(math.prod(batch_size)).reshape(batch_size)[index], len(batch_size)


def _cell_values(
    v: torch.Tensor, pos: torch.Tensor, cell_shape: list[int], server_where: str
) -> tuple[list[int], torch.Tensor]:
    """The distinct cells written, sorted, and their values (the last write of a cell
    wins, as in torch), one row of ``prod(cell_shape)`` elements each."""
    want = [*pos.shape, *cell_shape]
    try:
        # as torch's row writes: a value of as many elements fits as well
        v = v.reshape(want) if v.numel() == math.prod(want) else v.expand(want)
    except RuntimeError:
        raise BatchSizeError(
            f"{server_where}: a value of shape {list(v.shape)} does not fit {want}, the "
            "shape of the rows written"
        ) from None
    flat_pos = pos.reshape(-1).tolist()
    flat_v = v.reshape(len(flat_pos), math.prod(cell_shape))
    last = {r: i for i, r in enumerate(flat_pos)}
    uniq = sorted(last)
    order = [last[r] for r in uniq]
    if order == list(range(len(flat_pos))):
        return uniq, flat_v
    return uniq, flat_v[order]


def _cell_runs(
    h: _Header, v: torch.Tensor, cells: tuple[torch.Tensor, int], where: str
) -> list[tuple[int, bytes]]:
    """``(offset, bytes)`` of each run of adjacent cells ``v`` writes into the leaf
    ``h``: what ``SETRANGE`` sends."""
    pos, ncell = cells
    cell_shape = h.shape[ncell:]
    uniq, vals = _cell_values(v.to(h.dtype), pos, cell_shape, where)
    cb = math.prod(cell_shape) * h.dtype.itemsize
    out: list[tuple[int, bytes]] = []
    at = 0
    for s, c in _runs(uniq):
        out.append((s * cb, _tensor_bytes(vals[at : at + c])))
        at += c
    return out


@dataclasses.dataclass(eq=False)
class _Server:
    """The connection one store and its nested views share, with the names of its keys."""

    client: redis.Redis
    url: str
    namespace: str
    td_id: str
    backend: str
    owns_client: bool
    connect: dict[str, Any]

    def __post_init__(self) -> None:
        namespace, td_id, url = self.namespace, self.td_id, self.url
        self.base = f"{namespace}:{{{td_id}}}:"
        self.meta_key = self.base + "meta"
        self.index_key = self.base + "index"
        self.gen: str | None = None  # the store's generation, learned when opened
        self.limits: tuple[int, int] | None = None  # (proto-max-bulk-len, query buffer)
        # the largest value the write in progress sends: ``(path, nbytes, total)``
        self.big: tuple[tuple[str, ...], int, int | None] | None = None
        self.provider: Any = None  # a credential_provider, kept apart from ``connect``
        self.pickle_credentials = False
        # the store's batch size, once known: every header the server sends must start
        # with it (a header another client rewrote must not steer reads or SETRANGEs)
        self.batch: torch.Size | None = None
        # the index as last read whole, raw and parsed: row reads plan by it and check
        # it in the same read script (one round trip while nobody changes the index)
        self.snapshot: tuple[Any, dict[tuple[str, ...], _Header]] | None = None
        for name, text in (("prefix", namespace), ("td_id", td_id)):
            try:
                text.encode()
            except UnicodeEncodeError as err:
                raise ValueError(
                    f"TensorDictStore at {url}: the {name} {text!r} is not valid Unicode "
                    f"text ({err.reason} at position {err.start}); Redis keys are UTF-8"
                ) from None

    def data_key(self, path: tuple[str, ...]) -> str:
        return self.base + "data:" + _enc(path)

    def header(self, raw: bytes | str, path: tuple[str, ...]) -> _Header:
        """The header of ``path`` as the server sent it, checked against the store."""
        where = self.where(path)
        return _Header(_text(raw, where), where, self.batch)

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
            if "used memory > 'maxmemory'" in str(err) or str(err).startswith("OOM"):
                raise RuntimeError(
                    f"{self.where()}: {what}: the server is out of memory (maxmemory reached "
                    "and its policy evicts nothing): nothing of this write was applied; "
                    f"free memory there or raise its maxmemory ({err})"
                ) from err
            if "WRONGTYPE" in str(err):
                raise FormatError(
                    f"{self.where()}: {what}: the server holds keys under {self.base!r} of "
                    f"another type (foreign data, not a tensorbox store): {err}"
                ) from err
            raise RuntimeError(f"{self.where()}: {what}: the server refused: {err}") from err
        except r.exceptions.AuthenticationError as err:  # before its base, ConnectionError
            raise PermissionError(
                f"{self.where()}: {what}: the server refused the credentials (a wrong or "
                f"missing password or user name): {err}"
            ) from err
        except (r.exceptions.ConnectionError, r.exceptions.TimeoutError) as err:
            raise ConnectionError(
                f"{self.where()}: {what}: cannot reach the server ({type(err).__name__}: {err})"
            ) from err
        except r.exceptions.InvalidResponse as err:
            raise self.garbled(what, err) from err
        except (TypeError, ValueError, AttributeError, IndexError, KeyError) as err:
            if not _client_error(err):
                raise  # ours (a refused value), not the reply's
            raise self.garbled(what, err) from err

    def garbled(self, what: str, err: BaseException | str) -> FormatError:
        """The error for a reply that is not what a Redis server sends."""
        if isinstance(err, BaseException):
            err = f"{type(err).__name__}: {err}"
        # the connection may hold the rest of the bad reply: none is used again
        with contextlib.suppress(Exception):
            self.client.connection_pool.disconnect()
        return FormatError(
            f"{self.where()}: {what}: the reply is not what a Redis server sends ({err}); "
            "not a Redis server, or a damaged connection"
        )

    def reply(self, what: str, value: Any, n: int | None = None) -> list[Any]:
        """``value`` checked to be a list (of ``n`` items where given), as the commands
        sent ask for; else the ``FormatError`` of a garbled reply."""
        if not isinstance(value, list) or (n is not None and len(value) != n):
            shown = repr(value)[:100]
            want = "a list" if n is None else f"a list of {n}"
            raise self.garbled(what, f"{shown} where {want} was due")
        return value

    def write(self, what: str, fn: Callable[[], Any]) -> Any:
        """``call`` for a write: when its connection is lost, the server's limits are read
        again, and a value over a limit lowered since (``CONFIG SET``; the server drops
        the connection of a command over it) is the ``ValueError`` it would have been."""
        self.big = None
        try:
            return self.call(what, fn)
        except ConnectionError as err:
            big, self.big = self.big, None
            if big is not None:
                known, self.limits = self.limits, None
                try:
                    self.check_size(*big)
                except ValueError as refused:
                    raise ValueError(
                        f"{refused} (the server dropped the connection: its limit is lower "
                        "than when this handle read it)"
                    ) from err
                except (ConnectionError, _redis().exceptions.RedisError):
                    self.limits = known  # unreachable: the first error says so
            raise

    def index(self) -> dict[tuple[str, ...], _Header]:
        raw = self.call("read the index", lambda: self.client.hgetall(self.index_key))
        if not isinstance(raw, dict):
            raise self.garbled("read the index", f"{raw!r:.100} where a hash was due")
        return self.parse_index(raw)

    def check_gen(self, raw: bytes | str | None, path: tuple[str, ...] | None = None) -> None:
        """Raise unless ``raw`` (the index's generation field, read with the operation's
        own commands) is this handle's: the store is gone, or was created again."""
        if raw is None:
            raise FormatError(
                f"{self.where(path)}: the store is gone from the server: its index "
                f"{self.index_key!r} is missing, or lost its generation ({_GONE_WHY}); nothing "
                "is recreated"
            )
        if not isinstance(raw, (bytes, str)):
            raise self.garbled("read the generation", f"{raw!r:.100} where text was due")
        found = _text(raw, self.where(path), "the generation")
        if self.gen is not None and found != self.gen:
            raise FormatError(
                f"{self.where(path)}: the store was deleted and created again on the server "
                f"(generation {found!r}, this handle opened {self.gen!r}); attach again "
                "with TensorDictStore.from_store"
            )

    def missing(self, path: tuple[str, ...], length: int | None = None) -> FormatError:
        """The error for a value the index names and the server does not hold."""
        held = "is missing" if not length else f"holds {length} bytes"
        return FormatError(
            f"{self.where(path)}: the value {self.data_key(path)!r} {held} on the server "
            f"although the index names it ({_GONE_WHY}); it is not recreated as zeros"
        )

    def server_limits(self) -> tuple[int, int]:
        """The largest value and the largest command the server takes, read once
        (Redis's defaults where CONFIG is refused)."""
        if self.limits is None:
            got: dict[str, int] = {}
            r = _redis()
            for name in ("proto-max-bulk-len", "client-query-buffer-limit"):
                try:
                    reply: Any = self.client.config_get(name)
                    got[name] = int(next(iter(reply.values())))
                except (r.exceptions.ConnectionError, r.exceptions.TimeoutError):
                    raise  # unreachable: not a refusal, and no defaults to remember
                except (r.exceptions.RedisError, StopIteration, ValueError, TypeError):
                    pass  # CONFIG refused (managed services): Redis's defaults
            self.limits = (
                got.get("proto-max-bulk-len", _DEFAULT_MAX_BULK),
                got.get("client-query-buffer-limit", _DEFAULT_MAX_QUERY),
            )
        return self.limits

    def check_size(self, path: tuple[str, ...], nbytes: int, total: int | None = None) -> None:
        """Refuse, before anything is sent, a value or a command the server would refuse
        by dropping the connection (redis-py then waits and retries instead of failing)."""
        if nbytes < (1 << 20) and (total is None or total < (1 << 20)):
            return  # far below any server's limits: no need to ask the server
        if self.big is None or max(nbytes, total or 0) > max(self.big[1], self.big[2] or 0):
            self.big = (path, nbytes, total)
        bulk, query = self.server_limits()
        if nbytes > bulk:
            raise ValueError(
                f"{self.where(path)}: the value is {nbytes} bytes, more than the {bulk} "
                "bytes the server takes in one value (proto-max-bulk-len); raise that "
                "setting on the server, or split the leaf into several keys"
            )
        if total is not None and total > query:
            raise ValueError(
                f"{self.where(path)}: the write sends {total} bytes in one command, more "
                f"than the server's client-query-buffer-limit ({query}); write fewer rows "
                "at a time"
            )

    def parse_index(self, raw: Mapping[Any, Any]) -> dict[tuple[str, ...], _Header]:
        """The index's entries by path, after checking the store's generation in it."""
        gen = raw.get(_GEN.encode(), raw.get(_GEN))
        self.check_gen(gen)
        out: dict[tuple[str, ...], _Header] = {}
        for field, value in raw.items():
            if field in (_GEN, _GEN.encode()):
                continue
            try:
                path = _dec(field)
            except ValueError:
                raise FormatError(
                    f"{self.where()}: the index {self.index_key!r} holds the field "
                    f"{field[:100]!r}, not a key path (foreign data?)"
                ) from None
            out[path] = self.header(value, path)
        return out


def _parse_meta(raw: bytes | None, server: _Server) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
    except (ValueError, TypeError):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise FormatError(
            f"{server.where()}: the key {server.meta_key!r} holds {raw!r:.100}, not "
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
) -> tuple[Any, str, bool, dict[str, Any], Any]:
    r = _redis()
    if client is not None:
        kw = dict(client.connection_pool.connection_kwargs)
        owns = False
    elif url is not None:
        # every operation has a time limit: a silent server is an error, never a hang
        kw = {"socket_connect_timeout": 10, "socket_timeout": 60, **redis_kwargs}
        if not {"retry", "retry_on_error", "retry_on_timeout"} & set(redis_kwargs):
            kw["retry"] = _retry()
        client = r.Redis.from_url(url, **kw)
        kw = dict(client.connection_pool.connection_kwargs)
        owns = True
    else:
        kw = dict(redis_kwargs)
        kw.setdefault("socket_connect_timeout", 10)
        kw.setdefault("socket_timeout", 60)
        if not {"retry", "retry_on_error", "retry_on_timeout"} & set(kw):
            kw["retry"] = _retry()
        if unix_socket_path is not None:
            kw["unix_socket_path"] = unix_socket_path
        else:
            kw["host"], kw["port"] = host, port
        kw["db"] = db
        client = r.Redis(**kw)
        kw = dict(client.connection_pool.connection_kwargs)
        owns = True
    if "path" in kw or "unix_socket_path" in kw:
        shown = f"unix://{kw.get('path') or kw.get('unix_socket_path')}?db={kw.get('db', 0)}"
    else:
        shown = f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
    plain = {k: v for k, v in kw.items() if isinstance(v, (str, int, float, bool)) or v is None}
    return client, shown, owns, plain, kw.get("credential_provider")


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
    shape = list_shape(value)  # lists from JSON: plain lists
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


def reconnect(connect: dict[str, Any], provider: Any = None) -> Any:
    """A new client from the connection settings a handle recorded (its pool's
    ``connection_kwargs``: a Unix socket when they name a ``path``)."""
    r = _redis()
    if provider is not None:
        connect = {**connect, "credential_provider": provider}
    connect = {"retry": _retry(), **connect}  # a recorded policy is not plain: ours
    if "path" in connect:
        pool = r.ConnectionPool(connection_class=r.UnixDomainSocketConnection, **connect)
    else:
        pool = r.ConnectionPool(**connect)
    return r.Redis(connection_pool=pool)
