"""Memory-mapped nested tensors (torch's strided layout), as tensordict makes them: a 2-d
tensor of shapes for the constructors, a nested tensor for ``from_tensor``; the values lie
in one flat file or shared memory, and writes to an element reach it."""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import MemoryMappedTensor

# torch warns once per process that its strided nested tensors are a prototype
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")

shapes_st = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=4)


def _nested(shapes: list[tuple[int, int]]) -> torch.Tensor:
    elems = [
        torch.arange(a * b, dtype=torch.float64).reshape(a, b) + 100 * i
        for i, (a, b) in enumerate(shapes)
    ]
    return torch.nested.nested_tensor(elems)


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    ua, ub = a.unbind(), b.unbind()
    assert len(ua) == len(ub)
    for x, y in zip(ua, ub):
        assert x.dtype == y.dtype and torch.equal(x, y)


@given(shapes_st, st.booleans())
@settings(max_examples=25, deadline=None)
def test_from_tensor_copies_a_nested_tensor(shapes: list[tuple[int, int]], to_file: bool) -> None:
    src = _nested(shapes)
    with tempfile.TemporaryDirectory() as d:
        m = MemoryMappedTensor.from_tensor(src, filename=f"{d}/x" if to_file else None)
        assert type(m) is MemoryMappedTensor and m.is_nested
        _same(m, src)
        assert torch.equal(m._nested_tensor_size(), src._nested_tensor_size())
        if to_file:
            again = MemoryMappedTensor.from_filename(
                f"{d}/x", torch.float64, src._nested_tensor_size()
            )
            _same(again, src)
        else:
            again = MemoryMappedTensor.from_handler(
                m.handler, torch.float64, src._nested_tensor_size()
            )
            _same(again, src)
        del m, again


def test_constructors_take_a_2d_tensor_of_shapes(tmp_path: Path) -> None:
    shape = torch.tensor([[2, 3], [2, 4], [3, 2]])
    e = MemoryMappedTensor.empty(shape, filename=tmp_path / "e", dtype=torch.int32)
    assert type(e) is MemoryMappedTensor and e.filename == str(tmp_path / "e")
    assert (tmp_path / "e").stat().st_size == 20 * 4  # one flat file of 2*3 + 2*4 + 3*2 values
    e.fill_(2)
    assert [t.shape for t in e.unbind()] == [(2, 3), (2, 4), (3, 2)]
    assert all((t == 2).all() for t in e.unbind())
    z = MemoryMappedTensor.zeros(shape=shape, dtype=torch.bool)
    assert z.dtype == torch.bool and z.handler is not None and not any(t.any() for t in z.unbind())
    o = MemoryMappedTensor.ones(shape, dtype=torch.int64)
    assert all(bool((t == 1).all()) for t in o.unbind())
    f = MemoryMappedTensor.full(shape, 2.5)
    assert all(bool((t == 2.5).all()) for t in f.unbind())


def test_from_storage_views_a_flat_tensor_as_nested_and_writes_reach_it(tmp_path: Path) -> None:
    a = MemoryMappedTensor.from_tensor(
        torch.arange(10, dtype=torch.float64), filename=tmp_path / "f"
    )
    shape = torch.tensor([[2, 2], [2, 3]])
    b = MemoryMappedTensor.from_storage(
        a.untyped_storage(), filename=tmp_path / "f", shape=shape, dtype=a.dtype
    )
    assert type(b) is MemoryMappedTensor and torch.equal(b._nested_tensor_size(), shape)
    assert torch.equal(b[0], torch.arange(4.0, dtype=torch.float64).view(2, 2))
    assert torch.equal(b[1], torch.arange(4.0, 10, dtype=torch.float64).view(2, 3))
    b[1].fill_(-1)
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0] + [-1.0] * 6
    again = MemoryMappedTensor.from_filename(tmp_path / "f", torch.float64, (10,))
    assert again.tolist() == a.tolist()


def test_a_nested_memory_mapped_tensor_pickles_with_its_values(tmp_path: Path) -> None:
    src = _nested([(1, 2), (2, 2)])
    m = MemoryMappedTensor.from_tensor(src, filename=tmp_path / "p")
    back = pickle.loads(pickle.dumps(m))
    assert type(back) is MemoryMappedTensor
    _same(back, src)


def test_bad_nested_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"shapes must be non-negative ints.*\[\[1\.5, 2\.0\]\]"):
        MemoryMappedTensor.zeros(torch.tensor([[1.5, 2.0]]))
    jagged = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    with pytest.raises(TypeError, match=r"torch\.jagged layout cannot be memory-mapped"):
        MemoryMappedTensor.from_tensor(jagged)


def test_nested_memmap_matches_tensordict(tmp_path: Path) -> None:
    tensordict = pytest.importorskip("tensordict")
    shape = torch.tensor([[2, 3], [1, 4]])
    for lib, d in ((tensordict, tmp_path / "td"), (None, tmp_path / "tb")):
        cls = lib.MemoryMappedTensor if lib else MemoryMappedTensor
        d.mkdir()
        out = cls.ones(shape, filename=str(d / "x"), dtype=torch.int32)
        got = [t.tolist() for t in out]
        size = (d / "x").stat().st_size
        if lib:
            want = (got, size, type(out).__name__)
    assert (got, size, type(out).__name__) == want


def test_a_container_refuses_a_strided_nested_tensor_naming_the_key() -> None:
    from tensorbox import TensorClass, TensorDict

    class C(TensorClass):
        x: torch.Tensor

    nt = _nested([(3, 4), (3, 5)])
    msg = r"key {} is a nested tensor with the torch\.strided layout, which a container does not"
    with pytest.raises(TypeError, match=msg.format("'a'")):
        TensorDict({"a": nt}, batch_size=[2])
    with pytest.raises(TypeError, match=msg.format(r"\('n', 'a'\)")):
        TensorDict(batch_size=[2]).set(("n", "a"), nt)
    td = TensorDict(batch_size=[2])
    with pytest.raises(TypeError, match=msg.format("'a'")):
        td["a"] = MemoryMappedTensor.from_tensor(nt)
    with pytest.raises(TypeError, match=msg.format("'x'")):
        C(x=nt, batch_size=[2])
    assert list(td.keys()) == []
