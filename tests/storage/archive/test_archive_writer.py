"""The zip writer of one-file trees: units written in file order, checksummed by helper
threads ahead of the writer or by the writer itself, CRC-32s of pieces combined."""

from __future__ import annotations

import os
import threading
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox._storage.archive import crc32 as _crc32
from tensorbox._storage.archive import zip as _zip


def _write(path: Path, items: list[tuple[str, Any, bool]], threads: int, sizes: Any = None) -> Any:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        return _zip.write_zip(fd, items, threads, sizes)
    finally:
        os.close(fd)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=8),
    streamed=st.lists(st.booleans(), min_size=8, max_size=8),
    unit=st.integers(1, 2500),
    small=st.integers(0, 300),
    threads=st.integers(1, 3),
)
def test_any_layout_of_units_gives_the_same_zip(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sizes: list[int],
    streamed: list[bool],
    unit: int,
    small: int,
    threads: int,
) -> None:
    """The oracle is the payloads: zipfile reads them back, CRC-32s checked, aligned."""
    monkeypatch.setattr(_zip, "_UNIT", unit)
    monkeypatch.setattr(_zip, "_SMALL", small)
    data = [os.urandom(n) for n in sizes]
    items: list[tuple[str, Any, bool]] = []
    for i, raw in enumerate(data):
        if streamed[i]:  # a payload given as pieces, as non-contiguous tensors are
            items.append(
                (
                    f"d/{i}.memmap",
                    lambda raw=raw: (raw[j : j + 700] for j in range(0, len(raw), 700)),
                    True,
                )
            )
        else:
            items.append((f"d/{i}.memmap", bytearray(raw), i % 2 == 0))
    path = tmp_path / "w.zip"
    starts = _write(path, items, threads, sizes)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        assert [zf.read(f"d/{i}.memmap") for i in range(len(data))] == data
    for (_, _, align), at in zip(items, starts, strict=True):
        assert not align or at % _zip.ALIGN == 0


def test_a_piece_source_that_changes_size_raises(tmp_path: Path) -> None:
    for pieces in ([b"abc"], [b"abcdef", b"gh"]):
        items: list[tuple[str, Any, bool]] = [("x.memmap", lambda p=pieces: iter(p), True)]
        with pytest.raises(
            RuntimeError, match=r"entry 'x.memmap' changed size while being written"
        ):
            _write(tmp_path / "w.zip", items, 2, [6])


def test_a_write_error_stops_the_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_zip, "_UNIT", 1000)
    calls: list[int] = []
    real = _zip._pwrite_all

    def full(fd: int, bufs: list[Any], offset: int) -> None:
        calls.append(offset)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(fd, bufs, offset)

    monkeypatch.setattr(_zip, "_pwrite_all", full)
    items: list[tuple[str, Any, bool]] = [(f"{i}.memmap", os.urandom(5000), True) for i in range(4)]
    with pytest.raises(OSError, match="No space left on device"):
        _write(tmp_path / "w.zip", items, 3)
    assert len(calls) <= 3 + 2  # the save stops: at most one write under way per other thread


def test_the_writer_never_waits_for_a_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper that stalls (descheduled on a busy machine) holds nothing up: the writer
    checksums what the helper claimed but did not finish."""
    monkeypatch.setattr(_zip, "_UNIT", 1000)
    monkeypatch.setattr(_zip, "_SMALL", 10)
    _zip.crc32(b"")
    real = _zip._CRC32[0]
    release = threading.Event()
    stalled: list[int] = []

    def slow(data: Any, crc: int = 0) -> int:
        if threading.current_thread() is not threading.main_thread():
            stalled.append(1)
            release.wait(20)
        return int(real(data, crc))

    write = _zip._pwrite_all

    def slow_write(fd: int, bufs: list[Any], offset: int) -> None:
        time.sleep(0.002)  # lets the helper start and claim units ahead
        write(fd, bufs, offset)

    monkeypatch.setattr(_zip, "_pwrite_all", slow_write)
    data = [os.urandom(3000) for _ in range(6)]
    path = tmp_path / "w.zip"
    _zip._CRC32[0] = slow
    try:
        t0 = time.monotonic()
        _write(path, [(f"{i}.memmap", raw, True) for i, raw in enumerate(data)], 2)
        assert time.monotonic() - t0 < 10 and stalled  # the helper was stuck all along
    finally:
        _zip._CRC32[0] = real
        release.set()
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None and [zf.read(f"{i}.memmap") for i in range(6)] == data


def test_tensor_storage_is_written_without_a_copy(tmp_path: Path) -> None:
    t = torch.arange(100_000, dtype=torch.float32)
    view = memoryview(t.numpy()).cast("B")
    path = tmp_path / "w.zip"
    _write(path, [("t.memmap", view, True)], 2)
    with zipfile.ZipFile(path) as zf:
        assert zf.read("t.memmap") == bytes(view)


def test_python_crc32_combine_matches_zlib() -> None:
    @given(st.binary(max_size=300), st.binary(max_size=300))
    def check(a: bytes, b: bytes) -> None:
        want = zlib.crc32(a + b)
        assert _crc32._crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == want
        assert _zip.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == want

    check()


def test_combine_without_the_zlib_library(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    def missing(name: str) -> None:
        raise OSError(name)

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert _crc32._load_combine() is _crc32._crc32_combine


@pytest.mark.parametrize("threads", [1, 2])
def test_a_unit_of_more_buffers_than_one_pwritev_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """Many tiny entries put thousands of buffers in one unit; pwritev takes at most
    IOV_MAX (1024 on Linux; EINVAL beyond): the writer hands them over in batches."""
    monkeypatch.setattr(_zip, "_IOV_MAX", 7)  # the real limit, in small
    items: list[tuple[str, Any, bool]] = [
        (f"{i}.memmap", bytes([i % 256]) * 3, True) for i in range(40)
    ]
    _write(tmp_path / "w.zip", items, threads)
    with zipfile.ZipFile(tmp_path / "w.zip") as zf:
        assert zf.testzip() is None and [zf.read(n) for n, _, _ in items] == [
            d for _, d, _ in items
        ]
    monkeypatch.undo()
    many: list[tuple[str, Any, bool]] = [(f"{i}.memmap", b"ab", True) for i in range(1100)]
    _write(tmp_path / "many.zip", many, threads)  # over the real limit: 2,200 buffers
    with zipfile.ZipFile(tmp_path / "many.zip") as zf:
        assert zf.testzip() is None and len(zf.infolist()) == 1100
