"""AugmentBuffer: order, reproducibility, back-pressure, faults, cleanup, resume.

Tiny tensors and few batches: process start-up dominates. The default start method
(forkserver) pays about 1 s once per session, then a fork per producer.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict, tensorclass
from tensorbox.buffer import (
    AugmentBuffer,
    BufferStats,
    KeyTransforms,
    ProducerError,
    batch_seed,
    sample_seed,
)
from tensorbox.data.transforms import RandomCrop
from tensorbox.errors import TensorDictKeyError

# Heavy: starts worker processes. The quick loop (`make check`) leaves the module out without
# importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

N = 22  # samples: batches of 4 give 5 full batches and a short one


def make_data(n: int = N) -> TensorDict:
    return TensorDict(
        {"x": torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, 3), "y": torch.arange(n)},
        batch_size=[n],
    )


def noisy(sample, generator):
    """A random per-sample transform whose speed varies, so producers finish out of order."""
    noise = torch.rand(3, generator=generator)
    if int(sample["y"]) % 3 == 0:
        time.sleep(0.01)
    return {"x": sample["x"] + noise, "y": sample["y"], "g": torch.rand(2)}  # g: global RNG


def fails_on_5(sample, generator):
    if int(sample["y"]) == 5:
        raise ValueError("sample 5 is corrupt")
    return noisy(sample, generator)


def killed_on_7(sample, generator):
    if int(sample["y"]) == 7 and multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return noisy(sample, generator)


def sleeps_on_6(sample, generator):
    if int(sample["y"]) == 6 and multiprocessing.parent_process() is not None:
        time.sleep(20)  # far past the test's timeout, which leaves batch 0 time under load
    return noisy(sample, generator)


def run(buf: AugmentBuffer, epochs: int) -> list[TensorDict]:
    return [batch.clone() for _ in range(epochs) for batch in buf]


def assert_same(a: list[TensorDict], b: list[TensorDict]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.batch_size == y.batch_size, i
        assert (x == y).all(), f"batch {i} differs"


def empty(path: Path) -> bool:
    return not any(path.iterdir())


# ---------------------------------------------------------------- order and content


def test_inline_content_is_the_documented_one(tmp_path: Path) -> None:
    data = make_data()
    with AugmentBuffer(data, noisy, batch_size=4, num_workers=0, seed=3, dir=tmp_path) as buf:
        assert len(buf) == 6
        batches = run(buf, 2)
    for epoch in range(2):
        order = torch.cat([b["y"] for b in batches[epoch * 6 : epoch * 6 + 6]])
        assert sorted(order.tolist()) == list(range(N))  # a permutation of the dataset
        for i in order.tolist():  # each sample: the generator of (seed, epoch, index)
            gen = torch.Generator().manual_seed(sample_seed(3, epoch, i))
            want = data["x"][i] + torch.rand(3, generator=gen)
            row = torch.cat([b["x"] for b in batches[epoch * 6 : epoch * 6 + 6]])[
                (order == i).nonzero().item()
            ]
            assert torch.equal(row, want)
    assert [b.batch_size[0] for b in batches[:6]] == [4, 4, 4, 4, 4, 2]
    assert not torch.equal(batches[0]["y"], batches[6]["y"])  # a new order each epoch
    assert empty(tmp_path)


def test_one_and_two_producers_give_identical_batches(tmp_path: Path) -> None:
    data = make_data()
    kw = dict(batch_size=4, seed=1, dir=tmp_path, capacity=3)
    with AugmentBuffer(data, noisy, num_workers=0, **kw) as buf:
        ref = run(buf, 2)
    for workers in (1, 2):
        with AugmentBuffer(data, noisy, num_workers=workers, **kw) as buf:
            assert_same(run(buf, 2), ref)
    assert empty(tmp_path)


def test_no_shuffle_and_drop_last(tmp_path: Path) -> None:
    data = make_data()
    with AugmentBuffer(
        data, batch_size=4, num_workers=0, shuffle=False, drop_last=True, dir=tmp_path
    ) as buf:
        ys = [b["y"].tolist() for b in buf]
    assert ys == [list(range(i, i + 4)) for i in range(0, 20, 4)]


def test_batch_transform_and_key_transforms(tmp_path: Path) -> None:
    data = TensorDict(
        {"img": torch.randint(0, 256, (N, 3, 8, 8), dtype=torch.uint8), "y": torch.arange(N)},
        batch_size=[N],
    )

    kw = dict(batch_size=4, dir=tmp_path, num_epochs=1)
    crop = {"img": RandomCrop(6)}
    with AugmentBuffer(data, batch_transform=_crop_batch, num_workers=0, **kw) as buf:
        ref = run(buf, 1)
    with AugmentBuffer(data, batch_transform=_crop_batch, num_workers=1, **kw) as buf:
        assert_same(run(buf, 1), ref)
    # batch b of epoch 0 is the documented function of its indices and batch_seed
    first = ref[0]
    gen = torch.Generator().manual_seed(batch_seed(0, 0, 0))
    want = RandomCrop(6)(data["img"][first["y"]], gen)
    assert torch.equal(first["img"], want)
    # the per-key form: the same crop per sample, labels untouched
    with AugmentBuffer(data, crop, num_workers=0, **kw) as buf:
        out = run(buf, 1)
    assert out[0]["img"].shape == (4, 3, 6, 6) and out[0]["y"].dtype == torch.int64


def test_key_transforms_on_collections_and_dicts() -> None:
    @tensorclass
    class Sample:
        x: torch.Tensor
        meta: TensorDict

    def plus_one(v, generator):
        return v + 1

    sample = Sample(x=torch.zeros(2), meta=TensorDict(y=torch.ones(2)), batch_size=[])
    for keys in (["x", ("meta", "y")], [("x",), ("meta", ("y",))]):
        out = KeyTransforms(dict.fromkeys(keys, plus_one))(sample, torch.Generator())
        assert type(out) is Sample and out.x.tolist() == [1, 1] and out.meta["y"].tolist() == [2, 2]
    assert sample.x.tolist() == [0, 0]  # the sample itself is left alone
    out = KeyTransforms({("a", "b"): plus_one})({"a": {"b": torch.zeros(1)}}, torch.Generator())
    assert out["a"]["b"].tolist() == [1]
    with pytest.raises(TensorDictKeyError, match=r"key \('a', 3\) is not a key: expected a str"):
        KeyTransforms({("a", 3): plus_one})


def _crop_batch(batch, generator):
    return batch.set("img", RandomCrop(6)(batch["img"], generator))


# ---------------------------------------------------------------- back-pressure


def test_back_pressure_with_a_slow_consumer(tmp_path: Path) -> None:
    cap = 3
    seen: list[BufferStats] = []
    with AugmentBuffer(
        make_data(), noisy, batch_size=2, num_workers=2, capacity=cap, dir=tmp_path
    ) as buf:
        for batch in buf:
            time.sleep(0.05)  # the training step: producers are much faster
            s = buf.stats()
            seen.append(s)
            # made or being made, and not consumed: never more than the slots
            assert s.filled + s.in_progress <= cap
            assert s.produced - s.consumed <= cap
            assert batch.batch_size == (2,)
    assert max(s.filled for s in seen) == cap - 1  # full: one slot is the consumer's view
    assert seen[-1].producer_idle_s > 0.1  # producers waited for free slots
    assert seen[-1].wait_s < seen[0].first_wait_s + 0.5  # and the consumer hardly waited


def test_stats_and_repr(tmp_path: Path) -> None:
    with AugmentBuffer(make_data(), noisy, batch_size=4, num_workers=1, dir=tmp_path) as buf:
        assert "batches_per_epoch=6" in repr(buf)
        for _ in buf:
            pass
        s = buf.stats()
        assert (s.consumed, s.epoch, s.batch, s.capacity) == (6, 1, 0, 4)
        assert s.consumer_rate > 0 and s.num_workers == 1 and s.workers_alive == 1
        assert s.slot_bytes == 4 * (3 * 4 + 8 + 2 * 4)
        assert "fill" in str(s) and 0 <= s.fill <= 1
        assert len(buf.worker_pids) == 1


# ---------------------------------------------------------------- faults


def test_a_raising_producer_surfaces_with_its_traceback(tmp_path: Path) -> None:
    buf = AugmentBuffer(
        make_data(), fails_on_5, batch_size=4, num_workers=2, shuffle=False, dir=tmp_path
    )
    with buf, pytest.raises(ProducerError, match=r"ValueError: sample 5 is corrupt") as info:
        run(buf, 1)
    err = info.value
    assert "Traceback" in str(err) and "fails_on_5" in err.remote_traceback
    assert (err.epoch, err.batch) == (0, 1)
    assert isinstance(err.__cause__, ValueError)
    assert empty(tmp_path)


def test_a_killed_producer_is_an_error_not_a_hang(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    with AugmentBuffer(
        make_data(), killed_on_7, batch_size=4, num_workers=2, shuffle=False, dir=tmp_path
    ) as buf:
        with pytest.raises(ProducerError, match=r"killed by SIGKILL while making epoch 0 batch 1"):
            run(buf, 1)
        assert buf.worker_pids == []  # the other producer was stopped too
    assert time.perf_counter() - t0 < 10
    assert empty(tmp_path)


def test_timeout_names_the_stuck_batch(tmp_path: Path) -> None:
    buf = AugmentBuffer(
        make_data(),
        sleeps_on_6,
        batch_size=4,
        num_workers=1,
        shuffle=False,
        dir=tmp_path,
        timeout=3.0,
    )
    with buf, pytest.raises(TimeoutError, match=r"batch 1 of epoch 0 was not ready"):
        run(buf, 1)


def test_producers_ignore_sigint(tmp_path: Path) -> None:
    with AugmentBuffer(make_data(), noisy, batch_size=2, num_workers=1, dir=tmp_path) as buf:
        it = iter(buf)
        next(it)
        os.kill(buf.worker_pids[0], signal.SIGINT)  # Ctrl-C reaches the whole process group
        assert len([next(it) for _ in range(8)]) == 8


def test_a_bad_sample_layout_is_reported(tmp_path: Path) -> None:
    def bad(sample, generator):  # float64 for one sample (a classic numpy slip)
        x = sample["x"].double() if int(sample["y"]) == 2 else sample["x"]
        return {"x": x, "y": sample["y"]}

    buf = AugmentBuffer(make_data(), bad, batch_size=4, num_workers=0, shuffle=False, dir=tmp_path)
    want = r"sample 2 \(epoch 0, batch 0\): key 'x' is torch.float64 .* wants torch.float32"
    with buf, pytest.raises(ValueError, match=want):
        run(buf, 1)
    with pytest.raises(TypeError, match=r"returned a tuple"):
        AugmentBuffer(make_data(), lambda s, g: (s["x"], s["y"]), batch_size=4, num_workers=0)


# ---------------------------------------------------------------- cleanup


def test_break_and_exceptions_clean_up(tmp_path: Path) -> None:
    with AugmentBuffer(make_data(), noisy, batch_size=4, num_workers=2, dir=tmp_path) as buf:
        for _ in buf:
            pids = buf.worker_pids
            break
    assert empty(tmp_path)
    assert not any(_alive(p) for p in pids)
    b2 = AugmentBuffer(make_data(), noisy, batch_size=4, num_workers=1, dir=tmp_path)
    with pytest.raises(KeyboardInterrupt), b2:  # what Ctrl-C raises in the training loop
        for _ in b2:
            raise KeyboardInterrupt
    assert empty(tmp_path)


def test_garbage_collection_cleans_up(tmp_path: Path) -> None:
    buf = AugmentBuffer(make_data(), noisy, batch_size=4, num_workers=1, dir=tmp_path)
    next(iter(buf))
    pids = buf.worker_pids
    del buf
    gc.collect()
    assert empty(tmp_path)
    assert not any(_alive(p) for p in pids)


@pytest.mark.parametrize("how", ["SIGKILL to the trainer", "SIGTERM to the process group"])
def test_producers_remove_the_files_when_the_trainer_is_killed(how: str, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time, torch
        from tensorbox import TensorDict
        from tensorbox.buffer import AugmentBuffer
        if __name__ == "__main__":
            data = TensorDict({{"x": torch.zeros(64, 3)}}, batch_size=[64])
            buf = AugmentBuffer(data, batch_size=4, num_workers=2, capacity=2,
                                dir={str(tmp_path)!r}, start_method="fork")
            next(iter(buf))
            print("ready", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert not empty(tmp_path)
        if how.startswith("SIGKILL"):
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
    deadline = time.time() + 8
    while not empty(tmp_path) and time.time() < deadline:
        time.sleep(0.05)
    assert empty(tmp_path)


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not yet reaped by its parent counts as dead
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


# ---------------------------------------------------------------- resume


def test_resume_continues_at_epoch_and_batch(tmp_path: Path) -> None:
    data = make_data()
    kw = dict(batch_size=4, dir=tmp_path, seed=5)
    with AugmentBuffer(data, noisy, num_workers=0, **kw) as buf:
        ref = run(buf, 2)
    with AugmentBuffer(data, noisy, num_workers=2, **kw) as buf:
        it = iter(buf)
        got = [next(it).clone() for _ in range(3)]
        state = buf.state_dict()
    assert (state["epoch"], state["batch"]) == (0, 3)
    with AugmentBuffer(data, noisy, num_workers=1, **kw) as buf:
        buf.load_state_dict(state)
        got += run(buf, 2)  # the rest of epoch 0, then epoch 1
    assert_same(got, ref)
    buf = AugmentBuffer(data, noisy, num_workers=0, batch_size=4, seed=6, dir=tmp_path)
    with buf, pytest.raises(ValueError, match=r"seed=5 vs 6"):
        buf.load_state_dict(state)


def test_seek_and_num_epochs(tmp_path: Path) -> None:
    with AugmentBuffer(
        make_data(), noisy, batch_size=4, num_workers=1, num_epochs=2, dir=tmp_path
    ) as buf:
        buf.seek(1, 4)
        assert [b.batch_size[0] for b in buf] == [4, 2]
        assert list(buf) == []  # past num_epochs: the stream is over
        assert (buf.epoch, buf.batch) == (2, 0)


# ---------------------------------------------------------------- start methods


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_other_start_methods(method: str, tmp_path: Path) -> None:
    data = make_data()
    kw = dict(batch_size=4, seed=2, dir=tmp_path)
    with AugmentBuffer(data, noisy, num_workers=0, **kw) as buf:
        ref = run(buf, 1)
    with AugmentBuffer(data, noisy, num_workers=1, start_method=method, **kw) as buf:
        assert_same(run(buf, 1), ref)
    assert empty(tmp_path)


def test_capacity_in_bytes_and_copy(tmp_path: Path) -> None:
    # one batch: 4 samples of (3 float32 + int64 + 2 float32) = 112 bytes
    with AugmentBuffer(
        make_data(),
        noisy,
        batch_size=4,
        num_workers=1,
        capacity_bytes="1KiB",
        dir=tmp_path,
        copy=True,
    ) as buf:
        assert buf.capacity == 1024 // 112
        batch = next(iter(buf))
        assert not batch["x"].untyped_storage().filename  # a copy, not a view of a slot
    with pytest.raises(ValueError, match="holds no batch"):
        AugmentBuffer(make_data(), noisy, batch_size=4, capacity_bytes=10, dir=tmp_path)
    with pytest.raises(OSError, match="lower capacity"):
        AugmentBuffer(make_data(), noisy, batch_size=4, capacity=10**12, dir=tmp_path)
    assert empty(tmp_path)


def writes_in_place(sample, generator, out):
    """A transform with an ``out`` parameter: it gets the slot row to write into."""
    x = sample["x"] + torch.rand(3, generator=generator)
    if out is None:  # the first sample, made to learn the layout
        return {"x": x, "y": sample["y"]}
    out["x"].copy_(x)  # stands for e.g. Normalize(...)(img, out=out["image"])
    out["y"].copy_(sample["y"])
    return out


def test_transform_with_out_writes_into_the_slot(tmp_path: Path) -> None:
    def plain(sample, generator):
        return writes_in_place(sample, generator, None)

    kw = dict(batch_size=4, dir=tmp_path, seed=4)
    with AugmentBuffer(make_data(), plain, num_workers=0, **kw) as buf:
        ref = run(buf, 1)
    with AugmentBuffer(make_data(), writes_in_place, num_workers=1, **kw) as buf:
        assert_same(run(buf, 1), ref)


@tensorclass
class Pair:
    image: torch.Tensor
    label: torch.Tensor
    subset: str = "train"


def flip_pair(sample: Pair, generator) -> Pair:
    flip = bool(torch.rand((), generator=generator) < 0.5)
    return Pair(sample.image.flip(-1) if flip else sample.image, sample.label, batch_size=[])


def test_tensorclass_samples_give_tensorclass_batches(tmp_path: Path) -> None:
    data = Pair(torch.randn(10, 2, 3), torch.arange(10), batch_size=[10])
    with AugmentBuffer(data, flip_pair, batch_size=4, num_workers=1, dir=tmp_path) as buf:
        batches = run(buf, 1)
        assert type(buf.slots) is Pair and buf.slots.is_memmap()
    assert [type(b) for b in batches] == [Pair] * 3
    assert batches[0].subset == "train" and batches[2].batch_size == (2,)
    labels = torch.cat([b.label for b in batches])
    for b in batches:
        for img, lab in zip(b.image, b.label):
            orig = data.image[lab]
            assert torch.equal(img, orig) or torch.equal(img, orig.flip(-1))
    assert sorted(labels.tolist()) == list(range(10))


def failing_init(worker_id: int) -> None:
    raise RuntimeError(f"no GPU for worker {worker_id}")


def test_start_up_failures_are_reported(tmp_path: Path) -> None:
    buf = AugmentBuffer(
        make_data(), noisy, batch_size=4, num_workers=1, dir=tmp_path, worker_init_fn=failing_init
    )
    with buf, pytest.raises(ProducerError, match=r"no GPU for worker 0\nwhile starting"):
        next(iter(buf))

    class Local:  # defined in a function: pickle cannot name it
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> dict:
            return {"x": torch.zeros(2)}

    buf = AugmentBuffer(Local(), batch_size=4, num_workers=1, dir=tmp_path)
    with buf, pytest.raises(TypeError, match=r"cannot send the dataset or functions"):
        next(iter(buf))
    assert empty(tmp_path)


def test_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with AugmentBuffer(
        make_data(), noisy, batch_size=4, num_workers=0, dir=tmp_path, progress=True
    ) as buf:
        assert len(list(buf)) == 6
    err = capsys.readouterr().err
    assert "epoch 0" in err and "6/6" in err
    assert re.search(r"epoch 0: 6 batch, [0-9.]+ s, [0-9.]+ batch/s", err)  # the summary


def test_progress_lines_without_tqdm_show_the_buffer_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tensorbox.progress

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # not installed: plain lines
    monkeypatch.setattr(tensorbox.progress, "_PLAIN_EVERY", 0.0)
    with AugmentBuffer(
        make_data(), noisy, batch_size=4, num_workers=0, dir=tmp_path, progress=True
    ) as buf:
        assert len(list(buf)) == 6
    err = capsys.readouterr().err
    assert re.search(r"epoch 0: 3 batch of 6 batch \(50%\) \| fill 0/1 wait [0-9.]+s", err)


def test_inline_mode_keeps_its_slot_in_process_memory(tmp_path: Path) -> None:
    # A SIGKILLed trainer cannot clean up: with no producer, nothing is put in dir= at all.
    buf = AugmentBuffer(make_data(), noisy, batch_size=4, num_workers=0, dir=tmp_path)
    with buf:
        assert len(run(buf, 1)) > 0 and empty(tmp_path)


def test_a_hung_producer_ends_with_its_trainer(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import os, sys, time, torch
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_buffer import make_data, sleeps_on_6
        from tensorbox.buffer import AugmentBuffer
        buf = AugmentBuffer(make_data(), sleeps_on_6, batch_size=4, num_workers=1,
                            shuffle=False, dir={str(tmp_path)!r})
        it = iter(buf)
        next(it)
        print(buf.worker_pids[0], flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    proc.kill()  # SIGKILL: no cleanup in the trainer; the producer sleeps in the transform
    proc.wait()
    proc.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (os.path.exists(f"/proc/{pid}") or not empty(tmp_path)):
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}") and empty(tmp_path)
