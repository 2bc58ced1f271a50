"""``PersistentTensorDict`` over HDF5 and zarr v3, with h5py / zarr as the oracle."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import NonTensorData, PersistentTensorDict, TensorClass, TensorDict
from tensorbox.errors import BatchSizeError

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

BACKENDS = ["h5", "zarr"]


class Pair(TensorClass):
    a: torch.Tensor


def _save(td, path, backend, **kw):
    return td.to_h5(path, **kw) if backend == "h5" else td.to_zarr(path, **kw)


def _oracle(path, backend, key):
    """The array at ``key`` read by the format's own library."""
    if backend == "h5":
        with h5py.File(path, "r") as f:
            return np.asarray(f["/".join(key)][...])
    return np.asarray(zarr.open_group(str(path), mode="r")["/".join(key)][...])


def _tree():
    return TensorDict(
        {
            "a": torch.arange(12, dtype=torch.float32).view(3, 4),
            "b": {"c": torch.arange(60).view(3, 4, 5), "flag": torch.ones(3, 4, dtype=torch.bool)},
            "note": "hello",
        },
        batch_size=[3, 4],
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_save_matches_the_library_and_reopens_lazily(tmp_path, backend):
    td = _tree()
    path = tmp_path / f"s.{backend}"
    ptd = _save(td, path, backend)
    for key in (("a",), ("b", "c"), ("b", "flag")):
        assert np.array_equal(_oracle(path, backend, key), td[key].numpy())
    back = PersistentTensorDict(filename=path, backend=backend)
    assert back.batch_size == (3, 4) and back["b"].batch_size == (3, 4)
    assert isinstance(back["b"], PersistentTensorDict)
    mem = back.to_tensordict()
    assert torch.equal(mem["b", "c"], td["b", "c"]) and mem["b", "flag"].dtype == torch.bool
    assert set(ptd.keys(True, True)) == {"a", ("b", "c"), ("b", "flag"), "note"}


INDICES = st.one_of(
    st.integers(-3, 2),
    st.builds(slice, st.integers(0, 3), st.integers(0, 3)),
    st.lists(st.integers(0, 2), min_size=1, max_size=5).map(torch.tensor),
    st.lists(st.booleans(), min_size=3, max_size=3).map(torch.tensor),
    st.tuples(st.just(slice(None)), st.integers(0, 3)),
)


@pytest.mark.parametrize("backend", BACKENDS)
@given(index=INDICES)
def test_get_at_matches_torch_indexing(tmp_path_factory, backend, index):
    path = tmp_path_factory.mktemp("g") / f"s.{backend}"
    td = _tree()
    ptd = _save(td, path, backend)
    assert torch.equal(ptd.get_at("a", index), td["a"][index])
    assert torch.equal(ptd[index]["b", "c"], td[index]["b", "c"])
    ptd.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_go_live_into_the_file(tmp_path, backend):
    path = tmp_path / f"s.{backend}"
    ptd = _save(_tree(), path, backend)
    ptd.set_at_("a", torch.full((4,), -1.0), 1)
    ptd.set_at_(("b", "c"), torch.zeros(2, 4, 5, dtype=torch.int64), torch.tensor([0, 2]))
    ptd["new"] = torch.ones(3, 4)
    ptd.set("note", NonTensorData({"k": [1, 2]}))
    ptd.close()
    assert (_oracle(path, backend, ("a",))[1] == -1).all()
    assert (_oracle(path, backend, ("b", "c"))[[0, 2]] == 0).all()
    assert (_oracle(path, backend, ("new",)) == 1).all()
    again = PersistentTensorDict(filename=path, backend=backend)
    assert again["note"] == {"k": [1, 2]}
    assert again.get_at(("b", "c"), 1).sum() > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_only_mode_refuses_writes(tmp_path, backend):
    path = tmp_path / f"s.{backend}"
    _save(_tree(), path, backend).close()
    ptd = PersistentTensorDict(filename=path, backend=backend)
    with pytest.raises(PermissionError, match=r"open read-only \(mode='r'\)"):
        ptd["a"] = torch.zeros(3, 4)
    ptd.close()
    writable = PersistentTensorDict(filename=path, backend=backend, mode="r+")
    with pytest.raises(BatchSizeError, match=r"leading shape \[2\] does not match"):
        writable.set("x", torch.ones(2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_save_leaves_the_previous_file(tmp_path, backend):
    path = tmp_path / f"s.{backend}"
    _save(TensorDict({"a": torch.arange(3)}, [3]), path, backend).close()
    bad = TensorDict({"a": torch.ones(3), "z": torch.ones(3, dtype=torch.bfloat16)}, [3])
    with pytest.raises(TypeError, match=r"entry 'z': .* has no bfloat16 dtype"):
        _save(bad, path, backend)
    assert _oracle(path, backend, ("a",)).tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == [f"s.{backend}"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_structural_edits_and_pickling(tmp_path, backend):
    path = tmp_path / f"s.{backend}"
    ptd = _save(_tree(), path, backend)
    ptd.rename_key_("a", "a2")
    with pytest.raises(KeyError, match="already present"):
        ptd.rename_key_("a2", ("b", "c"))
    ptd.del_(("b", "flag"))
    ptd.create_nested("n")
    ptd["n", "x"] = torch.zeros(3, 4)
    ptd.masked_fill_(torch.tensor([True, False, False]), 7)
    assert set(ptd.keys(True, True)) == {"a2", ("b", "c"), ("n", "x"), "note"}
    assert (ptd["a2"][0] == 7).all() and (ptd["a2"][1:] != 7).any()
    if backend == "zarr":
        reread = TensorDict.from_zarr(path)
        assert "a2" in reread and "a" not in reread
    clone = pickle.loads(pickle.dumps(ptd["b"]))
    assert torch.equal(clone["c"], ptd["b", "c"])


def test_foreign_files_get_an_inferred_batch_size(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["x"] = np.zeros((5, 2))
        f.create_group("g")["y"] = np.zeros((5, 2, 3))
    ptd = TensorDict.from_h5(tmp_path / "f.h5")
    assert ptd.batch_size == (5, 2) and ptd["g"].batch_size == (5, 2, 3)
    assert TensorDict.from_h5(tmp_path / "f.h5", auto_batch_size=True, batch_dims=1).batch_size == (
        5,
    )


def test_h5_kwargs_reach_nested_leaves(tmp_path):
    td = TensorDict({"a": torch.zeros(8, 3), "b": {"c": torch.zeros(8)}}, [8])
    td.to_h5(tmp_path / "f.h5", compression="gzip")
    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert f["a"].compression == "gzip" and f["b/c"].compression == "gzip"


def test_zarr_chunks_store_objects_and_tensorclass(tmp_path):
    td = TensorDict({"img": torch.zeros(32, 3, 2), "y": torch.arange(32)}, [32])
    td.to_zarr(tmp_path / "s.zarr", chunks=(8,))
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert root["img"].chunks == (8, 3, 2) and root["y"].chunks == (8,)
    assert root.metadata.consolidated_metadata is not None
    store = zarr.storage.ZipStore(str(tmp_path / "s.zip"), mode="w")
    td.to_zarr(store).close()
    back = TensorDict.from_zarr(zarr.storage.ZipStore(str(tmp_path / "s.zip"), mode="r"))
    assert torch.equal(back["y"], td["y"])
    back.close()
    out = Pair(a=torch.ones(3), batch_size=[3]).to_zarr(tmp_path / "p.zarr")
    assert type(out) is Pair


def test_pickled_values_are_never_unpickled(tmp_path):
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    arr = root.create_array("obj", shape=(3,), dtype="uint8")
    arr[...] = np.frombuffer(b"\x80\x04K", dtype=np.uint8)
    arr.attrs["__tensordict_non_tensor__"] = "pickle"
    ptd = TensorDict.from_zarr(tmp_path / "s.zarr")
    with pytest.raises(ValueError, match=r"entry 'obj' .* encoded as 'pickle'.*never unpickled"):
        ptd["obj"]


def test_unsupported_values_are_refused_naming_the_key(tmp_path):
    td = TensorDict({"a": torch.zeros(2)}, [2])
    ptd = td.to_zarr(tmp_path / "s.zarr")
    with pytest.raises(TypeError, match=r"entry 'o': a non-tensor value of type object"):
        ptd.set("o", NonTensorData(object()))
