"""Training checkpoints as trees: exact state-dict mapping, random states, and a
resumed run that is bit-identical to an uninterrupted one."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tensorbox import TensorDict
from tensorbox.checkpoint import (
    LAYOUT_KEY,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    state_from_tree,
    state_to_tree,
)
from tensorbox.data import BatchLoader


def same(a, b) -> bool:
    """Equal values of identical types all the way down (nan equals nan, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(
            type(k) is type(j) and same(a[k], b[j]) for k, j in zip(a, b)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    return a == b


def _trained(opt_cls, **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = opt_cls(model.parameters(), **kw)
    x = torch.randn(8, 3)
    for _ in range(3):

        def closure():
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            return loss

        opt.step(closure)
    return opt


@pytest.mark.parametrize(
    "opt_cls, kw",
    [
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
        (torch.optim.Adam, {"lr": 1e-3, "amsgrad": True}),
        (torch.optim.AdamW, {"lr": 1e-3, "betas": (0.8, 0.9)}),
        (torch.optim.LBFGS, {"lr": 0.5, "history_size": 3}),  # lists of tensors, ints
    ],
)
def test_optimizer_state_round_trips_exactly_in_memory_and_on_disk(opt_cls, kw, tmp_path):
    state = _trained(opt_cls, **kw).state_dict()
    tree = state_to_tree(state)
    assert same(state_from_tree(tree), state)
    tree.memmap(tmp_path / "opt")
    assert same(state_from_tree(TensorDict.load_memmap(tmp_path / "opt")), state)


def test_tensors_sit_at_their_string_key_paths():
    state = _trained(torch.optim.Adam, lr=1e-3).state_dict()
    tree = state_to_tree(state)
    assert torch.equal(tree["state", "1", "exp_avg"], state["state"][1]["exp_avg"])
    assert isinstance(tree[LAYOUT_KEY], str)


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.integers(0, 5).map(lambda n: torch.arange(n, dtype=torch.float64) / 3),
)
_key = st.one_of(st.integers(0, 50), st.text("abcxyz_", min_size=1, max_size=4))


def _unique_keys(d: dict) -> bool:
    return len({str(k) for k in d}) == len(d)


_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_key, inner, max_size=3).filter(_unique_keys),
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_key, _values, max_size=4).filter(_unique_keys))
def test_any_nested_python_state_round_trips_exactly(state):
    assert same(state_from_tree(state_to_tree(state)), state)


def test_state_tree_refusals():
    with pytest.raises(ValueError, match=r"keys 0 and '0' at the root would both be written"):
        state_to_tree({0: 1, "0": 2})
    with pytest.raises(TypeError, match=r"state value \{1\} at a/0 is a set"):
        state_to_tree({"a": [{1}]})
    with pytest.raises(TypeError, match=r"state key True at the root is a bool"):
        state_to_tree({True: 1})
    with pytest.raises(ValueError, match=r"has a key '_layout', which the tree reserves"):
        state_to_tree({LAYOUT_KEY: 1})
    with pytest.raises(ValueError, match=r"the tree has no '_layout' string"):
        state_from_tree(TensorDict(a=torch.zeros(1)))


def test_rng_state_restores_every_generator():
    random.gauss(0, 1)  # Python's cached gaussian is part of its state
    saved = rng_state()

    def draws():
        return (
            torch.rand(3).tolist(),
            np.random.rand(3).tolist(),
            random.random(),
            random.gauss(0, 1),
        )

    first = draws()
    set_rng_state(saved)
    assert draws() == first


# ------------------------------------------------------------------ bit-identical resume


def _images(n: int = 40) -> TensorDict:
    g = torch.Generator().manual_seed(1)
    return TensorDict(
        {
            "images": torch.randint(0, 256, (n, 3, 10, 10), dtype=torch.uint8, generator=g),
            "targets": torch.randint(0, 3, (n,), generator=g),
        },
        batch_size=[n],
    )


def _setup(seed: int):
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Dropout(0.3), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=12)
    loader = BatchLoader(_images(), 8, crop=8, flip=True, normalize="imagenet", num_threads=1)
    return model, (opt, sched), loader


def _train(model, opts, loader, step: int, until: int, save_at=None, path=None) -> list[float]:
    opt, sched = opts
    losses = []
    while step < until:
        for batch in loader:
            loss = nn.functional.cross_entropy(model(batch["images"]), batch["targets"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            step += 1
            if step == save_at:
                save_checkpoint(
                    path, model=model, optimizer=opt, scheduler=sched, loader=loader,
                    extra={"step": step},
                )  # fmt: skip
            if step == until:
                break
    loader.close()
    return losses


def test_resumed_training_is_bit_identical(tmp_path):
    path = tmp_path / "ckpt"
    model, opt, loader = _setup(0)  # 5 batches per epoch: step 7 is mid-epoch 1
    whole = _train(model, opt, loader, 0, 12, save_at=7, path=path)
    torch.manual_seed(123)  # the resumed run starts from other weights and streams
    model2, opt2, loader2 = _setup(5)
    extra = load_checkpoint(
        path, model=model2, optimizer=opt2[0], scheduler=opt2[1], loader=loader2
    )
    assert extra == {"step": 7} and loader2.state_dict()["batch"] == 2
    rest = _train(model2, opt2, loader2, extra["step"], 12)
    assert rest == whole[7:]
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    assert same(opt[0].state_dict(), opt2[0].state_dict())
    assert same(opt[1].state_dict(), opt2[1].state_dict())


def test_load_checkpoint_refusals(tmp_path):
    TensorDict(rng=torch.stack([rng_state(), rng_state()])).memmap(tmp_path / "two")
    with pytest.raises(
        ValueError, match=r"holds the random states of 2 rank\(s\), but this run has 1"
    ):
        load_checkpoint(tmp_path / "two")
    with pytest.raises(KeyError, match=r"has no 'optimizer'"):
        load_checkpoint(
            tmp_path / "two", optimizer=torch.optim.SGD([nn.Parameter(torch.ones(1))], 0.1)
        )
    assert load_checkpoint(tmp_path / "two", rng=False) == {}


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        ("{{{", r"is not JSON"),
        ("[]", r"layout version None is not 1"),
        ('{"version": 1, "root": 5}', r"does not describe a state .*TypeError"),
        ('{"version": 1, "root": {"dict": [["str", "a"]]}}', r"does not describe .*ValueError"),
        ('{"version": 1, "root": {"dict": [["int", "zz", {"value": 1}]]}}', r"ValueError"),
        ('{"version": 1, "root": {"dict": [["str", "no", {"tensor": 1}]]}}', r"at 'no', where"),
        ('{"version": 1, "root": {"dict": [["str", "a", {"float": "abc"}]]}}', r"ValueError"),
        ('{"version": 1, "root": {"dict": [["str", "a", {}]]}}', r"KeyError: 'value'"),
        ('{"version": 1, "root": {"list": []}}', r"describes a list, not a dict"),
    ],
)
def test_a_damaged_layout_is_refused_naming_the_checkpoint(tmp_path, layout, why):
    save_checkpoint(tmp_path / "ck", extra={"step": 3, "w": torch.ones(2)}, fsync=False)
    tree = TensorDict.load_memmap(tmp_path / "ck")
    with tree["extra"].unlock_():
        tree["extra"][LAYOUT_KEY] = layout  # an edited or damaged checkpoint, committed
    with pytest.raises(ValueError, match=rf"checkpoint '.*ck', 'extra': .*{why}"):
        load_checkpoint(tmp_path / "ck", rng=False)
