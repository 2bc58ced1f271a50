"""``TensorDict.from_pytree`` / ``to_pytree``: torch's pytree as the oracle of structure."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
import torch.utils._pytree as pt
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict

Pair = namedtuple("Pair", ["left", "right"])

leaf = st.integers(0, 4).map(lambda n: torch.arange(float(n)))
trees = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3),
        st.lists(inner, min_size=1, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, min_size=1, max_size=3),
        st.tuples(inner, inner).map(lambda p: Pair(*p)),
    ),
    max_leaves=8,
)


@given(trees)
@settings(max_examples=40, deadline=None)
def test_roundtrip_keeps_structure_and_leaves(tree: object) -> None:
    back = TensorDict.from_pytree(tree).to_pytree()
    assert pt.tree_structure(back) == pt.tree_structure(tree)
    for a, b in zip(pt.tree_leaves(back), pt.tree_leaves(tree), strict=True):
        assert torch.equal(a, b)


def test_keys_follow_paths_and_odd_dict_keys_survive() -> None:
    class Odd:
        pass

    odd = Odd()
    tree = ([torch.zeros(3), torch.ones(2)], {"t": torch.ones(2), odd: torch.arange(2)})
    td = TensorDict.from_pytree(tree)
    assert td["0", "1"].tolist() == [1.0, 1.0] and td["1", "t"].tolist() == [1.0, 1.0]
    back = td.to_pytree()
    assert odd in back[1] and back[1][odd].tolist() == [0, 1]


def test_a_single_leaf_and_a_plain_container() -> None:
    td = TensorDict.from_pytree(torch.ones(2), batch_size=[2])
    assert td.batch_size == (2,) and torch.equal(td.to_pytree(), torch.ones(2))
    plain = TensorDict(a=torch.zeros(1), b={"c": torch.ones(1)})
    assert plain.to_pytree()["b"]["c"].tolist() == [1.0]


def test_a_saved_tree_refuses_the_spec(tmp_path: object) -> None:
    td = TensorDict.from_pytree([torch.zeros(1)])
    with pytest.raises(TypeError, match="_pytree_spec"):
        td.memmap(f"{tmp_path}/t")
