"""TensorDictStore against a real redis-server on loopback (the ``redis_server`` fixture).

Values are checked against torch (the same operations on a local TensorDict); the
failure tests corrupt the server's keys by hand and assert on the messages.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import tensorbox
from tensorbox import (
    FormatError,
    LazyStackedTensorDictStore,
    LockedError,
    TensorDict,
    TensorDictStore,
    tensorclass,
)
from tests.servers import RedisProcess, RedisServer, free_port

redis = pytest.importorskip("redis")


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    return redis_server


@pytest.fixture
def store(server: RedisServer) -> Iterator[TensorDictStore]:
    s = TensorDictStore(batch_size=[10], host=server.host, port=server.port)
    yield s
    s.clear_redis()
    s.close()


def _raw(server: RedisServer) -> Any:
    return redis.Redis(host=server.host, port=server.port)


@tensorclass
class Pair:
    obs: torch.Tensor
    label: str


@pytest.mark.heavy
def test_import_tensorbox_loads_no_redis() -> None:
    code = "import sys, tensorbox; tensorbox.TensorDict; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# Each example overwrites the same keys, so one store serves every example of a test.
_reuse = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

DTYPES = [
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.int8,
    torch.int64,
    torch.bool,
    torch.uint8,
    torch.complex64,
]


@_reuse
@given(
    dtype=st.sampled_from(DTYPES),
    feat=st.lists(st.integers(0, 4), max_size=2),
    seed=st.integers(0, 99),
)
def test_leaf_round_trip(
    store: TensorDictStore, dtype: torch.dtype, feat: list[int], seed: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 2, (10, *feat), generator=g).to(dtype)
    store["x"] = x
    y = store["x"]
    assert y.dtype == dtype and y.shape == x.shape and torch.equal(y, x)


def _index_strategy() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(-10, 9),
        st.builds(
            slice,
            st.none() | st.integers(-12, 12),
            st.none() | st.integers(-12, 12),
            st.none() | st.integers(1, 4),
        ),
        st.lists(st.integers(-10, 9), max_size=6).map(lambda v: torch.tensor(v, dtype=torch.long)),
        st.lists(st.booleans(), min_size=10, max_size=10).map(torch.tensor),
        st.just(...),
        st.lists(st.integers(0, 9), min_size=1, max_size=4),
    )


@_reuse
@given(index=_index_strategy())
def test_row_reads_match_torch(store: TensorDictStore, index: Any) -> None:
    local = TensorDict(
        {"obs": torch.arange(60.0).reshape(10, 2, 3), "n": {"a": torch.arange(10)}}, [10]
    )
    store.update(local)
    got = store[index]
    want = local[index]
    assert isinstance(got, TensorDict) and got.batch_size == want.batch_size
    assert torch.equal(got["obs"], want["obs"]) and torch.equal(got["n", "a"], want["n", "a"])


@_reuse
@given(index=_index_strategy(), fill=st.integers(-5, 5))
def test_row_writes_match_torch(store: TensorDictStore, index: Any, fill: int) -> None:
    local = TensorDict({"obs": torch.arange(30).reshape(10, 3)}, [10])
    store.update(local)
    n = torch.empty(10)[index].shape
    row = TensorDict({"obs": torch.full((*n, 3), fill)}, n)
    local[index] = row
    store[index] = row
    assert torch.equal(store["obs"], local["obs"])


def test_only_selected_rows_move(store: TensorDictStore, server: RedisServer) -> None:
    store["big"] = torch.zeros(10, 4096)  # 16 KiB per row
    raw = _raw(server)
    before = raw.info("stats")["total_net_output_bytes"]
    store[3:5]
    moved = raw.info("stats")["total_net_output_bytes"] - before
    assert moved < 3 * 16384  # two rows and the headers, not the 160 KiB leaf
    raw.close()


def test_nested_and_non_tensor(store: TensorDictStore) -> None:
    store["inner"] = TensorDict({"a": torch.ones(10, 2)}, [10, 2])
    store["label"] = "x"
    assert store["inner"].batch_size == torch.Size([10, 2])
    assert isinstance(store["inner"], TensorDictStore)
    assert store.entry_class("label") is tensorbox.NonTensorData
    store[torch.tensor([1, 4])] = TensorDict({"label": "y", "inner": {"a": torch.zeros(2, 2)}}, [2])
    local = store.to_local()
    assert [local[i]["label"] for i in range(5)] == ["x", "y", "x", "x", "y"]
    assert torch.equal(local["inner", "a"].sum(-1), torch.tensor([2.0, 0, 2, 2, 0, 2, 2, 2, 2, 2]))
    assert set(store.keys(include_nested=True, leaves_only=True)) == {("inner", "a"), "label"}


def test_new_leaf_by_row_write_is_zero_elsewhere(server: RedisServer) -> None:
    s = TensorDictStore(batch_size=[4], host=server.host, port=server.port)
    try:
        s[1] = TensorDict({"obs": torch.ones(3), "tag": "a"}, [])
        assert torch.equal(s["obs"].sum(-1), torch.tensor([0.0, 3, 0, 0]))
        assert [s[i]["tag"] for i in range(4)] == [None, "a", None, None]
    finally:
        s.clear_redis()
        s.close()


@pytest.mark.heavy
def test_pickle_attaches_to_the_same_keys(store: TensorDictStore, server: RedisServer) -> None:
    store["obs"] = torch.zeros(10, 2)
    blob = pickle.dumps(store)
    code = (
        "import pickle, sys, torch; s = pickle.loads(sys.stdin.buffer.read()); "
        "s[3] = {'obs': torch.ones(2)}; s.close()"
    )
    subprocess.run([sys.executable, "-c", code], input=blob, check=True)
    assert store["obs"].sum().item() == 2.0
    other = TensorDictStore.from_store(td_id=store.td_id, host=server.host, port=server.port)
    assert other.batch_size == torch.Size([10]) and other["obs"][3].tolist() == [1.0, 1.0]
    other.close()


def test_clone_copies_and_shallow_clone_shares(store: TensorDictStore) -> None:
    store["obs"] = torch.zeros(10)
    deep, shallow = store.clone(), store.clone(False)
    try:
        store["obs"] = torch.ones(10)
        assert deep["obs"].sum() == 0 and shallow["obs"].sum() == 10
        assert deep.td_id != store.td_id and shallow.td_id == store.td_id
    finally:
        deep.clear_redis()
        deep.close()


def test_rename_pop_del_lock(store: TensorDictStore) -> None:
    store["a", "b"] = torch.zeros(10)
    store.rename_key_("a", "c")
    assert store.keys() == ["c"] and store["c", "b"].shape == (10,)
    store.lock_()
    with pytest.raises(LockedError, match="locked: no new keys"):
        store["d"] = torch.zeros(10)
    store["c", "b"] = torch.ones(10)  # an existing key still changes
    store.unlock_()
    assert torch.equal(store.pop(("c", "b")), torch.ones(10))
    store.del_("c")
    assert store.keys() == []


def test_tensorclass_round_trip(server: RedisServer) -> None:
    p = Pair(obs=torch.arange(6.0).reshape(3, 2), label="hi", batch_size=[3])
    s = p.to_store(host=server.host, port=server.port)
    try:
        assert s._tensorclass_cls is not None and s._tensorclass_cls.endswith("Pair")
        back = TensorDictStore.from_store(
            td_id=s.td_id, host=server.host, port=server.port, tensorclass_cls=Pair
        )
        assert isinstance(back, Pair) and back.label == "hi" and torch.equal(back.obs, p.obs)
        same = TensorDictStore.from_store(td_id=s.td_id, host=server.host, port=server.port)
        assert type(same) is TensorDictStore  # the recorded class is never imported by itself
        same.close()
    finally:
        s.clear_redis()
        s.close()


# ---- refusals and failures -----------------------------------------------------------


def test_shape_ops_and_shared_memory_are_refused(store: TensorDictStore) -> None:
    with pytest.raises(RuntimeError, match=r"call to_local\(\)\.view"):
        store.view(2, 5)
    with pytest.raises(NotImplementedError, match="shared local copy"):
        store.share_memory_()


def test_batch_and_values_checked(store: TensorDictStore) -> None:
    with pytest.raises(
        tensorbox.BatchSizeError, match=r"'x'.*does not start with the batch size \[10\]"
    ):
        store["x"] = torch.zeros(3)
    with pytest.raises(TypeError, match=r"'f'.*not JSON-serialisable.*no pickles"):
        store["f"] = object()
    with pytest.raises(KeyError, match="no such key"):
        store["missing"]


def test_unknown_id(server: RedisServer) -> None:
    with pytest.raises(
        KeyError,
        match=rf"No TensorDictStore with td_id='nope' at redis://127.0.0.1:{server.port}/0",
    ):
        TensorDictStore.from_store(td_id="nope", host=server.host, port=server.port)


@pytest.mark.heavy
def test_no_server() -> None:
    port = free_port()
    with pytest.raises(
        ConnectionError, match=rf"redis://127.0.0.1:{port}/0.*cannot reach the server"
    ):
        TensorDictStore(batch_size=[2], host="127.0.0.1", port=port, socket_connect_timeout=2)


def test_foreign_metadata(server: RedisServer) -> None:
    raw = _raw(server)
    raw.set("tensordict:{foreign}:meta", b"hello")
    raw.rpush("tensordict:{listy}:meta", b"a")
    try:
        with pytest.raises(
            FormatError,
            match=r"'foreign' at redis://.*'tensordict:\{foreign\}:meta' holds b'hello'",
        ):
            TensorDictStore.from_store(td_id="foreign", host=server.host, port=server.port)
        with pytest.raises(FormatError, match=r"'listy' at redis://.*another type \(foreign data"):
            TensorDictStore(td_id="listy", host=server.host, port=server.port)
    finally:
        raw.delete("tensordict:{foreign}:meta", "tensordict:{listy}:meta")
        raw.close()


def test_damaged_values_are_refused(store: TensorDictStore, server: RedisServer) -> None:
    store["obs"] = torch.zeros(10, 3)
    raw = _raw(server)
    base = f"tensordict:{{{store.td_id}}}:"
    raw.set(base + 'data:["obs"]', b"\0" * 7)
    with pytest.raises(
        FormatError, match=r"entry 'obs'.*holds 7 bytes, its header .* promises 120"
    ):
        store["obs"]
    raw.hset(
        base + "index",
        '["obs"]',
        json.dumps({"kind": "tensor", "dtype": "float32", "shape": [2**40, 2**20]}),
    )
    with pytest.raises(FormatError, match=r"entry 'obs'.*promises \d+ bytes.*refusing to allocate"):
        store["obs"]
    raw.hset(base + "index", '["obs"]', "not json")
    with pytest.raises(
        FormatError, match=r"entry 'obs': the header 'not json' is not a store header"
    ):
        store["obs"]
    raw.hdel(base + "index", '["obs"]')
    raw.hset(base + "index", "garbage", "{}")
    with pytest.raises(FormatError, match=r"holds the field b'garbage', not a key path"):
        store.keys()
    raw.close()


def test_header_changed_by_another_client_is_reread(
    store: TensorDictStore, server: RedisServer
) -> None:
    store["obs"] = torch.zeros(10, 3)
    store[2:4]  # the header is cached here now
    other = TensorDictStore.from_store(td_id=store.td_id, host=server.host, port=server.port)
    other["obs"] = torch.arange(10.0)  # another shape under the same key
    assert torch.equal(store[2:4]["obs"], torch.tensor([2.0, 3.0]))
    other.close()


def test_lazy_stacked_store(server: RedisServer) -> None:
    tds = [
        TensorDict({"a": torch.full((4, 3), float(i)), "b": torch.arange(4)}, [4]) for i in range(5)
    ]
    kw = {"host": server.host, "port": server.port}
    st = LazyStackedTensorDictStore.from_lazy_stack(tds, **kw)
    try:
        assert st.batch_size == torch.Size([5, 4]) and "count=5" in repr(st)
        assert torch.equal(st["a"], torch.stack([t["a"] for t in tds]))
        st[0].set("a", torch.ones(4, 3) * 42)  # element views write through
        assert st[0]["a"].unique().tolist() == [42.0]
        st[1:3] = torch.stack([tds[0], tds[0]])
        again = pickle.loads(pickle.dumps(st))
        same = LazyStackedTensorDictStore.from_store(td_id=st.td_id, **kw)
        assert torch.equal(again.to_local()["a"], same.to_local()["a"])
        assert same[2]["a"].sum().item() == 0.0 and same[4]["a"].sum().item() == 48.0
        again.close()
        same.close()
        hetero = LazyStackedTensorDictStore.from_lazy_stack(
            [TensorDict({"a": torch.zeros(3, 4)}, [3]), TensorDict({"a": torch.ones(3, 8)}, [3])],
            **kw,
        )
        assert hetero[1]["a"].shape == (3, 8)
        hetero.clear_redis()
        hetero.close()
    finally:
        st.clear_redis()
        st.close()


# ---- a store that loses no write (issue 31) ------------------------------------------
# Each test below failed before the store checked its generation and wrote rows by script:
# the promise it breaks is named first.


def _kw(server: Any) -> dict[str, Any]:
    return {"host": server.host, "port": server.port}


def test_a_vanished_leaf_is_an_error_never_zeros(
    store: TensorDictStore, server: RedisServer
) -> None:
    """Item 7: a row write into a leaf another client deleted recreated it zero-filled."""
    store["obs"] = torch.ones(10, 3)
    store["tag"] = "a"
    store[0]  # the headers are known here now: the fast path is taken
    raw = _raw(server)
    key = f'tensordict:{{{store.td_id}}}:data:["obs"]'
    raw.delete(key, f'tensordict:{{{store.td_id}}}:data:["tag"]')
    missing = rf"entry 'obs'.*{re.escape(key)!s}' is missing on the server.*not recreated"
    with pytest.raises(FormatError, match=missing):
        store[2] = {"obs": torch.full((3,), 7.0)}
    with pytest.raises(FormatError, match=missing):
        store[:, None][1] = {"obs": torch.zeros(1, 3)}  # type: ignore[index]
    with pytest.raises(FormatError, match=missing):
        store.set_at_("obs", torch.zeros(3), 4)
    assert raw.exists(key) == 0  # nothing was recreated
    with pytest.raises(FormatError, match=missing):
        store[2:4]
    with pytest.raises(FormatError, match=r"entry 'tag'.*is missing on the server"):
        store[1] = {"tag": "b"}
    with pytest.raises(FormatError, match=r"entry 'tag'.*is missing on the server"):
        store["tag"]
    raw.close()


def test_row_writes_of_two_clients_lose_nothing(server: RedisServer) -> None:
    """Item 8: a write indexed beyond the first batch dim read, modified and wrote the
    whole value; another client's row write in between was lost. Each cell is written
    once, so any lost write shows."""
    n = 48
    a = TensorDictStore(batch_size=[4, n], **_kw(server))
    a["x"] = torch.zeros(4, n, 2)
    a["s"] = "-"
    b = TensorDictStore.from_store(td_id=a.td_id, **_kw(server))
    errors: list[BaseException] = []

    def writer(handle: TensorDictStore, cols: range) -> None:
        try:
            for j in cols:
                handle[:, j] = TensorDict({"x": torch.full((4, 2), float(j + 1))}, [4])
                handle[j % 4, j] = TensorDict({"s": f"c{j}"}, [])
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [
        threading.Thread(target=writer, args=(a, range(0, n, 2))),
        threading.Thread(target=writer, args=(b, range(1, n, 2))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        want = torch.arange(1.0, n + 1)[None, :, None].expand(4, n, 2)
        assert torch.equal(a["x"], want)
        s = a.to_local()
        assert [s[j % 4, j]["s"] for j in range(n)] == [f"c{j}" for j in range(n)]
    finally:
        a.clear_redis()
        a.close()
        b.close()


def _in_thread(fn: Any, limit: float = 120.0) -> BaseException | None:
    """Run ``fn`` in a thread; its exception, or a failure when it is still running after
    ``limit`` seconds (a hang, not a speed: the bound is far above any real run)."""
    out: list[BaseException | None] = [None]

    def run() -> None:
        try:
            fn()
        except BaseException as err:  # handed to the test
            out[0] = err

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"still running after {limit} s: a hang"
    return out[0]


def test_a_value_over_the_server_limit_is_refused(tmp_path: Any) -> None:
    """Item 9: a value over proto-max-bulk-len made transaction() reconnect for ever."""
    srv = RedisProcess(tmp_path, "--proto-max-bulk-len", "1mb")
    try:
        s = TensorDictStore(batch_size=[2], socket_timeout=10, **_kw(srv))
        err = _in_thread(lambda: s.set("big", torch.zeros(2, 2**18)))  # 2 MiB
        assert isinstance(err, ValueError)
        with pytest.raises(ValueError, match=r"'big'.*2097152 bytes, more than the 1048576"):
            raise err
        with pytest.raises(ValueError, match=r"proto-max-bulk-len"):
            s["t"] = "x" * 2**21  # a non-tensor value too
        assert s.keys() == []
        s.close()
    finally:
        srv.stop()


def test_a_lost_connection_in_a_transaction_ends(tmp_path: Any) -> None:
    """Item 9: where the limit cannot be read (CONFIG renamed away, as managed services
    do), the server drops the connection; the write ends with an error, not a loop."""
    srv = RedisProcess(tmp_path, "--proto-max-bulk-len", "1mb", "--rename-command", "CONFIG", '""')
    try:
        s = TensorDictStore(batch_size=[2], socket_timeout=10, **_kw(srv))
        err = _in_thread(lambda: s.set("big", torch.zeros(2, 2**18)))
        assert err is not None
        with pytest.raises(
            (ConnectionError, RuntimeError), match=r"write .*'big'.*(connection|refused)"
        ):
            raise err
        s.close()
    finally:
        srv.stop()


def test_a_store_lost_in_a_restart_is_an_error(redis_process: Any) -> None:
    """Item 10: after a restart without persistence, store[2:4] was an empty TensorDict."""
    s = TensorDictStore(batch_size=[6], **_kw(redis_process))
    s["obs"] = torch.arange(6.0)
    s[0]
    redis_process.restart()
    gone = r"TensorDictStore '.*' at redis://.*: the store is gone from the server.*restart"
    with pytest.raises(FormatError, match=gone):
        s[2:4]
    with pytest.raises(FormatError, match=gone):
        s["obs"]
    with pytest.raises(FormatError, match=gone):
        s.keys()
    with pytest.raises(FormatError, match=gone):
        s[2] = {"obs": torch.tensor(1.0)}
    with pytest.raises(FormatError, match=gone):
        s["new"] = torch.zeros(6)
    with pytest.raises(FormatError, match=gone):
        "obs" in s  # noqa: B015
    raw = redis.Redis(host=redis_process.host, port=redis_process.port)
    assert raw.dbsize() == 0  # nothing recreated
    # FLUSHALL, then another client creates a store of the same id: this handle refuses it
    t = TensorDictStore(batch_size=[6], **_kw(redis_process))
    t["obs"] = torch.zeros(6)
    t[1]
    raw.flushall()
    again = TensorDictStore(batch_size=[6], td_id=t.td_id, **_kw(redis_process))
    again["obs"] = torch.ones(6)
    again.close()
    with pytest.raises(FormatError, match=r"deleted and created again.*from_store"):
        t[1] = {"obs": torch.tensor(5.0)}
    with pytest.raises(FormatError, match=r"deleted and created again"):
        t["obs"]
    raw.close()
    s.close()
    t.close()


def test_eviction_never_serves_zeros(tmp_path: Any) -> None:
    """Item 7 under memory pressure (allkeys-lru): every leaf reads back as written or
    raises naming it; no row write recreates one."""
    srv = RedisProcess(tmp_path, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
    try:
        s = TensorDictStore(batch_size=[64], **_kw(srv))
        for i in range(8):
            s[f"x{i}"] = torch.full((64, 1024), float(i + 1))  # 256 KiB each
        raw = redis.Redis(host=srv.host, port=srv.port)
        for i in range(40):  # other data pushes the store out
            raw.set(f"filler{i}", b"\1" * 200_000)
        for i in range(8):
            try:
                s[3] = TensorDict({f"x{i}": torch.full((1024,), -1.0)}, [])
            except FormatError as err:
                assert re.search(rf"(entry 'x{i}'.*is missing|store is gone)", str(err)), err
            try:
                got = s[f"x{i}"]
            except FormatError as err:
                assert re.search(rf"(entry 'x{i}'.*is missing|store is gone)", str(err)), err
                continue
            want = torch.full((64, 1024), float(i + 1))
            want[3] = -1.0
            assert torch.equal(got, want)
        raw.close()
        s.close()
    finally:
        srv.stop()


def test_malformed_bytes_and_unstorable_keys(store: TensorDictStore, server: RedisServer) -> None:
    """Item 11: a non-UTF-8 header was a raw UnicodeDecodeError, a lone surrogate in a key
    a raw UnicodeEncodeError; neither named the key or the server."""
    store["obs"] = torch.zeros(10)
    raw = _raw(server)
    raw.hset(f"tensordict:{{{store.td_id}}}:index", '["obs"]', b"\xff\xfe{")
    with pytest.raises(FormatError, match=r"'.*' at redis://.*entry 'obs': a header .*not UTF-8"):
        store["obs"]
    with pytest.raises(FormatError, match=r"entry 'obs': a header from the server is not UTF-8"):
        store.keys()
    with pytest.raises(FormatError, match=r"entry 'obs': a header from the server is not UTF-8"):
        store[1]
    raw.hdel(f"tensordict:{{{store.td_id}}}:index", '["obs"]')
    raw.close()
    with pytest.raises(KeyError, match=r"at redis://.*the key 'a\\ud800' is not valid Unicode"):
        store["a\ud800"] = torch.zeros(10)
    with pytest.raises(KeyError, match=r"the key 'b\\udcff' is not valid Unicode"):
        store["n"] = TensorDict({"b\udcff": torch.zeros(10)}, [10])
    with pytest.raises(KeyError, match=r"the key 'a\\ud800' is not valid Unicode"):
        store["a\ud800"]
    assert "a\ud800" not in store
    with pytest.raises(ValueError, match=r"the td_id 'x\\ud800' is not valid Unicode"):
        TensorDictStore(td_id="x\ud800", **_kw(server))


class EnvPassword:
    """A credential provider of the user's own: it reads the secret where it runs."""

    def get_credentials(self) -> tuple[str]:
        return (os.environ["MY_REDIS_SECRET"],)


def test_a_pickle_carries_no_password(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also seen: a pickled store carried the connection settings, password included."""
    srv = RedisProcess(tmp_path, "--requirepass", "s3cret-pw")
    monkeypatch.delenv("TENSORBOX_REDIS_PASSWORD", raising=False)
    monkeypatch.delenv("REDISCLI_AUTH", raising=False)
    try:
        s = TensorDictStore(batch_size=[3], password="s3cret-pw", **_kw(srv))
        s["x"] = torch.arange(3)
        blob = pickle.dumps(s)
        assert b"s3cret-pw" not in blob
        with pytest.raises(
            PermissionError,
            match=r"at redis://.*needs credentials.*TENSORBOX_REDIS_PASSWORD or REDISCLI_AUTH",
        ):
            pickle.loads(blob)
        monkeypatch.setenv("REDISCLI_AUTH", "s3cret-pw")
        w = pickle.loads(blob)
        assert w["x"].tolist() == [0, 1, 2]
        assert b"s3cret-pw" not in pickle.dumps(w)  # nor does its own pickle
        w.close()
        monkeypatch.delenv("REDISCLI_AUTH")
        asked = TensorDictStore.from_store(
            td_id=s.td_id, password="s3cret-pw", pickle_credentials=True, **_kw(srv)
        )
        assert b"s3cret-pw" in pickle.dumps(asked)
        copy = pickle.loads(pickle.dumps(asked))
        assert copy["x"].tolist() == [0, 1, 2]
        copy.close()
        asked.close()
        monkeypatch.setenv("MY_REDIS_SECRET", "s3cret-pw")
        prov = TensorDictStore.from_store(
            td_id=s.td_id, credential_provider=EnvPassword(), **_kw(srv)
        )
        blob = pickle.dumps(prov)
        assert b"s3cret-pw" not in blob
        copy = pickle.loads(blob)
        assert copy["x"].tolist() == [0, 1, 2]
        copy.close()
        prov.close()
        s.close()
    finally:
        srv.stop()


# ---- two clients, a restart and a FLUSHALL: a stateful test on a real server ---------

_LOST = r"(the store is gone from the server|deleted and created again)"
_CELLS = [0, 3, -1, slice(1, 3), [2, 0], (slice(None), 1), (1, slice(0, 2)), (..., 2)]


def _explicit(cells: Any) -> Any:
    """``cells`` for a leaf tensor of the [4, 3] batch: an Ellipsis spans batch dims only."""
    if isinstance(cells, tuple) and Ellipsis in cells:
        i = cells.index(Ellipsis)
        return (*cells[:i], *[slice(None)] * (3 - len(cells)), *cells[i + 1 :])
    return cells


def _machine(srv: RedisProcess) -> type[RuleBasedStateMachine]:
    """Two handles on one store (batch [4, 3]: leaves x float32 [4, 3, 2] and y int64
    [4, 3]) write rows, cells beyond the first dim and whole leaves, alone or at once;
    the server restarts or is flushed in between. Every step either has the serialised
    effect of the writes (checked through both handles against local tensors) or, once
    the store is lost, raises naming it and recreates nothing."""

    class TwoClients(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.raw = redis.Redis(host=srv.host, port=srv.port)
            self.raw.flushall()
            self.stale: list[TensorDictStore] = []
            self.handles: list[TensorDictStore] = []
            self._open(None)

        def _open(self, td_id: str | None) -> None:
            a = TensorDictStore(batch_size=[4, 3], td_id=td_id, **_kw(srv))
            self.model = {"x": torch.zeros(4, 3, 2), "y": torch.zeros(4, 3, dtype=torch.long)}
            a.update(self.model)
            self.handles = [a, TensorDictStore.from_store(td_id=a.td_id, **_kw(srv))]
            self.live = True

        def _value(self, leaf: str, cells: Any, v: int) -> torch.Tensor:
            shape = self.model[leaf][_explicit(cells)].shape
            return torch.full(shape, v, dtype=self.model[leaf].dtype)

        @rule(who=st.integers(0, 1), leaf=st.sampled_from("xy"), cells=st.sampled_from(_CELLS),
              v=st.integers(1, 99))  # fmt: skip
        def write_cells(self, who: int, leaf: str, cells: Any, v: int) -> None:
            value = self._value(leaf, cells, v)
            row = TensorDict({leaf: value}, torch.empty(4, 3)[cells].shape)
            if not self.live:
                with pytest.raises(FormatError, match=_LOST):
                    self.handles[who][cells] = row
                return
            self.handles[who][cells] = row
            self.model[leaf][_explicit(cells)] = value

        @rule(who=st.integers(0, 1), leaf=st.sampled_from("xy"), v=st.integers(1, 99))
        def write_leaf(self, who: int, leaf: str, v: int) -> None:
            value = torch.full_like(self.model[leaf], v)
            if not self.live:
                with pytest.raises(FormatError, match=_LOST):
                    self.handles[who][leaf] = value
                return
            self.handles[who][leaf] = value
            self.model[leaf] = value

        @precondition(lambda self: self.live)
        @rule(cells=st.lists(st.sampled_from(_CELLS), min_size=2, max_size=2),
              leaf=st.sampled_from("xy"))  # fmt: skip
        def both_at_once(self, cells: list[Any], leaf: str) -> None:
            values = [self._value(leaf, c, 100 + i) for i, c in enumerate(cells)]
            rows = [
                TensorDict({leaf: v}, torch.empty(4, 3)[c].shape)
                for c, v in zip(cells, values, strict=True)
            ]
            threads = [
                threading.Thread(target=h.__setitem__, args=(c, r))
                for h, c, r in zip(self.handles, cells, rows, strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            got = self.handles[0][leaf]
            orders = []
            for order in ((0, 1), (1, 0)):
                m = self.model[leaf].clone()
                for i in order:
                    m[_explicit(cells[i])] = values[i]
                orders.append(m)
            assert any(torch.equal(got, m) for m in orders), (cells, got)
            self.model[leaf] = got

        @precondition(lambda self: self.live)
        @rule()
        def restart(self) -> None:
            srv.restart()
            self.live = False

        @precondition(lambda self: self.live)
        @rule()
        def flushall(self) -> None:
            self.raw.flushall()
            self.live = False

        @precondition(lambda self: not self.live)
        @rule(same_id=st.booleans())
        def create_again(self, same_id: bool) -> None:
            assert self.raw.dbsize() == 0  # the lost store was never recreated
            self.stale += self.handles
            self._open(self.handles[0].td_id if same_id else None)

        @precondition(lambda self: bool(self.stale))
        @rule(i=st.integers(0, 10))
        def stale_handle(self, i: int) -> None:
            with pytest.raises(FormatError, match=_LOST):
                self.stale[i % len(self.stale)][1:3]

        @invariant()
        def both_handles_read_the_model(self) -> None:
            if not self.live:
                return
            for h in self.handles:
                local = h.to_local()
                for leaf, want in self.model.items():
                    assert torch.equal(local[leaf], want), leaf

        def teardown(self) -> None:
            for h in self.handles + self.stale:
                h.close()
            self.raw.close()

    return TwoClients


def _run_machine(tmp_path: Any, examples: int, steps: int) -> None:
    srv = RedisProcess(tmp_path)
    try:
        machine = _machine(srv)
        machine.TestCase.settings = settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        run_state_machine_as_test(machine, settings=machine.TestCase.settings)
    finally:
        srv.stop()


def test_two_clients_a_restart_and_a_flush(tmp_path: Any) -> None:
    _run_machine(tmp_path, examples=10, steps=15)


@pytest.mark.slow
def test_two_clients_a_restart_and_a_flush_long(tmp_path: Any) -> None:
    _run_machine(tmp_path, examples=300, steps=50)


# ---- attacks by another client on a store that is open (probe 3) ---------------------


def test_a_header_rewritten_to_another_shape_is_refused(
    store: TensorDictStore, server: RedisServer
) -> None:
    """A header another client rewrote to a shape of the same byte count ([5, 6] for a
    [10, 3] leaf of a batch-[10] store) was trusted: reads gave a [5, 6] tensor, and a
    row write past row 4 SETRANGEd beyond the value, growing it."""
    store["obs"] = torch.arange(30.0).reshape(10, 3)
    store[0]  # the header is cached here
    raw = _raw(server)
    data = f'tensordict:{{{store.td_id}}}:data:["obs"]'
    for shape in ([5, 6], [30], [1, 10, 3]):
        hdr = json.dumps({"kind": "tensor", "dtype": "float32", "shape": shape})
        raw.hset(f"tensordict:{{{store.td_id}}}:index", '["obs"]', hdr)
        other = TensorDictStore.from_store(td_id=store.td_id, **_kw(server))
        bad = rf"entry 'obs': the shape {re.escape(str(shape))} in the header does not start "
        bad += r"with the store's batch size \[10\]"
        with pytest.raises(FormatError, match=bad):
            other["obs"]
        with pytest.raises(FormatError, match=bad):
            other[7]
        with pytest.raises(FormatError, match=bad):
            other[7] = {"obs": torch.zeros(shape[1:] if shape != [30] else [])}
        with pytest.raises(FormatError, match=bad):
            store[7] = {"obs": torch.zeros(3)}  # the cached header is re-read, then refused
        worker = pickle.loads(pickle.dumps(store))
        with pytest.raises(FormatError, match=bad):
            worker[2:4]
        worker.close()
        other.close()
        assert raw.strlen(data) == 120  # nothing grew the value
    raw.close()


_MASK = torch.tensor([False, True, False, True] + [False] * 6)


@pytest.mark.parametrize(
    "index",
    [_MASK, [bool(b) for b in _MASK], slice(2, None, 3), (_MASK,), [], [4], 7, -1, slice(3, 4)],
    ids=repr,
)
def test_an_expanded_row_is_written_at_any_index(store: TensorDictStore, index: Any) -> None:
    """A row broadcast to the rows selected (``row.expand(n)``, stride 0) failed with a
    raw RuntimeError from torch ("view Long as Byte") when a run held one row, and
    ``store[[]]`` was an IndexError about float tensors: compared with a TensorDict."""
    local = TensorDict(
        {"obs": torch.arange(30.0).reshape(10, 3), "n": {"x": torch.arange(10)}}, [10]
    )
    store.update(local.clone())
    row = TensorDict({"obs": torch.full((3,), -1.0), "n": {"x": torch.tensor(-1)}}, [])
    value = row.expand(local[index].batch_size)
    local[index] = value
    store[index] = value
    assert (store.to_local() == local).all()
    assert (store[index] == local[index]).all()


def test_a_limit_lowered_after_the_store_read_it(tmp_path: Any) -> None:
    """``CONFIG SET proto-max-bulk-len`` lowered after the store read the limit: the
    server drops the connection of a value over it, and the write ended in a
    ConnectionError saying it "may or may not have been applied"; now the limit is
    read again and the refusal names it. Nothing was written."""
    srv = RedisProcess(tmp_path)
    try:
        s = TensorDictStore(batch_size=[2], socket_timeout=10, **_kw(srv))
        s.set("big", torch.zeros(2, 2**18))  # 2 MiB: the limit (512 MiB) is read here
        raw = redis.Redis(host=srv.host, port=srv.port)
        raw.config_set("proto-max-bulk-len", "1mb")
        lowered = r"2097152 bytes, more than the 1048576 .*lower than when this handle read it"
        err = _in_thread(lambda: s.set("other", torch.ones(2, 2**18)))
        assert isinstance(err, ValueError)
        with pytest.raises(ValueError, match=rf"entry 'other'.*{lowered}"):
            raise err
        with pytest.raises(ValueError, match=r"entry 'big'.*2097152 bytes, more than the 1048576"):
            s[:] = {"big": torch.ones(2, 2**18)}  # refused before it is sent now
        assert s.keys() == ["big"] and s["big"].sum() == 0
        raw.close()
        s.close()
    finally:
        srv.stop()


def test_a_wrong_password_is_a_permission_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong or missing password was a ConnectionError "cannot reach the server"
    (redis-py's AuthenticationError is a ConnectionError): a server that is up and says
    no is a PermissionError, also for a worker whose environment holds a wrong one."""
    srv = RedisProcess(tmp_path, "--requirepass", "right-pw")
    refused = r"the server refused the credentials \(a wrong or missing password"
    try:
        for kw in ({"password": "wrong"}, {}, {"username": "bob", "password": "right-pw"}):
            with pytest.raises(
                PermissionError, match=rf"at redis://.*{refused}.*(invalid|HELLO|NOAUTH)"
            ):
                TensorDictStore(batch_size=[3], **kw, **_kw(srv))
        with pytest.raises(PermissionError, match=refused):
            TensorDictStore(batch_size=[3], url=f"redis://:wrong@{srv.host}:{srv.port}/0")
        s = TensorDictStore(batch_size=[3], password="right-pw", **_kw(srv))
        s["x"] = torch.arange(3)
        monkeypatch.setenv("TENSORBOX_REDIS_PASSWORD", "wrong")
        w = pickle.loads(pickle.dumps(s))
        with pytest.raises(PermissionError, match=rf"'x'.*: {refused}"):
            w["x"]
        w.close()
        s.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("index", [2, slice(2, 4), [0, 9], _MASK])
def test_rows_read_while_another_client_reshapes_the_leaf(
    store: TensorDictStore, server: RedisServer, index: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another client's ``set`` of a new shape between the read of the headers and the
    fetch of the rows: the byte ranges were planned by the old header and kept when the
    new one came back, so the read failed with "came back short" or a raw torch error
    (two processes, 3 of 3 runs). The rows are now planned by the header read with them."""
    store["obs"] = torch.zeros(10, 5)
    other = TensorDictStore.from_store(td_id=store.td_id, **_kw(server))
    new = torch.arange(30.0).reshape(10, 3)
    plan = store._plan
    once = [True]

    def plan_then_reshape(*args: Any) -> Any:
        got = plan(*args)
        if once.pop() if once else False:
            other["obs"] = new  # lands between the planning and the reading of the rows
        return got

    monkeypatch.setattr(store, "_plan", plan_then_reshape)
    assert torch.equal(store[index]["obs"], new[index])
    assert not once  # the race happened
    other.close()


def test_per_row_values_of_another_length_are_refused(
    store: TensorDictStore, server: RedisServer
) -> None:
    """Per-row non-tensor values another client replaced by a list of 3 (or a string, or
    an object) in a batch-[10] store: ``store["lab"]`` returned the 3 values, a row read
    or write was a raw numpy IndexError naming nothing."""
    store["lab"] = "a"
    store[3] = {"lab": "b"}  # per-row values now
    raw = _raw(server)
    bad = r"entry 'lab': the per-row values are not nested lists of the store's batch size \[10\]"
    for value in (["a"] * 3, "text", {"a": 1}, ["a"] * 11):
        raw.set(f'tensordict:{{{store.td_id}}}:data:["lab"]', json.dumps(value))
        with pytest.raises(FormatError, match=bad):
            store["lab"]
        with pytest.raises(FormatError, match=bad):
            store[5]
        with pytest.raises(FormatError, match=bad):
            store[5] = {"lab": "z"}
        with pytest.raises(FormatError, match=bad):
            store.to_local()
    raw.close()


def test_batch_size_is_fixed_and_setting_it_says_what_to_do(store: TensorDictStore) -> None:
    from tensorbox import LazyStackedTensorDict

    assert store.batch_size == torch.Size([10]) == store.shape
    with pytest.raises(
        RuntimeError, match=r"127\.0\.0\.1.*batch size of a store is fixed; to_local"
    ):
        store.batch_size = [5]
    assert store.batch_size == torch.Size([10])
    lazy = LazyStackedTensorDict(TensorDict(a=torch.zeros(3)), TensorDict(a=torch.ones(3)))
    assert lazy.batch_size == torch.Size([2])
    with pytest.raises(RuntimeError, match=r"batch size of a lazy stack: densify it first"):
        lazy.batch_size = [1, 2]
    assert lazy.batch_size == torch.Size([2])


def test_a_row_read_is_one_round_trip_and_sees_other_clients(
    store: TensorDictStore, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row reads plan by the index this handle last saw and read the whole index again in
    the same transaction: one round trip while nobody changes it (two before: the index,
    then the rows), and an entry another client adds or re-sets is seen at once."""
    import redis.connection

    store["obs"] = torch.arange(40.0).reshape(10, 4)
    store["act"] = torch.arange(10)
    store[0]  # learns the index
    sends = [0]
    send = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sends[0] += 1
        send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    for i in (3, slice(2, 5), [1, 7]):
        sends[0] = 0
        assert torch.equal(store[i]["obs"], torch.arange(40.0).reshape(10, 4)[i])
        assert sends[0] == 1
    other = TensorDictStore.from_store(td_id=store.td_id, **_kw(server))
    other["new"] = torch.full((10, 2), 7)
    other["act"] = -torch.arange(10)
    sends[0] = 0
    got = store[4]
    assert sends[0] == 2  # the changed index came back with the rows: planned again
    assert got["new"].tolist() == [7, 7] and got["act"].item() == -4
    other.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(idx=st.lists(st.integers(0, 99), min_size=1, max_size=40), flush=st.booleans())
def test_scattered_rows_by_one_script_even_after_script_flush(
    server: RedisServer, idx: list[int], flush: bool
) -> None:
    """Many scattered rows of a value come back as one reply of a server-side script
    (one reply, not one per range); a server that lost its scripts (``SCRIPT FLUSH``, a
    restart) is given the script again and the read succeeds. Oracle: torch indexing."""
    local = TensorDict({"obs": torch.randn(100, 3), "a": torch.arange(100)}, [100])
    store = TensorDictStore.from_tensordict(local, **_kw(server))
    raw = _raw(server)
    try:
        if flush:
            raw.script_flush()
        got = store[idx]
        assert torch.equal(got["obs"], local["obs"][idx])
        assert torch.equal(got["a"], local["a"][idx])
    finally:
        raw.close()
        store.clear_redis()
        store.close()
