"""The zip writer of one-file trees: units checksummed then written by several threads,
CRC-32s of pieces combined, errors from any thread raised by the caller."""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox import _zip


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


def test_an_error_in_a_helper_thread_reaches_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    assert len(calls) <= 6  # the other threads stopped taking units


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
        assert _zip._crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == want
        assert _zip.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == want

    check()


def test_combine_without_the_zlib_library(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    def missing(name: str) -> None:
        raise OSError(name)

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert _zip._load_combine() is _zip._crc32_combine
