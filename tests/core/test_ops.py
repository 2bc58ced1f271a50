"""TensorDict operations: apply, to, clone, shape ops, stack/cat, comparisons, pytree."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn

from tensorbox import BatchSizeError, LockedError, NonTensorData, TensorDict, TensorDictKeyError


@pytest.fixture
def td() -> TensorDict:
    return TensorDict(
        {
            "x": torch.arange(6.0).reshape(2, 3),
            "label": torch.tensor([0, 1]),
            "mask": torch.tensor([True, False]),
            "n": {"y": torch.ones(2, 4, dtype=torch.float64)},
            "tag": "t",
        },
        batch_size=[2],
    )


# -------------------------------------------------------------------- apply


def test_apply_maps_every_tensor_leaf(td: TensorDict) -> None:
    out = td.apply(lambda t: t * 2)
    assert torch.equal(out["x"], td["x"] * 2) and torch.equal(out["n", "y"], td["n", "y"] * 2)
    assert out["tag"] == "t" and out.batch_size == td.batch_size
    assert out is not td and out["n"] is not td["n"]


def test_apply_none_drops_leaves_and_emptied_levels(td: TensorDict) -> None:
    out = td.apply(lambda t: t if t.dtype == torch.float32 else None)
    assert out.keys(True) == ["x", "tag"]
    empty = TensorDict({"e": {}, "x": torch.zeros(2)}, batch_size=[2])
    assert empty.apply(lambda t: t).keys(True) == ["e", "x"]  # an empty level stays


def test_apply_with_others_and_batch_size(td: TensorDict) -> None:
    nums = td.exclude("mask", "tag")
    other = nums.clone().apply(lambda t: t + 1)
    out = nums.apply(lambda a, b: b - a, other)
    assert (out == 1).all() and out.keys(True) == nums.keys(True)
    reduced = td.apply(lambda t: t.sum(0), batch_size=[])
    assert reduced.batch_size == torch.Size([]) and reduced["x"].tolist() == [3.0, 5.0, 7.0]
    with pytest.raises(TensorDictKeyError, match=r"apply: key 'x' is missing"):
        td.apply(lambda a, b: a, TensorDict(batch_size=[2]))


def test_apply_refuses_results_that_break_the_batch_size(td: TensorDict) -> None:
    msg = "key 'x' (result of fn) has shape (3,), which does not start with batch_size (2,)"
    with pytest.raises(BatchSizeError, match=re.escape(msg)):
        td.apply(lambda t: t[0])
    with pytest.raises(BatchSizeError, match=r"under 'n': key 'y' \(result of fn\)"):
        td.apply(lambda t: t if t.dtype != torch.float64 else t[0])


def test_named_apply(td: TensorDict) -> None:
    seen: list[object] = []
    td.named_apply(lambda k, t: seen.append(k))
    assert seen == ["x", "label", "mask", "y"]
    seen.clear()
    td.named_apply(lambda k, t: seen.append(k), nested_keys=True)
    assert seen == ["x", "label", "mask", ("n", "y")]
    out = td.named_apply(lambda k, t: t + 1 if k == "x" else t)
    assert out["x"][0, 0] == 1 and out["label"][0] == 0


def test_apply_inplace(td: TensorDict) -> None:
    x = td["x"]
    assert td.apply(torch.Tensor.zero_, inplace=True) is td
    assert td["x"] is x and x.sum() == 0
    td.lock_()
    td.apply(lambda t: t.fill_(1), inplace=True)  # writes in place: allowed when locked
    assert x.sum() == x.numel()
    td.apply(lambda t: t + 1, inplace=True)  # a new result is copied into the tensor
    assert td["x"] is x and x.sum() == 2 * x.numel()
    with pytest.raises(
        LockedError,
        match=r"apply\(inplace=True\) would replace \('n', 'y'\) of a locked TensorDict by a result "
        r"of another shape or device",
    ):
        td.apply(lambda t: t.unsqueeze(-1), inplace=True)


# ----------------------------------------------------------------------- to


def test_to_dtype_floating_only(td: TensorDict) -> None:
    out = td.to(torch.float16, floating_only=True)
    assert out["x"].dtype == torch.float16 and out["n", "y"].dtype == torch.float16
    assert out["label"].dtype == torch.int64 and out["mask"].dtype == torch.bool
    everything = td.to(torch.float16)
    assert {t.dtype for t in everything.values(True, True) if isinstance(t, torch.Tensor)} == {
        torch.float16
    }
    assert td.to(dtype=torch.float64)["x"].dtype == torch.float64
    assert td.to(torch.float32, non_blocking=True)["n", "y"].dtype == torch.float32


def test_to_device_and_other_forms(td: TensorDict) -> None:
    meta = td.to("meta")
    assert meta.device == torch.device("meta") and meta["n"].device == torch.device("meta")
    assert meta["x"].is_meta and meta["n", "y"].is_meta
    both = td.to("meta", torch.float16)
    assert both["x"].dtype == torch.float16 and both["label"].dtype == torch.float16
    assert td.to(torch.zeros(1, dtype=torch.float64))["x"].dtype == torch.float64
    assert td.cpu().device == torch.device("cpu")
    with pytest.raises(TypeError, match="memory_format"):
        td.to(memory_format=torch.channels_last)


def test_clone_contiguous_detach(td: TensorDict) -> None:
    c = td.clone()
    assert (c == td).all() and c["x"].data_ptr() != td["x"].data_ptr()
    shallow = td.clone(recurse=False)
    assert shallow["x"] is td["x"] and shallow["n"] is not td["n"]
    shallow["new"] = torch.zeros(2)
    assert "new" not in td
    wide = TensorDict(x=torch.zeros(3, 2).t(), batch_size=[2])
    assert not wide["x"].is_contiguous() and wide.contiguous()["x"].is_contiguous()
    g = TensorDict(w=torch.ones(2, requires_grad=True), batch_size=[2])
    assert not g.detach()["w"].requires_grad and g["w"].requires_grad
    g2 = TensorDict(w=torch.ones(2), batch_size=[2]).requires_grad_()
    assert g2["w"].requires_grad


# ------------------------------------------------------------ shape ops


def test_shape_ops_on_batch_dims_only() -> None:
    td = TensorDict(x=torch.arange(24).reshape(2, 3, 4), batch_size=[2, 3])
    assert td.reshape(6)["x"].shape == (6, 4)
    assert td.reshape(3, -1).batch_size == (3, 2)
    assert td.view(-1)["x"].shape == (6, 4)
    assert td.unsqueeze(-1)["x"].shape == (2, 3, 1, 4)
    assert td.unsqueeze(0).squeeze(0).batch_size == (2, 3)
    assert td.permute(1, 0)["x"].shape == (3, 2, 4)
    assert td.permute([1, 0]).batch_size == (3, 2)
    assert td.transpose(-1, -2)["x"].shape == (3, 2, 4)
    assert td.expand(5, 2, 3)["x"].shape == (5, 2, 3, 4)
    assert td.flatten()["x"].shape == (6, 4)
    assert td.flatten().unflatten(0, (2, 3))["x"].shape == (2, 3, 4)
    assert td.narrow(1, 1, 2)["x"].shape == (2, 2, 4)
    assert torch.equal(td.narrow(1, 1, 2)["x"], td["x"][:, 1:3])
    assert td.squeeze() is td  # nothing to squeeze: as tensordict, the same object


def test_shape_op_errors() -> None:
    td = TensorDict(x=torch.zeros(2, 3, 4), batch_size=[2, 3])
    with pytest.raises(BatchSizeError, match=r"cannot reshape batch_size \(2, 3\) to \(5,\)"):
        td.reshape(5)
    with pytest.raises(BatchSizeError, match=r"cannot expand batch_size \(2, 3\) to \(4, 3\)"):
        td.expand(4, 3)
    with pytest.raises(IndexError, match="permute needs 2 dims"):
        td.permute(0)
    with pytest.raises(IndexError, match="not a permutation"):
        td.permute(0, 0)
    with pytest.raises(IndexError, match=r"dim 3 is out of range for 3 batch dim\(s\)"):
        td.unsqueeze(3)
    with pytest.raises(IndexError, match=r"dim 2 is out of range for 2 batch dim\(s\)"):
        td.transpose(0, 2)
    with pytest.raises(BatchSizeError, match="cannot unflatten batch dim 0 of size 2"):
        td.unflatten(0, (3, -1))
    with pytest.raises(RuntimeError, match="view"):
        td.transpose(0, 1).view(6)


# ---------------------------------------------------- unbind/split/stack/cat


def test_unbind_split_chunk(td: TensorDict) -> None:
    a, b = td.unbind(0)
    assert a.batch_size == () and b["label"] == 1 and a["tag"] == "t"
    assert [p.batch_size[0] for p in td.split(1)] == [1, 1]
    assert [p.batch_size[0] for p in td.split([2, 0])] == [2, 0]
    assert [p.batch_size[0] for p in td.chunk(5)] == [1, 1]
    with pytest.raises(ValueError, match="cannot split batch dim 0 of size 2"):
        td.split([1, 2])
    with pytest.raises(ValueError, match="chunks"):
        td.chunk(0)
    with pytest.raises(IndexError, match="out of range"):
        td.unbind(1)


def test_torch_functions_dispatch(td: TensorDict) -> None:
    s = torch.stack([td, td], 1)
    assert s.batch_size == (2, 2) and s["x"].shape == (2, 2, 3) and s["tag"] == [["t", "t"]] * 2
    assert torch.cat([td, td]).batch_size == (4,)
    assert torch.concat([td, td], dim=0).batch_size == (4,)
    assert torch.concatenate([td, td], axis=0).batch_size == (4,)
    assert len(torch.unbind(td)) == 2
    assert [p.batch_size for p in torch.split(td, 1)] == [(1,), (1,)]
    assert len(torch.chunk(td, 2)) == 2
    assert torch.unsqueeze(td, 0).batch_size == (1, 2)
    assert torch.squeeze(td[None], 0).batch_size == (2,)
    assert torch.narrow(td, 0, 1, 1)["label"].tolist() == [1]
    assert torch.clone(td)["x"].data_ptr() != td["x"].data_ptr()
    assert torch.permute(s, (1, 0)).batch_size == (2, 2)
    assert torch.reshape(s, (4,)).batch_size == (4,)
    assert torch.flatten(s).batch_size == (4,)
    assert torch.transpose(s, 0, 1).batch_size == (2, 2)
    assert torch.unflatten(td, 0, (1, 2)).batch_size == (1, 2)
    assert torch.eq(td, td).all() and not torch.ne(td, td).any()
    with pytest.raises(
        BatchSizeError, match=r"out= has batch_size \(2,\), the result has \(2, 2\)"
    ):
        torch.stack([td, td], out=td)  # type: ignore[call-overload]
    into = torch.stack([td, td]).zero_()
    assert torch.stack([td, td], out=into) is into and (into[1] == td).all()  # type: ignore[call-overload]
    # reductions dispatch to the container methods, as tensordict
    assert torch.sum(s, 0).batch_size == (2,)  # type: ignore[call-overload]


def test_stack_errors(td: TensorDict) -> None:
    with pytest.raises(BatchSizeError, match=r"stack: element 1 has batch_size \(1,\)"):
        torch.stack([td, td[:1]])
    with pytest.raises(TensorDictKeyError, match=r"element 1 has different keys.*missing \['x'\]"):
        torch.stack([td, td.exclude("x")])
    with pytest.raises(TensorDictKeyError, match=r"unexpected \['z'\]"):
        other = td.clone()
        del other["x"]
        other["z"] = torch.zeros(2)
        torch.stack([td, other])
    with pytest.raises(BatchSizeError, match="stack: cannot stack key 'x'"):
        other = td.clone()
        other["x"] = torch.zeros(2, 5)
        torch.stack([td, other])
    with pytest.raises(ValueError, match="non-empty"):
        TensorDict.__torch_function__(torch.stack, (), ([],))
    with pytest.raises(BatchSizeError, match=r"cat: element 1 has batch_size \(2, 1\)"):
        torch.cat([td, td[:, None]])


def test_stack_of_nested_and_dims(td: TensorDict) -> None:
    rows = [td[i] for i in range(2)]
    back = torch.stack(rows)
    assert (back == td).all()
    grid = torch.stack([td, td, td], dim=-1)
    assert grid.batch_size == (2, 3) and grid["n", "y"].shape == (2, 3, 4)
    assert grid["n"].batch_size == (2, 3)


def test_stacked_nontensor_values() -> None:
    items = [TensorDict(x=torch.tensor([i]), name=f"n{i}", kind="same") for i in range(4)]
    s = torch.stack(items)
    assert s["kind"] == ["same"] * 4 and s._tensordict["kind"].stacked  # per row, as tensordict
    assert s["name"] == ["n0", "n1", "n2", "n3"]
    assert s[1]["name"] == "n1" and s[1:3]["name"] == ["n1", "n2"]
    assert s[torch.tensor([3, 0])]["name"] == ["n3", "n0"]
    assert s[torch.tensor([True, False, False, True])]["name"] == ["n0", "n3"]
    assert [r["name"] for r in s.unbind(0)] == ["n0", "n1", "n2", "n3"]
    g = s.reshape(2, 2)
    assert g["name"] == [["n0", "n1"], ["n2", "n3"]]
    assert g.permute(1, 0)["name"] == [["n0", "n2"], ["n1", "n3"]]
    assert torch.cat([s, s[:1]])["name"] == ["n0", "n1", "n2", "n3", "n0"]
    assert torch.cat(
        [s[:1], TensorDict(x=torch.zeros(1, 1), name="z", kind="same", batch_size=[1])]
    )["name"] == ["n0", "z"]
    with pytest.raises(BatchSizeError, match=r"stacked values for batch_size \(2,\)"):
        TensorDict(
            v=NonTensorData(np.array(["a", "b"], dtype=object), stacked=True), batch_size=[3]
        )


# ---------------------------------------------------------- comparisons


def test_eq_ne_all_any(td: TensorDict) -> None:
    eq = td == td.clone()
    assert isinstance(eq, TensorDict) and eq["x"].dtype == torch.bool and eq.all()
    assert eq["tag"].tolist() == [True, True]  # non-tensor values compare per element
    other = td.clone()
    other["x"][0, 0] = 100
    assert not (td == other).all() and (td != other).any()
    assert (td != other)["x"].sum() == 1
    assert (
        td == {"x": td["x"], "label": td["label"], "mask": td["mask"], "n": td["n"], "tag": "t"}
    ).all()
    zero = td == 0
    assert "tag" not in zero and zero["x"][0, 0].item() is True
    per_row = (td == td).all(dim=0)
    assert per_row.batch_size == () and per_row["x"].tolist() == [True, True, True]
    with pytest.raises(TensorDictKeyError, match="cannot compare TensorDicts with different keys"):
        td == td.exclude("x")  # noqa: B015
    assert (td == "nonsense") is False


def test_arithmetic(td: TensorDict) -> None:
    f = td.select("x", "n")
    assert torch.equal((f + 1)["x"], td["x"] + 1) and torch.equal((1 + f)["x"], td["x"] + 1)
    assert torch.equal((f - f)["x"], torch.zeros(2, 3))
    assert torch.equal((f * 2)["n", "y"], td["n", "y"] * 2) and torch.equal(
        (2 * f)["x"], td["x"] * 2
    )
    assert torch.equal((f / 2)["x"], td["x"] / 2) and torch.equal((-f)["x"], -td["x"])
    b = td.select("mask")
    assert (~b)["mask"].tolist() == [False, True]
    assert (b & ~b)["mask"].tolist() == [False, False] and (b | ~b)["mask"].all()


# --------------------------------------------------------------- pytree


def test_pytree_sees_through(td: TensorDict) -> None:
    leaves, spec = pytree.tree_flatten(td)
    assert len(leaves) == 4 and all(isinstance(t, torch.Tensor) for t in leaves)
    back = pytree.tree_unflatten([t * 0 for t in leaves], spec)
    assert isinstance(back, TensorDict) and back["tag"] == "t" and back["n", "y"].sum() == 0
    doubled = pytree.tree_map(lambda t: t * 2, td)
    assert torch.equal(doubled["x"], td["x"] * 2) and doubled.batch_size == td.batch_size
    paths = [pytree.keystr(p) for p, _ in pytree.tree_flatten_with_path(td)[0]]
    assert paths == ["['x']", "['label']", "['mask']", "['n']['y']"]


def test_functional_call_with_tensordict_params() -> None:
    model = nn.Linear(3, 2)
    params = TensorDict(dict(model.named_parameters()), batch_size=[])
    zeros = params.apply(torch.zeros_like)
    x = torch.randn(4, 3)
    out = torch.func.functional_call(model, dict(zeros.items()), (x,))
    assert torch.equal(out, torch.zeros(4, 2))
    grads = torch.func.grad(
        lambda p: torch.func.functional_call(model, dict(p.items()), (x,)).sum()
    )(params)
    assert isinstance(grads, TensorDict) and grads["bias"].tolist() == [4.0, 4.0]


# ------------------------------------------------------- in-place writes


def test_large_in_place_writes_go_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorbox._core import chunks as _chunks

    calls: list[torch.Size] = []
    real = _chunks.copy_chunked

    def spy(dst: torch.Tensor, src: torch.Tensor, chunk_bytes: int | None = None) -> torch.Tensor:
        calls.append(dst.shape)
        return real(dst, src, chunk_bytes=256)

    monkeypatch.setattr(_chunks, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(_chunks, "copy_chunked", spy)
    td = TensorDict(big=torch.zeros(100, 10), small=torch.zeros(100), batch_size=[100])
    big = td["big"]
    td.set_("big", torch.ones(100, 10, dtype=torch.float64))
    td.update_({"small": torch.ones(100)})
    td.set("big", torch.full((100, 10), 2.0), inplace=True)
    td.update({"big": torch.full((100, 10), 3.0)}, inplace=True)
    assert calls == [torch.Size([100, 10])] * 3
    assert td["big"] is big and (big == 3).all() and (td["small"] == 1).all()
    td.set_("big", torch.zeros(10))  # a broadcasting copy takes the plain path
    assert len(calls) == 3 and big.sum() == 0


def test_weight_wrappers_forward_their_keywords() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[1].register_buffer("scratch", torch.zeros(1), persistent=False)
    assert ("1", "scratch") not in TensorDict.from_module(model)
    params = TensorDict.from_module(model, non_persistent=True)
    assert ("1", "scratch") in params
    zeros = params.apply(torch.zeros_like).exclude(("1", "scratch"))
    assert zeros.to_module(model, inplace=True, return_swap=False, strict=False) is None
    assert model[0].weight.abs().sum() == 0
    loaded = params.load_state_dict(
        {k: torch.ones_like(v) for k, v in params.state_dict().items()}, chunk_bytes=4
    )
    assert loaded is params and params["0", "weight"].eq(1).all()
