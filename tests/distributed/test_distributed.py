"""tensorbox.distributed: the wire protocol in process, then the real thing over gloo.

* In process (fast, hypothesis): ``_frame`` feeds ``_receive`` through a fake
  transport that, like gloo, refuses a message larger than the posted buffer, and
  checks that every message is consumed. Round trips of random containers, packed
  and per leaf, in place and structure-free, with the digest cache on both ends.
* Two processes spawned once (gloo, loopback, file init) run every scenario in
  order; each test reads its scenario's outcome on both ranks. A scenario that
  hangs is cut by the join timeout, never by the test run's.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

import tensorbox.distributed as tbd
from tensorbox import NonTensorData, TensorDict, tensorclass
from tests.strategies import tensordicts

# Heavy: starts process groups (gloo on loopback). The quick loop (`make check`) leaves the module
# out without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

CPU = torch.device("cpu")


@tensorclass
class Point:
    """Registered in both processes: spawn imports this module in the children."""

    xy: torch.Tensor
    label: str = "p"


def sample(i: int = 0) -> TensorDict:
    """Many dtypes, nesting, a 0-d leaf, an empty leaf, non-tensor values."""
    return TensorDict(
        {
            "obs": torch.arange(12.0).reshape(2, 6) + i,
            "mask": torch.tensor([True, False]) ^ bool(i % 2),
            "half": torch.full((2, 3), i, dtype=torch.float16),
            "z": torch.full((2, 2), complex(i, -i), dtype=torch.complex64),
            "empty": torch.zeros(2, 0),
            "info": {"step": torch.tensor([i, i + 1]), "scalar": torch.full((2,), 7 * i)},
            "name": "sample",
        },
        batch_size=[2],
    )


def assert_equal(a: Any, b: Any) -> None:
    pa = list(a.items(include_nested=True, leaves_only=True))
    pb = list(b.items(include_nested=True, leaves_only=True))
    assert [k for k, _ in pa] == [k for k, _ in pb]
    for (k, va), (_, vb) in zip(pa, pb):
        if isinstance(va, torch.Tensor):
            assert va.dtype == vb.dtype and va.shape == vb.shape, k
            assert torch.equal(va, vb), (k, va, vb)
        else:
            assert va == vb or (va != va and vb != vb), k  # NaN == NaN here
    assert a.batch_size == b.batch_size


def std_json(value: Any) -> bytes:
    return json.dumps(value).encode()


def tensors_only(td: TensorDict) -> TensorDict:
    return td.exclude(*[k for k, v in td.items(True, True) if not torch.is_tensor(v)])


# ------------------------------------------------------------ in process


def loopback(
    obj: Any, into: Any = None, *, packed: bool = True, chans: Any = None, cls: Any = None
):
    """One transfer through ``_frame`` -> fake transport -> ``_receive``."""
    send_ch, recv_ch = chans or (
        tbd._Channel(CPU, tbd.FRAME_BYTES),
        tbd._Channel(CPU, tbd.FRAME_BYTES),
    )
    s = tbd._describe(obj, "send")
    threshold = tbd.SEPARATE_BYTES if packed else tbd._PER_LEAF
    raw = b"" if send_ch.remember(s.digest) else s.raw
    frame, tail = tbd._frame(
        s, tbd._plan(s, threshold), raw, tbd.FRAME_BYTES, False, threshold, CPU
    )
    msgs = iter([frame, *tail])

    def recv(buf: torch.Tensor) -> None:
        msg = next(msgs)
        assert msg.nbytes <= buf.nbytes, "gloo would abort: message larger than the buffer"
        flat = buf.view(-1).view(torch.uint8) if buf.numel() else buf
        flat[: msg.nbytes].copy_(msg.reshape(-1).view(torch.uint8))

    mine = None if into is None else tbd._describe(into, "recv", values=False)
    out = tbd._receive(recv_ch, recv, 0, "recv", mine, into, cls)
    assert next(msgs, None) is None, "a message was left unread"
    return out


@given(tensordicts(nontensor=True), st.booleans())
def test_round_trip_structure_free(td: TensorDict, packed: bool) -> None:
    assert_equal(loopback(td, packed=packed), td)


@given(tensordicts(nontensor=True), st.booleans())
def test_round_trip_in_place(td: TensorDict, packed: bool) -> None:
    into = td.apply(torch.zeros_like)
    assert loopback(td, into, packed=packed) is into
    assert_equal(tensors_only(into), tensors_only(td))


def test_large_json_payload_and_separate_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tbd, "SEPARATE_BYTES", 4096)
    td = TensorDict({f"k{i:04d}": torch.full((3,), float(i)) for i in range(3000)}, [3])
    td["big"] = torch.arange(3 * 5000.0).reshape(3, 5000)  # 60 kB: alone
    td["nc"] = torch.arange(3 * 2000).reshape(2000, 3).T  # non-contiguous, alone
    assert len(tbd._describe(td, "t").raw) > tbd.FRAME_BYTES
    assert_equal(loopback(td), td)
    into = td.apply(torch.zeros_like)
    into["nc"] = torch.zeros(2000, 3, dtype=torch.int64).T  # receives through a copy
    loopback(td, into)
    assert_equal(into, td)


@pytest.mark.parametrize("packed", [True, False])
def test_conjugate_negative_and_grad_leaves(packed: bool) -> None:
    z = torch.complex(torch.arange(4.0), torch.ones(4))
    td = TensorDict(
        c=z.conj(), n=z.conj().imag, w=torch.randn(4, requires_grad=True), batch_size=[4]
    )
    out = loopback(td, packed=packed)
    assert torch.equal(out["c"], z.conj().resolve_conj()) and torch.equal(out["n"], -z.imag)
    zero = torch.zeros(4, dtype=torch.complex64).conj()
    into = TensorDict(
        c=zero, n=torch.zeros(4), w=torch.nn.Parameter(torch.zeros(4)), batch_size=[4]
    )
    loopback(td, into, packed=packed)  # a parameter is written in place, without autograd
    assert torch.equal(into["c"], out["c"]) and torch.equal(into["w"], td["w"].detach())


def test_digest_cache_stays_in_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tbd, "CACHE_SIZE", 2)
    chans = (tbd._Channel(CPU, tbd.FRAME_BYTES), tbd._Channel(CPU, tbd.FRAME_BYTES))
    structures = [TensorDict({k: torch.ones(2)}, [2]) for k in "abcab" * 3]
    for i, td in enumerate(structures):
        td[td.keys().__iter__().__next__()] *= i
        assert_equal(loopback(td, chans=chans), td)
    assert list(chans[0].seen) == list(chans[1].seen) and len(chans[0].seen) == 2


def test_in_place_mismatch_names_the_key_and_drains() -> None:
    chans = (tbd._Channel(CPU, tbd.FRAME_BYTES), tbd._Channel(CPU, tbd.FRAME_BYTES))
    sent = sample(1)
    cases = {
        "missing": (sample().exclude("half"), "key 'half'"),
        "dtype": (sample().set("obs", torch.zeros(2, 6, dtype=torch.float64)), "dtype"),
        "shape": (sample().set(("info", "step"), torch.zeros(2, 3, dtype=torch.int64)), "shape"),
        "extra": (sample().set("more", torch.zeros(2)), "'more' is a leaf on this rank"),
    }
    for into, pattern in cases.values():
        with pytest.raises(tbd.StructureMismatchError, match=pattern):
            loopback(sent, into, chans=chans)
    into = sample()
    loopback(sent, into, chans=chans)  # the stream is still in step
    assert_equal(into.exclude("name"), sent.exclude("name"))


def test_tensorclass_rebuilt_only_as_known_classes() -> None:
    p = Point(torch.ones(3, 2), label="q", batch_size=[3])
    got = loopback(p)
    assert type(got) is Point and got.label == "q" and torch.equal(got.xy, p.xy)
    assert type(loopback(p.to_tensordict(), cls=Point)) is Point  # the caller's class
    with pytest.raises(TypeError, match="no fields"):
        loopback(sample(), cls=Point)


def test_unknown_type_name_gives_a_tensordict() -> None:
    td = TensorDict({"xy": torch.ones(2)}, [2])
    s = tbd._describe(td, "t")
    s.desc["type"] = "os:system"
    parsed = tbd._parse(std_json(s.desc), "peer")
    plan = tbd._plan(parsed, tbd.SEPARATE_BYTES)
    buf = torch.empty(plan.nbytes, dtype=torch.uint8)
    tbd._pack(plan, s.leaves, buf)
    out = tbd._build(parsed, plan, buf, [], None, CPU)
    assert type(out) is TensorDict and torch.equal(out["xy"], td["xy"])


@pytest.mark.parametrize(
    "desc, pattern",
    [
        ({"type": "TensorDict", "batch_size": [2], "device": None}, "malformed"),
        ({"type": "TensorDict", "batch_size": [-1], "device": None, "entries": {}}, "malformed"),
        (
            {
                "type": "T",
                "batch_size": [2],
                "device": None,
                "entries": {"a": {"kind": "tensor", "dtype": "float99", "shape": [2]}},
            },
            "at key 'a'",
        ),
        (
            {
                "type": "T",
                "batch_size": [2],
                "device": None,
                "entries": {"a": {"kind": "tensor", "dtype": "float32", "shape": [3]}},
            },
            "at key 'a'",
        ),
        (
            {"type": "T", "batch_size": [], "device": None, "entries": {"a": {"kind": "pickle"}}},
            "at key 'a'",
        ),
    ],
)
def test_malformed_descriptions_are_refused(desc: dict, pattern: str) -> None:
    with pytest.raises(tbd.DistributedError, match=pattern):
        tbd._parse(std_json(desc), "rank 3")
    with pytest.raises(tbd.DistributedError, match="not JSON"):
        tbd._parse(b"{", "rank 3")


def test_sparse_and_non_json_values_refused() -> None:
    with pytest.raises(TypeError, match=r"'s'.*dense"):
        tbd._describe(TensorDict(s=torch.eye(2).to_sparse()), "send")
    with pytest.raises(TypeError, match="'obj'"):
        tbd._describe(TensorDict(obj=object()), "send")
    with pytest.raises(TypeError, match="expected a TensorDict"):
        tbd._describe({"a": torch.ones(1)}, "send")


def test_no_process_group_is_a_clear_error() -> None:
    assert not dist.is_initialized()
    td = sample()
    calls = [
        lambda: tbd.send(td, 1),
        lambda: tbd.recv(td, 1),
        lambda: tbd.isend(td, 1),
        lambda: tbd.recv_structure(1),
        lambda: tbd.broadcast_(td, 0),
        lambda: tbd.all_reduce_(td),
        lambda: tbd.all_gather(td),
        lambda: tbd.shard_indices(10),
    ]
    for call in calls:
        with pytest.raises(tbd.DistributedError, match="init_process_group"):
            call()


@pytest.mark.parametrize("n", [0, 1, 7, 10, 12])
@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize(
    "shuffle, drop_last", [(False, False), (True, False), (True, True), (False, True)]
)
def test_shard_indices_match_distributed_sampler(
    n: int, world: int, shuffle: bool, drop_last: bool
) -> None:
    for rank in range(world):
        sampler = DistributedSampler(
            range(n), world, rank, shuffle=shuffle, seed=5, drop_last=drop_last
        )
        sampler.set_epoch(2)
        got = tbd.shard_indices(
            n, rank, world, shuffle=shuffle, seed=5, epoch=2, drop_last=drop_last
        )
        assert got.tolist() == list(sampler)


@given(
    n=st.integers(0, 40),
    world=st.integers(1, 6),
    data=st.data(),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 50),
)
def test_shard_indices_are_distributed_samplers_order(
    n: int, world: int, data: Any, shuffle: bool, drop_last: bool, seed: int, epoch: int
) -> None:
    # shard_indices is built on the split BatchLoader and AugmentBuffer use
    # (tensorbox.distributed.sharding.share_positions); torch's sampler is the oracle
    rank = data.draw(st.integers(0, world - 1))
    sampler = DistributedSampler(
        range(n), world, rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    sampler.set_epoch(epoch)
    got = tbd.shard_indices(
        n, rank, world, shuffle=shuffle, seed=seed, epoch=epoch, drop_last=drop_last
    )
    assert got.tolist() == list(sampler)


def test_a_rank_past_the_rows_gets_none() -> None:
    # fewer rows than ranks, drop_last: the split BatchLoader uses raised from arange
    from tensorbox.data.sharding import share_positions

    assert share_positions(2, num_replicas=3, rank=2, drop_last=True).tolist() == []
    assert tbd.shard_indices(2, 2, 3, drop_last=True).tolist() == []


def test_shard_indices_cover_every_row_once_per_epoch() -> None:
    shards = [tbd.shard_indices(100, r, 4, shuffle=True, epoch=3) for r in range(4)]
    assert sorted(torch.cat(shards).tolist()) == list(range(100))
    with pytest.raises(ValueError, match="rank"):
        tbd.shard_indices(10, 4, 4)


# ------------------------------------------------------------ two processes


def s_send_recv(rank: int) -> None:
    if rank == 0:
        for i in (1, 2):  # the second reuses the peer's cached description
            td = sample(i)
            td["obs"] = td["obs"].T.contiguous().T  # a non-contiguous source
            assert tbd.send(td, 1) is None
        return
    for i in (1, 2):
        into = sample()
        into["obs"] = torch.zeros(6, 2).T  # a non-contiguous destination
        assert tbd.recv(into, 0) is into
        assert_equal(into.exclude("name"), sample(i).exclude("name"))
    assert len(tbd._channel(dist.group.WORLD, "recv", 0, 0).seen) == 1


def s_memmap_and_per_leaf(rank: int) -> None:
    if rank == 0:
        tbd.send(sample(3), 1, packed=False)
        tbd.send(sample(4), 1, packed=False)
        tbd.send(sample(5), 1)
        return
    with tempfile.TemporaryDirectory() as d:
        into = sample().memmap_(d)  # receive straight into files
        tbd.recv(into, 0)
        assert into.is_memmap()
        assert_equal(into.exclude("name"), sample(3).exclude("name"))
        assert_equal(tbd.recv_structure(0), sample(4))
        tbd.recv(into, 0)
        assert_equal(TensorDict.load_memmap(d).exclude("name"), sample(5).exclude("name"))


def s_isend_irecv(rank: int) -> None:
    if rank == 0:
        reqs = [tbd.isend(sample(i), 1) for i in range(3)]
        assert [r.wait() is not None for r in reqs] == [True] * 3
        assert all(r.is_completed() for r in reqs)
        tbd.send(sample(9), 1)
        return
    intos = [sample() for _ in range(3)]
    reqs = [tbd.irecv(x, 0) for x in intos]
    last = tbd.recv(sample(), 0)  # queued behind the irecvs: gets the 4th transfer
    for i, req in reversed(list(enumerate(reqs))):
        assert req.wait(timeout=20) is intos[i]
        assert req.is_completed()
        assert torch.equal(intos[i]["info", "step"], sample(i)["info", "step"])
    assert torch.equal(last["obs"], sample(9)["obs"])


def s_structure(rank: int) -> None:
    nested = TensorDict(
        {
            "x": torch.arange(6).reshape(2, 3),
            # Python numbers would become tensors: NonTensorData keeps them values.
            "meta": {
                "cfg": NonTensorData({"lr": 0.1, "tags": ["a", "b"]}),
                "nan": NonTensorData(float("nan")),
            },
            "deep": TensorDict({"y": torch.ones(2, 3, 4)}, [2, 3]),
        },
        batch_size=[2],
        device="cpu",
    )
    stacked = torch.stack([TensorDict(t=torch.ones(1), s="a"), TensorDict(t=torch.zeros(1), s="b")])
    if rank == 0:
        tbd.send(nested, 1)
        tbd.send_structure(stacked, 1)
        tbd.init_remote(Point(torch.ones(3, 2), label="q", batch_size=[3]), 1)
        tbd.send(TensorDict(xy=torch.ones(2, 2), batch_size=[2]), 1)
        return
    got = tbd.recv_structure(0)
    assert_equal(got, nested)
    assert got.device == CPU and got["deep"].batch_size == (2, 3)
    assert tbd.recv_structure(0)["s"] == ["a", "b"]
    p = tbd.from_remote_init(0)
    assert type(p) is Point and p.label == "q" and p.batch_size == (3,)
    assert type(tbd.recv_structure(0, cls=Point)) is Point


def s_broadcast(rank: int) -> None:
    td = sample(rank + 10)
    assert tbd.broadcast_(td, src=0) is td
    assert_equal(td, sample(10))
    for src in (1, 0):
        got = tbd.broadcast(sample(src + 20) if rank == src else None, src=src)
        assert_equal(got, sample(src + 20))
    p = tbd.broadcast(Point(torch.ones(2, 2), label="b", batch_size=[2]) if rank == 0 else None, 0)
    assert type(p) is Point and p.label == "b"


def s_all_reduce(rank: int) -> None:
    td = TensorDict(
        {
            "f": torch.full((3,), rank + 1.0),
            "i": torch.tensor([rank]),
            "d": {"g": torch.ones(2, 2, dtype=torch.float64) * rank},
        },
        [],
    )
    tbd.all_reduce_(td)
    assert td["f"].tolist() == [3.0] * 3 and td["i"].item() == 1 and td["d", "g"].sum() == 4
    floats = TensorDict(f=torch.full((3,), rank * 2.0), big=torch.full((4096,), rank * 1.0))
    old = tbd.SEPARATE_BYTES
    tbd.SEPARATE_BYTES = 1024  # "big" goes alone
    try:
        req = tbd.all_reduce_(floats, dist.ReduceOp.AVG, async_op=True)
        assert req.wait() is floats
    finally:
        tbd.SEPARATE_BYTES = old
    assert floats["f"].tolist() == [1.0] * 3 and floats["big"].eq(0.5).all()
    tbd.all_reduce_(td, dist.ReduceOp.MAX)
    with pytest.raises(TypeError, match="'i'"):
        tbd.all_reduce_(td, dist.ReduceOp.AVG)


def s_all_gather(rank: int) -> None:
    g = tbd.all_gather(sample(rank))
    assert g.batch_size == (2, 2)
    assert_equal(g[1], sample(1))
    p = tbd.all_gather(Point(torch.full((3, 2), float(rank)), label=f"r{rank}", batch_size=[3]))
    assert type(p) is Point and p.batch_size == (2, 3)
    assert p.label == [["r0"] * 3, ["r1"] * 3] and p.xy[1].eq(1).all()


def s_mismatch(rank: int) -> None:
    bad = sample(1).set("obs", torch.zeros(2, 7))
    if rank == 0:
        tbd.send(bad, 1)
        tbd.send(sample(2), 1)
    else:
        with pytest.raises(tbd.StructureMismatchError, match=r"key 'obs'.*shape \[2, 7\]"):
            tbd.recv(sample(), 0)
        into = sample()
        tbd.recv(into, 0)  # the failed transfer was drained: this one is intact
        assert_equal(into, sample(2))
    mine = sample(1) if rank == 0 else bad
    if rank == 1:
        with pytest.raises(tbd.StructureMismatchError, match="'obs'"):
            tbd.broadcast_(mine, 0)
    else:
        tbd.broadcast_(mine, 0)
    other = sample().exclude("half") if rank == 1 else sample()
    for fn in (tbd.all_reduce_, tbd.all_gather):
        with pytest.raises(tbd.StructureMismatchError, match="'half'"):
            fn(other.exclude("name", "z"))
    tbd.all_reduce_(sample().exclude("name", "z"))  # the group still works


def s_subgroup_and_big_leaves(rank: int) -> None:
    group = dist.new_group([0, 1])  # every rank creates it
    old, tbd.SEPARATE_BYTES = tbd.SEPARATE_BYTES, 32  # "obs" and "z" go alone
    try:
        if rank == 0:
            tbd.send(sample(3), 1, group=group)
        else:
            into = sample()
            into["obs"] = torch.zeros(6, 2).T  # alone, non-contiguous: through a copy
            step = into["info", "step"]  # 16 bytes: packed
            tbd.recv(into, 0, group=group)
            assert into["info", "step"] is step
            assert_equal(into.exclude("name"), sample(3).exclude("name"))
        td = sample(rank)
        tbd.all_reduce_(td.exclude("name", "mask"), group=group)
        assert td["obs"].equal(sample(0)["obs"] + sample(1)["obs"])
    finally:
        tbd.SEPARATE_BYTES = old


def s_bad_peers(rank: int) -> None:
    with pytest.raises(tbd.DistributedError, match="own rank"):
        tbd.send(sample(), rank)
    with pytest.raises(tbd.DistributedError, match="not a rank"):
        tbd.recv(sample(), 5)
    with pytest.raises(TypeError, match="int"):
        tbd.isend(sample(), "1")


SCENARIOS = {
    f.__name__[2:]: f
    for f in [
        s_send_recv,
        s_memmap_and_per_leaf,
        s_isend_irecv,
        s_structure,
        s_broadcast,
        s_all_reduce,
        s_all_gather,
        s_mismatch,
        s_subgroup_and_big_leaves,
        s_bad_peers,
    ]
}


def _worker(rank: int, init: str, q: Any) -> None:
    if sys.platform == "linux":
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=2, timeout=timedelta(seconds=15)
    )
    try:
        for name, fn in SCENARIOS.items():
            try:
                fn(rank)
                q.put((name, rank, None))
            except BaseException:
                q.put((name, rank, traceback.format_exc()))
            dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    init = f"file://{tmp_path_factory.mktemp('dist') / 'init'}"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, init, q), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    got: dict = {}
    deadline = time.monotonic() + 90
    try:
        while len(got) < 2 * len(SCENARIOS):
            name, rank, err = q.get(timeout=max(deadline - time.monotonic(), 0.1))
            got[name, rank] = err
    except queue.Empty:  # a scenario hung or a process died: its tests say so
        pass
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    return got


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_processes(outcomes: dict, name: str) -> None:
    for rank in range(2):
        assert (name, rank) in outcomes, f"{name} did not finish on rank {rank} (hang or crash)"
        assert outcomes[name, rank] is None, f"rank {rank}:\n{outcomes[name, rank]}"


def test_a_hostile_header_is_refused_before_anything_is_allocated() -> None:
    from tensorbox.distributed import _HEADER, _MAGIC, _VERSION, DistributedError, _header

    def frame(json_n: int, payload_n: int, flags: int) -> torch.Tensor:
        f = torch.zeros(1 << 12, dtype=torch.uint8)
        f[:_HEADER].view(torch.int64).copy_(
            torch.tensor([_MAGIC, _VERSION, 0, 0, json_n, payload_n, flags, 0])
        )
        return f

    assert _header(frame(10, 100, 3), "rank 1")[5] == 100  # a sane one passes
    for json_n, payload_n, flags in [
        (0, 1 << 40, 2),
        (1 << 40, 0, 0),
        (-1, 0, 0),
        (0, -5, 0),
        (5000, 0, 1),
        (0, 0, 99),
    ]:
        with pytest.raises(
            DistributedError,
            match=r"rank 1 sent a damaged header .* nothing "
            r"was allocated",
        ):
            _header(frame(json_n, payload_n, flags), "rank 1")
    from tensorbox.distributed import _bytes, _empty

    with pytest.raises(DistributedError, match=r"rank 1 needs 1125899906842624 bytes here"):
        _bytes(1 << 50, "cpu", who="rank 1")
    with pytest.raises(
        DistributedError, match=r"rank 1 sent a leaf of shape \(1125899906842624,\)"
    ):
        _empty((1 << 50,), torch.float32, "cpu", "rank 1")
