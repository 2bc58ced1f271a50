"""MemoryMappedTensor's constructors: the argument forms torch and tensordict accept.

The oracle is torch itself: every constructor must give what ``torch.zeros``,
``torch.ones``, ``torch.full`` or ``torch.*_like`` give, file-backed or not.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox._storage.memmap_tensor import (
    MemmapDeviceError,
    MemmapFileExistsError,
    MemoryMappedTensor,
)

SHAPES = st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple)
DTYPES = st.sampled_from([None, torch.float32, torch.float64, torch.int32, torch.bool])


def _shape_forms(shape: tuple[int, ...]) -> list[tuple[tuple, dict]]:
    """Every way of passing ``shape``: ints, tuple, list, torch.Size, numpy ints, shape=."""
    return [
        (shape, {}),
        ((shape,), {}),
        ((list(shape),), {}),
        ((torch.Size(shape),), {}),
        (tuple(np.int64(d) for d in shape), {}),
        ((), {"shape": shape}),
        ((), {"shape": torch.Size(shape)}),
    ]


def _check(t: torch.Tensor, expected: torch.Tensor, path: Path | None) -> None:
    assert type(t) is MemoryMappedTensor
    assert t.dtype == expected.dtype and t.shape == expected.shape
    assert torch.equal(t, expected)
    assert t.filename == (None if path is None else os.path.abspath(path))


@given(shape=SHAPES, dtype=DTYPES, on_disk=st.booleans())
def test_zeros_ones_empty_full_take_every_shape_form(
    tmp_path_factory: pytest.TempPathFactory, shape: tuple, dtype: torch.dtype, on_disk: bool
) -> None:
    root = tmp_path_factory.mktemp("forms")
    for i, (args, kw) in enumerate(_shape_forms(shape)):
        path = root / f"{i}.memmap" if on_disk else None
        z = MemoryMappedTensor.zeros(*args, dtype=dtype, filename=path, **kw)
        _check(z, torch.zeros(shape, dtype=dtype), path)
        e = MemoryMappedTensor.empty(*args, dtype=dtype, filename=path, existsok=True, **kw)
        _check(e, torch.zeros(shape, dtype=dtype), path)  # files start zero-filled
        o = MemoryMappedTensor.ones(*args, dtype=dtype, filename=path, existsok=True, **kw)
        _check(o, torch.ones(shape, dtype=dtype), path)
        f = MemoryMappedTensor.full(
            *args, fill_value=3, dtype=dtype, device="cpu", filename=path, existsok=True, **kw
        )
        _check(f, torch.full(shape, 3, dtype=dtype), path)


def test_scalar_shapes() -> None:
    assert MemoryMappedTensor.zeros(()).shape == ()
    assert MemoryMappedTensor.ones(shape=[]).shape == ()
    assert MemoryMappedTensor.full((), 2.5).item() == 2.5
    assert MemoryMappedTensor.zeros(torch.tensor(3)).shape == (3,)  # a 0-d tensor is one dim
    assert MemoryMappedTensor.zeros(torch.tensor([2, 3])).shape == (2, 3)


def test_full_takes_fill_value_by_position_or_keyword() -> None:
    expected = torch.full((2, 3), 1.5)
    for t in (
        MemoryMappedTensor.full((2, 3), 1.5),
        MemoryMappedTensor.full([2, 3], fill_value=1.5),
        MemoryMappedTensor.full(2, 3, fill_value=1.5),
        MemoryMappedTensor.full(shape=(2, 3), fill_value=1.5),
        MemoryMappedTensor.full(1.5, shape=(2, 3)),
    ):
        _check(t, expected, None)
    # One int and a value: the shape is that int, as torch.full((2,), 3) would read it.
    assert MemoryMappedTensor.full(2, 3).tolist() == [3, 3]


def test_dtypes_follow_torch() -> None:
    assert MemoryMappedTensor.zeros(2).dtype == torch.get_default_dtype()
    assert MemoryMappedTensor.ones(2).dtype == torch.get_default_dtype()
    assert MemoryMappedTensor.empty(2).dtype == torch.get_default_dtype()
    # torch.full infers the dtype from the value (tensordict uses the default float dtype).
    assert MemoryMappedTensor.full((2,), 7).dtype == torch.full((2,), 7).dtype == torch.int64
    assert MemoryMappedTensor.full((2,), True).dtype == torch.bool
    assert MemoryMappedTensor.full((2,), 7, dtype=torch.float16).dtype == torch.float16


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.bool, torch.complex64])
@pytest.mark.parametrize("on_disk", [False, True])
def test_like_constructors_match_torch(tmp_path: Path, dtype: torch.dtype, on_disk: bool) -> None:
    src = torch.arange(6).reshape(2, 3).to(dtype).t()  # not contiguous
    path = tmp_path / "x.memmap" if on_disk else None
    _check(MemoryMappedTensor.zeros_like(src, filename=path), torch.zeros_like(src), path)
    _check(
        MemoryMappedTensor.empty_like(src, filename=path, existsok=True),
        torch.zeros_like(src),
        path,
    )
    _check(
        MemoryMappedTensor.ones_like(src, filename=path, existsok=True), torch.ones_like(src), path
    )
    _check(
        MemoryMappedTensor.full_like(src, 1, filename=path, existsok=True),
        torch.full_like(src, 1),
        path,
    )
    assert MemoryMappedTensor.zeros_like(src).is_contiguous()  # a fresh C-ordered tensor


def test_like_constructors_take_a_dtype_and_never_read_the_input() -> None:
    src = torch.empty(4, 2, device="meta")  # has no data: reading it would fail
    out = MemoryMappedTensor.full_like(src, 2.5, dtype=torch.float64, device="cpu")
    assert out.dtype == torch.float64 and out.tolist() == [[2.5, 2.5]] * 4
    assert MemoryMappedTensor.ones_like(src, dtype=torch.int8).dtype == torch.int8
    assert MemoryMappedTensor.full_like(torch.zeros(2, dtype=torch.int32), 2.7).tolist() == [2, 2]


def test_existing_files_need_existsok(tmp_path: Path) -> None:
    path = tmp_path / "x.memmap"
    old = MemoryMappedTensor.zeros(3, filename=path)
    inode = path.stat().st_ino
    for make in (
        lambda **kw: MemoryMappedTensor.ones(3, filename=path, **kw),
        lambda **kw: MemoryMappedTensor.full(3, fill_value=4.0, filename=path, **kw),
        lambda **kw: MemoryMappedTensor.empty(shape=(3,), filename=path, **kw),
        lambda **kw: MemoryMappedTensor.ones_like(old, filename=path, **kw),
        lambda **kw: MemoryMappedTensor([1.0, 2.0, 3.0], filename=path, **kw),
    ):
        with pytest.raises(MemmapFileExistsError, match=r"x.memmap already exists; pass existsok"):
            make()
        assert path.stat().st_ino == inode  # nothing was touched
        new = make(existsok=True)
        assert path.stat().st_ino != inode  # a new file replaced the old one
        inode = path.stat().st_ino
        assert new.filename == str(path)
    assert old.tolist() == [0.0, 0.0, 0.0]  # never written into
    assert issubclass(MemmapFileExistsError, FileExistsError)
    assert issubclass(MemmapFileExistsError, RuntimeError)  # what tensordict raises


@pytest.mark.parametrize("device", ["meta", "cuda", torch.device("cuda", 1)])
def test_only_the_cpu_is_a_device(device: object) -> None:
    cases = [
        ("zeros", lambda: MemoryMappedTensor.zeros(2, device=device)),
        ("empty", lambda: MemoryMappedTensor.empty((2,), device=device)),
        ("ones", lambda: MemoryMappedTensor.ones(shape=(2,), device=device)),
        ("full", lambda: MemoryMappedTensor.full((2,), 1, device=device)),
        ("zeros_like", lambda: MemoryMappedTensor.zeros_like(torch.ones(2), device=device)),
        ("full_like", lambda: MemoryMappedTensor.full_like(torch.ones(2), 0, device=device)),
        ("__new__", lambda: MemoryMappedTensor([1, 2], device=device)),
    ]
    for name, make in cases:
        with pytest.raises(
            MemmapDeviceError,
            match=rf"MemoryMappedTensor\.{name}\(device=.*\): a memory-mapped tensor lives in "
            r"CPU memory .* pass device='cpu' or leave it out",
        ):
            make()
    # tensordict raises RuntimeError from the constructors, ValueError from __new__.
    assert issubclass(MemmapDeviceError, RuntimeError) and issubclass(MemmapDeviceError, ValueError)
    assert MemoryMappedTensor.zeros(2, device=torch.device("cpu")).device.type == "cpu"


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(TypeError, match=r"zeros\(\) needs a shape: zeros\(2, 3\)"):
        MemoryMappedTensor.zeros(dtype=torch.float32)
    with pytest.raises(TypeError, match=r"ones\(\) got a shape twice: \(2,\) and shape=\(3,\)"):
        MemoryMappedTensor.ones(2, shape=(3,))
    with pytest.raises(TypeError, match=r"empty\(\): shape \(2\.5, 1\) is not a sequence of ints"):
        MemoryMappedTensor.empty(2.5, 1)
    with pytest.raises(TypeError, match=r"zeros\(\): shape 'ab' is not a sequence of ints"):
        MemoryMappedTensor.zeros("ab")
    with pytest.raises(ValueError, match=r"shape \(2, -1\) has a negative dim"):
        MemoryMappedTensor.full((2, -1), 0)
    with pytest.raises(ValueError, match=r"shapes must be non-negative ints.*got \[\[2, -3\]\]"):
        MemoryMappedTensor.empty(torch.tensor([[2, -3]]), dtype=torch.int32)
    with pytest.raises(TypeError, match=r"full\(\) needs a fill_value: full\(\(2, 3\), 1\.5\)"):
        MemoryMappedTensor.full()
    with pytest.raises(TypeError, match=r"full\(\) needs a shape"):
        MemoryMappedTensor.full(1.5)
    with pytest.raises(TypeError, match=r"zeros_like\(\) takes a tensor .*, got list"):
        MemoryMappedTensor.zeros_like([1, 2])
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    with pytest.raises(TypeError, match=r"ones_like\(\): nested tensors are not supported"):
        MemoryMappedTensor.ones_like(nested)


def test_calling_the_class_copies_the_data(tmp_path: Path) -> None:
    src = torch.arange(6.0).reshape(2, 3)
    m = MemoryMappedTensor(src)
    assert type(m) is MemoryMappedTensor and m.is_shared() and torch.equal(m, src)
    src.zero_()
    assert m.sum() == 15  # a copy, never an alias of the argument
    _check(MemoryMappedTensor([3, 4]), torch.tensor([3, 4]), None)
    cast = MemoryMappedTensor(torch.arange(3), dtype=torch.float16, filename=tmp_path / "c")
    _check(cast, torch.arange(3, dtype=torch.float16), tmp_path / "c")
    assert (tmp_path / "c").stat().st_size == 6
    again = MemoryMappedTensor(m.t(), filename=tmp_path / "t", device="cpu")
    _check(again, torch.arange(6.0).reshape(2, 3).t(), tmp_path / "t")
    with pytest.raises(TypeError, match=r"MemoryMappedTensor\('x.memmap'\) got a path as data"):
        MemoryMappedTensor("x.memmap")
    with pytest.raises(TypeError, match=r"got a path as data: map an existing file with"):
        MemoryMappedTensor(tmp_path / "t")
