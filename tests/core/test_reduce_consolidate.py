"""tensordict's reductions, consolidation and the smaller methods users call: each
result checked against torch on the leaves (the oracle)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict, tensorclass
from tensorbox.utils import expand_as_right, unravel_key_list

REDUCTIONS = ["sum", "nansum", "prod", "mean", "nanmean", "std", "var", "amax", "amin"]


def _td(seed: int, bs: tuple[int, ...]) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {"a": torch.randn(*bs, 3, generator=g), "n": {"b": torch.randn(*bs, 2, generator=g)}},
        batch_size=bs,
    )


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 1000),
    bs=st.lists(st.integers(2, 4), min_size=1, max_size=3).map(tuple),  # std needs 2 rows
    name=st.sampled_from(REDUCTIONS),
    keepdim=st.booleans(),
    data=st.data(),
)
def test_reductions_match_torch_on_every_leaf(
    seed: int, bs: tuple[int, ...], name: str, keepdim: bool, data: st.DataObject
) -> None:
    td = _td(seed, bs)
    dim = data.draw(st.integers(-len(bs), len(bs) - 1))
    fn = getattr(torch, name)
    out = getattr(td, name)(dim, keepdim=keepdim)
    leaf_dim = dim % len(bs)  # a negative dim counts from the last batch dim
    for key in (("a",), ("n", "b")):
        want = fn(td[key], dim=leaf_dim, keepdim=keepdim)
        assert torch.allclose(out[key], want, equal_nan=True)
    feat = getattr(td, name)(dim="feature")
    assert feat.batch_size == td.batch_size
    assert torch.allclose(feat["a"], fn(td["a"], dim=-1), equal_nan=True)
    whole = getattr(td, name)(reduce=True)
    flat = torch.cat([td["a"].reshape(-1), td["n", "b"].reshape(-1)])
    assert torch.allclose(whole, fn(flat), equal_nan=True)


def test_min_max_return_values_and_indices_like_torch() -> None:
    td = _td(0, (3, 4))
    r = td.max(1)
    assert isinstance(r, torch.return_types.max)
    assert torch.equal(r.values["a"], td["a"].max(1).values)
    assert torch.equal(r.indices["n", "b"], td["n", "b"].max(1).indices)
    assert td.min(0, return_indices=False).batch_size == (4,)
    assert torch.equal(td.cummax(1).values["a"], td["a"].cummax(1).values)
    assert td.min()["a"].shape == ()
    with pytest.raises(TypeError, match=r"max: dim must be one batch dim \(an int\)"):
        td.max((0, 1))


def test_quantile_logsumexp_softmax_and_losses() -> None:
    td = _td(1, (3, 4))
    assert torch.allclose(td.quantile(0.5, 1)["a"], td["a"].quantile(0.5, 1))
    out = td.logsumexp(1).empty()
    assert td.logsumexp(1, out=out) is out
    assert torch.allclose(out["a"], torch.logsumexp(td["a"], 1))
    assert torch.allclose(torch.softmax(td, 0)["a"].sum(0), torch.ones(4, 3))
    loss = torch.nn.functional.mse_loss(td, td * 0)
    assert loss.batch_size == () and torch.allclose(loss["a"], td["a"].pow(2).mean())
    with pytest.raises(TypeError, match=r"dim='feature'.*keepdim=True is not supported"):
        td.mean(dim="feature", keepdim=True)
    with pytest.raises(IndexError, match=r"sum: dim 2 is out of range for 2 batch dim"):
        td.sum(2)


def test_consolidate_holds_every_leaf_in_one_storage(tmp_path: Path) -> None:
    td = TensorDict(
        {"a": torch.arange(4.0), "b": {"c": torch.ones(4, 2, dtype=torch.float16)}, "s": "x"},
        batch_size=[4],
    )
    c = td.consolidate(num_threads=2)
    assert c.is_consolidated() and c.is_locked and (c == td).all() and c["s"] == "x"
    ptrs = {t.untyped_storage().data_ptr() for t in (c["a"], c["b", "c"])}
    assert len(ptrs) == 1
    back = pickle.loads(pickle.dumps(c))
    assert back.is_consolidated() and (back == td).all()
    f = tmp_path / "td.bin"
    on_disk = td.consolidate(f)
    assert (TensorDict.from_consolidated(f) == on_disk).all()
    assert td.consolidate(return_early=True).result().is_consolidated()
    c.unlock_()
    assert not c.is_consolidated()
    with pytest.raises(TypeError, match=r"key 'z' holds object .*\(JSON values only\)"):
        TensorDict(z=object()).consolidate(tmp_path / "bad.bin")
    with pytest.raises(NotImplementedError, match=r"does not take use_buffer=True"):
        td.consolidate(return_early=True, use_buffer=True)


def test_consolidated_tensorclass_keeps_its_class() -> None:
    @tensorclass
    class Pair:
        x: torch.Tensor
        tag: str

    p = Pair(x=torch.zeros(3), tag="t", batch_size=[3]).consolidate()
    assert type(p) is Pair and p.is_consolidated() and p.tag == "t"
    moved = p.to("cpu")  # one copy of the storage, still consolidated
    assert moved.is_consolidated() and moved.device == torch.device("cpu")
    assert moved.to("cpu") is moved


def test_new_containers_popitem_namedtuple_and_grads() -> None:
    td = TensorDict({"a": torch.ones(4, 3), "n": {"b": torch.ones(4, 2)}}, batch_size=[4])
    z = td.new_zeros(2, 5)
    assert z.batch_size == (2, 5) and z["a"].shape == (2, 5, 3) and not z["a"].any()
    assert td.new_full([2], 7.0)["n", "b"].tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert td.new_ones(1)["a"].sum() == 3 and td.new_ones(1)["n", "b"].shape == (1, 2)
    nt = td.to_namedtuple()
    assert (TensorDict.from_namedtuple(nt, batch_size=[4]) == td).all()
    assert td.popitem()[0] == "n" and list(td.keys()) == ["a"]
    with pytest.raises(KeyError, match=r"popitem\(\): the TensorDict is empty"):
        TensorDict().popitem()
    x = TensorDict(a=torch.ones(2), batch_size=[2]).float().requires_grad_()
    (x * 3).backward(TensorDict(a=torch.ones(2), batch_size=[2]))
    assert x.grad["a"].tolist() == [3.0, 3.0]
    x.zero_grad(set_to_none=False)
    assert x.grad["a"].tolist() == [0.0, 0.0]
    assert x.zero_grad().grad is None


def test_where_pad_and_gather_inplace() -> None:
    td = TensorDict(a=torch.arange(4.0), batch_size=[4])
    mask = torch.tensor([True, False, True, False])
    assert td.where(mask, td.empty(), pad=-1)["a"].tolist() == [0.0, -1.0, 2.0, -1.0]
    with pytest.raises(KeyError, match=r"where: key 'a' not found in both containers"):
        td.where(mask, td.empty())
    out = td.clone()
    assert torch.where(mask, td, td * 0, out=out) is out and out["a"].tolist() == [0, 0, 2, 0]
    g = td.clone()
    assert g.gather(0, torch.tensor([3, 1]), inplace=True) is g and g["a"].tolist() == [3, 1]
    with pytest.raises(ValueError, match=r"gather: out= and inplace=True are mutually exclusive"):
        td.gather(0, torch.tensor([0]), out=td.clone(), inplace=True)


def test_utils() -> None:
    assert unravel_key_list(["a", ("b", ("c",))]) == [("a",), ("b", "c")]
    assert expand_as_right(torch.ones(2), torch.zeros(2, 3)).shape == (2, 3)
    with pytest.raises(RuntimeError, match=r"expand_as_right: a shape \(3,\) cannot be"):
        expand_as_right(torch.ones(3), torch.zeros(2, 3))


def test_consolidate_keeps_jagged_leaves_in_the_one_storage(tmp_path) -> None:
    nt = torch.nested.nested_tensor([torch.arange(3.0), torch.arange(1.0)], layout=torch.jagged)
    td = TensorDict({"a": nt, "b": torch.ones(2, 3)}, batch_size=[2])
    c = td.consolidate()
    assert c.is_consolidated()
    assert c["a"].values().untyped_storage().data_ptr() == c["b"].untyped_storage().data_ptr()
    for out in (c, pickle.loads(pickle.dumps(c)), td.consolidate(filename=tmp_path / "c")):
        assert [r.tolist() for r in out["a"].unbind()] == [[0.0, 1.0, 2.0], [0.0]]
    back = TensorDict.from_consolidated(tmp_path / "c")
    assert [r.tolist() for r in back["a"].unbind()] == [[0.0, 1.0, 2.0], [0.0]]


def test_a_damaged_consolidated_layout_is_refused(tmp_path) -> None:
    path = tmp_path / "c"
    TensorDict(a=torch.arange(4), batch_size=[4]).consolidate(filename=path)
    raw = path.read_bytes().replace(b'"int64", [4], 0, 32', b'"int64", [8], 0, 32')  # same length
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=r"does not fit its 32-byte storage .*the file is damaged"):
        TensorDict.from_consolidated(path)
