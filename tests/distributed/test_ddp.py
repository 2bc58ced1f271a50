"""Data-parallel loading: rank shares of ``BatchLoader`` and ``AugmentBuffer``.

Two kinds of checks: single-process ones with explicit ``num_replicas``/``rank`` (every
rank of a world simulated in one process), and one run of 2 gloo processes on loopback
(``tests/ddp_worker.py``) for the process-group defaults, whose results the tests below
compare across ranks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict
from tensorbox.buffer import AugmentBuffer
from tensorbox.data import BatchLoader

# Heavy: starts process groups (gloo on loopback). The quick loop (`make check`) leaves the module
# out without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "ddp_worker.py"


def _data(n: int) -> TensorDict:
    return TensorDict({"x": torch.zeros(n, 2), "targets": torch.arange(n)}, batch_size=[n])


def _rows(loader) -> list[list[int]]:
    return [b["targets"].tolist() for b in loader]


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


# ------------------------------------------------------------------ one process, explicit


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    replicas=st.integers(1, 4),
    batch=st.integers(1, 6),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    epoch=st.integers(0, 3),
)
def test_rank_shares_split_the_epoch_like_a_distributed_sampler(
    n, replicas, batch, drop_last, shuffle, epoch
):
    loaders = [
        BatchLoader(
            _data(n),
            batch,
            shuffle=shuffle,
            drop_last=drop_last,
            num_replicas=replicas,
            rank=r,
            num_threads=1,
        )
        for r in range(replicas)
    ]
    for lo in loaders:
        lo.set_epoch(epoch)
    shares = [_flat(_rows(lo)) for lo in loaders]
    # the oracle: one permutation for all, padded by repeating it (or cut), then strided
    perm = loaders[0].permutation(epoch).tolist()
    assert all(lo.permutation(epoch).tolist() == perm for lo in loaders)
    per_rank = n // replicas if drop_last else -(-n // replicas)
    padded = (perm * (replicas + 1))[: per_rank * replicas]
    for r, share in enumerate(shares):
        mine = padded[r::replicas]
        if drop_last:
            mine = mine[: len(mine) // batch * batch]
        assert sorted(share) == sorted(mine)
        assert len(_rows(loaders[r])) == len(loaders[r])
    assert len({len(s) for s in shares}) == 1  # every rank runs as many steps
    everything = _flat(shares)
    if not drop_last:
        assert set(everything) == set(range(n))  # together, the whole dataset
        assert len(everything) - n == per_rank * replicas - n  # repeats: padding only
    else:
        assert len(everything) == len(set(everything))  # disjoint


def test_shares_change_with_set_epoch_and_ranks_agree_on_the_permutation():
    a = BatchLoader(_data(20), 4, num_replicas=2, rank=0, seed=3)
    b = BatchLoader(_data(20), 4, num_replicas=2, rank=1, seed=3)
    assert torch.equal(a.permutation(0), b.permutation(0))
    e0 = _flat(_rows(a))
    a.set_epoch(1)
    assert _flat(_rows(a)) != e0
    assert sorted(_flat(_rows(b)) + e0) == list(range(20))


def test_seed_none_means_zero_with_several_replicas():
    assert BatchLoader(_data(10), 4, num_replicas=2, rank=1).seed == 0
    assert BatchLoader(_data(10), 4, num_replicas=2, rank=1, seed=5).seed == 5


def test_one_replica_is_the_single_process_loader():
    plain = BatchLoader(_data(13), 4, seed=7, crop=None)
    one = BatchLoader(_data(13), 4, seed=7, num_replicas=1)
    assert (one.num_replicas, one.rank) == (1, 0)
    assert _rows(plain) == _rows(one)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"num_replicas": 2, "rank": 2}, r"rank=2 is outside \[0, num_replicas=2\)"),
        ({"num_replicas": 2, "rank": -1}, r"rank=-1 is outside \[0, num_replicas=2\)"),
        ({"num_replicas": 0, "rank": 0}, r"num_replicas must be >= 1, got 0"),
        ({"num_replicas": 2}, r"num_replicas=2 was given without rank"),
        ({"rank": 1}, r"rank=1 was given without num_replicas"),
    ],
)
def test_bad_ranks_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        BatchLoader(_data(10), 4, **kw)
    with pytest.raises(ValueError, match=match):
        AugmentBuffer(_data(10), batch_size=4, num_workers=0, **kw)


def test_rank_must_be_an_int():
    with pytest.raises(TypeError, match=r"rank must be an int, got 1.0"):
        BatchLoader(_data(10), 4, num_replicas=2, rank=1.0)


def _aug_data(n: int) -> TensorDict:
    image = torch.arange(3 * 10 * 10, dtype=torch.uint8).view(3, 10, 10)
    return TensorDict(
        {"images": image.expand(n, 3, 10, 10).clone(), "targets": torch.arange(n)}, [n]
    )


def test_ranks_draw_different_augmentations():
    kw = dict(batch_size=4, crop=5, flip=True, num_replicas=2, seed=0)
    a, b = (next(iter(BatchLoader(_aug_data(16), rank=r, **kw)))["images"] for r in (0, 1))
    same = sum(torch.equal(x, y) for x, y in zip(a, b))
    assert same < 2, "the ranks drew the same crops and flips"


@pytest.mark.parametrize("stop_after", [0, 1, 2])
def test_resume_mid_epoch_on_every_rank(stop_after):
    kw = dict(batch_size=3, crop=5, flip=True, num_replicas=2, seed=1, num_threads=1)
    for rank in (0, 1):
        whole = [b.clone() for b in BatchLoader(_aug_data(17), rank=rank, **kw)]
        lo = BatchLoader(_aug_data(17), rank=rank, **kw)
        it = iter(lo)
        for _ in range(stop_after):
            next(it)
        state = lo.state_dict()
        it.close()
        again = BatchLoader(_aug_data(17), rank=rank, **kw)
        again.load_state_dict(state)
        rest = list(again)
        assert len(rest) == len(whole) - stop_after
        for x, y in zip(rest, whole[stop_after:]):
            assert (x == y).all()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("new_world", [1, 3])
def test_resume_with_another_world_size_reshards_the_rest_of_the_epoch(drop_last, new_world):
    n, bs = 23, 3
    old = [
        BatchLoader(_data(n), bs, num_replicas=2, rank=r, seed=4, drop_last=drop_last)
        for r in range(2)
    ]
    its = [iter(lo) for lo in old]
    read = [next(it)["targets"].tolist() for it in its for _ in range(2)]
    state = old[0].state_dict()
    for it in its:
        it.close()
    new = [
        BatchLoader(_data(n), bs, num_replicas=new_world, rank=r, seed=0, drop_last=drop_last)
        for r in range(new_world)
    ]
    for lo in new:
        lo.load_state_dict(state)
    rest = [_flat(_rows(lo)) for lo in new]
    before, after = _flat(read), _flat(rest)
    assert set(before).isdisjoint(after)  # nothing read twice
    assert len({len(r) for r in rest}) == 1
    perm = old[0].permutation(0).tolist()
    assert sorted(before) == sorted(perm[: 2 * bs * 2])  # the old world read a prefix
    left = perm[2 * bs * 2 :]
    if drop_last:  # the new world's drop rule: fewer rows, never repeated
        assert len(after) == len(set(after)) and set(after) <= set(left)
    else:
        assert set(after) == set(left)
    for lo in new:  # the next epoch is the new world's own
        assert lo.state_dict()["epoch"] == 1 and lo.state_dict()["offset"] == 0


def test_state_is_rank_independent_and_checks_drop_last():
    a = BatchLoader(_data(10), 4, num_replicas=2, rank=0)
    b = BatchLoader(_data(10), 4, num_replicas=2, rank=1)
    assert a.state_dict() == b.state_dict()
    with pytest.raises(ValueError, match=r"saved with drop_last=0 but this loader has drop_last=1"):
        BatchLoader(_data(10), 4, drop_last=True).load_state_dict(a.state_dict())


# ------------------------------------------------------------------ AugmentBuffer, explicit


def _jitter(sample, generator):
    return {"x": sample["x"] + torch.rand(2, generator=generator), "targets": sample["targets"]}


def _buffer_epoch(n, replicas, rank, **kw):
    with AugmentBuffer(
        _data(n), _jitter, batch_size=3, num_workers=0, num_replicas=replicas, rank=rank, **kw
    ) as buf:
        batches = [b.clone() for b in buf]
        return len(buf), batches


@pytest.mark.parametrize("drop_last", [False, True])
def test_buffer_shares(drop_last):
    n = 11
    got = [_buffer_epoch(n, 2, r, drop_last=drop_last) for r in (0, 1)]
    lens = [g[0] for g in got]
    rows = [torch.cat([b["targets"] for b in g[1]]).tolist() for g in got]
    xs = [torch.cat([b["x"] for b in g[1]]) for g in got]
    assert lens[0] == lens[1] == len(got[0][1]) == (1 if drop_last else 2)
    assert len(rows[0]) == len(rows[1]) == (3 if drop_last else 6)
    if drop_last:
        assert set(rows[0]).isdisjoint(rows[1])
    else:
        assert set(rows[0] + rows[1]) == set(range(n)) and len(rows[0] + rows[1]) == 12
    # augmentations: no draw repeats across ranks, padded repeats included
    assert len(set(torch.cat(xs).flatten().tolist())) == xs[0].numel() + xs[1].numel()


def test_buffer_producers_make_the_same_rank_batches_as_inline():
    def epoch(workers):
        with AugmentBuffer(
            _data(11), _jitter, batch_size=3, num_workers=workers, num_replicas=2, rank=1,
            start_method="fork",
        ) as buf:  # fmt: skip
            return [b.clone() for b in buf]

    inline, produced = epoch(0), epoch(1)
    assert len(inline) == len(produced) == 2
    for a, b in zip(inline, produced):
        assert (a == b).all()


def _batch_noise(batch, generator):
    return {"x": torch.rand(batch["x"].shape, generator=generator), "targets": batch["targets"]}


def test_buffer_batch_transforms_draw_differently_per_rank():
    draws = []
    for rank in (0, 1):
        with AugmentBuffer(
            _data(12), batch_size=3, batch_transform=_batch_noise, num_workers=0,
            num_replicas=2, rank=rank,
        ) as buf:  # fmt: skip
            draws.append(torch.cat([b["x"] for b in buf]).flatten().tolist())
    assert set(draws[0]).isdisjoint(draws[1])


@pytest.mark.parametrize("rank", [0, 1])
def test_buffer_resumes_mid_epoch_on_each_rank(rank):
    kw = dict(batch_size=3, num_workers=0, num_replicas=2, rank=rank, seed=2)
    with AugmentBuffer(_data(13), _jitter, **kw) as buf:
        whole = [b.clone() for b in buf]
    with AugmentBuffer(_data(13), _jitter, **kw) as buf:
        it = iter(buf)
        next(it)
        state = buf.state_dict()
    with AugmentBuffer(_data(13), _jitter, **kw) as buf:
        buf.load_state_dict(state)
        rest = [b.clone() for b in buf]
    assert len(whole) == 3 and len(rest) == 2
    for a, b in zip(rest, whole[1:]):
        assert (a == b).all()


def test_buffer_resume_with_another_world_size():
    with AugmentBuffer(_data(12), batch_size=3, num_workers=0, num_replicas=2, rank=0) as buf:
        it = iter(buf)
        next(it)
        mid = buf.state_dict()
        list(it)
        boundary = buf.state_dict()
    with AugmentBuffer(_data(12), batch_size=3, num_workers=0, num_replicas=1) as other:
        with pytest.raises(ValueError, match=r"saved mid-epoch \(epoch 0, batch 1\) by 2 replicas"):
            other.load_state_dict(mid)
        other.load_state_dict(boundary)
        assert (other.epoch, other.batch) == (1, 0)


# ------------------------------------------------------------------ 2 gloo processes


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    shared = tmp_path_factory.mktemp("ddp")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(r), "2", str(shared)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=90)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs)
    return [torch.load(shared / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_read_disjoint_equal_shares_that_cover_the_data(ranks, drop_last):
    n, per_rank = 21, (10 if drop_last else 11)
    for epoch in range(2):
        a, b = (r[f"loader/{drop_last}"][epoch] for r in ranks)
        assert int(a["len"]) == int(b["len"]) == (2 if drop_last else 3)
        assert a["sizes"].tolist() == b["sizes"].tolist() == ([4, 4] if drop_last else [4, 4, 3])
        ta, tb = a["targets"].tolist(), b["targets"].tolist()
        if drop_last:  # each rank dropped its partial last batch of 2
            assert len(ta) == len(tb) == 8 and set(ta).isdisjoint(tb)
        else:
            assert len(ta) == len(tb) == per_rank
            assert set(ta + tb) == set(range(n))
            assert len(set(ta) & set(tb)) == 1  # the one padded row
    for r in ranks:
        e0, e1 = r[f"loader/{drop_last}"]
        assert e0["targets"].tolist() != e1["targets"].tolist()  # set_epoch reshuffled


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_defaults_equal_explicit(ranks, drop_last):
    for r in ranks:
        for d, e in zip(r[f"loader/{drop_last}"], r[f"explicit/{drop_last}"]):
            assert torch.equal(d["targets"], e["targets"]) and torch.equal(d["images"], e["images"])
        for d, e in zip(r[f"buffer/{drop_last}"], r[f"buffer_explicit/{drop_last}"]):
            assert torch.equal(d["y"], e["y"]) and torch.equal(d["x"], e["x"])


def test_two_ranks_draw_different_augmentations(ranks):
    a, b = (r["loader/False"][0]["images"] for r in ranks)
    same = sum(torch.equal(x, y) for x, y in zip(a, b))
    assert same < len(a) // 2
    xa, xb = (r["buffer/False"][0]["x"] for r in ranks)
    assert set(xa.flatten().tolist()).isdisjoint(xb.flatten().tolist())


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_resume_from_rank_zeros_state(ranks, drop_last):
    for r in ranks:
        got = r[f"resume/{drop_last}"]
        assert int(got["state_batch"]) == 1
        assert torch.equal(got["again"], got["tail"])


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_buffer_shares(ranks, drop_last):
    for epoch in range(2):
        a, b = (r[f"buffer/{drop_last}"][epoch] for r in ranks)
        ya, yb = a["y"].tolist(), b["y"].tolist()
        assert int(a["len"]) == int(b["len"]) and len(ya) == len(yb)
        if drop_last:
            assert set(ya).isdisjoint(yb) and len(ya) == 8
        else:
            assert set(ya + yb) == set(range(21)) and len(ya) == 11
    for r in ranks:
        assert (
            r[f"buffer/{drop_last}"][0]["y"].tolist() != r[f"buffer/{drop_last}"][1]["y"].tolist()
        )


def test_one_replica_under_a_process_group_reads_everything(ranks):
    for r in ranks:
        assert r["single"][0]["targets"].tolist() == list(range(21))
