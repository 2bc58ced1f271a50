"""tensordict behaviours added for drop-in use (tensordict's test_methods/test_errors):
the get-defaults switch, tensor-only leaves, nested-tuple key lookups, backward's checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import (
    LazyStackedTensorDict,
    TensorClass,
    TensorDict,
    get_defaults_to_none,
    lazy_stack,
    set_get_defaults_to_none,
)


@pytest.fixture
def get_raises() -> Iterator[None]:
    before = get_defaults_to_none()
    set_get_defaults_to_none(False)
    try:
        yield
    finally:
        set_get_defaults_to_none(before)


def test_get_defaults_to_none_by_default() -> None:
    td = TensorDict({"a": 0, "b": {"c": 1}})
    assert get_defaults_to_none() is True
    assert td.get("c") is None and td.get(("b", "d")) is None


@pytest.mark.usefixtures("get_raises")
def test_get_raises_when_switched_off() -> None:
    td = TensorDict({"a": 0, "b": {"c": 1}})
    assert get_defaults_to_none() is False
    with pytest.raises(KeyError, match="key 'c' not found"):
        td.get("c")
    with pytest.raises(KeyError, match=r"no 'd' under 'b'"):
        td.get(("b", "d"))
    assert td.get("c", None) is None and td.get(("b", "d"), default=0) == 0  # a default wins
    assert td.get("a").item() == 0
    stack = lazy_stack([td, td])
    assert isinstance(stack, LazyStackedTensorDict)
    with pytest.raises(KeyError, match="key 'c' not found in the lazy stack"):
        stack.get("c")
    assert stack.get("c", None) is None


def test_set_get_defaults_to_none_takes_truthiness() -> None:
    before = get_defaults_to_none()
    try:
        set_get_defaults_to_none(None)  # as tensordict: None means False
        assert get_defaults_to_none() is False
        set_get_defaults_to_none()
        assert get_defaults_to_none() is True
    finally:
        set_get_defaults_to_none(before)


class Pair(TensorClass):
    x: torch.Tensor
    name: str


@pytest.mark.usefixtures("get_raises")
def test_get_switch_on_tensorclasses() -> None:
    p = Pair(x=torch.zeros(2), name="a", batch_size=[2])
    with pytest.raises(KeyError, match="key 'y' not found"):
        p.get("y")
    assert p.get("y", None) is None


@given(st.booleans(), st.sampled_from(["a", ("b", "c"), "zz", ("b", "zz")]))
def test_get_switch_never_changes_present_keys_or_indexing(flag: bool, key: object) -> None:
    td = TensorDict({"a": torch.arange(3), "b": {"c": torch.ones(3)}}, batch_size=[3])
    before = get_defaults_to_none()
    set_get_defaults_to_none(flag)
    try:
        present = key in td
        if present:
            assert td.get(key) is td[key]
        else:
            with pytest.raises(KeyError, match="not found"):
                td[key]
            if flag:
                assert td.get(key) is None
            else:
                with pytest.raises(KeyError, match="not found"):
                    td.get(key)
    finally:
        set_get_defaults_to_none(before)
