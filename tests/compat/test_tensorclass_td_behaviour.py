"""Tensorclass behaviour matched to tensordict 0.15.3: a field the class lacks, joining
different classes, and state dicts carrying the plain fields (tensordict as the oracle)."""

from __future__ import annotations

import collections

import pytest
import torch

from tensorbox import TensorDict, tensorclass
from tensorbox.errors import UnknownFieldError, WeightsMismatchError

td_real = pytest.importorskip("tensordict")


@tensorclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


@tensorclass
class Other:
    x: torch.Tensor
    z: torch.Tensor


@tensorclass
class Node:
    x: torch.Tensor
    z: str
    y: Node | None = None


def _pair() -> Pair:
    return Pair(x=torch.zeros(3, 2), y=torch.zeros(3, 2), batch_size=[3])


def test_setting_a_field_the_class_lacks() -> None:
    p = _pair()
    with pytest.raises(AttributeError, match="Pair has no field 'w'"):
        p.set("w", torch.zeros(3))
    with pytest.raises(KeyError, match="Pair has no field 'w'"):
        p.set("w", torch.zeros(3))
    other = Other(x=torch.ones(3, 2), z=torch.ones(3, 2), batch_size=[3])
    with pytest.raises(ValueError, match="Pair has no field 'z'"):
        p[:2] = other[:2]
    with pytest.raises(UnknownFieldError, match="Other has no field 'y'"):
        other[2:] = p[2:]


@pytest.mark.parametrize("join", [torch.stack, torch.cat])
def test_joining_two_classes_is_a_type_error(join: object) -> None:
    other = Other(x=torch.ones(3, 2), z=torch.ones(3, 2), batch_size=[3])
    with pytest.raises(TypeError, match="element 1 is a Other and element 0 a Pair"):
        join([_pair(), other], 0)  # type: ignore[operator]
    with pytest.raises(TypeError, match="element 1 is a TensorDict and element 0 a Pair"):
        join([_pair(), _pair().to_tensordict()], 0)  # type: ignore[operator]
    assert type(join([_pair(), _pair()], 0)) is Pair  # type: ignore[operator]


def _node(cls: object) -> object:
    inner = cls(x=torch.randn(3), z="zz", batch_size=[])  # type: ignore[operator]
    return cls(x=torch.randn(3), z="zz", y=inner, batch_size=[])  # type: ignore[operator]


def test_state_dict_metadata_as_tensordict() -> None:
    @td_real.tensorclass
    class Node:  # the same class under tensordict
        x: torch.Tensor
        z: str
        y: Node | None = None

    ours = _node(globals()["Node"]).state_dict()  # type: ignore[attr-defined]
    theirs = _node(Node).state_dict()  # type: ignore[attr-defined]
    assert list(ours) == list(theirs)
    for prefix in ("", "y"):
        mine, ref = ours._metadata[prefix], theirs._metadata[prefix]
        assert mine["_non_tensor"] == ref["_non_tensor"]
        assert mine["_type"] == ref["_type"].rpartition(".")[2] == "Node"  # theirs is local


def test_state_dict_roundtrip_carries_plain_fields() -> None:
    tc = _node(Node)
    sd = tc.state_dict()  # type: ignore[attr-defined]
    sd._metadata[""]["_non_tensor"]["z"] = "new"
    back = tc.clone()  # type: ignore[attr-defined]
    back.x = torch.zeros(3)
    back.load_state_dict(sd)
    torch.testing.assert_close(back.x, tc.x)  # type: ignore[attr-defined]
    assert back.z == "new" and back.y.z == "zz"


def test_state_dict_unexpected_names_are_key_errors() -> None:
    tc = _node(Node)
    sd = tc.state_dict()  # type: ignore[attr-defined]
    sd["a"] = None
    with pytest.raises(KeyError, match="1 unexpected"):
        tc.load_state_dict(sd)  # type: ignore[attr-defined]
    del sd["a"]
    sd._metadata[""]["_non_tensor"]["a"] = None
    with pytest.raises(WeightsMismatchError, match="'a', which is no field of Node"):
        tc.load_state_dict(sd)  # type: ignore[attr-defined]
    assert tc.z == "zz"  # type: ignore[attr-defined]  # nothing written


def test_legacy_tensorclass_state_dict_loads() -> None:
    tc = Pair(x=torch.randn(3), y=torch.randn(3), batch_size=[])
    legacy = collections.OrderedDict(
        _tensordict=collections.OrderedDict(
            x=torch.tensor([1.0, 2.0, 3.0]),
            y=torch.tensor([4.0, 5.0, 6.0]),
            __batch_size=torch.Size([]),
            __device=None,
        ),
        _non_tensordict={},
    )
    tc.load_state_dict(legacy)
    assert tc.x.tolist() == [1.0, 2.0, 3.0] and tc.y.tolist() == [4.0, 5.0, 6.0]


def test_plain_tensordict_state_dict_unchanged() -> None:
    td = TensorDict({"a": torch.zeros(2), "b": {"c": torch.zeros(2)}}, batch_size=[2])
    assert "_type" not in td.state_dict()._metadata[""]  # type: ignore[attr-defined]
