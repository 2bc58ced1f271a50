"""How many threads a folder save writes from (``num_threads``; 0, the default, picks).

A large save (32 MiB or more, in two files or more) writes from the caller and up to
three helper threads, as many as the CPUs allow; a small one (every write-through
commit) from the caller alone. The promises of a save hold either way: every byte
lands, a failure leaves the old tree as it was, no helper outlives the save.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import TensorDict
from tensorbox._storage import filewrite
from tensorbox._storage.filewrite import THREADED_BYTES, save_threads, write_all

CPUS = filewrite._cpus()
MIB = 1 << 20


def _large(n: int = 16, dtype: torch.dtype = torch.float32) -> TensorDict:
    """``n`` leaves, THREADED_BYTES in all: a save the default writes from threads."""
    each = THREADED_BYTES // n // torch.tensor([], dtype=dtype).element_size()
    g = torch.Generator().manual_seed(n)
    return TensorDict(
        {f"w{i}": torch.randint(-100, 100, (each,), generator=g).to(dtype) for i in range(n)}
    )


@contextlib.contextmanager
def _threads_seen() -> Iterator[dict[str, set[int]]]:
    """The threads that ran write_all's helper loop and write_file, by ident."""
    seen: dict[str, set[int]] = {"work": set(), "write_file": set()}
    codes = {filewrite.write_file.__code__: "write_file"}

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            name = codes.get(frame.f_code) or (
                "work" if frame.f_code.co_name == "work" and frame.f_globals is vars(filewrite)
                else None
            )  # fmt: skip
            if name is not None:
                seen[name].add(threading.get_ident())

    threading.setprofile(hook)  # threads started from now on
    try:
        yield seen
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]  # typeshed: no None


def test_the_rule() -> None:
    assert save_threads(3, [1]) == 3  # asked for: always that many
    assert save_threads(1, [THREADED_BYTES] * 8) == 1
    assert save_threads(0, [THREADED_BYTES - 1, 0]) == 1  # small: the caller alone
    assert save_threads(0, [THREADED_BYTES]) == 1  # one file: nothing to share
    assert save_threads(0, [THREADED_BYTES // 2] * 2) == min(4, CPUS)
    assert save_threads(0, [1 << 30] * 64) == min(4, CPUS)  # never more than 4 by default


@pytest.mark.skipif(CPUS < 2, reason="one CPU: the default writes from the caller alone")
def test_a_large_default_save_writes_from_helper_threads(tmp_path: Path) -> None:
    td = _large()
    with _threads_seen() as seen:
        saved = td.memmap(tmp_path / "t")
    assert len(seen["work"]) == min(4, CPUS) - 1  # helpers started, then joined
    assert threading.get_ident() not in seen["work"]
    assert not [t for t in threading.enumerate() if t.name.endswith("(work)")]  # all joined
    back = TensorDict.load_memmap(tmp_path / "t")
    for k in list(td.keys()):
        assert torch.equal(back[k], td[k]) and torch.equal(saved[k], td[k])


def test_num_threads_1_and_small_saves_write_from_the_caller(tmp_path: Path) -> None:
    with _threads_seen() as seen:
        _large().memmap(tmp_path / "one", num_threads=1)
        TensorDict(a=torch.arange(10), b=torch.ones(3)).memmap(tmp_path / "small")
    assert seen["work"] == set() and seen["write_file"] == set()  # no thread started


@pytest.mark.parametrize("num_threads", [0, 1, 3])
@given(
    n=st.integers(2, 9),
    dtype=st.sampled_from([torch.float32, torch.int16, torch.float64, torch.uint8]),
)
def test_every_byte_lands_whatever_the_threads(num_threads: int, n: int, dtype: Any) -> None:
    import tempfile

    td = _large(n, dtype)
    td["nested", "x"] = torch.arange(7)
    with tempfile.TemporaryDirectory() as d:
        saved = td.memmap(f"{d}/t", num_threads=num_threads)
        back = TensorDict.load_memmap(f"{d}/t")
        for k, v in td.items(include_nested=True, leaves_only=True):
            got, mapped = back.get(k), saved.get(k)
            assert isinstance(got, torch.Tensor) and isinstance(mapped, torch.Tensor)
            assert got.dtype == v.dtype and torch.equal(got, v) and torch.equal(mapped, v), k


@contextlib.contextmanager
def _file_size_limit(nbytes: int) -> Iterator[None]:
    """Writes past ``nbytes`` fail with EFBIG (SIGXFSZ ignored) in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


@pytest.mark.parametrize("num_threads", [0, 1])
def test_a_write_that_fails_in_any_thread_leaves_the_old_tree(
    tmp_path: Path, num_threads: int
) -> None:
    path = tmp_path / "t"
    old = TensorDict(a=torch.arange(5), b=torch.ones(2)).memmap(path)
    td = _large(8)  # 4 MiB files, each past the limit below
    with (
        _file_size_limit(MIB),
        pytest.raises(OSError, match=r"File too large: writing key 'w\d' to .*[/\\]w\d"),
    ):
        td.memmap(path, num_threads=num_threads)
    # every writer stopped before the stage was removed: nothing of the new tree is left
    assert sorted(os.listdir(tmp_path)) == ["t"]
    back = TensorDict.load_memmap(path)
    assert sorted(back.keys()) == ["a", "b"] and torch.equal(back["a"], old["a"])


def test_the_save_summary_counts_every_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.INFO, logger="tensorbox"):
        _large(8).memmap(tmp_path / "t", progress=True)  # helpers' files reported too
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["save: 32.0 MiB in 8 files"]


def test_write_all_raises_the_first_failure_after_every_helper_stopped() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> int:
        with lock:
            started.append(i)
        if i == 3:
            raise ValueError(f"job {i} failed")
        return i

    with pytest.raises(ValueError, match="job 3 failed"):
        write_all(job, list(range(200)), threads=3)
    assert not [t for t in threading.enumerate() if t.name.endswith("(work)")]  # all joined
    assert len(started) < 200  # the others stopped before their next job
    reported: list[int] = []
    assert write_all(lambda x: -x, list(range(50)), threads=3, done=reported.append) == [
        -x for x in range(50)
    ]
    assert sorted(reported) == list(range(50))  # every job reported once, in this thread
