"""MemoryMappedTensor: handler/from_handler, from_storage, from_tensor of a memory-mapped
tensor, tensordict's ``_filename``/``_handler`` spellings, and symlinked destinations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import MemoryMappedTensor
from tensorbox.errors import FormatError


@settings(max_examples=25, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    dtype=st.sampled_from([torch.float32, torch.int64, torch.uint8, torch.bool]),
)
def test_from_handler_maps_the_same_memory(dims: list[int], dtype: torch.dtype) -> None:
    t = MemoryMappedTensor.empty(dims, dtype=dtype)
    t.copy_(torch.arange(t.numel()).reshape(dims).to(dtype))
    again = MemoryMappedTensor.from_handler(t.handler, dtype, dims)
    assert type(again) is MemoryMappedTensor and torch.equal(again, t)
    again.fill_(1)  # the same memory, not a copy
    assert torch.equal(t, torch.ones(dims, dtype=dtype))
    assert t._handler is t.handler and t._filename is None


def test_from_handler_index_and_errors() -> None:
    t = MemoryMappedTensor.from_tensor(torch.arange(6))
    part = MemoryMappedTensor.from_handler(t.handler, torch.int64, (2, 3), index=1)
    assert type(part) is MemoryMappedTensor and part.tolist() == [3, 4, 5]
    with pytest.raises(
        FormatError, match=r"holds 48 bytes, but torch.int64 of shape \[7\] needs 56"
    ):
        MemoryMappedTensor.from_handler(t.handler, torch.int64, 7)
    with pytest.raises(TypeError, match="expected the handler of a MemoryMappedTensor"):
        MemoryMappedTensor.from_handler("nope", torch.int64, 2)


def test_file_tensors_have_no_handler_and_from_storage(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    t = MemoryMappedTensor.from_tensor(torch.arange(4.0), filename=path)
    assert t.handler is None and t._filename == str(path) == t.filename
    view = MemoryMappedTensor.from_storage(
        t.untyped_storage(), shape=(2, 2), dtype=torch.float32, filename=path
    )
    assert view.tolist() == [[0.0, 1.0], [2.0, 3.0]] and view.filename == str(path)
    with pytest.raises(ValueError, match="is not the storage's file"):
        MemoryMappedTensor.from_storage(
            t.untyped_storage(), shape=4, dtype=torch.float32, filename=tmp_path / "other"
        )
    with pytest.raises(
        TypeError, match=r"expected a torch\.UntypedStorage, got MemoryMappedTensor"
    ):
        MemoryMappedTensor.from_storage(t, shape=4, dtype=torch.float32)
    assert MemoryMappedTensor.from_filename(path, torch.float32, 4, index=slice(2, 4)).tolist() == [
        2.0,
        3.0,
    ]


def test_from_tensor_of_a_memory_mapped_tensor(tmp_path: Path) -> None:
    mem = MemoryMappedTensor.zeros(3)
    assert MemoryMappedTensor.from_tensor(mem) is mem
    f = MemoryMappedTensor.from_tensor(torch.ones(3), filename=tmp_path / "a")
    assert MemoryMappedTensor.from_tensor(f, filename=f.filename) is f
    with pytest.raises(RuntimeError, match=r"already memory-mapped .*pass copy_existing=True"):
        MemoryMappedTensor.from_tensor(f, filename=tmp_path / "b")
    copy = MemoryMappedTensor.from_tensor(f, filename=tmp_path / "b", copy_existing=True)
    assert copy is not f and copy.filename == str(tmp_path / "b") and copy.tolist() == [1.0] * 3
    fresh = MemoryMappedTensor.from_tensor(mem, copy_existing=True)
    assert fresh is not mem and fresh.handler is not mem.handler


def test_a_symlinked_destination_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"unchanged")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    with pytest.raises(
        FileExistsError, match="is a symlink: a memory-mapped tensor is never written"
    ):
        MemoryMappedTensor.from_tensor(torch.zeros(2), filename=link, existsok=True)
    assert target.read_bytes() == b"unchanged" and link.is_symlink()
