"""Jagged leaves: torch's jagged nested tensors in containers, in memory and on disk.

The oracle is a Python list of row tensors: every selection, concatenation and
round trip is compared with what the list gives.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader

import tensorbox
from tensorbox import TensorDict
from tensorbox._core.jagged import cat_rows, from_parts, select_rows, shifted_offsets
from tensorbox._storage.folder import FolderStore
from tensorbox._storage.jagged_io import map_jagged
from tensorbox._storage.store import verify
from tensorbox.errors import BatchDimError, BatchSizeError, FormatError


def njt(
    rows: list[torch.Tensor], odt: torch.dtype = torch.int64, feature: tuple[int, ...] = ()
) -> torch.Tensor:
    """The jagged tensor of ``rows`` (any count, zero included), offsets of ``odt``."""
    feature = rows[0].shape[1:] if rows else feature
    values = torch.cat(rows) if rows else torch.empty(0, *feature)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = torch.tensor([len(r) for r in rows], dtype=torch.int64).cumsum(0)
    return from_parts(values, offsets.to(odt))


def make_rows(lengths: list[int], feature: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(-9, 10, (n, *feature), generator=g).float() for n in lengths]


def rows_of(t: Any) -> list[torch.Tensor]:
    return list(t.unbind()) if t.shape[0] else []


def same_rows(got: Any, want: list[torch.Tensor]) -> None:
    got_rows = rows_of(got)
    assert len(got_rows) == len(want)
    for g, w in zip(got_rows, want, strict=True):
        assert g.shape == w.shape and torch.equal(g, w)


@st.composite
def jagged_case(draw: st.DrawFn) -> tuple[list[torch.Tensor], Any, torch.dtype]:
    lengths = draw(st.lists(st.integers(0, 4), min_size=1, max_size=7))
    feature = draw(st.sampled_from([(), (2,)]))
    rows = make_rows(lengths, feature, draw(st.integers(0, 2**16)))
    n = len(rows)
    kind = draw(st.sampled_from(["int", "slice", "list", "tensor", "mask", "int32"]))
    index: Any
    if kind == "int":
        index = draw(st.integers(-n, n - 1))
    elif kind == "slice":
        bounds = st.none() | st.integers(-n - 2, n + 2)
        index = slice(draw(bounds), draw(bounds), draw(st.none() | st.integers(1, 3)))
    elif kind == "mask":
        index = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    else:
        items = draw(st.lists(st.integers(-n, n - 1), max_size=6))
        if kind == "list":
            index = items
        else:
            dt = torch.int32 if kind == "int32" else torch.int64
            index = torch.tensor(items, dtype=dt)
    return rows, index, draw(st.sampled_from([torch.int64, torch.int32]))


def oracle(rows: list[torch.Tensor], index: Any) -> Any:
    if type(index) is int:
        return rows[index]
    if type(index) is slice:
        return rows[index]
    if isinstance(index, torch.Tensor) and index.dtype is torch.bool:
        return [r for r, keep in zip(rows, index.tolist(), strict=True) if keep]
    return [rows[i] for i in (index.tolist() if isinstance(index, torch.Tensor) else index)]


def check_index(td: Any, rows: list[torch.Tensor], index: Any) -> None:
    want = oracle(rows, index)
    got = td[index]
    if type(index) is int:
        assert got.batch_size == torch.Size([])
        # one dense row (a MemoryMappedTensor view of the values file after a load)
        assert not got["x"].is_nested and torch.equal(got["x"], want)
        assert int(got["n"]) == len(want)
        return
    assert got.batch_size == torch.Size([len(want)])
    same_rows(got["x"], want)
    assert got["n"].tolist() == [len(r) for r in want]
    if len(want):  # padding works on every selection
        padded = torch.nested.to_padded_tensor(got["x"], 0.0)
        assert padded.shape[1] == max(len(r) for r in want)


def container(
    rows: list[torch.Tensor], odt: torch.dtype, feature: tuple[int, ...] = ()
) -> TensorDict:
    return TensorDict(
        x=njt(rows, odt, feature), n=torch.tensor([len(r) for r in rows]), batch_size=[len(rows)]
    )


@given(jagged_case())
def test_index_against_list_in_memory(case: Any) -> None:
    rows, index, odt = case
    td = container(rows, odt)
    check_index(td, rows, index)
    if type(index) is not int:
        assert td[index]["x"].offsets().dtype is odt  # offsets keep their dtype


@given(jagged_case())
def test_index_against_list_after_save_and_load(case: Any) -> None:
    rows, index, odt = case
    with tempfile.TemporaryDirectory() as d:
        container(rows, odt).memmap(f"{d}/t")
        back = TensorDict.load_memmap(f"{d}/t")
        assert back["x"].offsets().dtype is odt
        check_index(back, rows, index)
        if isinstance(index, list):  # what DataLoader's fetcher calls
            got = back.__getitems__([i % len(rows) for i in index])
            same_rows(got["x"], [rows[i] for i in index])
        del back


@given(
    st.lists(st.lists(st.integers(0, 3), max_size=4), min_size=1, max_size=4),
    st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_cat_against_list(lengths: list[list[int]], int32: list[bool]) -> None:
    parts = [make_rows(ls, (2,), i) for i, ls in enumerate(lengths)]
    tds = [container(p, torch.int32 if b else torch.int64, (2,)) for p, b in zip(parts, int32)]
    out = torch.cat(tds)
    want = [r for p in parts for r in p]
    assert out.batch_size == torch.Size([len(want)])
    same_rows(out["x"], want)
    assert out["n"].tolist() == [len(r) for r in want]
    all32 = all(int32[: len(parts)])
    assert out["x"].offsets().dtype is (torch.int32 if all32 else torch.int64)
    same_rows(tensorbox.cat(tds)["x"], want)


def test_cat_rows_takes_dense_blocks_and_refuses_mismatches() -> None:
    a = njt(make_rows([1, 0], (2,), 0))
    dense = torch.ones(2, 3, 2)
    same_rows(cat_rows([a, dense]), [*rows_of(a), torch.ones(3, 2), torch.ones(3, 2)])
    with pytest.raises(
        BatchSizeError, match=r"cat: key 'x': element 1 has rows of feature shape \[3\]"
    ):
        cat_rows([a, njt(make_rows([1], (3,), 0))], "x")
    with pytest.raises(BatchSizeError, match=r"cat: key 'x' is jagged in element 0 but element 1"):
        cat_rows([a, torch.ones(2)], "x")
    assert shifted_offsets(torch.tensor([0, 2, 5], dtype=torch.int32), 7).tolist() == [9, 12]


def test_zero_rows_and_zero_length_rows() -> None:
    empty = TensorDict(x=njt([], feature=(2,)), batch_size=[0])
    assert empty[0:0]["x"].shape[0] == 0
    rows = [torch.empty(0, 2), torch.empty(0, 2)]
    td = container(rows, torch.int64)
    same_rows(td[torch.tensor([1, 0, 1])]["x"], [rows[1], rows[0], rows[1]])
    with tempfile.TemporaryDirectory() as d:
        empty.memmap(f"{d}/e")
        td.memmap(f"{d}/z")
        assert TensorDict.load_memmap(f"{d}/e")["x"].shape[0] == 0
        same_rows(TensorDict.load_memmap(f"{d}/z")[:]["x"], rows)


def test_from_file_mapped_values(tmp_path: Path) -> None:
    values = torch.arange(10.0)
    values.numpy().tofile(tmp_path / "v.bin")
    mapped = torch.from_file(str(tmp_path / "v.bin"), shared=False, size=10)
    td = TensorDict(x=from_parts(mapped, torch.tensor([0, 3, 3, 10])), batch_size=[3])
    same_rows(td[[2, 0]]["x"], [values[3:10], values[0:3]])
    assert td[1:]["x"].values().data_ptr() == mapped[3:].data_ptr()  # a slice is a view
    saved = td.memmap(tmp_path / "t")
    same_rows(saved["x"], [values[0:3], values[3:3], values[3:10]])


class _CountIndexSelect(TorchDispatchMode):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows, self.calls = rows, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.index_select.default and args[0].shape[0] == self.rows:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def test_a_selection_is_one_gather_from_the_mapped_values(tmp_path: Path) -> None:
    rows = make_rows([3, 1, 4, 1, 5], (2,), 3)
    TensorDict(x=njt(rows), batch_size=[5]).memmap(tmp_path / "t")
    back = TensorDict.load_memmap(tmp_path / "t")
    length = back["x"].values().shape[0]
    with _CountIndexSelect(length) as counter:
        got = back[torch.tensor([4, 0, 2])]
    assert counter.calls == 1
    same_rows(got["x"], [rows[4], rows[0], rows[2]])


def test_dataloader_default_collate_pads(tmp_path: Path) -> None:
    rows = make_rows([2, 0, 5, 1, 3], (), 1)
    container(rows, torch.int64).memmap(tmp_path / "t")
    ds = TensorDict.load_memmap(tmp_path / "t")
    seen = []
    for batch in DataLoader(ds, batch_size=2):
        assert type(batch["x"]) is type(ds["x"])
        padded = torch.nested.to_padded_tensor(batch["x"], -1.0)
        lengths = batch["n"].tolist()
        assert padded.shape == (len(lengths), max(lengths))
        for row, n in zip(padded, lengths, strict=True):
            seen.append(row[:n])
            assert (row[n:] == -1).all()
    for s, r in zip(seen, rows, strict=True):
        assert torch.equal(s, r)


def test_leaf_ops_apply_to_clone_eq_memmap_like(tmp_path: Path) -> None:
    rows = make_rows([2, 0, 3], (2,), 5)
    td = container(rows, torch.int32)
    same_rows(td.apply(lambda t: t * 2)["x"], [r * 2 for r in rows])
    assert td.to(torch.float64)["x"].dtype == torch.float64
    clone = td.clone()
    assert clone["x"].values().data_ptr() != td["x"].values().data_ptr()
    other = container([r.clone() for r in rows], torch.int64)  # built separately
    assert (td == other).all() and not (td != other).any()
    assert (td == clone).all()
    changed = container([rows[0], rows[1], rows[2] + 1], torch.int64)
    assert not (td == changed).all() and (td != changed).any()
    shorter = container([rows[0], rows[1], rows[2][:1]], torch.int64)
    assert not (td == shorter).all() and (td != shorter).any()
    like = td.memmap_like(tmp_path / "like")
    same_rows(like["x"], [torch.zeros_like(r) for r in rows])
    back = TensorDict.load_memmap(tmp_path / "like")
    assert back["x"].offsets().tolist() == [0, 2, 2, 5] and back["x"].offsets().dtype is torch.int32
    shared = td.clone().memmap_()
    assert shared.is_memmap() and (shared == td).all()
    assert back.is_memmap()


def test_split_narrow_unbind_take_rows() -> None:
    rows = make_rows([2, 0, 3, 1], (), 2)
    td = container(rows, torch.int64)
    a, b = td.split([1, 3])
    same_rows(a["x"], rows[:1])
    same_rows(b["x"], rows[1:])
    same_rows(td.narrow(0, -2, 2)["x"], rows[2:])
    assert [torch.equal(r["x"], w) for r, w in zip(td.unbind(0), rows, strict=True)] == [True] * 4


def test_row_writes_keep_lengths() -> None:
    rows = make_rows([2, 0, 3], (), 4)
    td = container(rows, torch.int64)
    td[2] = {"x": torch.tensor([7.0, 8.0, 9.0]), "n": 3}
    td[0:2] = 1.0
    assert [r.tolist() for r in rows_of(td["x"])] == [[1.0, 1.0], [], [7.0, 8.0, 9.0]]
    td[torch.tensor([2, 0])] = {"x": njt([torch.zeros(3), torch.ones(2) * 5]), "n": 0}
    assert [r.tolist() for r in rows_of(td["x"])] == [[5.0, 5.0], [], [0.0, 0.0, 0.0]]
    with pytest.raises(BatchSizeError, match=r"the rows given have lengths \[2\], the selected"):
        td[[2]] = {"x": njt([torch.ones(2)]), "n": 0}
    with pytest.raises(BatchSizeError, match=r"cannot write into row 2 of key 'x'"):
        td[2] = {"x": torch.ones(2)}
    with pytest.raises(BatchSizeError, match=r"not all 2; give a jagged tensor"):
        td[[0, 2]] = {"x": torch.ones(2, 2), "n": 0}


def test_writes_reach_a_saved_tree(tmp_path: Path) -> None:
    rows = make_rows([2, 1], (), 6)
    container(rows, torch.int64).memmap(tmp_path / "t")
    back = TensorDict.load_memmap(tmp_path / "t")
    back[1] = {"x": torch.tensor([42.0]), "n": 1}
    again = TensorDict.load_memmap(tmp_path / "t")
    assert again["x"].unbind()[1].tolist() == [42.0]


def test_saved_format(tmp_path: Path) -> None:
    rows = make_rows([2, 0, 3], (2,), 0)
    td = TensorDict(x=njt(rows, torch.int32), y=torch.zeros(3), batch_size=[3])
    td.memmap(tmp_path / "t", checksum=True)
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["version"] == 3
    e = meta["entries"]["x"]
    assert e["kind"] == "jagged" and e["shape"] == [3, None, 2] and e["length"] == 5
    assert e["values"]["file"] == "x.values.memmap" and len(e["values"]["sha256"]) == 64
    assert e["offsets"] == {**e["offsets"], "file": "x.offsets.memmap", "dtype": "int32"}
    assert os.path.getsize(tmp_path / "t" / "x.offsets.memmap") == 4 * 4
    assert os.path.getsize(tmp_path / "t" / "x.values.memmap") == 5 * 2 * 4
    TensorDict(y=torch.zeros(3), batch_size=[3]).memmap(tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "meta.json").read_text())["version"] == 2
    assert TensorDict.load_memmap(tmp_path / "t", verify=True)["x"].offsets().dtype is torch.int32
    v = map_jagged(
        str(tmp_path / "t" / "x.values.memmap"),
        str(tmp_path / "t" / "x.offsets.memmap"),
        torch.float32,
        (2,),
        3,
        5,
        torch.int32,
    )
    same_rows(v, rows)


# ---------------------------------------------------------------- damaged trees


def _saved(tmp_path: Path) -> Path:
    rows = make_rows([2, 0, 3], (), 0)
    TensorDict(x=njt(rows), batch_size=[3]).memmap(tmp_path / "t")
    return tmp_path / "t"


def _write_offsets(path: Path, values: list[int]) -> None:
    torch.tensor(values, dtype=torch.int64).numpy().tofile(path / "x.offsets.memmap")


@pytest.mark.parametrize(
    ("offsets", "match"),
    [
        ([1, 2, 2, 5], r"x\.offsets\.memmap: the offsets start at 1, expected 0"),
        ([0, 2, 2, 4], r"x\.offsets\.memmap: the offsets end at 4, but the values hold 5"),
        ([0, 3, 2, 5], r"x\.offsets\.memmap: the offsets decrease at row 1 \(3 then 2\)"),
        ([0, 2], r"x\.offsets\.memmap is 16 bytes, but int64 of shape \[4\] needs 32"),
    ],
)
def test_damaged_offsets_raise(tmp_path: Path, offsets: list[int], match: str) -> None:
    t = _saved(tmp_path)
    _write_offsets(t, offsets)
    with pytest.raises(FormatError, match=match):
        TensorDict.load_memmap(t)


def test_damaged_trees_are_found_by_verify(tmp_path: Path) -> None:
    t = _saved(tmp_path)
    _write_offsets(t, [0, 3, 2, 5])
    with pytest.raises(FormatError, match=r"offsets decrease at row 1"):
        verify(FolderStore(str(t)))
    os.truncate(t / "x.values.memmap", 8)
    with pytest.raises(FormatError, match=r"x\.values\.memmap is 8 bytes, but float32 of shape"):
        TensorDict.load_memmap(t)


def _edit_entry(t: Path, **changes: Any) -> None:
    meta = json.loads((t / "meta.json").read_text())
    meta["entries"]["x"].update(changes)
    for k in [k for k, v in changes.items() if v is None and k != "shape"]:
        del meta["entries"]["x"][k]
    (t / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"shape": [3, 1]}, r"entry 'x': shape \[3, 1\] is not \[rows, null, \*feature\]"),
        ({"shape": [2, None]}, r"a jagged entry of 2 rows needs batch_size \[2\]"),
        ({"length": -1}, r"'length' is -1, expected an int >= 0"),
        (
            {"offsets": {"file": "x.offsets.memmap", "dtype": "int16", "id": "0" * 32}},
            r"offsets dtype 'int16' is not one of \['int32', 'int64'\]",
        ),
        ({"values": {"file": "x.values.memmap"}}, r"'values' is .*; expected an object with"),
        ({"values": {"file": "../x", "id": "0" * 32}}, r"file '\.\./x' is not a plain file"),
        ({"extra": 1}, r"a 'jagged' entry has \["),
    ],
)
def test_bad_jagged_entries(tmp_path: Path, changes: dict[str, Any], match: str) -> None:
    t = _saved(tmp_path)
    _edit_entry(t, **changes)
    with pytest.raises(FormatError, match=match):
        TensorDict.load_memmap(t)


def test_jagged_entry_needs_version_3(tmp_path: Path) -> None:
    t = _saved(tmp_path)
    meta = json.loads((t / "meta.json").read_text())
    meta["version"] = 2
    (t / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FormatError, match=r"is a 'jagged' entry, which format version 3 added"):
        TensorDict.load_memmap(t)


def test_show_and_verify_list_jagged_leaves(tmp_path: Path) -> None:
    from tensorbox.cli import main

    t = _saved(tmp_path)
    out: list[str] = []
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["show", str(t)]) == 0
        assert main(["verify", "--read", str(t)]) == 0
    out = buf.getvalue().splitlines()
    assert any("'x': jagged float32 [3, *]" in line for line in out)
    assert any("1 tensor" in line for line in out)


# ---------------------------------------------------------------- what raises


def test_containers_refuse_jagged_leaves_with_other_batch_sizes() -> None:
    x = njt(make_rows([1, 2, 0], (2,), 0))
    with pytest.raises(
        BatchSizeError,
        match=r"key 'x' is a jagged nested tensor of 3 rows, but the batch_size is \[\]",
    ):
        TensorDict(x=x)
    with pytest.raises(
        BatchSizeError, match=r"key \('a', 'x'\) is a jagged .* batch_size is \[2\]"
    ):
        TensorDict(a={"x": x}, batch_size=[2])
    td = TensorDict(batch_size=[3, 1])
    with pytest.raises(BatchSizeError, match=r"batch_size is \[3, 1\]: a container holding"):
        td["x"] = x
    ok = TensorDict(x=x, batch_size=[3])
    with pytest.raises(BatchSizeError, match=r"batch_size is \[\]: a container holding"):
        ok.batch_size = []
    with pytest.raises(BatchSizeError, match=r"ragged dim is 2, not 1"):
        TensorDict(x=x.transpose(1, 2), batch_size=[3])


@pytest.mark.parametrize(
    ("op", "name"),
    [
        (lambda td: td.reshape(3, 1), "reshape"),
        (lambda td: td.view(-1), "view"),
        (lambda td: td.unsqueeze(0), "unsqueeze"),
        (lambda td: td.permute(0), "permute"),
        (lambda td: td.transpose(0, 0), "transpose"),
        (lambda td: td.flatten(), "flatten"),
        (lambda td: td.expand(2, 3), "expand"),
        (lambda td: td.unflatten(0, (3, 1)), "unflatten"),
    ],
)
def test_shape_ops_raise_naming_the_key(op: Any, name: str) -> None:
    td = TensorDict(a={"x": njt(make_rows([1, 2, 0], (), 0))}, batch_size=[3])
    with pytest.raises(BatchDimError, match=rf"{name}: key \('a', 'x'\) is a jagged nested"):
        op(td)


def test_stack_raises_naming_the_key() -> None:
    td = TensorDict(x=njt(make_rows([1, 2], (), 0)), batch_size=[2])
    with pytest.raises(BatchDimError, match=r"stack: key 'x' is a jagged nested tensor"):
        torch.stack([td, td])


@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        (3, IndexError, r"index 3 is out of range for batch_size \(3,\)"),
        (torch.tensor([0, 5]), IndexError, r"index 5 is out of range for 3 rows"),
        (torch.tensor([-4]), IndexError, r"index -4 is out of range for 3 rows"),
        (torch.tensor([0.0]), IndexError, r"cannot select rows of a jagged leaf with a tensor"),
        (torch.zeros(2, 2, dtype=torch.long), IndexError, r"tensor of shape \[2, 2\]"),
        (torch.tensor([True]), IndexError, r"a bool mask of shape \[1\] does not match 3 rows"),
        ((0, 0), IndexError, r"addresses more than the batch dim"),
        (None, IndexError, r"cannot index the rows of a jagged leaf with None"),
        (slice(None, None, -1), ValueError, r"slice step must be positive"),
    ],
)
def test_bad_row_indices(index: Any, error: type, match: str) -> None:
    td = TensorDict(x=njt(make_rows([1, 2, 0], (), 0)), batch_size=[3])
    with pytest.raises(error, match=match):
        td[index]


def test_select_rows_directly() -> None:
    rows = make_rows([1, 2, 0], (), 0)
    x = njt(rows)
    assert torch.equal(select_rows(x, -2), rows[1])
    same_rows(select_rows(x, (..., slice(1, None))), rows[1:])
    same_rows(select_rows(x, range(3)), rows)


def test_pickles_by_reference_and_commits_and_tensorclass(tmp_path: Path) -> None:
    import pickle

    from tensorbox import tensorclass

    rows = make_rows([3, 0, 2], (), 7)
    container(rows, torch.int64).memmap(tmp_path / "t")
    ds = TensorDict.load_memmap(tmp_path / "t")
    again = pickle.loads(pickle.dumps(ds))  # mapped files travel as references
    assert (again == ds).all()
    ds[2] = {"x": torch.tensor([5.0, 6.0]), "n": 7}
    ds.memmap_()  # a commit of the tree-backed container
    back = TensorDict.load_memmap(tmp_path / "t")
    assert back["n"].tolist() == [3, 0, 7] and back[2]["x"].tolist() == [5.0, 6.0]

    @tensorclass
    class Seq:
        x: torch.Tensor
        n: torch.Tensor

    seq = Seq.load_memmap(tmp_path / "t")
    assert type(seq) is Seq and seq[[2, 0]].x.shape[0] == 2


def test_dataloader_workers(tmp_path: Path) -> None:
    rows = make_rows([3, 0, 2, 5], (), 8)
    container(rows, torch.int64).memmap(tmp_path / "t")
    ds = TensorDict.load_memmap(tmp_path / "t")
    batches = list(DataLoader(ds, batch_size=3, num_workers=1))
    same_rows(torch.cat(batches)["x"], rows)


@given(st.lists(st.integers(0, 4), max_size=6), st.sampled_from([(), (2,)]))
def test_pad_matches_to_padded_tensor(lengths: list[int], feature: tuple[int, ...]) -> None:
    from tensorbox import to_padded_tensor

    x = njt(make_rows(lengths, feature, 0), feature=feature)
    got = to_padded_tensor(x, -1)
    if lengths and max(lengths):
        assert torch.equal(got, torch.nested.to_padded_tensor(x, -1.0))
    assert got.shape[:2] == (len(lengths), max(lengths, default=0))


def test_an_empty_stepped_slice_of_jagged_rows() -> None:
    """slice(1, 0, 2) selects no row (as on a list), found by hypothesis: it used to raise
    from torch.arange."""
    nt = torch.nested.nested_tensor(
        [torch.zeros(0), torch.ones(2), torch.ones(3)], layout=torch.jagged
    )
    td = TensorDict({"j": nt}, [3])
    assert td[1:0:2].batch_size == torch.Size([0])
    assert [len(r) for r in td[::2]["j"].unbind()] == [0, 3]
