"""set_printoptions / get_printoptions: the options of the container repr."""

from __future__ import annotations

import pytest
import torch

from tensorbox import TensorClass, TensorDict, get_printoptions, set_printoptions


class Pair(TensorClass):
    x: torch.Tensor
    name: str


def test_defaults_keep_the_compact_repr() -> None:
    td = TensorDict({"a": torch.zeros(2, 3)}, batch_size=[2])
    assert repr(td) == "TensorDict(batch_size=[2], device=None, fields={a: float32[3]})"
    assert get_printoptions()["compact"] is True


def test_get_printoptions_is_a_copy_and_blocks_restore() -> None:
    before = get_printoptions()
    before["show_device"] = False
    assert get_printoptions()["show_device"] is True
    with set_printoptions(show_device=False, sort_keys="alphabetical"):
        assert get_printoptions()["show_device"] is False
    assert get_printoptions() == {**before, "show_device": True}


def test_set_applies_until_exit() -> None:
    ctx = set_printoptions(show_batch_size=False)
    ctx.set()
    try:
        assert repr(TensorDict()) == "TensorDict(device=None, fields={})"
    finally:
        ctx.__exit__(None, None, None)
    assert repr(TensorDict()) == "TensorDict(batch_size=[], device=None, fields={})"


def test_decorator_and_compact_options() -> None:
    @set_printoptions(show_device=False, show_dtype=False, sort_keys=lambda k: k[::-1])
    def show() -> str:
        return repr(TensorDict({"xb": torch.zeros(2), "ya": torch.zeros(2, 4)}, batch_size=[2]))

    assert show() == "TensorDict(batch_size=[2], fields={ya: [4], xb: []})"
    assert "device=None" in repr(TensorDict())


def test_detailed_form_of_a_tree_and_a_tensorclass() -> None:
    td = TensorDict({"b": {"c": torch.ones(2, dtype=torch.int64)}, "a": torch.ones(2)}, [2])
    with set_printoptions(plain=True, show_grad=True, sort_keys="alphabetical"):
        r = repr(td)
    assert r.splitlines()[2] == (
        "        a: Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.float32, "
        "is_shared=False, requires_grad=False, mean=1, std=0),"
    )
    assert "min=1, max=1" in r and r.endswith("    is_shared=False)")
    p = Pair(x=torch.zeros(3), name="n", batch_size=[3])
    with set_printoptions(compact=False, verbose=False):
        assert repr(p) == (
            "Pair(\n    x=Tensor(shape=torch.Size([3])),\n"
            "    name=NonTensorData(data=n, batch_size=torch.Size([3]), device=None),\n"
            "    batch_size=torch.Size([3]))"
        )


def test_view_contiguity_and_storage_flags() -> None:
    base = torch.zeros(4, 2)
    td = TensorDict({"v": base[::2]}, batch_size=[2])
    with set_printoptions(show_is_view=True, show_is_contiguous=True, show_storage_size=True):
        r = repr(td)
    assert "is_view=True, storage_size=32" in r and "is_contiguous=False" in r


def test_bad_options_are_refused() -> None:
    with pytest.raises(TypeError, match=r"Unknown printoptions \['colour'\]; the options are"):
        set_printoptions(colour=True)
    with pytest.raises(ValueError, match="sort_keys='random'; expected 'insertion'"):
        set_printoptions(sort_keys="random")
