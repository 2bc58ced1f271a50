"""TensorDictStore against a misbehaving server: one that stops answering, answers with
bytes that are not Redis protocol, cuts replies short, or is written to by other
clients. Each test runs on a real redis-server on loopback, through ``RedisProxy``
(``tests/servers.py``) where the server itself must misbehave.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tensorbox import FormatError, TensorDictStore
from tests.servers import RedisProcess, RedisProxy

redis = pytest.importorskip("redis")


def _ops(s: TensorDictStore) -> dict[str, Callable[[], Any]]:
    """One of each kind of call a store makes: reads, row writes, whole-leaf writes."""
    return {
        "get": lambda: s["a"],
        "rows": lambda: s[1:3],
        "row write": lambda: s.__setitem__(slice(0, 2), {"a": torch.zeros(2)}),
        "non-tensor rows": lambda: s.__setitem__(slice(0, 2), {"t": "x"}),
        "set": lambda: s.set("a", torch.ones(4)),
        "keys": lambda: s.keys(),
        "contains": lambda: "a" in s,
        "attach": lambda: TensorDictStore.from_store(
            td_id=s.td_id, port=s._server.connect["port"], socket_timeout=0.5
        ),
    }


def _through(proxy: RedisProxy) -> TensorDictStore:
    s = TensorDictStore(batch_size=[4], port=proxy.port, socket_timeout=0.5)
    s["a"] = torch.arange(4.0)
    s["t"] = "text"
    return s


@pytest.mark.parametrize("unpickled", [False, True])
def test_a_silent_server_ends_each_call_after_one_timeout(
    redis_proxy: RedisProxy, unpickled: bool
) -> None:
    """A server that stops answering (SIGSTOP, overload) held each call for redis-py's
    default 3 retries with growing pauses: 15 s for a 1 s socket_timeout, minutes for
    the default 60 s. Each call is now one try: its error comes after socket_timeout.
    Counted by the connections made (one per retry), not timed."""
    s = _through(redis_proxy)
    if unpickled:  # the worker's client is made from the pickle's settings
        s = pickle.loads(pickle.dumps(s))
        s.keys()
    redis_proxy.mode = "silent"
    ops = _ops(s)
    if unpickled:  # the settings the pickle carried: one read, one write, one listing
        ops = {k: ops[k] for k in ("rows", "row write", "keys")}
    before = redis_proxy.accepted
    for name, op in ops.items():
        with pytest.raises(ConnectionError, match=r"cannot reach the server \(TimeoutError"):
            op()
        assert redis_proxy.accepted - before <= 1, name  # no retry after a timeout
        before = redis_proxy.accepted
    redis_proxy.mode = "pass"
    assert s["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    "garbage",
    [b"zzz\r\n", b"+OK\r\n", b":99\r\n", b"*-1\r\n", b"*2\r\n:1\r\n:2\r\n", b"$3\r\nabc\r\n"],
)
def test_a_reply_that_is_not_redis_is_a_format_error(
    redis_proxy: RedisProxy, garbage: bytes
) -> None:
    """A server that answers in bytes other than Redis protocol, or with replies of the
    wrong shape, raised raw AttributeError, TypeError, IndexError or redis-py's
    InvalidResponse. Each is a FormatError naming the store and the server, and the
    connection that carried it is not used again."""
    s = _through(redis_proxy)
    redis_proxy.mode, redis_proxy.garbage = "garbage", garbage
    for op in _ops(s).values():
        with pytest.raises(FormatError, match=r"at redis://.*the reply is not what a Redis server"):
            op()
    redis_proxy.mode = "pass"
    assert s["a"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert s["t"] == "text"


def test_a_reply_cut_short_is_a_connection_error(redis_proxy: RedisProxy) -> None:
    """A connection closed in the middle of a reply: a ConnectionError naming the server,
    after one more try on a new connection (each of which is cut as well)."""
    s = _through(redis_proxy)
    redis_proxy.mode, redis_proxy.cut = "cut", 3
    for name, op in _ops(s).items():
        before = redis_proxy.accepted
        with pytest.raises(ConnectionError, match=r"at redis://.*cannot reach the server"):
            op()
        assert redis_proxy.accepted - before <= 2, name  # redis-py's default: 4
    redis_proxy.mode = "pass"
    assert s["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


class _RowsOf(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Rows of a store's leaf ``x``: a dataset whose workers unpickle the store handle."""

    def __init__(self, store: TensorDictStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.store[i]["x"]


def _env_free(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TENSORBOX_REDIS_PASSWORD", "REDISCLI_AUTH", "TENSORBOX_REDIS_USERNAME"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.heavy
def test_a_dataloader_worker_without_the_password_says_what_is_missing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spawned DataLoader workers unpickle a handle to a password-protected server. The
    handle raised while being unpickled, which kills the worker: the loader said only
    "worker exited unexpectedly". The error now comes at first use, as the worker's
    error naming what is missing; with the password in the environment, workers read."""
    srv = RedisProcess(tmp_path, "--requirepass", "pw-4-workers")
    _env_free(monkeypatch)
    try:
        s = TensorDictStore(batch_size=[4], port=srv.port, password="pw-4-workers")
        s["x"] = torch.arange(4.0)
        # one worker for the failing pass: with two, the loader's error could end a second
        # worker still starting (spawn), whose exit torch's own cleanup then reported as
        # an unraisable "worker exited unexpectedly" (seen once in a CI run under load)
        loader = torch.utils.data.DataLoader(
            _RowsOf(s), batch_size=2, num_workers=1, multiprocessing_context="spawn"
        )
        with pytest.raises(PermissionError, match=r"needs credentials.*TENSORBOX_REDIS_PASSWORD"):
            list(loader)
        monkeypatch.setenv("TENSORBOX_REDIS_PASSWORD", "pw-4-workers")
        loader = torch.utils.data.DataLoader(
            _RowsOf(s), batch_size=2, num_workers=2, multiprocessing_context="spawn"
        )
        assert torch.cat(list(loader)).tolist() == [0.0, 1.0, 2.0, 3.0]
        s.close()
    finally:
        srv.stop()


def test_an_acl_user_name_survives_the_pickle(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened with redis-py's UsernamePasswordCredentialProvider (an ACL user):
    the pickle drops the provider, which holds the password, and dropped the user name
    with it, so the password from the environment signed in as the default user and was
    refused. The user name (no secret) is kept."""
    from redis.credentials import UsernamePasswordCredentialProvider

    srv = RedisProcess(tmp_path, "--requirepass", "admin-pw")
    _env_free(monkeypatch)
    try:
        admin = redis.Redis(port=srv.port, password="admin-pw")
        admin.execute_command("ACL", "SETUSER", "alice", "on", ">alice-pw", "~*", "+@all")
        provider = UsernamePasswordCredentialProvider("alice", "alice-pw")
        s = TensorDictStore(batch_size=[2], port=srv.port, credential_provider=provider)
        s["x"] = torch.ones(2)
        blob = pickle.dumps(s)
        assert b"alice-pw" not in blob
        monkeypatch.setenv("TENSORBOX_REDIS_PASSWORD", "alice-pw")
        w = pickle.loads(blob)
        assert w["x"].tolist() == [1.0, 1.0]
        assert any(c["user"] == "alice" for c in admin.client_list() if c["user"] != "default")
        w.close()
        s.close()
        admin.close()
    finally:
        srv.stop()


def test_a_same_shape_set_leaves_other_writers_transactions_alone(
    redis_server: Any,
) -> None:
    """Writers that replace whole leaves at once (``store["x"] = t``) each rewrote the
    index, where every other writer's transaction watches: with 4 processes writing, 3%
    of the writes failed with "the index kept changing". A value of the same dtype and
    shape now changes only its bytes; another client's WATCH on the index survives it."""
    s = TensorDictStore(batch_size=[3], port=redis_server.port)
    s["x"] = torch.zeros(3, 2)
    raw = redis.Redis(port=redis_server.port)
    with raw.pipeline(transaction=True) as other:
        other.watch(s._server.index_key)
        s["x"] = torch.ones(3, 2)  # same dtype and shape
        other.multi()
        other.set("probe-key", b"1")
        assert other.execute() == [True]  # the index did not change under the WATCH
    assert s["x"].tolist() == [[1.0, 1.0]] * 3
    s["x"] = torch.ones(3, 4)  # another shape: the header changes, and the index
    assert s["x"].shape == (3, 4)
    raw.delete("probe-key")
    raw.close()
    s.clear_redis()
    s.close()


def test_attaching_to_a_store_whose_metadata_alone_is_gone(redis_server: Any) -> None:
    """Another client (or eviction) deleted only the store's metadata key: attaching
    said "No TensorDictStore with td_id=..." although the index and values were there
    (and creating one under that id is refused as damaged). Attaching now says the
    store is damaged, naming the key; handles opened before keep working (the identity
    they check is the index's generation)."""
    s = TensorDictStore(batch_size=[2], port=redis_server.port)
    s["x"] = torch.ones(2)
    raw = redis.Redis(port=redis_server.port)
    raw.delete(s._server.meta_key)
    with pytest.raises(
        FormatError, match=r"metadata '.*:meta' is gone but its index.*attach to it"
    ):
        TensorDictStore.from_store(td_id=s.td_id, port=redis_server.port)
    with pytest.raises(FormatError, match=r"is gone but its index.*create a new one over it"):
        TensorDictStore(batch_size=[2], td_id=s.td_id, port=redis_server.port)
    assert s["x"].tolist() == [1.0, 1.0]
    raw.close()
    s.clear_redis()
    s.close()


def test_a_server_out_of_memory_still_reads_and_refuses_writes_whole(tmp_path: Any) -> None:
    """A server at its maxmemory with the noeviction policy refuses every command queued
    in a MULTI, reads included: a full server could not even be read. Reads now run as
    one read-only script; each write is refused whole, naming its keys, and the store
    holds what it held."""
    srv = RedisProcess(tmp_path, "--maxmemory-policy", "noeviction")
    try:
        s = TensorDictStore(batch_size=[4], port=srv.port)
        s["a"] = torch.arange(4.0)
        s["b"] = torch.ones(4, 3)
        raw = redis.Redis(port=srv.port)
        raw.config_set("maxmemory", "1")  # below what it holds: out of memory from now on
        full = r"the server is out of memory \(maxmemory.*nothing of this write was applied"
        with pytest.raises(RuntimeError, match=rf"write rows of 'a', 'b': {full}"):
            s[0:2] = {"a": torch.zeros(2), "b": torch.zeros(2, 3)}
        with pytest.raises(RuntimeError, match=rf"write rows of 't': {full}"):
            s[0:2] = {"t": "text"}
        with pytest.raises(RuntimeError, match=rf"""write "'a'": {full}"""):
            s["a"] = torch.zeros(4)
        assert s["a"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert s[1:3]["b"].tolist() == [[1.0] * 3] * 2
        assert sorted(s.keys()) == ["a", "b"]
        raw.config_set("maxmemory", "0")
        s[0:2] = {"a": torch.zeros(2)}
        assert s["a"].tolist() == [0.0, 0.0, 2.0, 3.0]
        raw.close()
        s.close()
    finally:
        srv.stop()
