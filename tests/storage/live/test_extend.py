"""extend_: rows appended along batch dim 0, in memory and to saved trees, crash-safe."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox import BatchSizeError, NonTensorData, TensorDict, TensorDictKeyError, tensorclass
from tensorbox._storage import commit as _commit
from tensorbox._storage import extend as _extend
from tests.checkout import checkout_env


@tensorclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor
    source: str = "train"


def _rows(start: int, k: int, name: Any = "same") -> TensorDict:
    """Rows ``start .. start+k-1``: row i holds i in every leaf."""
    i = torch.arange(start, start + k)
    return TensorDict({"a": i.clone(), "n": {"b": i.float()[:, None].repeat(1, 3)}, "s": name}, [k])


def _same(got: Any, want: Any) -> None:
    """The same batch size, keys, leaves (dtype and values) and non-tensor values."""
    assert type(got) is type(want)
    assert got.batch_size == want.batch_size
    assert list(got._tensordict) == list(want._tensordict)
    for k, w in want._tensordict.items():
        g = got._tensordict[k]
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and torch.equal(g, w), k
        elif isinstance(w, NonTensorData):
            assert g == w, (k, g, w)
        else:
            _same(g, w)


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# ---------------------------------------------------------------- against torch.cat

_STEPS = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from(["same", "other", "per-row"])),
    min_size=1,
    max_size=5,
)


def _step_rows(start: int, k: int, how: str) -> TensorDict:
    if how == "per-row" and k:
        names = [NonTensorData(f"r{start + j}") for j in range(k)]
        return _rows(start, k, NonTensorData.stack(names, 0, ()))
    return _rows(start, k, "same" if how == "per-row" else how)


@given(n=st.integers(0, 3), steps=_STEPS, locked=st.booleans())
@settings(deadline=None)
def test_in_memory_extend_is_cat(n: int, steps: list[tuple[int, str]], locked: bool) -> None:
    td = _rows(0, n)
    if locked:
        td.lock_()
    nested = td["n"]
    want = td.clone()
    for k, how in steps:
        rows = _step_rows(len(want), k, how)
        want = torch.cat([want, rows], 0)
        assert td.extend_(rows) is td
        _same(td, want)
    assert td["n"] is nested and td.is_locked == locked  # identity and lock kept


@given(n=st.integers(0, 3), steps=_STEPS)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_tree_extend_is_cat_and_reloads(
    tmp_path: Path, n: int, steps: list[tuple[int, str]]
) -> None:
    path = tmp_path / os.urandom(4).hex()
    td = _rows(0, n).memmap(path)
    want = _rows(0, n)
    for k, how in steps:
        rows = _step_rows(len(want), k, how)
        want = torch.cat([want, rows], 0)
        td.extend_(rows)
        _same(td, want)
        _same(TensorDict.load_memmap(path), want)
        _same(TensorDict.load_memmap(path / "n"), want["n"])
        assert td.is_memmap() and td.is_locked
    assert _hidden(path.parent) == []


def _samples(start: int, k: int, source: str) -> Sample:
    return Sample(
        image=torch.arange(start, start + k)
        .to(torch.uint8)[:, None, None, None]
        .repeat(1, 3, 2, 2),
        label=torch.arange(start, start + k),
        source=source,
        batch_size=[k],
    )


def _per_row(value: object, n: int) -> list[object]:
    return list(value) if isinstance(value, list) else [value] * n


@given(
    n=st.integers(0, 3),
    steps=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["train", "test"])), min_size=1, max_size=4
    ),
)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_tensorclass_with_a_non_tensor_field(
    tmp_path: Path, n: int, steps: list[tuple[int, str]]
) -> None:
    path = tmp_path / os.urandom(4).hex()
    mem, saved = _samples(0, n, "train"), _samples(0, n, "train").memmap(path)
    want = _samples(0, n, "train")
    for k, source in steps:
        rows = _samples(len(want), k, source)
        want = torch.cat([want, rows], 0)
        assert mem.extend_(rows) is mem and saved.extend_(rows) is saved
        for got in (mem, saved, Sample.load_memmap(path)):
            assert type(got) is Sample and got.batch_size == want.batch_size
            assert torch.equal(got.image, want.image) and torch.equal(got.label, want.label)
            # the same value in every row, whether held once (shared) or once per row
            assert _per_row(got.source, len(want)) == _per_row(want.source, len(want))


def test_a_tree_loaded_without_its_class_keeps_its_type(tmp_path: Path) -> None:
    Sample(
        image=torch.zeros(1, 3, 2, 2, dtype=torch.uint8),
        label=torch.zeros(1, dtype=torch.int64),
        batch_size=[1],
    ).memmap(tmp_path / "tc")
    plain = TensorDict.load_memmap(tmp_path / "tc")
    plain.extend_(
        Sample(
            image=torch.ones(2, 3, 2, 2, dtype=torch.uint8),
            label=torch.ones(2, dtype=torch.int64),
            batch_size=[2],
        )
    )
    meta = json.loads((tmp_path / "tc" / "meta.json").read_text())
    assert meta["type"].endswith(":Sample") and meta["batch_size"] == [3]
    assert Sample.load_memmap(tmp_path / "tc").label.tolist() == [0, 1, 1]


# ---------------------------------------------------------------- saved trees


def test_views_and_earlier_readers_keep_their_rows(tmp_path: Path) -> None:
    td = _rows(0, 3).memmap(tmp_path / "t")
    view, reader = td["a"], TensorDict.load_memmap(tmp_path / "t")
    ident = os.stat(tmp_path / "t" / "a.memmap").st_ino
    td.extend_(_rows(3, 2))
    assert view.tolist() == [0, 1, 2] and reader["a"].tolist() == [0, 1, 2]
    assert td["a"].tolist() == [0, 1, 2, 3, 4]
    assert os.stat(tmp_path / "t" / "a.memmap").st_ino == ident  # the same file, grown
    td["a"][0] = 100  # the rebound leaf still writes through to the file
    assert view[0] == 100 and TensorDict.load_memmap(tmp_path / "t")["a"][0] == 100


def test_appends_reuse_the_mapping_and_saves_keep_the_grown_file(tmp_path: Path) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t")
    td.extend_(_rows(2, 1))  # maps the whole grown file
    storage = td["n", "b"].untyped_storage()
    assert storage.nbytes() == os.path.getsize(tmp_path / "t" / "n" / "b.memmap") > 3 * 3 * 4
    td.extend_(_rows(3, 2))  # fits in the file: the same mapping, a longer view
    assert td["n", "b"].untyped_storage().data_ptr() == storage.data_ptr()
    _same(pickle.loads(pickle.dumps(td)), _rows(0, 5))  # references to the grown files
    ids = json.loads((tmp_path / "t" / "meta.json").read_text())["entries"]["a"]["id"]
    inode = os.stat(tmp_path / "t" / "a.memmap").st_ino
    td.memmap_()  # an in-place save links the grown files: same inode, same id
    assert os.stat(tmp_path / "t" / "a.memmap").st_ino == inode
    assert json.loads((tmp_path / "t" / "meta.json").read_text())["entries"]["a"]["id"] == ids
    _same(TensorDict.load_memmap(tmp_path / "t"), _rows(0, 5))


def test_a_stale_container_appends_after_the_rows_on_disk(tmp_path: Path) -> None:
    first = _rows(0, 2).memmap(tmp_path / "t")
    second = TensorDict.load_memmap(tmp_path / "t")
    second.extend_(_rows(2, 3))
    first.extend_(_rows(5, 1))  # mapped 2 rows, the tree has 5: appended after them
    assert first["a"].tolist() == list(range(6))
    _same(
        TensorDict.load_memmap(tmp_path / "t"), torch.cat([_rows(0, 2), _rows(2, 3), _rows(5, 1)])
    )


def test_growth_is_amortised(tmp_path: Path) -> None:
    assert _extend.grow_capacity(0, 8) == _extend.GROW_FLOOR
    assert _extend.grow_capacity(1 << 20, (1 << 20) + 8) == 3 << 19
    assert _extend.grow_capacity(100, 10**6) == 10**6
    td = TensorDict({"x": torch.zeros(0, 4096, dtype=torch.uint8)}, [0]).memmap(tmp_path / "t")
    sizes = set()
    for i in range(300):
        td.extend_(TensorDict({"x": torch.full((1, 4096), i % 256, dtype=torch.uint8)}, [1]))
        sizes.add(os.path.getsize(tmp_path / "t" / "x.memmap"))
    assert len(sizes) <= 16  # 300 appends, about log1.5(300) file growths
    assert (td["x"][:, 0] == torch.arange(300) % 256).all()


def test_a_failed_commit_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t")

    def fail(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_commit, "commit", fail)
    with pytest.raises(OSError, match="No space left"):
        td.extend_(_rows(2, 3))
    _same(td, _rows(0, 2))
    _same(TensorDict.load_memmap(tmp_path / "t"), _rows(0, 2))
    # The rows were written past the committed size: a sub-folder alone never shows them.
    assert os.path.getsize(tmp_path / "t" / "n" / "b.memmap") > 2 * 3 * 4
    _same(TensorDict.load_memmap(tmp_path / "t" / "n"), _rows(0, 2)["n"])
    monkeypatch.undo()
    td.extend_(_rows(2, 1))
    _same(TensorDict.load_memmap(tmp_path / "t"), _rows(0, 3))
    assert _hidden(tmp_path) == []


def test_a_full_disk_is_an_error_and_keeps_the_committed_rows(small_tmpfs: Path) -> None:
    def rows(start: int) -> TensorDict:  # 4 rows of 256 KiB, row i holding i
        return TensorDict({"x": torch.arange(start, start + 4.0)[:, None].repeat(1, 1 << 16)}, [4])

    td = rows(0).memmap(small_tmpfs / "t")
    with pytest.raises(OSError, match="No space left on device"):
        for _ in range(40):
            td.extend_(rows(td.batch_size[0]))
    n = td.batch_size[0]
    assert 8 <= n < 32
    back = TensorDict.load_memmap(small_tmpfs / "t")
    assert back.batch_size == (n,) and torch.equal(
        back["x"][:, 0], torch.arange(n, dtype=torch.float32)
    )
    del back
    assert sorted(os.listdir(small_tmpfs)) == ["t"]


def test_checksums_are_kept_current(tmp_path: Path) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t", checksum=True)
    td.extend_(_rows(2, 2))
    back = TensorDict.load_memmap(tmp_path / "t", verify=True)
    _same(back, _rows(0, 4))


def test_fsync_and_a_tree_from_memmap_like(tmp_path: Path) -> None:
    td = _rows(0, 1).expand(3).memmap_like(tmp_path / "t")
    td.extend_(_rows(3, 2), fsync=True)
    assert td["a"].tolist() == [0, 0, 0, 3, 4]


def test_an_in_place_save_then_extend(tmp_path: Path) -> None:
    td = _rows(0, 2)
    td.memmap_(tmp_path / "t")
    td.extend_(_rows(2, 2))
    assert td["a"].tolist() == [0, 1, 2, 3] and td.is_memmap()
    with td.unlock_():
        td["c"] = torch.zeros(4)  # a write-through commit after the growth
    back = TensorDict.load_memmap(tmp_path / "t")
    assert back["a"].tolist() == [0, 1, 2, 3] and back["c"].shape == (4,)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("rows", "error", "match"),
    [
        ({"a": torch.zeros(1)}, TypeError, r"rows is a dict, expected a TensorDict"),
        (
            TensorDict({"a": torch.arange(1), "n": {"b": torch.zeros(1, 3)}}, [1]),
            TensorDictKeyError,
            r"rows lack key 's', which the container has",
        ),
        (
            _rows(0, 1).update({"z": torch.zeros(1)}),
            TensorDictKeyError,
            r"rows have key 'z', which the container has not",
        ),
        (
            TensorDict({"a": torch.arange(1), "n": {"c": torch.zeros(1, 3)}, "s": "x"}, [1]),
            TensorDictKeyError,
            r"rows lack key \('n', 'b'\)",
        ),
        (
            _rows(0, 1).set("a", torch.zeros(1)),
            TypeError,
            r"key 'a' has dtype torch.float32 in rows, torch.int64 in the container: cast",
        ),
        (
            _rows(0, 1).set(("n", "b"), torch.zeros(1, 4)),
            BatchSizeError,
            r"key \('n', 'b'\) has rows of shape \(4,\) in rows, \(3,\) in the container",
        ),
        (
            _rows(0, 2).reshape(1, 2),
            BatchSizeError,
            r"rows have batch_size \(1, 2\), expected \(n\) like the container's \(\d+,\)",
        ),
        (
            _rows(0, 1).set("s", torch.zeros(1)),
            TypeError,
            r"key 's' is a non-tensor value in the container but a tensor in rows",
        ),
        (
            _rows(0, 1).set("a", "text"),
            TypeError,
            r"key 'a' is a tensor in the container but a non-tensor value in rows",
        ),
        (
            _rows(0, 1).set("n", "text"),
            TypeError,
            r"key 'n' is a nested node in the container but a non-tensor value in rows",
        ),
        (
            _rows(0, 1).set("a", torch.arange(1).to_sparse()),
            TypeError,
            r"key 'a' is a torch.sparse_coo tensor in rows; extend_ appends rows of dense",
        ),
        (
            Sample(image=torch.zeros(1), label=torch.zeros(1), batch_size=[1]),
            TypeError,
            r"rows are a .*:Sample, the container a TensorDict: build the rows with",
        ),
    ],
)
@pytest.mark.parametrize("where", ["memory", "tree"])
def test_rows_that_do_not_fit_raise_before_any_write(
    tmp_path: Path, rows: Any, error: type, match: str, where: str
) -> None:
    td = _rows(0, 2) if where == "memory" else _rows(0, 2).memmap(tmp_path / "t")
    sizes = {p: p.stat().st_size for p in tmp_path.rglob("*.memmap")}
    with pytest.raises(error, match=match):
        td.extend_(rows)
    _same(td, _rows(0, 2))
    assert {p: p.stat().st_size for p in tmp_path.rglob("*.memmap")} == sizes  # nothing written


def test_a_nested_node_type_must_match() -> None:
    td = TensorDict({"c": Sample(image=torch.zeros(2), label=torch.zeros(2), batch_size=[2])}, [2])
    rows = TensorDict(
        {"c": TensorDict({"image": torch.zeros(1), "label": torch.zeros(1)}, [1])}, [1]
    )
    with pytest.raises(
        TypeError, match=r"rows at key 'c' are a TensorDict, the container at key 'c' a .*:Sample"
    ):
        td.extend_(rows)


def test_a_batch_dim_is_needed() -> None:
    with pytest.raises(
        BatchSizeError,
        match=r"extend_ appends along batch dim 0, but the container has batch_size \(\)",
    ):
        TensorDict({"a": torch.zeros(2)}, []).extend_(TensorDict({"a": torch.zeros(2)}, []))


def test_a_value_the_tree_cannot_hold_raises_before_any_write(tmp_path: Path) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t")
    with pytest.raises(TypeError, match=r"key 's'"):
        td.extend_(_rows(2, 1, name=object()))
    _same(TensorDict.load_memmap(tmp_path / "t"), _rows(0, 2))
    assert os.path.getsize(tmp_path / "t" / "a.memmap") == 16


def test_read_only_trees_and_archives_are_refused(tmp_path: Path) -> None:
    _rows(0, 2).memmap(tmp_path / "t")
    ro = TensorDict.load_memmap(tmp_path / "t", mode="r")
    with pytest.raises(
        RuntimeError, match=r"maps its tree read-only \(load_memmap\(\.\.\., mode='r'\)"
    ):
        ro.extend_(_rows(2, 1))
    _rows(0, 2).memmap(tmp_path / "z.zip", archive=True)
    ar = TensorDict.load_memmap(tmp_path / "z.zip")
    with pytest.raises(
        RuntimeError, match=r"opened from the archive .*z\.zip', which is read-only; unpack"
    ):
        ar.extend_(_rows(2, 1))
    _same(TensorDict.load_memmap(tmp_path / "t"), _rows(0, 2))


def test_a_nested_node_of_a_tree_is_refused(tmp_path: Path) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t")
    with pytest.raises(
        ValueError, match=r"is the node .*/n' of the tree at .*; rows are appended to a whole tree"
    ):
        td["n"].extend_(_rows(0, 1)["n"])


def test_a_tree_saved_again_since_is_refused(tmp_path: Path) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t")
    _rows(0, 2).memmap(tmp_path / "t")  # a new save: new files
    with pytest.raises(
        RuntimeError,
        match=r"was saved again since this container was loaded or saved \(key 'a': the container does not map",
    ):
        td.extend_(_rows(2, 1))
    other = _rows(0, 2).memmap(tmp_path / "u")
    stale = TensorDict.load_memmap(tmp_path / "u")
    with stale.unlock_():
        del stale["a"]  # committed: the tree has no "a" now
    with pytest.raises(RuntimeError, match=r"key 'a': the container has a key the tree has not"):
        other.extend_(_rows(2, 1))
    with stale.unlock_():
        stale["q"] = torch.zeros(2)
    other = TensorDict.load_memmap(tmp_path / "u")
    with stale.unlock_():
        stale["r"] = torch.zeros(2)
    with pytest.raises(RuntimeError, match=r"key 'r': the tree has a key the container has not"):
        other.extend_(
            TensorDict({"n": {"b": torch.zeros(1, 3)}, "s": "x", "q": torch.ones(1)}, [1])
        )


def test_a_tensor_not_saved_yet_is_named(tmp_path: Path) -> None:
    saved = Sample(
        image=torch.zeros(2, 3, 2, 2, dtype=torch.uint8), label=torch.arange(2), batch_size=[2]
    ).memmap(tmp_path / "tc")
    saved._tensordict["label"] = torch.tensor([5, 6])  # a change memmap_() has not saved yet
    rows = Sample(image=torch.zeros(1, 3, 2, 2, dtype=torch.uint8), label=torch.arange(1),
                  batch_size=[1])  # fmt: skip
    with pytest.raises(RuntimeError, match=r"key 'label' holds a tensor that is not saved in"):
        saved.extend_(rows)
    saved.memmap_()
    saved.extend_(rows)
    assert Sample.load_memmap(tmp_path / "tc").label.tolist() == [5, 6, 0]


def test_a_tree_without_a_batch_dim_on_disk_is_refused(tmp_path: Path) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t")
    TensorDict({"a": torch.zeros(2)}, []).memmap(tmp_path / "t")  # saved over, no batch dim
    with pytest.raises(BatchSizeError, match=r"has batch_size \(\) on disk: no batch dim 0"):
        td.extend_(_rows(2, 1))


def test_leaf_kinds_it_cannot_grow_and_files_replaced_midway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    td = _rows(0, 2).memmap(tmp_path / "t")
    with monkeypatch.context() as m:
        m.setattr(_extend, "DISK_KINDS", {})
        with pytest.raises(TypeError, match=r"key 'a' is a TensorEntry on disk \(.*\), which"):
            td.extend_(_rows(2, 1))
    check = _extend.check_rows

    def replace_then_check(*args: Any) -> None:  # a file swapped under the lock: never by us
        check(*args)
        leaf = tmp_path / "t" / "a.memmap"
        data = leaf.read_bytes()
        leaf.unlink()
        leaf.write_bytes(data)

    monkeypatch.setattr(_extend, "check_rows", replace_then_check)
    with pytest.raises(RuntimeError, match=r"a.memmap was replaced while key 'a' was being"):
        td.extend_(_rows(2, 1))


def test_a_device_copy_extends_in_memory(tmp_path: Path) -> None:
    _rows(0, 2).memmap(tmp_path / "t")
    copy = TensorDict.load_memmap(tmp_path / "t").clone()
    copy.extend_(_rows(2, 1))
    assert copy["a"].tolist() == [0, 1, 2]
    _same(TensorDict.load_memmap(tmp_path / "t"), _rows(0, 2))


# ---------------------------------------------------------------- processes

_DRIVER = r"""
import json, os, random, signal, sys, time
import torch
from tensorbox import TensorDict

base, scale = sys.argv[1], float(sys.argv[2])
random.seed(0)
# Children are forked: torch 2.13's CPU repeat_interleave (jagged rows) hangs in a child
# forked after the parent ran ops on several threads, as DataLoader workers avoid too.
torch.set_num_threads(1)

def rows(start, k, a=None):
    i = torch.arange(start, start + k) if a is None else a
    lengths = i % 4  # a jagged leaf too: row i holds i, (i % 4) times
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    j = torch.nested.nested_tensor_from_jagged(i.repeat_interleave(lengths), offsets)
    return TensorDict({"a": i.clone(), "n": {"b": i.float()[:, None].repeat(1, 3)}, "s": "x",
                       "j": j}, [len(i)])

def check(td):
    n = td.batch_size[0]
    a, b = td["a"], td["n", "b"]
    ok = a.shape == (n,) and b.shape == (n, 3) and td["n"].batch_size == (n,)
    j = td["j"]
    ok = ok and j.shape[0] == n and torch.equal(j.offsets().diff(), a % 4)
    ok = ok and torch.equal(j.values(), a.repeat_interleave(a % 4))
    return ok and torch.equal(a, torch.arange(n)) and torch.equal(b, a.float()[:, None].expand(n, 3))

def child(fn):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        finally:
            os._exit(code)
    return pid

out = {}

# 1. kill -9 at random moments; after each, a committed size with matching rows.
path = f"{base}/kill"
rows(0, 1).memmap(path)
def extend_forever():
    td = TensorDict.load_memmap(path)
    while True:
        td.extend_(rows(td.batch_size[0], random.randint(1, 8)))
sizes, good = [], True
for trial in range(int(8 * scale)):
    pid = child(extend_forever)
    time.sleep(random.uniform(0.2, 0.35))  # the child's first rows, then a random moment
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    td = TensorDict.load_memmap(path)
    good &= check(td)
    sub = TensorDict.load_memmap(f"{base}/kill/n")
    good &= sub.batch_size == td.batch_size and torch.equal(sub["b"][:, 0], td["a"].float())
    sizes.append(td.batch_size[0])
td = TensorDict.load_memmap(path)
td.extend_(rows(td.batch_size[0], 3))
good &= check(TensorDict.load_memmap(path))
out["kill"] = {"sizes": sizes, "good": bool(good),
               "hidden": sorted(p for p in os.listdir(base) if p.startswith(".kill"))}

# 1b. killed at each unlink/rmdir/rename of an append in turn (the commit and the disposal
# of the old tree): the same, and the next append leaves nothing behind.
path = f"{base}/steps"
rows(0, 1).memmap(path)
def killed_at(step):
    calls = [0]
    def hook(fn):
        def run(*args, **kw):
            calls[0] += 1
            if calls[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kw)
        return run
    td = TensorDict.load_memmap(path)
    for name in ("unlink", "rmdir", "rename", "replace"):
        setattr(os, name, hook(getattr(os, name)))
    td.extend_(rows(td.batch_size[0], 2))
steps_good, step = True, 0
while step < 40:
    step += 1
    pid = child(lambda: killed_at(step))
    if os.waitpid(pid, 0)[1] == 0:
        break  # the append finished before the step-th call: every step was tried
    td = TensorDict.load_memmap(path)
    steps_good &= check(td)
td = TensorDict.load_memmap(path)
td.extend_(rows(td.batch_size[0], 1))
steps_good &= check(TensorDict.load_memmap(path))
out["steps"] = {"good": bool(steps_good), "steps": step,
                "hidden": sorted(p for p in os.listdir(base) if p.startswith(".steps"))}

# 2. one process extends while this one loads and reads: no torn reads.
path = f"{base}/rw"
rows(0, 1).memmap(path)
def extend_for_a_while():
    td = TensorDict.load_memmap(path)
    end = time.monotonic() + 1.0 * scale
    while time.monotonic() < end:
        td.extend_(rows(td.batch_size[0], random.randint(1, 16)))
pid = child(extend_for_a_while)
reads = torn = backwards = 0
last = 0
while True:
    done = os.waitpid(pid, os.WNOHANG)[0] == pid
    for p in (path, f"{path}/n"):
        td = TensorDict.load_memmap(p)
        if p.endswith("/n"):
            n = td.batch_size[0]
            ok = torch.equal(td["b"][:, 0], torch.arange(n).float())
        else:
            ok, n = check(td), td.batch_size[0]
        reads += 1
        torn += not ok
        backwards += n < last
        last = max(last, n) if not p.endswith("/n") else last
    if done:
        break
out["rw"] = {"reads": reads, "torn": torn, "backwards": backwards, "rows": last}

# 3. two producers append many small batches to one tree.
path = f"{base}/prod"
rows(0, 0).memmap(path)
batches = int(60 * scale)
def produce(p):
    td = TensorDict.load_memmap(path)
    rng = random.Random(p)
    for j in range(batches):
        k = rng.randint(1, 4)
        td.extend_(rows(0, 0, torch.tensor([p * 1_000_000 + j * 100 + r for r in range(k)])))
pids = [child(lambda p=p: produce(p)) for p in (1, 2)]
codes = [os.waitpid(pid, 0)[1] for pid in pids]
a = TensorDict.load_memmap(path)["a"].tolist()
out["prod"] = {"codes": codes, "a": a, "batches": batches}
print(json.dumps(out))
"""


def _run_driver(tmp_path: Path, scale: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(tmp_path), str(scale)],
        env=checkout_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return out


def _check_processes(out: dict[str, Any], scale: float) -> None:
    kill = out["kill"]
    assert kill["good"] and kill["hidden"] == [], kill
    assert kill["sizes"] == sorted(kill["sizes"]) and kill["sizes"][-1] > 1  # it made progress
    steps = out["steps"]
    assert steps["good"] and steps["hidden"] == [] and 5 < steps["steps"] < 40, steps
    rw = out["rw"]
    assert rw["torn"] == 0 and rw["backwards"] == 0 and rw["reads"] > 2 and rw["rows"] > 1, rw
    prod = out["prod"]
    assert prod["codes"] == [0, 0]
    a = prod["a"]
    batches: dict[tuple[int, int], list[int]] = {}
    for pos, v in enumerate(a):
        batches.setdefault((v // 1_000_000, v % 1_000_000 // 100), []).append(pos)
    assert sorted(batches) == [(p, j) for p in (1, 2) for j in range(prod["batches"])]
    for where in batches.values():  # each batch once, contiguous, in its order
        assert where == list(range(where[0], where[0] + len(where)))
        assert [a[i] % 100 for i in where] == list(range(len(where)))
    assert len(set(a)) == len(a)


@pytest.mark.heavy
def test_kill_readers_and_two_producers(tmp_path: Path) -> None:
    _check_processes(_run_driver(tmp_path, 0.5), 0.5)


@pytest.mark.slow
def test_kill_readers_and_two_producers_longer(tmp_path: Path) -> None:
    _check_processes(_run_driver(tmp_path, 4.0), 4.0)


# ---------------------------------------------------------------- jagged leaves


def _jagged_rows(lengths: list[int], start: int, offsets_dtype: torch.dtype) -> TensorDict:
    """Rows of ``lengths`` tokens (row r holds ``start + r`` in every token, then a
    column of its position), with a dense ``n`` leaf beside: the list-of-rows oracle is
    :func:`_token_rows`."""
    rows = _token_rows(lengths, start)
    offsets = torch.tensor([0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()])
    values = torch.cat(rows) if rows else torch.zeros(0, 2, dtype=torch.int64)
    tok = torch.nested.nested_tensor_from_jagged(values, offsets.to(offsets_dtype))
    return TensorDict({"tok": tok, "n": torch.tensor(lengths, dtype=torch.int64)}, [len(lengths)])


def _token_rows(lengths: list[int], start: int) -> list[torch.Tensor]:
    return [
        torch.stack([torch.full((n,), start + r), torch.arange(n)], 1)
        for r, n in enumerate(lengths)
    ]


def _same_rows(td: TensorDict, want: list[torch.Tensor], offsets_dtype: torch.dtype) -> None:
    assert td.batch_size == (len(want),)
    tok = td["tok"]
    assert tok.is_nested and tok.offsets().dtype == offsets_dtype
    assert td["n"].tolist() == [len(r) for r in want]
    for i, r in enumerate(want):
        assert torch.equal(td[i]["tok"], r), i
    if want:  # the whole leaf pads to its longest row
        padded = torch.nested.to_padded_tensor(tok, -1)
        assert padded.shape[1] == max(len(r) for r in want)


_LENGTHS = st.lists(st.lists(st.integers(0, 5), max_size=4), min_size=1, max_size=5)


@given(
    first=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    steps=_LENGTHS,
    int32=st.booleans(),
    saved=st.booleans(),
)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_jagged_rows_extend_like_a_list(
    tmp_path: Path, first: list[int], steps: list[list[int]], int32: bool, saved: bool
) -> None:
    odt = torch.int32 if int32 else torch.int64
    path = tmp_path / os.urandom(4).hex()
    td = _jagged_rows(first, 0, odt)
    if saved:
        td = td.memmap(path)
    want = _token_rows(first, 0)
    for lengths in steps:
        rows = _jagged_rows(lengths, len(want), odt)
        want += _token_rows(lengths, len(want))
        assert td.extend_(rows) is td
        _same_rows(td, want, odt)
        if saved:
            _same_rows(TensorDict.load_memmap(path), want, odt)
    if saved:
        assert td.is_memmap() and _hidden(path.parent) == []


def test_jagged_rows_must_fit(tmp_path: Path) -> None:
    td = _jagged_rows([1, 2], 0, torch.int64).memmap(tmp_path / "t")
    wide = torch.nested.nested_tensor_from_jagged(
        torch.zeros(3, 5, dtype=torch.int64), torch.tensor([0, 3])
    )
    with pytest.raises(BatchSizeError, match=r"key 'tok' has rows of shape \(5,\) in rows, \(2,\)"):
        td.extend_(TensorDict({"tok": wide, "n": torch.tensor([3])}, [1]))
    dense = TensorDict(
        {"tok": torch.zeros(1, 3, 2, dtype=torch.int64), "n": torch.tensor([3])}, [1]
    )
    with pytest.raises(
        TypeError,
        match=r"key 'tok' is a torch.strided tensor in rows, a "
        r"torch.jagged one",
    ):
        td.extend_(dense)
    assert TensorDict.load_memmap(tmp_path / "t").batch_size == (2,)  # nothing committed


def test_int32_offsets_that_would_overflow_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    td = _jagged_rows([3], 0, torch.int32).memmap(tmp_path / "t")
    real = _extend.JaggedEntry

    class Huge(real):  # type: ignore[misc,valid-type]
        """The entry as read, claiming 2**31 - 2 values already (no such file needed)."""

    def disk(node: Any, root: str, path: tuple[str, ...] = ()) -> Any:
        spec = original(node, root, path)
        e = spec.entries["tok"][1]
        big = e.values._replace(shape=(2**31 - 2, 2))
        spec.entries["tok"] = (spec.entries["tok"][0], real(big, e.offsets))
        return spec

    original = _extend._disk_spec
    monkeypatch.setattr(_extend, "_disk_spec", disk)
    monkeypatch.setattr(_extend, "check_offsets", lambda *args: None)  # no such file
    with pytest.raises(BatchSizeError, match=r"key 'tok' has int32 offsets, which cannot pass"):
        td.extend_(_jagged_rows([2], 1, torch.int32))
    monkeypatch.undo()
    assert TensorDict.load_memmap(tmp_path / "t").batch_size == (1,)
