"""Model weights as TensorDicts: tensorbox.weights (from_module, to_module, state dicts, disk)."""

from __future__ import annotations

import gc
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import tensorbox.weights as tbnn
from tensorbox import TensorDict
from tensorbox._core import chunks as _chunks
from tensorbox.weights import ParamTree, SwappedWeights, WeightsMismatchError, copy_chunked

PERSIST = importlib.util.find_spec("tensorbox._storage.persist") is not None
needs_persist = pytest.mark.skipif(not PERSIST, reason="tensorbox._storage.persist not ready")


def small_transformer(seed: int = 0) -> nn.Transformer:
    torch.manual_seed(seed)
    # batch_first=True: the default layout makes torch warn at construction.
    return nn.Transformer(
        d_model=32,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dim_feedforward=64,
        batch_first=True,
    ).eval()


def run(model: nn.Transformer) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        return model(torch.randn(2, 5, 32, generator=g), torch.randn(2, 3, 32, generator=g))


class Tied(nn.Module):
    """A language-model head tied to the embedding, plus a norm with running stats."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.norm = nn.BatchNorm1d(4)
        self.act = nn.ReLU()  # no tensors: no entry
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("cache", torch.arange(3.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.norm(self.emb(x))))


def perturbed(td: TensorDict) -> TensorDict:
    return td.apply(lambda t: t.detach() + 1 if t.is_floating_point() else t.detach() + 2)


# ----------------------------------------------------------------- from_module


def test_from_module_is_nested_and_shares_the_objects() -> None:
    model = small_transformer()
    td = TensorDict.from_module(model)
    layer = model.encoder.layers[0]
    assert td["encoder", "layers", "0", "linear1", "weight"] is layer.linear1.weight
    assert (
        td["encoder"]["layers"]["0"]["self_attn"]["in_proj_weight"]
        is layer.self_attn.in_proj_weight
    )
    assert "dropout" not in td["encoder", "layers", "0"]  # no tensors, no entry
    assert "q_proj_weight" not in td["encoder", "layers", "0", "self_attn"]  # None
    # same keys, same order as nn.Module.state_dict
    assert list(td.state_dict()) == list(model.state_dict())
    assert td.batch_size == torch.Size([])


def test_from_module_buffers_none_and_non_persistent() -> None:
    model = Tied()
    model.norm.register_buffer("none_buf", None)
    td = TensorDict.from_module(model)
    assert set(td.keys()) == {"emb", "norm", "head"}
    assert td["norm", "running_mean"] is model.norm.running_mean
    assert "none_buf" not in td["norm"]
    assert "cache" not in td  # persistent=False: out, as in state_dict
    assert tbnn.from_module(model, non_persistent=True)["cache"] is model.cache
    assert list(td.state_dict()) == list(model.state_dict())
    assert TensorDict.from_module(nn.ReLU()).is_empty()


# ------------------------------------------------------------------- to_module


def test_to_module_swap_is_zero_copy_and_keeps_parameters() -> None:
    model, other = small_transformer(0), small_transformer(1)
    model.encoder.norm.weight.requires_grad_(False)
    weights = TensorDict.from_module(other).detach().clone()  # plain tensors
    before = run(model)
    old = weights.to_module(model)
    assert isinstance(old, SwappedWeights) and isinstance(old, TensorDict)
    w = model.encoder.layers[0].linear1.weight
    assert isinstance(w, nn.Parameter) and w.requires_grad
    assert w.data_ptr() == weights["encoder", "layers", "0", "linear1", "weight"].data_ptr()
    assert not model.encoder.norm.weight.requires_grad
    assert isinstance(model.encoder.norm.weight, nn.Parameter)
    torch.testing.assert_close(run(model), run(other), rtol=0, atol=0)
    old.to_module(model)  # restore: the very same Parameter objects come back
    assert (
        model.encoder.layers[0].linear1.weight is old["encoder", "layers", "0", "linear1", "weight"]
    )
    torch.testing.assert_close(run(model), before, rtol=0, atol=0)


def test_to_module_inplace_keeps_identity() -> None:
    model, other = small_transformer(0), small_transformer(1)
    w = model.decoder.layers[0].linear2.weight
    old = TensorDict.from_module(other).to_module(model, inplace=True)
    assert model.decoder.layers[0].linear2.weight is w
    torch.testing.assert_close(run(model), run(other), rtol=0, atol=0)
    assert old["decoder", "layers", "0", "linear2", "weight"] is not w  # a copy of the old values
    old.to_module(model, inplace=True)
    torch.testing.assert_close(run(model), run(small_transformer(0)), rtol=0, atol=0)


@pytest.mark.parametrize("inplace", [False, True])
def test_to_module_context_manager_restores_on_error(inplace: bool) -> None:
    model = nn.Linear(3, 2)
    w = model.weight
    zeros = TensorDict.from_module(model).apply(torch.zeros_like)
    with pytest.raises(ZeroDivisionError), zeros.to_module(model, inplace=inplace):
        assert bool((model(torch.ones(1, 3)) == 0).all())
        _ = 1 / 0
    assert model.weight is w and bool((w != 0).any())


def test_to_module_gradients_reach_a_source_that_requires_grad() -> None:
    model = nn.Linear(3, 1)
    base = TensorDict.from_module(model).detach().clone().requires_grad_()
    shifted = base.apply(lambda t: t * 2)  # non-leaf tensors, as in meta-learning
    with shifted.to_module(model):
        model(torch.ones(1, 3)).sum().backward()
    assert base["weight"].grad is not None and base["weight"].grad.abs().sum() > 0


def test_tied_parameters_stay_tied() -> None:
    model = Tied()
    td = TensorDict.from_module(model)
    assert td["emb", "weight"] is td["head", "weight"]
    new = perturbed(td)  # emb.weight and head.weight become two different tensors
    new.to_module(model)
    assert model.emb.weight is model.head.weight
    assert model.emb.weight.data_ptr() == new["emb", "weight"].data_ptr()
    tripled = new.apply(lambda t: t * 3)
    tripled.to_module(model, inplace=True)
    assert model.emb.weight is model.head.weight
    torch.testing.assert_close(model.emb.weight.data, tripled["emb", "weight"])
    assert len(list(model.parameters())) == len(list(Tied().parameters()))


def test_shared_submodule_reached_twice() -> None:
    lin = nn.Linear(2, 2)
    model = nn.Sequential(lin, nn.Tanh(), lin)
    td = TensorDict.from_module(model)
    assert td["0", "weight"] is td["2", "weight"]
    perturbed(td).to_module(model)
    assert model[0] is model[2] and model[0].weight is model[2].weight


def test_buffers_round_trip_and_train_writes_land_in_the_weights() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    model(torch.randn(8, 4))  # running stats move
    model2 = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()
    weights = TensorDict.from_module(model).detach().clone()
    weights.to_module(model2)
    assert model2[1].running_mean is weights["1", "running_mean"]  # buffers: as they are
    assert model2[1].num_batches_tracked.item() == 1
    model.eval()
    x = torch.randn(5, 4)
    torch.testing.assert_close(model2(x), model(x), rtol=0, atol=0)
    model2.train()(torch.randn(8, 4))
    assert weights["1", "num_batches_tracked"].item() == 2


def test_non_persistent_buffers_are_optional_but_accepted() -> None:
    model = Tied()
    TensorDict.from_module(Tied()).to_module(model)  # no "cache": not missing
    full = tbnn.from_module(Tied(), non_persistent=True).apply(lambda t: t.detach() + 0)
    full.to_module(model)
    assert model.cache is full["cache"]


def test_to_module_mismatch_lists_everything_and_changes_nothing() -> None:
    model = small_transformer()
    td = TensorDict.from_module(small_transformer(1)).detach().clone()
    del td["encoder", "norm", "bias"]
    td["decoder", "extra"] = torch.zeros(3)
    td["decoder", "norm", "weight"] = torch.zeros(16)
    w, b = model.encoder.norm.weight, model.encoder.norm.bias
    with pytest.raises(WeightsMismatchError) as info:
        td.to_module(model)
    msg = str(info.value)
    assert (
        "the weights do not fit Transformer: 1 missing, 1 unexpected, 1 with a different shape"
        in msg
    )
    assert "missing (in the target, not in the source): 'encoder.norm.bias'" in msg
    assert "unexpected (in the source, not in the target): 'decoder.extra'" in msg
    assert "shape mismatch at 'decoder.norm.weight': source float32[16], target float32[32]" in msg
    assert model.encoder.norm.weight is w  # checked before anything was swapped
    assert isinstance(info.value, RuntimeError)
    # strict=False: missing/unexpected pass, the shape mismatch still raises
    with pytest.raises(WeightsMismatchError, match=r"0 missing, 0 unexpected, 1 with"):
        tbnn.to_module(td, model, strict=False)
    del td["decoder", "norm", "weight"]
    tbnn.to_module(td, model, strict=False)
    assert model.encoder.norm.bias is b  # missing from the weights: left alone
    assert model.decoder.norm.bias.data_ptr() == td["decoder", "norm", "bias"].data_ptr()


def test_partial_to_module_on_a_submodule() -> None:
    model, other = small_transformer(0), small_transformer(1)
    TensorDict.from_module(other)["encoder"].to_module(model.encoder)
    assert torch.equal(model.encoder.norm.weight, other.encoder.norm.weight)
    assert model.decoder.norm.weight.data_ptr() != other.decoder.norm.weight.data_ptr()


def test_long_mismatch_lists_are_cut() -> None:
    with pytest.raises(WeightsMismatchError, match=r"'3\.bias', \.\.\. and 4 more"):
        TensorDict().to_module(nn.Sequential(*[nn.Linear(1, 1) for _ in range(6)]))


# ---------------------------------------------------------------- state dicts


def test_state_dict_round_trips_with_nn_module() -> None:
    model, other = small_transformer(0), small_transformer(1)
    td = TensorDict.from_module(model)
    sd = td.state_dict()
    assert not any(isinstance(v, nn.Parameter) for v in sd.values())
    assert isinstance(td.state_dict(keep_vars=True)["encoder.norm.weight"], nn.Parameter)
    # module -> TensorDict (copies into the model's own tensors, in place)
    td.load_state_dict(other.state_dict())
    torch.testing.assert_close(run(model), run(other), rtol=0, atol=0)
    # TensorDict -> module, strict
    fresh = small_transformer(2)
    fresh.load_state_dict(TensorDict.from_module(other).state_dict(), strict=True)
    torch.testing.assert_close(run(fresh), run(other), rtol=0, atol=0)
    # a TensorDict is accepted as the source too
    tbnn.load_state_dict(
        TensorDict.from_module(fresh), TensorDict.from_module(small_transformer(3))
    )
    torch.testing.assert_close(run(fresh), run(small_transformer(3)), rtol=0, atol=0)


def test_load_state_dict_errors_and_strict_false() -> None:
    td = TensorDict.from_module(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)))
    sd = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).state_dict()
    sd.pop("1.running_var")
    sd["1.extra"] = torch.zeros(1)
    sd["0.bias"] = torch.zeros(4)
    with pytest.raises(WeightsMismatchError) as info:
        td.load_state_dict(sd)
    msg = str(info.value)
    assert "missing (in the target, not in the source): '1.running_var'" in msg
    assert "unexpected (in the source, not in the target): '1.extra'" in msg
    assert "shape mismatch at '0.bias': source float32[4], target float32[3]" in msg
    sd["0.bias"] = torch.zeros(3)
    out = tbnn.load_state_dict(td, sd, strict=False)
    assert out.missing_keys == ["1.running_var"] and out.unexpected_keys == ["1.extra"]
    assert bool((td["0", "bias"] == 0).all())
    sd["0.bias"] = "not a tensor"
    with pytest.raises(WeightsMismatchError, match=r"source a str, not a tensor"):
        td.load_state_dict(sd, strict=False)


# ------------------------------------------------------------- chunked copies


class LargestAllocation(TorchDispatchMode):
    """Records the largest tensor storage any aten op creates (views and in-place
    results share an input's storage and are not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        seen = {
            t.untyped_storage().data_ptr()
            for t in pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def test_copy_chunked_bounds_temporaries() -> None:
    src = torch.randn(256, 1024, dtype=torch.float64)  # 2 MiB, converted to float32
    dst = torch.empty(256, 1024)
    with LargestAllocation() as naive:
        dst.copy_(src.to(torch.float32))
    assert naive.largest == dst.nbytes  # the measurement sees a whole-tensor temporary
    with LargestAllocation() as chunked:
        copy_chunked(dst, src, chunk_bytes=16 << 10)
    assert chunked.largest <= 16 << 10
    assert torch.equal(dst, src.float())
    # strided source, rows bigger than a chunk
    dst2 = torch.empty(1024, 256)
    copy_chunked(dst2, src.t(), chunk_bytes=100)
    assert torch.equal(dst2, src.t().float())
    with pytest.raises(WeightsMismatchError, match=r"source shape \(3,\) differs"):
        copy_chunked(torch.empty(2), torch.empty(3))


def test_load_state_dict_into_preallocated_copies_in_chunks(monkeypatch: Any) -> None:
    model = nn.Linear(512, 512)
    target = TensorDict.from_module(model).apply(torch.empty_like)
    sd = {k: v.double() for k, v in model.state_dict().items()}  # 2 MiB weight
    monkeypatch.setattr(_chunks, "CHUNK_BYTES", 64 << 10)
    with LargestAllocation() as alloc:
        target.load_state_dict(sd)
    assert alloc.largest <= 64 << 10
    torch.testing.assert_close(target["weight"], model.weight.detach(), rtol=0, atol=0)


# ------------------------------------------------------------------ as_module


def test_as_module_param_tree() -> None:
    model = Tied()
    tree = TensorDict.from_module(model, as_module=True)
    assert isinstance(tree, ParamTree) and isinstance(tree, nn.Module)
    assert [n for n, _ in tree.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert list(tree.state_dict()) == list(model.state_dict())
    assert tree["emb", "weight"] is model.emb.weight
    opt = torch.optim.SGD(tree.parameters(), lr=1.0)
    before = model.emb.weight.detach().clone()
    model(torch.tensor([1, 2])).sum().backward()
    opt.step()
    assert not torch.equal(model.emb.weight, before)  # the optimizer moved the model's weights
    other = Tied()
    tree.to_module(other)
    assert other.emb.weight is model.emb.weight is other.head.weight
    with pytest.raises(TypeError, match="holds weights only"):
        tree(torch.zeros(1))
    assert "cache" not in tree.td
    assert "cache" in tbnn.from_module(model, as_module=True, non_persistent=True).td


# ---------------------------------------------------------------- on disk


@needs_persist
def test_save_load_round_trip_transformer(tmp_path: Path) -> None:
    model, model2 = small_transformer(0), small_transformer(1)
    TensorDict.from_module(model).memmap(tmp_path / "w", num_threads=2)
    loaded = TensorDict.load_memmap(tmp_path / "w")
    loaded.to_module(model2)
    torch.testing.assert_close(run(model2), run(model), rtol=0, atol=0)
    assert isinstance(model2.encoder.norm.weight, nn.Parameter)
    # the module now reads the file's pages: no copy was made
    w = model2.encoder.layers[0].linear1.weight
    assert w.data_ptr() == loaded["encoder", "layers", "0", "linear1", "weight"].data_ptr()


@needs_persist
def test_save_load_tied_and_buffers(tmp_path: Path) -> None:
    model = Tied()
    model(torch.tensor([1, 2, 3]))
    TensorDict.from_module(model).memmap(tmp_path / "t")
    model2 = Tied()
    TensorDict.load_memmap(tmp_path / "t").to_module(model2)
    assert model2.emb.weight is model2.head.weight
    model.eval(), model2.eval()
    x = torch.tensor([4, 5])
    torch.testing.assert_close(model2(x), model(x), rtol=0, atol=0)
    assert model2.norm.num_batches_tracked.item() == 1


@needs_persist
def test_load_onto_device(tmp_path: Path) -> None:
    model = small_transformer(0)
    TensorDict.from_module(model).memmap(tmp_path / "w")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    loaded = TensorDict.load_memmap(tmp_path / "w", device=dev)
    model2 = small_transformer(1)
    loaded.to_module(model2)
    assert model2.encoder.norm.weight.device.type == dev
    torch.testing.assert_close(run(model2.cpu()), run(model), rtol=0, atol=0)


def mapped_files(root: Path) -> set[str]:
    """Files under ``root`` that this process has memory-mapped (from /proc/self/maps)."""
    found = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith(str(root)):
            found.add(os.path.relpath(parts[5], root))
    return found


@needs_persist
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps")
def test_partial_load_opens_only_the_subtree(tmp_path: Path) -> None:
    model = small_transformer(0)
    root = tmp_path / "w"
    TensorDict.from_module(model).memmap(root)  # the mapped copy it returns is dropped
    gc.collect()
    assert mapped_files(root) == set()
    enc = TensorDict.load_memmap(root / "encoder")
    assert enc.keys() == {"layers", "norm"}
    opened = mapped_files(root)
    n_enc = len(list((root / "encoder").rglob("*.memmap")))
    assert len(opened) == n_enc and all(p.startswith("encoder/") for p in opened)
    # and the rest of the tree is not needed at all: delete every other leaf file
    for f in (root / "decoder").rglob("*.memmap"):
        f.unlink()
    del enc
    gc.collect()
    model2 = small_transformer(1)
    TensorDict.load_memmap(root / "encoder").to_module(model2.encoder)
    for (k, a), b in zip(model.encoder.state_dict().items(), model2.encoder.state_dict().values()):
        assert torch.equal(a, b), k


@needs_persist
def test_convert_checkpoint_into_preallocated_tree_in_chunks(
    tmp_path: Path, monkeypatch: Any
) -> None:
    model = nn.Sequential(nn.Linear(256, 256), nn.BatchNorm1d(256))
    torch.save(model.state_dict(), tmp_path / "ckpt.pt")
    tree = TensorDict.from_module(model).memmap_like(tmp_path / "tree")
    sd = torch.load(tmp_path / "ckpt.pt", mmap=True)
    sd["0.weight"] = sd["0.weight"].double()  # a conversion makes naive copies materialize
    monkeypatch.setattr(_chunks, "CHUNK_BYTES", 32 << 10)  # the weight is 256 KiB
    with LargestAllocation() as alloc:
        tree.load_state_dict(sd)
    assert alloc.largest <= 32 << 10
    del tree
    back = TensorDict.load_memmap(tmp_path / "tree")
    model2 = nn.Sequential(nn.Linear(256, 256), nn.BatchNorm1d(256))
    back.to_module(model2)
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), k


@needs_persist
def test_inplace_load_leaves_the_files_alone(tmp_path: Path) -> None:
    model = nn.Linear(4, 4)
    TensorDict.from_module(model).memmap(tmp_path / "w")
    model2 = nn.Linear(4, 4)
    TensorDict.load_memmap(tmp_path / "w").to_module(model2, inplace=True)
    with torch.no_grad():
        model2.weight.add_(1)  # training the copy ...
    on_disk = TensorDict.load_memmap(tmp_path / "w")["weight"]
    assert torch.equal(on_disk, model.weight.detach())  # ... does not touch the checkpoint


def test_state_dict_forms_of_tensordict() -> None:
    """tensordict's forms: an OrderedDict with _metadata, nested with flatten=False, a
    prefix, and load_state_dict taking flat, nested and legacy dicts alike."""
    from collections import OrderedDict

    td = TensorDict({"a": torch.tensor(1), "b": {"c": torch.tensor([2, 3])}}, [])
    sd = td.state_dict()
    assert isinstance(sd, OrderedDict) and list(sd) == ["a", "b.c"]
    assert sd._metadata["b"] == {"batch_size": torch.Size([]), "device": None}  # type: ignore[attr-defined]
    nested = td.state_dict(flatten=False)
    assert list(nested) == ["a", "b"] and torch.equal(nested["b"]["c"], td["b", "c"])
    assert list(td.state_dict(prefix="model.")) == ["model.a", "model.b.c"]
    legacy = {"a": torch.tensor(1), "b": {"c": torch.tensor([2, 3]), "__batch_size": []}}
    for form in (sd, nested, legacy):
        zero = td.clone().zero_()
        zero.load_state_dict(form)
        assert (zero == td).all()
    with pytest.raises(WeightsMismatchError, match=r"1 unexpected"):
        td.clone().load_state_dict({**nested, "z": {"y": torch.zeros(1)}})
