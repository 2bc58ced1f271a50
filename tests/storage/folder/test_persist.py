"""Saving and loading containers: round trips, repeated saves, safety, faults, migration."""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox import NonTensorData, TensorDict
from tensorbox._storage import persist
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.persist import saved_type
from tensorbox.errors import FormatError, IncompleteTreeError

DATA = Path(__file__).resolve().parents[2] / "fixtures"
DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.uint8,
    torch.int8, torch.int16, torch.int64, torch.complex64, torch.complex128,
]  # fmt: skip


def _example(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    base = (torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) + seed) % 5 - 2
    if dtype is torch.bool:
        return base > 0
    if dtype.is_complex:
        return torch.complex(base, 1 - base).to(dtype)
    return base.to(dtype)


def assert_same(a: object, b: object, path: tuple = ()) -> None:
    """Same structure, keys in order, batch sizes, dtypes, and bytes (so NaN == NaN)."""
    ta, tb = _inner(a), _inner(b)
    assert type(a) is type(b), path
    assert ta.batch_size == tb.batch_size, path
    assert list(ta._tensordict) == list(tb._tensordict), path
    for k, va in ta._tensordict.items():
        vb = tb._tensordict[k]
        if isinstance(va, torch.Tensor):
            assert isinstance(vb, torch.Tensor) and va.dtype == vb.dtype and va.shape == vb.shape
            assert _bytes(va) == _bytes(vb), (*path, k)
        elif isinstance(va, NonTensorData):
            assert isinstance(vb, NonTensorData) and va.stacked == vb.stacked, (*path, k)
            assert repr(va.value) == repr(vb.value), (*path, k)
        else:
            assert_same(va, vb, (*path, k))


def _inner(x: object) -> TensorDict:
    return x  # type: ignore[return-value]  # a tensorclass has the same storage


def _bytes(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().clone(memory_format=torch.contiguous_format).reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()


def _sample() -> TensorDict:
    return TensorDict(
        {
            "obs": torch.arange(12.0).reshape(3, 4),
            "info": {"id": torch.arange(3), "flag": torch.tensor([True, False, True])},
            "bf": torch.ones(3, 2, dtype=torch.bfloat16),
            "name": "run-1",
        },
        batch_size=[3],
    )


# ---------------------------------------------------------------- round trips


def test_round_trip(tmp_path: Path) -> None:
    td = _sample()
    saved = td.memmap(tmp_path)
    assert saved is not td and saved.is_memmap() and saved.is_locked and not td.is_memmap()
    assert isinstance(saved["obs"], MemoryMappedTensor)
    assert saved["obs"].filename == str(tmp_path.resolve() / "obs.memmap")
    back = TensorDict.load_memmap(tmp_path)
    assert_same(back, td)
    assert back.is_memmap() and not back.is_locked  # unlocked, as tensordict's
    assert back.device == saved.device == torch.device("cpu")  # as tensordict's
    assert TensorDict.load(tmp_path)["info", "id"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["bf.memmap", "info", "meta.json", "obs.memmap"]


def test_loaded_leaves_write_through(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    back = TensorDict.load_memmap(tmp_path)
    back[1] = TensorDict.load_memmap(tmp_path)[2]  # batch writes go to the files
    back["obs"][0, 0] = -5.0
    again = TensorDict.load_memmap(tmp_path)
    assert again["obs"][0, 0] == -5.0 and again["obs"][1].tolist() == [8.0, 9.0, 10.0, 11.0]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
keys = st.text(max_size=6) | st.sampled_from(
    ["shape", "device", "entries", "meta", "_type", "..", "A", "a"]
)


# Wider than tests/strategies.py on purpose: every dtype the format stores, keys named like
# format fields, JSON values of every kind, and stacked values.
@st.composite
def containers(draw, batch: list[int] | None = None, depth: int = 0) -> TensorDict:
    batch = draw(st.lists(st.integers(0, 3), max_size=2)) if batch is None else batch
    entries: dict = {}
    for key in draw(st.lists(keys, max_size=4, unique=True)):
        kind = draw(
            st.sampled_from(["tensor", "tensor", "json", "stacked"] + ["node"] * (depth < 2))
        )
        if kind == "tensor":
            extra = draw(st.lists(st.integers(0, 3), max_size=2))
            entries[key] = _example(draw(st.sampled_from(DTYPES)), (*batch, *extra), len(entries))
        elif kind == "node":
            entries[key] = draw(
                containers(batch + draw(st.lists(st.integers(0, 2), max_size=1)), depth + 1)
            )
        elif kind == "json":
            entries[key] = NonTensorData(draw(json_values))
        else:
            arr = np.empty(tuple(batch), dtype=object)
            for ix in np.ndindex(*batch):
                arr[ix] = draw(json_values)
            entries[key] = NonTensorData(arr, stacked=True)
    return TensorDict(entries, batch_size=batch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(td=containers())
def test_save_load_is_identity(td: TensorDict) -> None:
    with tempfile.TemporaryDirectory() as d:
        saved = td.memmap(d)
        assert_same(saved, td)
        assert_same(TensorDict.load_memmap(d), td)
        assert_same(TensorDict.load_memmap(d, device="cpu"), td)
        assert_same(td.memmap(), td)  # shared memory
        like = td.memmap_like(os.path.join(d, "like"))
        for _, t in like.items(include_nested=True, leaves_only=True):
            if isinstance(t, torch.Tensor):
                assert not t.any()


def test_tensorclass_round_trip(tmp_path: Path) -> None:
    tc = pytest.importorskip("tensorbox._tensorclass")

    @tc.tensorclass
    class Pair:
        a: torch.Tensor
        b: TensorDict
        label: str = "x"

    p = Pair(torch.arange(4), TensorDict(c=torch.ones(4, 2), batch_size=[4]), "hi", batch_size=[4])
    saved = p.memmap(tmp_path / "p")
    assert type(saved) is Pair and saved.is_memmap()
    assert_same(Pair.load_memmap(tmp_path / "p"), p)
    assert type(TensorDict.load_memmap(tmp_path / "p")) is Pair  # registered class
    holder = TensorDict({"pair": p}, batch_size=[4]).memmap(tmp_path / "h")
    assert type(TensorDict.load_memmap(tmp_path / "h")["pair"]) is Pair
    assert_same(holder["pair"], p)
    p.memmap_(tmp_path / "q")
    assert p.is_memmap() and p.a.filename.endswith("q/a.memmap")


def test_a_class_that_does_not_fit_the_saved_fields(tmp_path: Path) -> None:
    tc = pytest.importorskip("tensorbox._tensorclass")

    @tc.tensorclass
    class Changed:
        a: torch.Tensor
        c: torch.Tensor  # was `b` when saved

    TensorDict({"a": torch.zeros(2), "b": torch.ones(2)}, [2]).memmap(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["type"] = f"{Changed.__module__}:{Changed.__qualname__}"
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        FormatError, match=r"meta.json: the saved '.*Changed' holds \['b'\], which is not a field"
    ):
        Changed.load_memmap(tmp_path)
    back = TensorDict.load_memmap(tmp_path)  # found in the registry, but does not fit
    assert type(back) is TensorDict and saved_type(back) == meta["type"]
    assert back["b"].tolist() == [1.0, 1.0]


def test_unknown_class_loads_as_tensordict_without_importing(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["type"] = "evil_module_never_imported:Thing"
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    back = TensorDict.load_memmap(tmp_path)
    assert type(back) is TensorDict and saved_type(back) == "evil_module_never_imported:Thing"
    assert "evil_module_never_imported" not in sys.modules
    assert saved_type(_sample()) is None


# ---------------------------------------------------------------- repeated saves


def test_memmap_twice_without_prefix_keeps_the_storage(tmp_path: Path) -> None:
    td = _sample().memmap_()
    assert td["obs"].filename is None and td["obs"].is_shared() and td.is_memmap()
    leaf = td["obs"]
    td.memmap_()
    assert td["obs"] is leaf
    files = _sample().memmap_(tmp_path)
    leaf = files["obs"]
    files.memmap_()  # no prefix: keep the files
    assert files["obs"] is leaf and leaf.filename.endswith("obs.memmap")


def test_same_prefix_keeps_files_and_rewrites_meta(tmp_path: Path) -> None:
    td = _sample().memmap_(tmp_path)
    leaf = td["obs"]
    td.memmap_(tmp_path)
    assert td["obs"] is leaf  # nothing rewritten: the files are the data
    (tmp_path / "meta.json").write_text("damaged")  # which files are the tree's? unknown now
    with pytest.raises(FileExistsError, match=r"\.(json|memmap)' is not a file of the saved tree"):
        td.memmap_(tmp_path)
    with pytest.raises(FileExistsError, match=r"\.(json|memmap)' is not a file of the saved tree"):
        td.memmap(tmp_path)
    assert (tmp_path / "meta.json").read_text() == "damaged" and td["obs"] is leaf


def test_different_prefix_needs_copy_existing(tmp_path: Path) -> None:
    td = _sample().memmap_(tmp_path / "a")
    with pytest.raises(
        RuntimeError,
        match=r"key 'obs' is already memory-mapped at '.*a/obs.memmap'; memmap_\('.*b'\) would leave it there. Pass copy_existing=True",
    ):
        td.memmap_(tmp_path / "b")
    assert not (tmp_path / "b" / "meta.json").exists()
    td.memmap_(tmp_path / "b", copy_existing=True)
    assert td["obs"].filename.endswith("b/obs.memmap")
    assert_same(TensorDict.load_memmap(tmp_path / "a"), td)
    shm = _sample().memmap_()  # shared memory is copied into the files, as tensordict does
    assert shm.memmap_(tmp_path / "c")["obs"].filename.endswith("c/obs.memmap")
    assert_same(TensorDict.load_memmap(tmp_path / "c"), _sample())


def test_overwrite_never_writes_into_mapped_files(tmp_path: Path) -> None:
    first = _sample().memmap(tmp_path)
    opened = TensorDict.load_memmap(tmp_path)
    other = _sample().apply(lambda t: t + 1 if t.dtype != torch.bool else ~t)
    other.memmap(tmp_path)
    assert_same(first, _sample())  # mapped data keep their values
    assert_same(opened, _sample())
    assert_same(TensorDict.load_memmap(tmp_path), other)
    # A copy of data mapped from the very files it replaces.
    again = opened.memmap(tmp_path)
    assert_same(again, _sample()) and assert_same(opened, _sample())
    again["obs"][0, 0] = 100.0
    assert opened["obs"][0, 0] == 0.0  # a copy, not an alias


def test_in_place_save_over_views_of_the_same_files(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    view = TensorDict.load_memmap(tmp_path)[1:]  # plain views of the files being replaced
    view.memmap_(tmp_path)
    back = TensorDict.load_memmap(tmp_path)
    assert back.batch_size == (2,) and back["obs"].tolist() == [[4, 5, 6, 7], [8, 9, 10, 11]]


def test_stale_files_of_the_old_tree_are_removed(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    (tmp_path / "mine.txt").write_text("user file")
    TensorDict({"obs": torch.zeros(3)}, batch_size=[3]).memmap(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["meta.json", "mine.txt", "obs.memmap"]


def test_memmap_like_of_a_million_rows_uses_no_memory(tmp_path: Path) -> None:
    import resource

    datum = TensorDict(
        {"x": torch.ones(1, 1000), "y": {"z": torch.ones(1, 3, dtype=torch.uint8)}}, [1]
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    big = persist.memmap_like(datum.expand(1_000_000), tmp_path, sparse=True)
    assert time.perf_counter() - start < 2.0
    assert big.batch_size == (1_000_000,) and big["x"].shape == (1_000_000, 1000)
    assert os.path.getsize(tmp_path / "x.memmap") == 4_000_000_000
    assert os.stat(tmp_path / "x.memmap").st_blocks * 512 < 1 << 20  # sparse
    loaded = TensorDict.load_memmap(tmp_path)  # lazy: nothing is read
    assert loaded["x"][999_999, 999] == 0
    loaded["x"][5] = 2.0
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 200_000, grown  # KiB: far below the 4 GB described
    shm = datum.expand(1000).memmap_like()
    assert shm["x"].is_shared() and not shm["x"].any()


# ---------------------------------------------------------------- partial and device loads


def test_sub_folders_open_as_trees(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    info = TensorDict.load_memmap(tmp_path / "info")
    assert info.batch_size == (3,) and info["id"].tolist() == [0, 1, 2]
    sel = TensorDict.load_memmap(tmp_path).select("obs")
    assert list(sel.keys()) == ["obs"]


def test_device_cpu_keeps_the_mapping(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    back = TensorDict.load_memmap(tmp_path, device="cpu")  # as tensordict: still mapped
    assert type(back["obs"]) is MemoryMappedTensor and back.device == torch.device("cpu")
    back["obs"][0, 0] = 99.0
    assert TensorDict.load_memmap(tmp_path)["obs"][0, 0] == 99.0
    copy = TensorDict.load_memmap(tmp_path).clone()  # the spelling for a copy in memory
    assert type(copy["obs"]) is torch.Tensor
    copy["obs"][0, 0] = 5.0
    assert TensorDict.load_memmap(tmp_path)["obs"][0, 0] == 99.0
    on_meta = TensorDict.load_memmap(tmp_path, device="meta")  # another device: a copy
    assert on_meta.device.type == "meta" and on_meta["obs"].device.type == "meta"


def test_unwritable_trees_open_copy_on_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tensorbox._storage.memmap_tensor as mmt

    _sample().memmap(tmp_path)
    real = mmt._from_file

    def no_write_access(path: str, shared: bool, nbytes: int):
        if shared:  # what torch raises when the file cannot be opened read-write
            raise RuntimeError(f"unable to open {path} in read-write mode: Permission denied (13)")
        return real(path, shared, nbytes)

    monkeypatch.setattr(mmt, "_from_file", no_write_access)
    monkeypatch.setattr(mmt.os, "access", lambda path, mode: False)
    back = TensorDict.load_memmap(tmp_path)
    assert back["obs"].mode == "r" and back.is_memmap()
    back["obs"][0, 0] = 42.0  # stays in this process
    monkeypatch.undo()
    assert TensorDict.load_memmap(tmp_path)["obs"][0, 0] == 0.0
    monkeypatch.setattr(mmt, "_from_file", no_write_access)
    monkeypatch.setattr(mmt.os, "access", lambda path, mode: False)
    with pytest.raises(
        PermissionError, match=r"obs\.memmap is not writable: open it with mode='r'"
    ):
        MemoryMappedTensor.from_filename(tmp_path / "obs.memmap", torch.float32, (3, 4))


def test_read_only_load_leaves_the_files_alone(tmp_path: Path) -> None:
    from tensorbox._storage import persist as _persist

    _sample().memmap(tmp_path)
    back = _persist.load_memmap(TensorDict, tmp_path, mode="r")
    assert back["obs"].mode == "r" and back.is_memmap()
    back["obs"].add_(1)  # e.g. fine-tuning loaded weights in place
    assert TensorDict.load_memmap(tmp_path)["obs"][0, 0] == 0.0
    assert pickle.loads(pickle.dumps(back[1:]))["obs"].untyped_storage().filename is None
    with pytest.raises(ValueError, match=r"mode 'w' is not one of \('r\+', 'r'\)"):
        _persist.load_memmap(TensorDict, tmp_path, mode="w")


def test_num_threads_and_fsync(tmp_path: Path) -> None:
    td = TensorDict({f"k{i}": torch.full((4, 8), float(i)) for i in range(40)}, [4])
    saved = td.memmap(tmp_path, num_threads=4, fsync=True)
    assert_same(saved, td)
    assert_same(TensorDict.load_memmap(tmp_path), td)


# ---------------------------------------------------------------- keys and paths


FIELD_KEYS = [
    "shape", "device", "batch_size", "type", "meta", "_type", "entries", "format", "version",
    "kind", "file", "dir", "value", "stacked", "meta.json", "x.memmap", "_format_version", "_class",
]  # fmt: skip


def test_keys_named_like_format_fields_round_trip(tmp_path: Path) -> None:
    entries = {k: torch.full((2,), float(i)) for i, k in enumerate(FIELD_KEYS)}
    entries["x"] = torch.zeros(2)
    entries["node"] = {k: torch.ones(2) for k in FIELD_KEYS}
    entries["meta.json "] = {"entries": "a value"}
    td = TensorDict(entries, batch_size=[2])
    td.memmap(tmp_path)
    assert_same(TensorDict.load_memmap(tmp_path), td)


HOSTILE_KEYS = [
    "a/b", "..", ".", "../../outside", "/abs", "spaced key", "ünïcödé", "日本", "", "A", "a",
    "\x00", "\n", "con", "k" * 300, "é" * 120, "e\u0301", "\\", "%41", "^a",
]  # fmt: skip


def test_hostile_keys_round_trip_and_stay_inside(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    td = TensorDict(
        {
            **{k: torch.full((2,), float(i)) for i, k in enumerate(HOSTILE_KEYS)},
            **{f"{k} node": {k: torch.ones(2)} for k in HOSTILE_KEYS},
        },
        batch_size=[2],
    )
    td.memmap(root)
    assert_same(TensorDict.load_memmap(root), td)
    assert sorted(os.listdir(tmp_path)) == ["tree"]  # nothing written beside the tree
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            assert not p.is_symlink() and str(p.resolve()).startswith(str(root.resolve()))
            assert len(name.encode()) <= 255


def test_symlinks_leading_out_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(range(48)))
    root = tmp_path / "tree"
    _sample().memmap(root)
    (root / "obs.memmap").unlink()
    (root / "obs.memmap").symlink_to(secret)
    with pytest.raises(
        FormatError, match=r"obs.memmap is a symlink to .*secret.bin.*outside the tree"
    ):
        TensorDict.load_memmap(root)
    # Saving over it replaces the link, never writes through it.
    _sample().memmap(root)
    assert secret.read_bytes() == bytes(range(48)) and not (root / "obs.memmap").is_symlink()
    # A node directory swapped for a symlink leading out: the save never writes or
    # deletes through it (the new tree is built beside the old one), only the link goes.
    other = tmp_path / "other"
    _sample().memmap(other)
    before = sorted(p.name for p in other.rglob("*"))
    shutil.rmtree(root / "info")
    (root / "info").symlink_to("../other")
    _sample().memmap(root)
    assert sorted(p.name for p in other.rglob("*")) == before
    assert_same(TensorDict.load_memmap(other), _sample())
    assert (root / "info").is_dir() and not (root / "info").is_symlink()
    assert_same(TensorDict.load_memmap(root), _sample())


# ---------------------------------------------------------------- refusals


def test_values_that_are_not_json_are_refused_before_writing(tmp_path: Path) -> None:
    td = TensorDict({"x": torch.zeros(2), "v": NonTensorData((1, 2))}, batch_size=[2])
    with pytest.raises(
        TypeError, match=r"key 'v': value \(1, 2\) of type tuple cannot be saved; .* never pickles"
    ):
        td.memmap(tmp_path / "t")
    assert not (tmp_path / "t").exists()
    sparse = TensorDict({"s": torch.eye(2).to_sparse()}, batch_size=[2])
    with pytest.raises(TypeError, match=r"key 's' is a torch.sparse_coo tensor; only dense"):
        sparse.memmap(tmp_path / "s")
    bits = TensorDict({"q": torch.zeros(2, dtype=torch.uint8).view(torch.bits8)}, [2])
    with pytest.raises(TypeError, match=r"key 'q' has dtype torch.bits8, which the tensorbox"):
        bits.memmap(tmp_path / "q")


def test_damaged_trees_are_refused_naming_the_file(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    (tmp_path / "info" / "id.memmap").write_bytes(bytes(8))
    with pytest.raises(
        FormatError, match=r"info/id.memmap is 8 bytes, but int64 of shape \[3\] needs 24"
    ):
        TensorDict.load_memmap(tmp_path)
    (tmp_path / "info" / "meta.json").unlink()
    with pytest.raises(IncompleteTreeError, match=r"info/meta.json is missing"):
        TensorDict.load_memmap(tmp_path)
    (tmp_path / "meta.json").write_text('{"format": "tensorbox", "vers')
    with pytest.raises(FormatError, match=r"meta.json is not valid JSON \(truncated or damaged\)"):
        TensorDict.load_memmap(tmp_path)
    with pytest.raises(FileNotFoundError, match="no saved tree at"):
        TensorDict.load_memmap(tmp_path / "missing")


def test_child_batch_size_must_extend_the_parent(tmp_path: Path) -> None:
    _sample().memmap(tmp_path)
    meta = json.loads((tmp_path / "info" / "meta.json").read_text())
    meta["batch_size"] = [2]
    meta["entries"] = {}
    (tmp_path / "info" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        FormatError, match=r"batch_size \[2\] does not start with its parent's \[3\]"
    ):
        TensorDict.load_memmap(tmp_path)


# ---------------------------------------------------------------- crashes


_CRASH_CHILD = """
import sys, time, torch
from tensorbox import TensorDict
import tensorbox._storage.folder as persist

real, count = persist.write_file, [0]
def write_then_stall(*args, **kwargs):
    real(*args, **kwargs)
    count[0] += 1
    if count[0] == 3:  # a few leaves are on disk, the rest and every meta.json are not
        print("stalled", flush=True)
        time.sleep(120)
persist.write_file = write_then_stall
td = TensorDict({f"k{i}": torch.full((1 << 16,), float(i) + 1) for i in range(8)}, [1 << 16])
td["nested"] = TensorDict({"a": torch.ones(1 << 16)}, [1 << 16])
td.memmap(sys.argv[1])
"""


@pytest.mark.heavy
def test_save_killed_midway_leaves_the_old_tree(tmp_path: Path) -> None:
    fresh, over = tmp_path / "fresh", tmp_path / "over"
    n = 1 << 16
    TensorDict(
        {**{f"k{i}": torch.zeros(n) for i in range(8)}, "nested": {"a": torch.zeros(n)}}, [n]
    ).memmap(over)
    # Two saves killed with SIGKILL after 3 of 9 leaves; the second overwrites a complete tree.
    cmd = [sys.executable, "-c", _CRASH_CHILD]
    procs = [
        subprocess.Popen([*cmd, str(p)], stdout=subprocess.PIPE, text=True) for p in (fresh, over)
    ]
    for proc in procs:
        assert proc.stdout is not None
        with proc.stdout:
            try:
                assert proc.stdout.readline().strip() == "stalled"
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
    # The killed fresh save left no tree; the killed overwrite left the old tree whole.
    with pytest.raises(FileNotFoundError, match=r"no saved tree at .*fresh"):
        TensorDict.load_memmap(fresh)
    old = TensorDict.load_memmap(over)
    assert old["k0"].sum() == 0 and old["nested", "a"].sum() == 0 and len(old.keys()) == 9
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert [n.split("-")[0] for n in leftovers] == [
        ".fresh.tbx",
        ".fresh.tbx",
        ".over.tbx",
        ".over.tbx",
    ]
    # The next save at each path cleans up after the killed one.
    for root in (fresh, over):
        TensorDict({"x": torch.ones(2)}, [2]).memmap(root)
        assert TensorDict.load_memmap(root)["x"].tolist() == [1.0, 1.0]
    assert sorted(os.listdir(tmp_path)) == ["fresh", "over"]


# ---------------------------------------------------------------- processes


class _WritingDataset(torch.utils.data.Dataset):
    def __init__(self, td: TensorDict) -> None:
        self.td = td

    def __len__(self) -> int:
        return self.td.batch_size[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        self.td["x"][i] = 100 + i  # lands in the shared file
        return self.td["x"][i : i + 1]  # a bare view of the file goes back by reference too


@pytest.mark.heavy
def test_spawned_workers_share_the_files(tmp_path: Path) -> None:
    td = TensorDict({"x": torch.zeros(6, dtype=torch.int64)}, [6]).memmap(tmp_path)
    data = pickle.dumps(td[2:5])
    assert len(data) < 2000  # references, not data
    loader = torch.utils.data.DataLoader(
        _WritingDataset(td[2:5]), batch_size=None, num_workers=1, multiprocessing_context="spawn"
    )
    got = list(loader)
    assert [v.tolist() for v in got] == [[100], [101], [102]]
    assert got[0].untyped_storage().filename == td["x"].filename
    assert td["x"].tolist() == [0, 0, 100, 101, 102, 0]


# ---------------------------------------------------------------- fixtures


def _copy(name: str, tmp_path: Path) -> Path:
    # Work on a copy: loaded leaves are writable mappings of the files.
    return Path(shutil.copytree(DATA / name, tmp_path / name))


def test_golden_tree(tmp_path: Path) -> None:
    """tests/fixtures/tensorbox_v1_golden was written once by this format's writer; it must load
    with exactly these values forever."""
    td = TensorDict.load_memmap(_copy("tensorbox_v1_golden", tmp_path))
    assert td.batch_size == () and list(td.keys()) == ["step", "data", "note", "cfg", ""]
    assert td["step"].dtype == torch.int64 and td["step"].item() == 42
    assert td[""].tolist() == [0.25]
    assert td["note"] == "hello"
    cfg = td["cfg"]
    assert cfg["lr"] == 0.5 and cfg["layers"] == [1, 2] and cfg["big"] == 2**70
    assert math.isnan(cfg["bad"])
    data = td["data"]
    assert data.batch_size == (3,)
    assert data["obs"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert data["label"].tolist() == [0, 1, 1] and data["mask"].tolist() == [True, False, True]
    assert data["bf"].dtype == torch.bfloat16
    assert data["bf"].tolist() == [[1.5, -2.0], [3.25, 4.0], [0.0, -0.5]]
    assert data["z"].tolist() == [1 + 2j, -3j, 0.5 + 0j] and data["z"].dtype == torch.complex64
    assert data["empty"].shape == (3, 0) and data["empty"].dtype == torch.int32
    assert data["shape"].tolist() == [7.0, 8.0, 9.0] and data["shape"].dtype == torch.float64
    assert data["Weird key/.."].tolist() == [1, -2, 3]
    assert data["nested", "deep", "x"].tolist() == [0, 1, 2]
    assert data["tags"] == ["a", "b", "c"] and data[1]["tags"] == "b"


def test_reads_a_tensordict_0_15_tree(tmp_path: Path) -> None:
    td = TensorDict.load_memmap(_copy("tensordict_0_15_tree", tmp_path))
    assert td.batch_size == (3,) and td.device == torch.device("cpu")
    assert td["obs"].tolist() == torch.arange(12.0).reshape(3, 4).tolist()
    assert td["label"].tolist() == [0, 1, 1] and td["mask"].tolist() == [True, False, True]
    assert td["nested", "bf"].dtype == torch.bfloat16
    assert td["nested", "bf"].tolist() == [[1, 2], [3, 4], [5, 6]]
    assert td["nested", "deep", "x"].tolist() == [0, 1, 2]
    assert td["nested", "deep", "x"].dtype == torch.int16
    assert td["note"] == "hello" and td["weird key"].tolist() == [[1.0, 1.0]] * 3
    # Migration: save it again in tensorbox's format.
    td.memmap(tmp_path / "new")
    assert json.loads((tmp_path / "new" / "meta.json").read_text())["format"] == "tensorbox"
    assert_same(TensorDict.load_memmap(tmp_path / "new"), td)


def test_reads_a_tensordict_format_0_tree(tmp_path: Path) -> None:
    td = TensorDict.load_memmap(_copy("tensordict_mmap_example", tmp_path))
    assert td.batch_size == (2, 1)
    assert td["nested", "int64"].tolist() == [[1], [2]]  # the file has a trailing byte
    assert td["nested", "bfloat16"].tolist() == [[1.0], [1.0]]
    assert td["nested", "string"] == ["a string!"]


# ---------------------------------------------------------------- fuzzing meta.json


HOSTILE_VALUES = [
    10**12, -1, 2**63, 2**64, True, False, None, 1.5, "", "..", "/etc/passwd", "x.memmap",
    "float32", "bool", "node", "tensor", "json", "info", [], {}, [10**12], [-1], [True], ["3"],
    [[3]], [0] * 70, "cuda:0", "\ud800",
]  # fmt: skip
hostile = st.one_of(
    st.sampled_from(HOSTILE_VALUES),
    json_values,
    st.integers(-5, 5).map(lambda n: [[[[[n]]]]] * 2),
)


def _walk_json(doc: object):
    """(container, key) for every place in a JSON document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield doc, k
            yield from _walk_json(v)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield doc, i
            yield from _walk_json(v)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_meta_json_loads_consistently_or_raises_format_error(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as d:
        legacy = data.draw(st.booleans())
        if legacy:  # tensordict's layout goes through its own parser
            shutil.copytree(DATA / "tensordict_0_15_tree", d, dirs_exist_ok=True)
            metas = ["meta.json", "nested/meta.json", "note/meta.json", "nested/deep/meta.json"]
        else:
            _sample().memmap(d)
            metas = ["meta.json", "info/meta.json"]
        target = Path(d) / data.draw(st.sampled_from(metas))
        text = target.read_text()
        action = data.draw(st.sampled_from(["replace", "replace", "delete", "add", "truncate"]))
        if action == "truncate":
            text = text[: data.draw(st.integers(0, len(text) - 1))]
        else:
            doc = json.loads(text)
            places = list(_walk_json(doc))
            container, key = data.draw(st.sampled_from(places))
            if action == "replace":
                container[key] = data.draw(hostile)
            elif action == "delete":
                del container[key]
            elif isinstance(container, dict):
                container[data.draw(st.text(max_size=8))] = data.draw(hostile)
            else:
                container.append(data.draw(hostile))
            text = json.dumps(doc)
        target.write_text(text)
        try:
            td = TensorDict.load_memmap(d)
        except FormatError:
            return
        # Loaded: every leaf is readable and fits its file.
        for _, t in td.items(include_nested=True, leaves_only=True):
            if isinstance(t, torch.Tensor):
                assert t.numel() * t.element_size() <= os.path.getsize(t.filename)
                t.clone()


def test_a_save_with_progress_ends_with_a_summary_line(tmp_path: Path, capsys) -> None:
    td = TensorDict({"a": torch.zeros(1 << 16), "n": {"b": torch.ones(1 << 16)}}, [1 << 16])
    td.memmap(tmp_path / "t", progress=True, num_threads=2)
    td.memmap(tmp_path / "a.tdz", progress=True)
    err = capsys.readouterr().err.splitlines()
    summaries = [line for line in err if line.startswith("save: 512.0 KiB in 2 files")]
    assert len(summaries) == 2, err
    td.memmap(tmp_path / "quiet", progress=False)
    td.memmap(tmp_path / "small")  # None: a small save opens no bar and writes no line
    assert capsys.readouterr().err == ""
