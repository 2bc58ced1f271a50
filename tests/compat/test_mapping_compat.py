"""A TensorDict is not a Mapping (tensordict's is; deliberate), and tensordict's small helpers
``param_count``, ``bytes`` and ``tensorbox.utils.convert_ellipsis_to_idx``."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tensorbox import TensorDict
from tensorbox.utils import convert_ellipsis_to_idx
from tests.strategies import batch_sizes, indices, tensordicts


def test_a_tensordict_is_not_a_mapping_so_batched_dataloaders_pass_it_through():
    """tensordict's TensorDict is a MutableMapping, and torch's default_convert then walks
    it as a dict by iterating its rows; tensorbox's passes through untouched."""
    td = TensorDict(a=torch.arange(6).reshape(3, 2), batch_size=[3])
    assert not isinstance(td, Mapping)

    class Batches(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int) -> TensorDict:
            return td + i

    got = list(torch.utils.data.DataLoader(Batches(), batch_size=None))
    assert [type(b) for b in got] == [TensorDict, TensorDict]
    assert torch.equal(got[1]["a"], td["a"] + 1)


def test_module_load_state_dict_takes_the_state_dict_form():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    weights = TensorDict.from_module(net).apply(torch.ones_like)
    result = net.load_state_dict(weights.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    assert all(bool((p == 1).all()) for p in net.parameters())
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        net.load_state_dict(weights.flatten_keys("."))  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), td=tensordicts())
def test_row_writes_and_comparisons_from_a_tensordict_value(data, td):
    """A TensorDict value is read through its entries, not as a plain mapping."""
    other = td.clone().apply(lambda t: t ^ True if t.dtype == torch.bool else t + 1)
    assert bool((td == td.clone()).all())
    index = data.draw(indices(td.batch_size, allow_none=False))
    expected = {k: v.clone() for k, v in td.items(True, True)}
    target = td.clone()
    target[index] = other[index]
    for k, v in expected.items():
        v[index] = other[k][index]
        assert torch.equal(target[k], v)


def test_param_count_and_bytes_count_each_tensor_once_unless_asked():
    td = TensorDict(a=torch.randn(3), b=torch.randn(6), n={"c": torch.zeros(2, dtype=torch.int64)})
    td["d"] = td["a"]
    assert td.param_count() == 3 + 6 + 2 + 3
    assert td.param_count(count_duplicates=False) == 3 + 6 + 2
    assert td.bytes() == 4 * 3 + 4 * 6 + 8 * 2
    assert td.bytes(count_duplicates=True) == td.bytes() + 4 * 3
    assert TensorDict().param_count() == 0


def test_param_count_of_a_module():
    net = nn.Linear(5, 3)
    weights = TensorDict.from_module(net)
    assert weights.param_count() == sum(p.numel() for p in net.parameters())


@settings(max_examples=200, deadline=None)
@given(data=st.data(), bs=batch_sizes(min_dims=1, max_dims=4))
def test_convert_ellipsis_to_idx_indexes_as_torch(data, bs):
    index = data.draw(indices(bs))
    x = torch.arange(max(1, torch.Size(bs).numel())).reshape(-1)[: torch.Size(bs).numel()]
    x = x.reshape(bs)
    out = convert_ellipsis_to_idx(index, bs)
    assert Ellipsis not in (out if isinstance(out, tuple) else (out,))
    assert torch.equal(x[out], x[index])


@pytest.mark.parametrize(
    "index, expected",
    [
        (..., (slice(None),) * 5),
        ((0, ..., 0), (0, slice(None), slice(None), slice(None), 0)),
        ((None, ..., 1), (None, slice(None), slice(None), slice(None), slice(None), 1)),
        ((0, 1), (0, 1)),
        (2, 2),
    ],
)
def test_convert_ellipsis_to_idx_cases(index, expected):
    assert convert_ellipsis_to_idx(index, [3, 4, 5, 6, 7]) == expected


def test_convert_ellipsis_to_idx_errors():
    with pytest.raises(RuntimeError, match="has 2 ellipses; an index takes one at most"):
        convert_ellipsis_to_idx((..., 0, ...), [3, 4])
    with pytest.raises(IndexError, match=r"uses 3 dims, but the batch size \[3, 4\] has 2"):
        convert_ellipsis_to_idx((0, ..., 1, 2), [3, 4])
