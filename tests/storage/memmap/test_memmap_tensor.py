"""MemoryMappedTensor: constructors, modes, plain-tensor results, chunked writes, pickling."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox._core import chunks as _chunks
from tensorbox._storage.fileref import FileRef, restore, shareable
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox.errors import FormatError

DTYPES = [torch.float32, torch.bfloat16, torch.bool, torch.complex64, torch.int16, torch.uint8]


def _example(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    n = int(np.prod(shape))
    base = torch.arange(n, dtype=torch.float64).reshape(shape) % 7 - 3
    if dtype is torch.bool:
        return base > 0
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    return base.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 4), (2, 0, 5)])
def test_from_tensor_round_trip(tmp_path: Path, dtype: torch.dtype, shape: tuple) -> None:
    t = _example(dtype, shape)
    path = tmp_path / "x.memmap"
    m = MemoryMappedTensor.from_tensor(t, filename=path)
    assert type(m) is MemoryMappedTensor and m.dtype == dtype and m.shape == t.shape
    assert torch.equal(m, t)
    assert m.filename == str(path) and m.mode == "r+"
    assert path.stat().st_size == t.numel() * t.element_size()
    # The file holds exactly the raw little-endian bytes.
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    assert path.read_bytes() == raw
    again = MemoryMappedTensor.from_filename(path, dtype, shape)
    assert torch.equal(again, t)


def test_constructors(tmp_path: Path) -> None:
    z = MemoryMappedTensor.zeros(2, 3, filename=tmp_path / "z")
    assert z.tolist() == [[0.0] * 3] * 2 and z.dtype == torch.get_default_dtype()
    e = MemoryMappedTensor.empty((4,), dtype=torch.int64, filename=tmp_path / "e")
    assert e.shape == (4,) and os.path.getsize(tmp_path / "e") == 32
    o = MemoryMappedTensor.ones(3, dtype=torch.bfloat16, filename=tmp_path / "o")
    assert o.tolist() == [1.0, 1.0, 1.0] and o.dtype == torch.bfloat16
    f = MemoryMappedTensor.full([2, 2], 7, dtype=torch.int32, filename=tmp_path / "f")
    assert f.tolist() == [[7, 7], [7, 7]]
    like = MemoryMappedTensor.from_tensor(torch.ones(5), filename=tmp_path / "l", copy_data=False)
    assert like.tolist() == [0.0] * 5
    with pytest.raises(ValueError, match=r"shape \(2, -1\) has a negative dim"):
        MemoryMappedTensor.zeros(2, -1)


def test_anonymous_shared_memory() -> None:
    m = MemoryMappedTensor.from_tensor(torch.arange(4))
    assert m.filename is None and m.mode is None and m.is_shared()
    assert MemoryMappedTensor.zeros(3).is_shared()
    assert MemoryMappedTensor.full(2, 1.5).tolist() == [1.5, 1.5]


def test_existing_file_is_replaced_never_written_into(tmp_path: Path) -> None:
    path = tmp_path / "x"
    old = MemoryMappedTensor.from_tensor(torch.zeros(3), filename=path)
    with pytest.raises(FileExistsError, match=r"x already exists; pass existsok=True to replace"):
        MemoryMappedTensor.from_tensor(torch.ones(3), filename=path)
    with pytest.raises(RuntimeError, match=r"x already exists"):  # tensordict's type
        MemoryMappedTensor.zeros(3, filename=path)
    new = MemoryMappedTensor.from_tensor(torch.ones(3), filename=path, existsok=True)
    assert old.tolist() == [0.0] * 3  # the old mapping keeps its data
    assert new.tolist() == [1.0] * 3
    assert sorted(os.listdir(tmp_path)) == ["x"]


def test_results_are_plain_tensors_and_views(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.arange(12.0).reshape(3, 4), filename=tmp_path / "x")
    row = m[1]
    assert type(row) is MemoryMappedTensor and type(m + 1) is torch.Tensor
    assert row.filename == str(tmp_path / "x")
    assert type(m.sum()) is torch.Tensor and type(torch.stack([m, m])) is torch.Tensor
    assert row.untyped_storage().filename == str(tmp_path / "x")
    row[0] = 100.0  # a view: the write reaches the file
    assert MemoryMappedTensor.from_filename(tmp_path / "x", torch.float32, (3, 4))[1, 0] == 100
    gathered = m[torch.tensor([0, 2])]
    assert type(gathered) is torch.Tensor and gathered.untyped_storage().filename is None


def test_read_only_mode_never_writes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x"
    MemoryMappedTensor.from_tensor(torch.arange(4), filename=path)
    before = path.read_bytes()
    ro = MemoryMappedTensor.from_filename(path, torch.int64, (4,), mode="r")
    assert ro.mode == "r" and ro.filename == str(path)
    ro[0] = 99
    ro[1:].add_(1)
    assert ro.tolist() == [99, 2, 3, 4]  # this process sees its own writes
    assert path.read_bytes() == before  # the file never does
    rw = MemoryMappedTensor.from_filename(path, torch.int64, (4,), mode="r+")
    rw[0] = 5
    assert path.read_bytes() != before
    with pytest.raises(ValueError, match=r"mode 'w' is not one of \('r\+', 'r'\)"):
        MemoryMappedTensor.from_filename(path, torch.int64, (4,), mode="w")


def test_from_filename_checks_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(bytes(17))  # longer than needed is fine (tensordict leaves such tails)
    assert MemoryMappedTensor.from_filename(path, torch.int64, (2,)).tolist() == [0, 0]
    with pytest.raises(
        FormatError, match=r"x is 17 bytes, but torch.int64 of shape \[3\] needs 24"
    ):
        MemoryMappedTensor.from_filename(path, torch.int64, (3,))
    assert path.stat().st_size == 17  # not grown by a failed attempt
    with pytest.raises(FileNotFoundError, match="nope does not exist"):
        MemoryMappedTensor.from_filename(tmp_path / "nope", torch.int64, (3,))
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_writes_of_non_contiguous_tensors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(_chunks, "CHUNK_BYTES", chunk)
    sources = {
        "expanded": torch.arange(3.0).expand(5, 3),
        "transposed": torch.arange(24, dtype=torch.int16).reshape(4, 6).t(),
        "conj": torch.complex(torch.ones(3), torch.arange(3.0)).conj(),
        "neg": torch.complex(torch.ones(2), torch.ones(2)).conj().imag,
        "zero-dim": torch.tensor(3.5),
    }
    for name, t in sources.items():
        pieces = list(_chunks.byte_chunks(t))
        assert all(len(p) <= max(chunk, t.element_size()) for p in pieces), name
        m = MemoryMappedTensor.from_tensor(t, filename=tmp_path / name)
        assert torch.equal(m, t.resolve_conj().resolve_neg()), name


@pytest.mark.heavy
def test_huge_expanded_tensor_is_written_in_bounded_memory(tmp_path: Path) -> None:
    # 64 MiB from a 1 KiB source, with 256 KiB pieces: peak memory stays far below the size.
    code = textwrap.dedent(
        f"""
        import resource, torch
        from tensorbox._core import chunks as _chunks
        from tensorbox._storage import memmap_tensor as mmt
        _chunks.CHUNK_BYTES = 1 << 18
        src = torch.arange(256.0).expand(1 << 16, 256)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        m = mmt.MemoryMappedTensor.from_tensor(src, filename={str(tmp_path / "big")!r})
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert m[12345, 17].item() == 17.0
        print(grown // 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=os.getcwd()
    )
    assert int(out.stdout.strip()) < 24, out.stdout  # MiB
    assert (tmp_path / "big").stat().st_size == 64 << 20


def test_unsupported_layouts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"cannot write a torch.sparse_coo tensor to a file"):
        MemoryMappedTensor.from_tensor(torch.eye(2).to_sparse(), filename=tmp_path / "s")
    assert not (tmp_path / "s").exists()  # no partial file left


# ---------------------------------------------------------------- pickling


def test_pickles_by_file_name(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.zeros(1000, 100), filename=tmp_path / "x")
    data = pickle.dumps(m)
    assert len(data) < 1000  # a reference, not 400 kB of floats
    back = pickle.loads(data)
    assert type(back) is MemoryMappedTensor and back.filename == m.filename
    back[3, 4] = 1.0
    assert m[3, 4] == 1.0  # same file, same data


def test_shareable_views(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.arange(24.0).reshape(4, 6), filename=tmp_path / "x")
    view = m[1:3, ::2].t()
    ref = shareable(view)
    assert isinstance(ref, FileRef) and not ref.memmap
    assert (ref.offset, ref.size, ref.stride) == (6, (3, 2), (2, 6))
    back = restore(ref)
    assert type(back) is torch.Tensor and torch.equal(back, view)
    back[0, 0] = -1.0
    assert m[1, 0] == -1.0
    plain = torch.zeros(3)
    assert shareable(plain) is plain and restore(plain) is plain
    assert restore("not a ref") == "not a ref"
    shm = MemoryMappedTensor.from_tensor(torch.ones(2))
    assert shareable(shm) is shm


def test_read_only_tensors_pickle_read_only(tmp_path: Path) -> None:
    MemoryMappedTensor.from_tensor(torch.arange(3), filename=tmp_path / "x")
    ro = MemoryMappedTensor.from_filename(tmp_path / "x", torch.int64, (3,), mode="r")
    back = pickle.loads(pickle.dumps(ro))
    assert back.mode == "r" and back.tolist() == [0, 1, 2]
    back[0] = 9
    assert MemoryMappedTensor.from_filename(tmp_path / "x", torch.int64, (3,))[0] == 0
    view = shareable(ro[1:])  # views of a private mapping travel by reference too
    assert isinstance(view, FileRef) and view.mode == "r" and restore(view).tolist() == [1, 2]


def test_a_replaced_file_is_never_confused_with_the_mapped_one(tmp_path: Path) -> None:
    path = tmp_path / "x"
    old = MemoryMappedTensor.from_tensor(torch.zeros(8), filename=path)
    ref = shareable(old)
    MemoryMappedTensor.from_tensor(torch.ones(8), filename=path, existsok=True)
    # Pickled now, `old` carries its data: its name leads to other bytes.
    assert shareable(old) is old and shareable(old[2:]).untyped_storage().filename == str(path)
    assert pickle.loads(pickle.dumps(old)).tolist() == [0.0] * 8
    # Pickled before the swap, unpickled after: refused, not silently the new bytes.
    with pytest.raises(FormatError, match=r"x was replaced after a tensor mapping it was pickled"):
        restore(ref)


def test_restore_refuses_a_shrunk_or_missing_file(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.zeros(8), filename=tmp_path / "x")
    ref = shareable(m)
    del m
    os.truncate(tmp_path / "x", 8)  # same file, shorter
    with pytest.raises(FormatError, match=r"x is 8 bytes, shorter than the 32 bytes it had"):
        restore(ref)
    assert os.path.getsize(tmp_path / "x") == 8  # not grown
    os.unlink(tmp_path / "x")
    with pytest.raises(
        FileNotFoundError, match="the file of a pickled memory-mapped tensor, is gone"
    ):
        restore(ref)


def test_deepcopy_is_an_in_memory_tensor(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.arange(3), filename=tmp_path / "x")
    c = copy.deepcopy(m)
    assert type(c) is torch.Tensor and c.untyped_storage().filename is None
    assert torch.equal(c, m)


def test_shared_memory_pickles_through_multiprocessing() -> None:
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # registers torch's shared-memory reductions

    m = MemoryMappedTensor.from_tensor(torch.arange(4.0))
    back = pickle.loads(ForkingPickler.dumps(m))
    assert type(back) is MemoryMappedTensor and back.is_shared()
    back[0] = 42.0
    assert m[0] == 42.0  # shared, not copied


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(0, 4), max_size=3),
    transpose=st.booleans(),
)
def test_round_trip_property(tmp_path_factory, dtype, shape, transpose) -> None:
    t = _example(dtype, tuple(shape))
    if transpose and t.dim() >= 2:
        t = t.transpose(0, 1)
    path = tmp_path_factory.mktemp("p") / "x"
    m = MemoryMappedTensor.from_tensor(t, filename=path)
    assert torch.equal(MemoryMappedTensor.from_filename(path, dtype, t.shape, mode="r"), t)
    assert torch.equal(restore(shareable(m)), t)


@pytest.mark.parametrize("file", [True, False])
def test_views_keep_the_class_and_the_file(tmp_path: Path, file: bool) -> None:
    # tensordict's behaviour: a view of the file is still a MemoryMappedTensor
    name = tmp_path / "x" if file else None
    m = MemoryMappedTensor.from_tensor(torch.arange(10.0), filename=name)
    views = [m[:2], m[:2][:1], m[3], m[..., 1:], *m.split((3, 3, 4)), *m.chunk(3), *m.unbind(0)]
    for v in views:
        assert type(v) is MemoryMappedTensor
        assert v.filename == m.filename and v._handler is m._handler
    assert [float(v) for v in m] == list(range(10)) and type(next(iter(m))) is MemoryMappedTensor
    for copied in (m[torch.tensor([0, 1])], m[m > 4], m.clone(), m * 2):
        assert type(copied) is torch.Tensor
    view = m[2:5]
    view[0] = -1.0  # a view: the write reaches the mapping
    assert m[2] == -1.0 and torch.equal(m.clone()[2:5], view.clone())
    assert MemoryMappedTensor.from_tensor(view)._filename == view._filename


def test_view_pickles_by_reference(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.zeros(10), filename=tmp_path / "x")
    back = pickle.loads(pickle.dumps(m[:3]))
    assert type(back) is MemoryMappedTensor and back.filename == m.filename
    m.fill_(1.0)
    assert back.tolist() == [1.0] * 3  # the same file, not a copy


def test_rows_of_a_saved_tree_save_elsewhere(tmp_path: Path) -> None:
    from tensorbox import TensorDict

    saved = TensorDict({"a": torch.arange(6.0)}, [6]).memmap(tmp_path / "x")
    rows = saved[:2]
    assert rows.is_memmap() and type(rows["a"]) is MemoryMappedTensor  # views of the file
    rows.memmap_(tmp_path / "y")  # written like any tensor: a view is not a whole file
    assert TensorDict.load_memmap(tmp_path / "y")["a"].tolist() == [0.0, 1.0]
    assert rows["a"].filename == str(tmp_path / "y" / "a.memmap")
    whole = TensorDict.load_memmap(tmp_path / "x")
    with pytest.raises(RuntimeError, match=r"already memory-mapped at .*copy_existing=True"):
        whole.memmap_(tmp_path / "z")
