"""NonTensorData's tensordict arguments: batch_size= and device=."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import NonTensorData, TensorDict


@given(st.lists(st.integers(0, 3), max_size=3), st.one_of(st.integers(), st.text(max_size=3)))
def test_declared_batch_size_is_reported_and_listed(batch: list[int], value: object) -> None:
    d = NonTensorData(value, batch_size=batch)
    assert d.batch_size == torch.Size(batch) and d.data == value and d.value == value
    expected = np.full(batch, None, dtype=object)
    expected.fill(value)
    assert d.tolist() == (expected.tolist() if batch else value)  # numpy as the oracle


def test_forms_of_batch_size_and_device() -> None:
    assert NonTensorData(1, batch_size=3).batch_size == (3,)
    assert NonTensorData(1, batch_size=torch.Size([2, 1])).batch_size == (2, 1)
    assert NonTensorData(1, batch_size=(np.int64(2),)).batch_size == (2,)
    assert NonTensorData(1).batch_size == () and NonTensorData(1).device is None
    assert NonTensorData(data=1, device="cpu").device == torch.device("cpu")
    stack = NonTensorData(np.array(["a", "b"], dtype=object), stacked=True)
    assert stack.batch_size == (2,) and stack.tolist() == ["a", "b"]
    assert repr(NonTensorData("a", batch_size=[2])) == "NonTensorData('a', batch_size=[2])"
    assert repr(NonTensorData("a")) == "NonTensorData('a')"
    # Equality is about the values, as before.
    assert NonTensorData(1, batch_size=[3]) == NonTensorData(1)


def test_bad_batch_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"NonTensorData: batch_size \(2, -1\) has a negative dim"):
        NonTensorData(0, batch_size=[2, -1])
    with pytest.raises(TypeError, match=r"NonTensorData: batch_size \[1\.5\] is not a sequence"):
        NonTensorData(0, batch_size=[1.5])
    with pytest.raises(
        ValueError, match=r"batch_size \(3,\) does not match the stacked values' shape \(2,\)"
    ):
        NonTensorData(np.array([1, 2], dtype=object), batch_size=[3], stacked=True)
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        NonTensorData(0, device="nowhere")


def test_a_container_uses_its_own_batch_size() -> None:
    td = TensorDict({"v": NonTensorData(0, batch_size=[4]), "x": torch.zeros(4)}, [4])
    assert td["v"] == 0 and td[1:3]["v"] == 0
    # As in tensordict, a declared batch that differs is replaced by the container's.
    other = TensorDict({"v": NonTensorData("s", batch_size=[7])}, [2])
    assert other["v"] == "s" and other[0]["v"] == "s"
    assert other.reshape(1, 2)["v"] == "s"
    both = torch.stack([td, TensorDict({"v": NonTensorData(1, batch_size=[4]), "x": td["x"]}, [4])])
    assert both["v"] == [[0] * 4, [1] * 4]


def test_pickles_with_its_batch_size() -> None:
    d = pickle.loads(pickle.dumps(NonTensorData("a", batch_size=[2], device="cpu")))
    assert d.batch_size == (2,) and d.device == torch.device("cpu") and d.tolist() == ["a", "a"]
