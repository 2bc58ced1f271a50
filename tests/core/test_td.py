"""TensorDict: construction, keys, batch indexing, locking, devices, repr, pickling, DataLoader."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tensorbox
from tensorbox import (
    BatchSizeError,
    KeyCollisionError,
    LockedError,
    NonTensorData,
    TensorDict,
    TensorDictKeyError,
)


@pytest.fixture
def td() -> TensorDict:
    return TensorDict(
        {
            "obs": torch.arange(24.0).reshape(4, 3, 2),
            "action": torch.arange(4),
            "next": {"reward": torch.ones(4, 1), "done": torch.zeros(4, dtype=torch.bool)},
            "name": "cartpole",
        },
        batch_size=[4],
    )


# ------------------------------------------------------------- construction


def test_construct_from_dict_kwargs_and_nested_dicts() -> None:
    a = TensorDict({"x": torch.zeros(3, 2), "n": {"y": torch.ones(3)}}, batch_size=3)
    b = TensorDict(x=torch.zeros(3, 2), n={"y": torch.ones(3)}, batch_size=[3])
    assert isinstance(a["n"], TensorDict) and a["n"].batch_size == torch.Size([3])
    assert (a == b).all()
    assert a.batch_size == torch.Size([3]) and b.batch_size == torch.Size([3])
    assert TensorDict().batch_size == torch.Size([]) and len(TensorDict().keys()) == 0


@pytest.mark.parametrize("bs", [3, [3], (3,), torch.Size([3]), np.int64(3), torch.tensor([3])])
def test_batch_size_forms(bs: object) -> None:
    assert TensorDict(x=torch.zeros(3, 5), batch_size=bs).batch_size == torch.Size([3])


@pytest.mark.parametrize("bs", [-1, [2, -1], "3", 2.5, [2.0], True])
def test_bad_batch_size_is_refused(bs: object) -> None:
    with pytest.raises(BatchSizeError, match="batch_size must"):
        TensorDict(batch_size=bs)


def test_batch_size_mismatch_names_key_and_both_shapes() -> None:
    msg = "key 'x' has shape (3, 5), which does not start with batch_size (4,)"
    with pytest.raises(BatchSizeError, match=re.escape(msg)):
        TensorDict(x=torch.zeros(3, 5), batch_size=[4])
    msg = "key ('obs', 'pixels') has shape (32, 3), which does not start with batch_size (64,)"
    with pytest.raises(BatchSizeError, match=re.escape(msg)):
        TensorDict({"obs": {"pixels": torch.zeros(32, 3)}}, batch_size=[64])
    # Also a RuntimeError, as tensordict raises for the same mistake.
    with pytest.raises(RuntimeError):
        TensorDict(x=torch.zeros(3), batch_size=[4])


def test_nested_container_must_start_with_parent_batch_size() -> None:
    inner = TensorDict(y=torch.zeros(2, 3), batch_size=[2, 3])
    outer = TensorDict(n=inner, batch_size=[2])
    assert outer["n"].batch_size == torch.Size([2, 3])
    with pytest.raises(
        BatchSizeError, match=r"key 'n' holds a TensorDict with batch_size \(2, 3\)"
    ):
        TensorDict(n=inner, batch_size=[3])


def test_construct_rejects_bad_sources_and_keys() -> None:
    with pytest.raises(TypeError, match=r"must be a mapping.*got list"):
        TensorDict([("a", torch.zeros(1))])  # type: ignore[arg-type]
    with pytest.raises(TensorDictKeyError, match="key 1 is a int; TensorDict keys are str"):
        TensorDict({1: torch.zeros(1)})  # type: ignore[dict-item]
    with pytest.raises(TensorDictKeyError, match=r"key 2 under 'n' is a int"):
        TensorDict({"n": {2: torch.zeros(1)}})
    with pytest.raises(TypeError, match="no named batch dims"):
        TensorDict(x=torch.zeros(2), batch_size=[2], names=["b"])


def test_values_are_converted() -> None:
    td = TensorDict(arr=np.ones((2, 3)), text="hi", n=3, objs=np.array([1, "a"], dtype=object))
    assert isinstance(td["arr"], torch.Tensor) and td["arr"].dtype == torch.float64
    assert td["text"] == "hi" and td["n"] == 3
    assert isinstance(td._tensordict["text"], NonTensorData)
    assert isinstance(td["objs"], np.ndarray)  # object arrays stay Python values


def test_device_moves_every_leaf_now_and_on_later_sets() -> None:
    td = TensorDict({"x": torch.zeros(2), "n": {"y": torch.ones(2)}}, batch_size=[2], device="meta")
    assert td.device == torch.device("meta")
    assert td["x"].device.type == "meta" and td["n", "y"].device.type == "meta"
    assert td["n"].device == torch.device("meta")
    td["z"] = torch.zeros(2)
    td.set(("n", "w"), torch.zeros(2))
    td.set(("m", "v"), torch.zeros(2))
    assert {t.device.type for t in td.values(True, True)} == {"meta"}
    assert td["m"].device == torch.device("meta")


def test_device_cpu() -> None:
    td = TensorDict(x=torch.zeros(2), batch_size=[2], device="cpu")
    assert td.device == torch.device("cpu")
    assert td.to("cpu") is td
    assert td[0].device == torch.device("cpu")
    assert td.clone().device == torch.device("cpu")
    assert torch.stack([td, td]).device == torch.device("cpu")
    free = TensorDict(x=torch.zeros(2), batch_size=[2])
    assert free.device is None
    moved = free.cpu()
    assert moved.device == torch.device("cpu") and moved is not free
    assert moved.clear_device_().device is None


def test_from_dict_auto_batch_size() -> None:
    src = {"a": torch.zeros(3, 4, 5), "b": {"c": torch.zeros(3, 4), "d": {}}}
    td = TensorDict.from_dict(src, auto_batch_size=True)
    assert td.batch_size == torch.Size([3, 4])
    assert td["b"].batch_size == torch.Size([3, 4])
    assert td["b", "d"].batch_size == torch.Size([3, 4])  # an empty level follows its parent
    assert TensorDict.from_dict(src, auto_batch_size=True, batch_dims=1).batch_size == (3,)
    assert TensorDict.from_dict(src).batch_size == torch.Size([])
    assert TensorDict.from_dict(src, batch_size=[3]).batch_size == torch.Size([3])


def test_to_dict_round_trip(td: TensorDict) -> None:
    d = td.to_dict()
    assert set(d) == {"obs", "action", "next", "name"}
    assert isinstance(d["next"], dict) and d["name"] == "cartpole"
    back = TensorDict(d, batch_size=[4])
    assert (back == td).all()


def test_lock_kwarg() -> None:
    td = TensorDict(x=torch.zeros(2), n={"y": torch.zeros(2)}, batch_size=[2], lock=True)
    assert td.is_locked and td["n"].is_locked


# --------------------------------------------------------------------- keys


def test_get_set_del_contains(td: TensorDict) -> None:
    assert td["action"] is td.get("action")
    assert td.get("missing") is None and td.get("missing", 7) == 7
    assert td.get(("next", "missing"), 7) == 7
    td["new"] = torch.ones(4)
    td.set(("deep", "er", "leaf"), torch.ones(4, 2))
    assert isinstance(td["deep", "er"], TensorDict)
    assert td["deep", "er", "leaf"].shape == (4, 2)
    assert td[("deep", ("er", "leaf"))] is td["deep", "er", "leaf"]
    assert "new" in td and ("deep", "er") in td and ("deep", "zz") not in td
    del td["new"]
    del td["deep", "er", "leaf"]
    assert "new" not in td and ("deep", "er", "leaf") not in td
    assert ("deep", "er") in td
    with pytest.raises(TypeError, match="'in' looks up keys"):
        0 in td  # noqa: B015


def test_missing_keys_name_the_nearest_path(td: TensorDict) -> None:
    with pytest.raises(
        TensorDictKeyError,
        match=re.escape("key 'zz' not found: no 'zz'; existing keys there: ['action', 'name'"),
    ):
        td["zz"]
    with pytest.raises(
        TensorDictKeyError,
        match=re.escape("key ('next', 'zz') not found: no 'zz' under 'next'; existing keys"),
    ):
        td["next", "zz"]
    with pytest.raises(TensorDictKeyError, match=r"'obs' is a leaf, not a TensorDict"):
        td["obs", "x"]
    with pytest.raises(TensorDictKeyError, match=r"cannot set \('obs', 'x'\): 'obs' is a leaf"):
        td.set(("obs", "x"), torch.zeros(4))
    with pytest.raises(KeyError):  # a TensorDictKeyError is a KeyError
        del td["next", "zz"]
    with pytest.raises(
        TensorDictKeyError,
        match="key 0 is not a key: expected a str or a non-empty tuple of str, got a int",
    ):
        td.get(0)  # type: ignore[arg-type]
    with pytest.raises(TensorDictKeyError, match="look it up first"):
        td["obs", 0]
    with pytest.raises(TensorDictKeyError, match="mixes keys and batch indices"):
        td[0, "obs"]


def test_keys_items_values(td: TensorDict) -> None:
    assert list(td.keys()) == ["obs", "action", "next", "name"]
    assert td.keys(include_nested=True) == [
        "obs",
        "action",
        "next",
        ("next", "reward"),
        ("next", "done"),
        "name",
    ]
    # leaves are the tensors, as in tensordict: the non-tensor "name" is a key, not a leaf
    assert td.keys(include_nested=True, leaves_only=True) == [
        "obs",
        "action",
        ("next", "reward"),
        ("next", "done"),
    ]
    assert td.keys(leaves_only=True) == ["obs", "action"]
    items = dict(td.items(include_nested=True, leaves_only=True))
    assert "name" not in items and items["next", "done"].dtype == torch.bool
    assert dict(td.items(include_nested=True))["name"].data == "cartpole"
    assert td.keys(True, True, is_leaf=lambda cls: True)[-1] == "name"
    assert len(list(td.values())) == 4
    assert td.keys() == td._tensordict.keys()  # a live view, like dict.keys()


def test_select_exclude(td: TensorDict) -> None:
    s = td.select("obs", ("next", "done"))
    assert s.keys(True, True) == ["obs", ("next", "done")]
    assert s["obs"] is td["obs"]
    with pytest.raises(TensorDictKeyError, match="key 'zz' not found"):
        td.select("zz")
    with pytest.raises(TensorDictKeyError, match=r"key \('next', 'zz'\) not found"):
        td.select(("next", "zz"))
    assert td.select("obs", "zz", strict=False).keys(True) == ["obs"]
    e = td.exclude("obs", ("next", "reward"), "zz")
    assert e.keys(True) == ["action", "next", ("next", "done"), "name"]
    assert ("next", "reward") in td  # exclude does not touch the original
    td.exclude("obs", inplace=True)
    assert "obs" not in td


def test_update_is_recursive(td: TensorDict) -> None:
    td.update({"next": {"reward": torch.zeros(4, 1), "extra": torch.ones(4)}, "new": "x"})
    assert td["next", "reward"].sum() == 0 and ("next", "done") in td
    assert ("next", "extra") in td and td["new"] == "x"
    obs = td["obs"]
    td.update({"obs": torch.zeros(4, 3, 2)}, inplace=True)
    assert td["obs"] is obs and obs.sum() == 0
    td.update({"action": torch.ones(4, dtype=torch.long), "name": "q"}, keys_to_update=["name"])
    assert td["name"] == "q" and td["action"].sum() == 6
    with pytest.raises(TensorDictKeyError, match="key 'zz' not found"):
        td.update_({"zz": torch.zeros(4)})
    with pytest.raises(BatchSizeError, match="key 'bad' has shape"):
        td.update({"bad": torch.zeros(5)})


def test_flatten_unflatten_keys(td: TensorDict) -> None:
    flat = td.flatten_keys("/")
    assert list(flat.keys()) == ["obs", "action", "next/reward", "next/done", "name"]
    assert (flat.unflatten_keys("/") == td).all()
    clash = TensorDict({"a.b": torch.zeros(1), "a": {"b": torch.ones(1)}}, batch_size=[1])
    with pytest.raises(KeyCollisionError, match=r"two entries become 'a\.b'"):
        clash.flatten_keys()
    bad = TensorDict({"a": torch.zeros(1), "a.b": torch.ones(1)}, batch_size=[1])
    with pytest.raises(KeyCollisionError, match="needs 'a' to be a TensorDict but it is a leaf"):
        bad.unflatten_keys()
    empty = TensorDict({"a": {}, "b": {"c": torch.zeros(1)}}, batch_size=[1])
    assert empty.flatten_keys().unflatten_keys().keys(True) == ["a", "b", ("b", "c")]


def test_pop_and_rename(td: TensorDict) -> None:
    action = td.pop("action")
    assert "action" not in td and action.shape == (4,)
    assert td.pop("zz", None) is None
    with pytest.raises(TensorDictKeyError):
        td.pop("zz")
    td.rename_key_(("next", "done"), "done")
    assert "done" in td and ("next", "done") not in td


# ---------------------------------------------------------- batch indexing


def test_shape_properties(td: TensorDict) -> None:
    assert len(td) == 4 and td.batch_size == td.shape == torch.Size([4])
    assert td.batch_dims == td.ndim == td.dim() == 1
    assert td.numel() == 4 and td.size(0) == 4 and td.size() == (4,)
    t2 = TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2, 3])
    assert t2.numel() == 6 and len(t2) == 2 and len(TensorDict()) == 0


def test_int_and_slice_index(td: TensorDict) -> None:
    row = td[1]
    assert row.batch_size == torch.Size([]) and torch.equal(row["obs"], td["obs"][1])
    assert row["next", "reward"].shape == (1,) and row["name"] == "cartpole"
    assert torch.equal(td[-1]["action"], torch.tensor(3))
    sl = td[1:3]
    assert sl.batch_size == torch.Size([2])
    sl["obs"].zero_()  # a slice is a view
    assert td["obs"][1:3].sum() == 0 and td["obs"][0].sum() > 0
    assert td[::2]["action"].tolist() == [0, 2]
    assert td[10:].batch_size == torch.Size([0])
    with pytest.raises(IndexError, match=re.escape("index 4 is out of range for batch_size (4,)")):
        td[4]
    with pytest.raises(ValueError, match="step must be positive"):
        td[::-1]


def test_mask_tensor_list_ellipsis_none(td: TensorDict) -> None:
    mask = torch.tensor([True, False, True, False])
    assert td[mask]["action"].tolist() == [0, 2]
    assert td[torch.tensor([3, 0, 3])]["action"].tolist() == [3, 0, 3]
    assert td[torch.tensor([-1])]["action"].tolist() == [3]
    assert td[[1, 2]]["action"].tolist() == [1, 2]
    assert td[[]].batch_size == torch.Size([0])
    assert td[range(1, 3)]["action"].tolist() == [1, 2]
    assert td[...].batch_size == td.batch_size
    assert td[None].batch_size == torch.Size([1, 4])
    assert td[..., None]["obs"].shape == (4, 1, 3, 2)  # None lands after the batch dims
    assert td[:, None]["obs"].shape == (4, 1, 3, 2)
    grid = TensorDict(x=torch.arange(12).reshape(3, 4), batch_size=[3, 4])
    assert grid[..., 1]["x"].tolist() == [1, 5, 9]
    assert grid[1, [0, 3]]["x"].tolist() == [4, 7]
    assert grid[torch.tensor([0, 2]), torch.tensor([1, 3])]["x"].tolist() == [1, 11]
    assert grid[grid["x"] % 2 == 0].batch_size == torch.Size([6])
    with pytest.raises(IndexError, match="out of bounds"):
        td[torch.tensor([4])]
    with pytest.raises(IndexError, match="mask"):
        td[torch.tensor([True, False])]


def test_index_tensor_fast_path_and_its_fallbacks() -> None:
    x = torch.arange(10).reshape(5, 2)
    td = TensorDict(x=x, n={"y": x.clone()}, s="k", batch_size=[5])
    for idx in (torch.tensor([4, 0]), torch.tensor([4, 0], dtype=torch.int32)):
        assert torch.equal(td[idx]["x"], x[idx.long()]) and td[idx]["s"] == "k"
    # Negative entries are not index_select's business: the general path handles them.
    assert torch.equal(td[torch.tensor([-1, 1])]["n", "y"], x[[-1, 1]])
    # Leaves on another device than the index take the general path too.
    meta = TensorDict(x=torch.zeros(5, 3), batch_size=[5], device="meta")
    assert meta[torch.tensor([0, -1])]["x"].shape == (2, 3)
    assert meta[torch.tensor([True, False, True, False, True])].batch_size == (3,)
    assert meta.__getitems__([1, 2]).batch_size == (2,)


def test_index_longer_than_batch_is_an_index_error() -> None:
    td = TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2, 3])
    with pytest.raises(IndexError, match=r"too many indices: \(0, 0, 0\) indexes 3 dim"):
        td[0, 0, 0]
    with pytest.raises(IndexError, match="too many indices"):
        td[..., 0, 0, 0]
    with pytest.raises(IndexError, match="no batch dims"):
        td[0, 0][0]
    with pytest.raises(IndexError, match="single ellipsis"):
        td[..., ...]


def test_setitem_writes_rows_in_place(td: TensorDict) -> None:
    obs = td["obs"]
    td[0] = 0
    assert obs[0].sum() == 0 and td["action"][0] == 0 and td["next", "done"][0].item() is False
    td[1:3] = {"action": torch.tensor([7, 8]), "next": {"reward": torch.full((2, 1), 5.0)}}
    assert td["action"].tolist() == [0, 7, 8, 3]
    assert td["next", "reward"][:, 0].tolist() == [0.0, 5.0, 5.0, 1.0]
    src = td[[3]].clone().apply(lambda t: t + 1 if t.dtype != torch.bool else t)
    td[torch.tensor([0])] = src
    assert td["action"][0] == 4
    assert td["obs"] is obs  # never replaced, only written into
    td[0] = {"zz": torch.ones(())}  # a missing key is created, zeros in the other rows
    assert td["zz"].tolist() == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(BatchSizeError, match="cannot write into key 'action'"):
        td[0:2] = {"action": torch.zeros(3)}
    with pytest.raises(TypeError, match="non-tensor value 'x' into tensor 'action'"):
        td[0] = {"action": "x"}


def test_setitem_on_nontensor_makes_per_element_values(td: TensorDict) -> None:
    td[1] = {"name": "acrobot"}
    assert td["name"] == ["cartpole", "acrobot", "cartpole", "cartpole"]
    assert td[1]["name"] == "acrobot" and td[2:]["name"] == ["cartpole"] * 2  # as tensordict


def test_batch_size_setter() -> None:
    td = TensorDict(x=torch.zeros(2, 3), n={"y": torch.zeros(2, 3, 4)}, batch_size=[2])
    td.batch_size = [2, 3]
    assert td.batch_size == (2, 3) and td["n"].batch_size == (2, 3)
    with pytest.raises(BatchSizeError, match=r"key 'x' has shape \(2, 3\)"):
        td.batch_size = [2, 3, 4]
    td.batch_size = []
    assert td.batch_size == () and td["n"].batch_size == (2, 3)


def test_iteration_goes_over_the_first_batch_dim(td: TensorDict) -> None:
    rows = list(td)
    assert len(rows) == 4 and rows[2]["action"] == 2
    with pytest.raises(TypeError, match=r"batch_size \[\] \(use keys\(\)\)"):
        iter(td[0])


def test_bool_raises_with_reason(td: TensorDict) -> None:
    with pytest.raises(RuntimeError, match=r"ambiguous: use \(a == b\).all\(\)"):
        bool(td)
    with pytest.raises(RuntimeError, match="ambiguous"):
        td or 1  # noqa: B018


# ------------------------------------------------------------- locking


def test_lock_semantics(td: TensorDict) -> None:
    td.lock_()
    assert td.is_locked and td["next"].is_locked
    with pytest.raises(LockedError, match="cannot set 'x': the TensorDict is locked"):
        td["x"] = torch.zeros(4)
    with pytest.raises(LockedError, match=r"cannot set \('next', 'x'\)"):
        td["next", "x"] = torch.zeros(4)
    with pytest.raises(LockedError, match=r"cannot create \('a',\)|cannot create 'a'"):
        td["a", "b"] = torch.zeros(4)
    with pytest.raises(LockedError, match="cannot delete 'obs'"):
        del td["obs"]
    with pytest.raises(LockedError, match="cannot set 'obs'"):
        td["obs"] = torch.zeros(4, 3, 2)
    with pytest.raises(LockedError):
        td.update({"new": torch.zeros(4)})
    with pytest.raises(LockedError):
        td.rename_key_("obs", "o")
    with pytest.raises(LockedError):
        td.exclude("obs", inplace=True)
    # In-place writes stay allowed: this is how a locked memmap is filled.
    td[0] = 0
    td.set_("action", torch.full((4,), 9))
    td.set("obs", torch.ones(4, 3, 2), inplace=True)
    td.update_({"next": {"reward": torch.full((4, 1), 2.0)}})
    td.zero_()
    assert td["action"].sum() == 0
    # Results of operations are new, unlocked containers.
    assert not td[0].is_locked and not td.clone().is_locked
    assert not td.apply(lambda t: t).is_locked and not torch.stack([td, td]).is_locked
    assert "locked=True" in repr(td)
    td.unlock_()
    assert not td.is_locked and not td["next"].is_locked
    td["x"] = torch.zeros(4)


def test_share_memory(td: TensorDict) -> None:
    assert not td.is_shared()
    out = td.share_memory_()
    assert out is td and td.is_shared()


def test_pin_memory_without_accelerator_raises_clearly(td: TensorDict) -> None:
    if torch.cuda.is_available():
        pinned = td.pin_memory(num_threads=2)
        assert pinned.is_pinned()
        return
    with pytest.raises(RuntimeError, match="pin_memory\\(\\) needs an accelerator"):
        td.pin_memory()
    with pytest.raises(RuntimeError, match="needs an accelerator"):
        td.pin_memory(num_threads=4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_round_trip(td: TensorDict) -> None:
    g = td.cuda()
    assert g.device.type == "cuda" and g["obs"].is_cuda
    assert (g.cpu() == td).all()


# ------------------------------------------------------------------ repr


def test_repr_is_compact() -> None:
    td = TensorDict(
        {"obs": torch.zeros(4, 3), "n": {"r": torch.zeros(4, 2, dtype=torch.long)}, "s": "hi"},
        batch_size=[4],
    )
    assert repr(td) == (
        "TensorDict(batch_size=[4], device=None, "
        "fields={obs: float32[3], n: {r: int64[2]}, s: 'hi'})"
    )
    deeper = TensorDict({"n": TensorDict(y=torch.zeros(4, 5), batch_size=[4, 5])}, batch_size=[4])
    assert "n: [5]{y: float32[]}" in repr(deeper)
    wide = TensorDict({f"key_{i}": torch.zeros(2, 8) for i in range(12)}, batch_size=[2])
    lines = repr(wide).splitlines()
    assert len(lines) == 13 and lines[1] == "    key_0: float32[8],"
    long_text = TensorDict(s="x" * 100)
    assert "..." in repr(long_text) and len(repr(long_text)) < 120


# -------------------------------------------------------------- pickling


def test_pickle_round_trip_keeps_everything(td: TensorDict) -> None:
    td.lock_()
    back = pickle.loads(pickle.dumps(td))
    assert (back == td).all() and back.is_locked and back.batch_size == td.batch_size
    assert back["name"] == "cartpole" and isinstance(back["next"], TensorDict)
    stacked = torch.stack([TensorDict(s="a"), TensorDict(s="b")])
    assert pickle.loads(pickle.dumps(stacked))["s"] == ["a", "b"]
    with_dev = TensorDict(x=torch.zeros(2), batch_size=[2], device="cpu")
    assert pickle.loads(pickle.dumps(with_dev)).device == torch.device("cpu")


# ------------------------------------------------------------ DataLoader


def test_getitems_gathers_a_batch(td: TensorDict) -> None:
    batch = td.__getitems__([3, 1, 1])
    assert batch.batch_size == torch.Size([3])
    assert batch["action"].tolist() == [3, 1, 1] and batch["name"] == "cartpole"
    assert torch.equal(batch["obs"], td["obs"][[3, 1, 1]])
    assert td.__getitems__(torch.tensor([0, -1]))["action"].tolist() == [0, 3]
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        td.__getitems__([0, 9])


def test_dataloader_fetches_each_batch_with_one_call(
    td: TensorDict, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[int]] = []
    original = TensorDict.__getitems__

    def spy(self: TensorDict, indices: list[int]) -> TensorDict:
        calls.append(list(indices))
        return original(self, indices)

    monkeypatch.setattr(TensorDict, "__getitems__", spy)
    big = TensorDict(x=torch.arange(10), y={"z": torch.arange(10.0)}, batch_size=[10])
    batches = list(DataLoader(big, batch_size=4, shuffle=False))
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b.batch_size for b in batches] == [torch.Size([4]), torch.Size([4]), torch.Size([2])]
    assert torch.cat(batches)["y", "z"].tolist() == list(map(float, range(10)))
    shuffled = list(DataLoader(big, batch_size=5, shuffle=True))
    assert sorted(torch.cat(shuffled)["x"].tolist()) == list(range(10))


def test_dataloader_collates_single_samples() -> None:
    class Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> TensorDict:
            return TensorDict(x=torch.tensor([i, i]), tag=f"s{i % 2}")

    (batch,) = list(DataLoader(Samples(), batch_size=6))
    assert batch.batch_size == torch.Size([6]) and batch["x"][:, 0].tolist() == list(range(6))
    assert batch["tag"] == ["s0", "s1"] * 3


def test_is_tensor_collection() -> None:
    assert tensorbox.is_tensor_collection(TensorDict())
    assert tensorbox.is_tensor_collection(TensorDict)
    assert not tensorbox.is_tensor_collection(torch.zeros(1))
    assert not tensorbox.is_tensor_collection({})
