"""``TensorDictStore``: the class, its constructors, pickling by reference and the
operations it refuses."""

from __future__ import annotations

import importlib
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from tensorbox._core.batchshape import BatchShaped
from tensorbox._core.nestedkey import NestedKey
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.shape import as_batch_size
from tensorbox._core.tensordict import TensorDict, is_tensor_collection
from tensorbox._core.viewentries import FixedBatch
from tensorbox._redis.creds import pickled_connection, worker_client
from tensorbox._redis.scripts import new_meta, open_store, transaction
from tensorbox._redis.wire import (
    _GEN,
    _SHAPE_OPS,
    _connect,
    _enc,
    _fields_repr,
    _Header,
    _parse_meta,
    _Server,
    reconnect,
)
from tensorbox._redis.writes import StoreWrites
from tensorbox.errors import BatchSizeError, FormatError, TensorDictKeyError

__all__ = ["TensorDictStore"]


class TensorDictStore(FixedBatch, BatchShaped, StoreWrites):
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
        cache_metadata: keep each leaf's header here, so that row reads and row writes
            take one round trip (every one still checks the header against the server's).
        pickle_credentials: put the password (or credential provider) in the pickle of
            a handle; by default a handle unpickled elsewhere takes it from
            ``TENSORBOX_REDIS_PASSWORD`` (or ``REDISCLI_AUTH``), or fails saying so.
        **redis_kwargs: passed to ``redis.Redis``.

    Reads fetch from the server on every access (``store["obs"]`` is a new tensor),
    row reads (``store[3:7]``) fetch only the rows' bytes, adjacent rows in one range,
    and return a local ``TensorDict``. Shape operations are refused: call
    ``to_local()`` first.
    """

    _is_tensor_collection = False  # a handle on a server, not a local container
    _tensorclass_cls: str | None  # the writer's tensorclass path, recorded, never imported

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
        pickle_credentials: bool = False,
        **redis_kwargs: Any,
    ) -> None:
        cl, shown, owns, plain, provider = _connect(
            url=url,
            host=host,
            port=port,
            db=db,
            unix_socket_path=unix_socket_path,
            client=client,
            redis_kwargs=redis_kwargs,
        )
        server = _Server(cl, shown, prefix, td_id or str(uuid.uuid4()), backend, owns, plain)
        server.provider, server.pickle_credentials = provider, pickle_credentials
        bs = as_batch_size(batch_size)
        dev = None if device is None else torch.device(device)
        meta = open_store(server, new_meta(bs, dev))
        assert meta is not None
        stored = torch.Size(meta.get("batch_size", []))
        if batch_size is not None and stored != bs:
            raise BatchSizeError(
                f"{server.where()}: the store has batch size {list(stored)}, not {list(bs)}"
            )
        bs = server.batch = stored
        if dev is None and meta.get("device"):
            dev = torch.device(meta["device"])
        self._init(server, (), bs, dev, cache_metadata, None, False)
        self._tensorclass_cls = meta.get("tensorclass")  # after _init set it to None

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
        self._tensorclass_cls = None

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
        return _enc(self._keypath(key))

    def _fixed_batch_message(self) -> str:
        # The batch size: the leading dims every leaf shares.
        return f"{self._server.where()}: the batch size of a store is fixed; to_local() first"

    def ndimension(self) -> int:
        """The number of batch dims."""
        return len(self._batch_size)

    def __len__(self) -> int:
        return self._batch_size[0] if self._batch_size else 0

    @property
    def device(self) -> torch.device | None:
        """The device leaves are moved to when read (None: where they are, the CPU)."""
        return self._device

    @property
    def is_locked(self) -> bool:
        """Whether this handle refuses new keys."""
        return self._locked

    def lock_(self) -> TensorDictStore:
        """Refuse new keys through this handle (values of existing keys still change)."""
        self._locked = True
        return self

    def unlock_(self) -> TensorDictStore:
        """Accept new keys through this handle again."""
        self._locked = False
        return self

    def is_contiguous(self) -> bool:
        """False: a store's leaves live in the server."""
        return False

    def is_memmap(self) -> bool:
        """False: a store's leaves live in the server."""
        return False

    def is_shared(self) -> bool:
        """False: a store's leaves live in the server."""
        return False

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
        """``(key, value)`` pairs, every value read now."""
        for k in self.keys(include_nested, leaves_only):
            yield k, self.get(k)

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> Iterator[Any]:
        """Every value of this level, read now."""
        for _, v in self.items(include_nested, leaves_only):
            yield v

    def __contains__(self, key: object) -> bool:
        try:
            path = self._keypath(key)
        except TensorDictKeyError:
            return False
        return self._header(path) is not None

    def entry_class(self, key: NestedKey) -> type:
        """The class of the entry ``key``: ``torch.Tensor``, ``TensorDictStore`` or ``NonTensorData``."""
        path = self._keypath(key)
        h = self._header(path)
        if h is None:
            raise TensorDictKeyError(f"{self._server.where(path)}: no such key in the store")
        return {"tensor": torch.Tensor, "node": TensorDictStore, "nontensor": NonTensorData}[h.kind]

    def _node(self, path: tuple[str, ...], h: _Header) -> TensorDictStore:
        out = TensorDictStore.__new__(TensorDictStore)
        out._init(
            self._server,
            path,
            h.batch_size,
            self._device,
            self._meta_cache,
            self._headers,
            self._locked,
        )
        return out

    def get(self, key: NestedKey, default: Any = KeyError) -> Any:
        """The entry ``key`` read now: a tensor, a nested store, or a non-tensor value."""
        path = self._keypath(key)
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
        return (
            value.tolist()
            if isinstance(value, NonTensorData) and value.stacked
            else (value.data if isinstance(value, NonTensorData) else value)
        )

    def get_non_tensor(self, key: NestedKey, default: Any = KeyError) -> Any:
        """The non-tensor value under ``key`` (as ``get``)."""
        return self.get(key, default)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, (str, tuple)) for k in index)
        ):
            return self.get(index)
        return self._rows(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, (str, tuple)) for k in index)
        ):
            self.set(index, value)
            return
        self._write_rows(index, value)

    def zero_(self) -> TensorDictStore:
        """Set every tensor leaf to zero."""
        for k in self.keys(include_nested=True, leaves_only=True):
            path = self._keypath(k)
            h = self._header(path)
            if h is not None and h.kind == "tensor":
                self.fill_(k, 0)
        return self

    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    def pop(self, key: NestedKey, default: Any = KeyError) -> Any:
        """The entry ``key`` read now (a local copy), then deleted from the server."""
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
        """The last key of this level and its value (read now), deleted from the server."""
        keys = self.keys()
        if not keys:
            raise KeyError(f"{self._server.where()}: popitem() on an empty store")
        key = keys[-1]
        assert isinstance(key, str)
        return key, self.pop(key)

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """Every entry read now into a local ``TensorDict`` (as ``to_local``)."""
        del retain_none
        return self.to_local()

    def contiguous(self) -> TensorDict:
        """Every entry read now into a local ``TensorDict`` (as ``to_local``)."""
        return self.to_local()

    def empty(
        self, recurse: bool = False, *, batch_size: Any = None, device: Any = None
    ) -> TensorDict:
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
        """A new store on ``kwargs``' server holding a copy of this one."""
        return TensorDictStore.from_tensordict(self.to_local(), **kwargs)

    def clone(self, recurse: bool = True) -> TensorDictStore:
        """``recurse=True``: a new store on the same server holding a copy (copied by the
        server); ``recurse=False``: another handle on the same keys."""
        server = self._server
        if not recurse:
            out = TensorDictStore.__new__(TensorDictStore)
            out._init(
                server,
                self._path,
                self._batch_size,
                self._device,
                self._meta_cache is not None,
                None,
                self._locked,
            )
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
        server.client = reconnect(server.connect, server.provider)
        server.owns_client = True

    @classmethod
    def from_dict(
        cls,
        input_dict: Any,
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

        def read(pipe: Any) -> dict[str, Any]:
            server.check_gen(pipe.hget(server.index_key, _GEN))
            return _parse_meta(pipe.get(server.meta_key), server) or {}

        def plan(pipe: Any, meta: dict[str, Any]) -> None:
            pipe.set(server.meta_key, json.dumps({**meta, **changes}))

        server.call(
            "write the metadata",
            lambda: transaction(
                server, "write the metadata", [server.meta_key, server.index_key], read, plan
            ),
        )

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
        pickle_credentials = kwargs.pop("pickle_credentials", False)
        cache = kwargs.pop("cache_metadata", True)
        cl, shown, owns, plain, provider = _connect(
            url=url,
            host=host,
            port=port,
            db=db,
            unix_socket_path=unix_socket_path,
            client=kwargs.pop("client", None),
            redis_kwargs=kwargs,
        )
        server = _Server(cl, shown, prefix, td_id, backend, owns, plain)
        server.provider, server.pickle_credentials = provider, pickle_credentials
        meta = open_store(server, None)
        if meta is None:
            if owns:
                cl.close()
            raise KeyError(
                f"No TensorDictStore with td_id={td_id!r} at {shown} (prefix={prefix!r})"
            )
        dev = (
            torch.device(device)
            if device is not None
            else (torch.device(meta["device"]) if meta.get("device") else None)
        )
        server.batch = torch.Size(meta["batch_size"])
        store = cls.__new__(cls)
        store._init(
            server,
            (),
            server.batch,
            dev,
            cache,
            None,
            False,
        )
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
            **pickled_connection(s),
            "gen": s.gen,
            "url": s.url,
            "namespace": s.namespace,
            "td_id": s.td_id,
            "backend": s.backend,
            "path": list(self._path),
            "batch_size": list(self._batch_size),
            "root_batch_size": None if s.batch is None else list(s.batch),
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

    def share_memory_(self) -> TensorDictStore:
        """Refused: ``to_local().share_memory_()`` makes a shared local copy."""
        raise NotImplementedError(
            f"{self._server.where()}: a store's leaves live in the server, not in shared "
            "memory; to_local().share_memory_() makes a shared local copy"
        )

    def memmap_(self, *args: Any, **kwargs: Any) -> TensorDictStore:
        """Refused: ``to_local().memmap(path)`` saves a copy."""
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


def _attach(spec: dict[str, Any]) -> TensorDictStore:
    """Unpickle a store handle: a new connection to the same server and keys (the
    credentials the pickle left out come from this process: see ``creds``)."""
    where = f"TensorDictStore {spec['td_id']!r} at {spec['url']}"
    client, connect, provider = worker_client(spec, where)
    server = _Server(
        client, spec["url"], spec["namespace"], spec["td_id"], spec["backend"], True, connect
    )
    server.provider, server.gen = provider, spec.get("gen")
    root = spec.get("root_batch_size")
    server.batch = None if root is None else torch.Size(root)
    server.pickle_credentials = spec["connect"].get("password") is not None
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
