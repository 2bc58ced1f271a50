"""Padding jagged leaves and gathering their rows: ``tensorbox.to_padded_tensor``,
``td.to_padded_tensor`` and ``td.pad_rows``, against a Python list of row tensors.

Row gathers on the CPU run through numpy; under a torch mode, with autograd, or for a
dtype numpy lacks they run in torch (or view the values as integers). Both are checked
against the same list oracle.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader

import tensorbox
from tensorbox import TensorDict
from tensorbox._core.jagged import from_parts
from tensorbox._core.jagged_gather import as_rows, gather, gather_padded, positions

DTYPES = [torch.float32, torch.int32, torch.bfloat16, torch.bool, torch.float64]


def njt(rows: list[torch.Tensor], odt: torch.dtype, feature: tuple[int, ...], dtype: Any) -> Any:
    values = torch.cat(rows) if rows else torch.empty(0, *feature, dtype=dtype)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = torch.tensor([len(r) for r in rows], dtype=torch.int64).cumsum(0)
    return from_parts(values, offsets.to(odt))


def padded_oracle(rows: list[torch.Tensor], feature: tuple[int, ...], dtype: Any, pad: float):
    longest = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), longest, *feature), pad, dtype=dtype)
    mask = torch.zeros(len(rows), longest, dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        mask[i, : len(r)] = True
    return out, mask


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


class _Mode(TorchDispatchMode):
    """A mode that changes nothing: the gathers must then run as torch ops."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


@st.composite
def pad_case(draw: st.DrawFn) -> tuple[Any, ...]:
    lengths = draw(st.lists(st.integers(0, 5), min_size=1, max_size=7))
    feature = draw(st.sampled_from([(), (2,)]))
    dtype = draw(st.sampled_from(DTYPES))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    rows = [torch.randint(-9, 10, (n, *feature), generator=g).to(dtype) for n in lengths]
    n = len(rows)
    kind = draw(st.sampled_from(["list", "tensor", "int32", "mask", "slice"]))
    index: Any
    if kind == "mask":
        index = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        picked = [i for i in range(n) if index[i]]
    elif kind == "slice":
        index = slice(draw(st.integers(0, n)), None, draw(st.integers(1, 3)))
        picked = list(range(n))[index]
    else:
        picked = draw(st.lists(st.integers(-n, n - 1), max_size=6))
        dt = torch.int32 if kind == "int32" else torch.int64
        index = picked if kind == "list" else torch.tensor(picked, dtype=dt)
        picked = [i % n for i in picked]
    odt = draw(st.sampled_from([torch.int64, torch.int32]))
    pad = draw(st.sampled_from([0, -1, 3]))
    return rows, feature, dtype, index, picked, odt, pad


@settings(max_examples=60, deadline=None)
@given(pad_case(), st.booleans())
def test_padding_and_gathers_against_a_list(case: Any, under_mode: bool) -> None:
    rows, feature, dtype, index, picked, odt, pad = case
    want_rows = [rows[i] for i in picked]
    want, want_mask = padded_oracle(want_rows, feature, dtype, pad)
    td = TensorDict(
        x=njt(rows, odt, feature, dtype), n=torch.arange(len(rows)), batch_size=[len(rows)]
    )
    mode = _Mode() if under_mode else None
    with mode if mode is not None else _nothing():
        fused = td.pad_rows(index, pad, mask_key="mask")
        batch = td[index]
        via_batch = batch.to_padded_tensor(pad, mask_key=("m", "ask"))
        alone = tensorbox.to_padded_tensor(batch["x"], pad)
    if mode is not None:  # the torch path ran: the values were gathered by torch ops
        assert any("index_select" in op or "index.Tensor" in op for op in mode.ops)
    for got in (fused["x"], via_batch["x"], alone):
        assert same(got, want)
    assert same(fused["mask"], want_mask) and same(via_batch["m", "ask"], want_mask)
    assert fused["n"].tolist() == picked == via_batch["n"].tolist()
    assert batch["x"].offsets().dtype == odt
    got_rows = list(batch["x"].unbind()) if picked else []
    assert len(got_rows) == len(want_rows)
    for g, w in zip(got_rows, want_rows, strict=True):
        assert same(g, w)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_to_padded_tensor_matches_torch_and_keeps_feature_dims() -> None:
    rows = [torch.randn(n, 3, 2) for n in (4, 0, 2, 7)]
    nt = torch.nested.nested_tensor(rows, layout=torch.jagged)
    for pad in (0.0, -2.5, float("nan")):
        want = torch.nested.to_padded_tensor(nt, pad)
        got = tensorbox.to_padded_tensor(nt, pad)
        assert got.shape == want.shape == (4, 7, 3, 2)
        assert torch.equal(got.nan_to_num(9.0), want.nan_to_num(9.0))
    # a narrowed view of a larger values tensor (offsets not starting at 0)
    window = tensorbox.TensorDict(x=nt, batch_size=[4])[2:]["x"]
    assert same(tensorbox.to_padded_tensor(window, 0), torch.nested.to_padded_tensor(window, 0.0))


def test_gathers_of_dtypes_numpy_lacks_and_of_empty_selections() -> None:
    for dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.complex64, torch.uint16):
        values = torch.arange(6).to(dtype)
        offsets = torch.tensor([0, 2, 2, 6])
        v, o, seqlens = gather(values, offsets, torch.tensor([2, 0]))
        assert v.dtype == dtype and v.view(torch.uint8).equal(
            values[[2, 3, 4, 5, 0, 1]].view(torch.uint8)
        )
        assert o.tolist() == [0, 4, 6] and seqlens == (2, 4)
        p, lengths = gather_padded(values, offsets, torch.tensor([1, 0]), 1)
        assert p.dtype == dtype and lengths.tolist() == [0, 2]
        real = p.real if dtype.is_complex else p
        assert real.to(torch.float32).tolist() == [[1.0, 1.0], [0.0, 1.0]]
    none = torch.empty(0, dtype=torch.int64)
    v, o, seqlens = gather(torch.arange(3.0), torch.tensor([0, 3]), none)
    assert v.shape == (0,) and o.tolist() == [0] and seqlens is None
    p, lengths = gather_padded(torch.arange(3.0), torch.tensor([0, 3]), none)
    assert p.shape == (0, 0) and lengths.shape == (0,)
    assert positions(torch.tensor([5, 0]), torch.tensor([2, 1])).tolist() == [5, 6, 0]
    assert (
        positions(torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)).numel() == 0
    )


def test_autograd_sees_gathers_and_padding() -> None:
    values = torch.arange(5.0, requires_grad=True)
    nt = from_parts(values, torch.tensor([0, 2, 5]))
    td = TensorDict(x=nt, batch_size=[2])
    (td[torch.tensor([1])]["x"].values().sum() + tensorbox.to_padded_tensor(nt, 0).sum()).backward()
    assert values.grad is not None and values.grad.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]


def test_as_rows_takes_python_ints_and_falls_back_to_torch() -> None:
    assert same(as_rows([3, 1]), torch.tensor([3, 1]))
    assert same(as_rows(range(2, 5)), torch.tensor([2, 3, 4]))
    assert same(as_rows([]), torch.empty(0, dtype=torch.int64))
    assert same(as_rows([True, False]), torch.tensor([1, 0]))  # as torch.as_tensor(..., int64)


def test_dataloader_collate_fn_pad_rows_over_a_saved_tree(tmp_path: Path) -> None:
    rows = [torch.arange(n, dtype=torch.int32) for n in (2, 0, 5, 1, 3)]
    nt = torch.nested.nested_tensor(rows, layout=torch.jagged)
    TensorDict(x=nt, n=torch.tensor([2, 0, 5, 1, 3]), batch_size=[5]).memmap(tmp_path / "t")
    ds = TensorDict.load_memmap(tmp_path / "t")
    seen = []
    for batch in DataLoader(range(len(ds)), batch_size=2, collate_fn=ds.pad_rows):
        lengths = batch["n"].tolist()
        assert batch["x"].shape == (len(lengths), max(lengths))
        for row, n in zip(batch["x"], lengths, strict=True):
            assert row[:n].tolist() == list(range(n)) and not row[n:].any()
        seen += lengths
    assert seen == [2, 0, 5, 1, 3]
    # workers: the bound method pickles the tree by file reference
    loader = DataLoader(range(5), batch_size=2, num_workers=1, collate_fn=ds.pad_rows)
    assert [b["n"].tolist() for b in loader] == [[2, 0], [5, 1], [3]]


def test_padding_leaves_dense_and_nested_containers() -> None:
    nt = torch.nested.nested_tensor([torch.ones(1), torch.ones(3)], layout=torch.jagged)
    inner = TensorDict(y=nt, batch_size=[2])
    td = TensorDict(a=torch.tensor([7, 8]), inner=inner, batch_size=[2])
    out = td.to_padded_tensor(0, mask_key="mask")
    assert out["inner", "y"].tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    assert out["a"] is td["a"] and out["mask"].tolist() == [[True, False, False], [True] * 3]
    picked = td.pad_rows([1], 0)
    assert picked["inner", "y"].tolist() == [[1.0, 1.0, 1.0]] and picked["a"].tolist() == [8]
    dense = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
    assert same(dense.pad_rows((slice(None), 0))["a"], torch.zeros(2))
    assert same(dense.to_padded_tensor()["a"], dense["a"])


def test_errors() -> None:
    nt = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(1, 3)], layout=torch.jagged)
    with pytest.raises(
        TypeError, match=r"pads a jagged nested tensor .*got a torch.strided tensor of shape \[2\]"
    ):
        tensorbox.to_padded_tensor(torch.zeros(2))
    with pytest.raises(TypeError, match=r"got list \[1\]"):
        tensorbox.to_padded_tensor([1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ragged along dim 2; transpose it back first"):
        tensorbox.to_padded_tensor(nt.transpose(1, 2))
    td = TensorDict(x=nt, batch_size=[2])
    with pytest.raises(IndexError, match=r"got the single row index 1; give a list, .*td\[1\]"):
        td.pad_rows(1)
    with pytest.raises(IndexError, match="index 5 is out of range for 2 rows"):
        td.pad_rows([0, 5])
    dense = TensorDict(a=torch.zeros(2), batch_size=[2])
    with pytest.raises(ValueError, match=r"mask_key='m': the container holds no jagged leaf"):
        dense.to_padded_tensor(mask_key="m")
    with pytest.raises(ValueError, match=r"mask_key=\('m', 'k'\): the container holds no jagged"):
        dense.pad_rows([0], mask_key=("m", "k"))


def test_a_forked_child_gathers_after_the_parent_used_threads() -> None:
    # torch 2.13's CPU repeat_interleave hangs in such a child: the CPU gathers avoid it.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.randn(2_000_000).mul(2).sum()
        rows = [torch.arange(n) for n in (3, 0, 5, 2)] * 500
        td = TensorDict(x=torch.nested.nested_tensor(rows, layout=torch.jagged), batch_size=[2000])
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                ok = td[torch.arange(0, 2000, 2)]["x"].values().numel() == 4000
                ok &= td.pad_rows(torch.arange(0, 2000, 3))["x"].shape == (667, 5)
                three = torch.nested.nested_tensor(
                    [torch.zeros(3, dtype=torch.int64)] * 2, layout=torch.jagged
                )
                td[torch.tensor([0, 4])] = {"x": three}
                code = 0 if ok else 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                return
            time.sleep(0.05)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child did not finish its row gathers within 60 s")
    finally:
        torch.set_num_threads(threads)


def test_tensorclass_rows_pad_into_a_mask_field(tmp_path: Path) -> None:
    @tensorbox.tensorclass
    class Tokens:
        tokens: torch.Tensor
        mask: torch.Tensor | None = None

    nt = torch.nested.nested_tensor([torch.arange(2), torch.arange(3)], layout=torch.jagged)
    Tokens(tokens=nt, batch_size=[2]).memmap(tmp_path / "t")
    saved = Tokens.load_memmap(tmp_path / "t")
    batch = saved.pad_rows([1, 0], -1, mask_key="mask")
    assert type(batch) is Tokens and not batch.is_locked and not batch.is_memmap()
    assert batch.tokens.tolist() == [[0, 1, 2], [0, 1, -1]]
    assert batch.mask is not None and batch.mask.tolist() == [[True] * 3, [True, True, False]]
    assert saved.mask is None  # the saved tree is untouched
    with pytest.raises(tensorbox.TensorDictKeyError, match="has no field 'other'"):
        saved.to_padded_tensor(mask_key="other")


@pytest.mark.parametrize("under_mode", [False, True])
def test_row_writes_through_both_paths(under_mode: bool) -> None:
    nt = torch.nested.nested_tensor(
        [torch.zeros(2), torch.zeros(0), torch.zeros(3)], layout=torch.jagged
    )
    td = TensorDict(x=nt, batch_size=[3])
    new = torch.nested.nested_tensor([torch.ones(3), torch.full((2,), 2.0)], layout=torch.jagged)
    with _Mode() if under_mode else _nothing():
        td[torch.tensor([2, 0])] = {"x": new}
    assert [r.tolist() for r in td["x"].unbind()] == [[2.0, 2.0], [], [1.0, 1.0, 1.0]]
    assert positions(torch.tensor([4, 9]), torch.tensor([0, 2])).tolist() == [9, 10]
