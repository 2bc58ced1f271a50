"""TensorDictStore against a real redis-server on loopback (the ``redis_server`` fixture).

Values are checked against torch (the same operations on a local TensorDict); the
failure tests corrupt the server's keys by hand and assert on the messages.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorbox
from tensorbox import (
    FormatError,
    LazyStackedTensorDictStore,
    LockedError,
    TensorDict,
    TensorDictStore,
    tensorclass,
)
from tests.servers import RedisServer, free_port

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
