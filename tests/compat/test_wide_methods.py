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
    NonTensorData,
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


# ---------------------------------------------------------------- leaves are tensors


class Inner(TensorClass):
    X: torch.Tensor
    z: str


def _mixed() -> TensorDict:
    return TensorDict(
        {
            "a": torch.zeros(2, 3),
            "n": {"tag": "x", "b": torch.ones(2)},
            "s": "text",
            "tc": Inner(X=torch.ones(2), z="z", batch_size=[2]),
        },
        batch_size=[2],
    )


def test_leaves_only_lists_tensor_leaves() -> None:
    td = _mixed()
    assert td.keys(True, True) == ["a", ("n", "b"), ("tc", "X")]
    assert td.keys(False, True) == ["a"]
    assert [type(v) for v in td.values(True, True)] == [torch.Tensor] * 3
    assert dict(td.items(True, True)).keys() == {"a", ("n", "b"), ("tc", "X")}
    # without leaves_only every entry is listed, the non-tensor ones as NonTensorData
    assert set(td.keys(True)) == {"a", "n", ("n", "tag"), ("n", "b"), "s", "tc"} | {
        ("tc", "X"),
        ("tc", "z"),
    }
    assert dict(td.items(True))["n", "tag"].data == "x"
    assert td["tc"].keys(True, True) == ["X"]


def test_is_leaf_decides_for_non_tensor_values() -> None:
    td = _mixed()
    tensors = td.keys(True, True, is_leaf=lambda cls: issubclass(cls, torch.Tensor))
    assert tensors == ["a", ("n", "b"), ("tc", "X")]
    everything = td.keys(True, True, is_leaf=lambda cls: not issubclass(cls, TensorDict))
    assert ("n", "tag") in everything and "s" in everything and "tc" in everything
    wrapped = td.values(True, True, is_leaf=lambda cls: True)
    assert [v.data for v in wrapped if isinstance(v, NonTensorData)] == ["text"]


def test_casts_and_views_reach_every_tensor_leaf_of_a_mixed_tree() -> None:
    td = _mixed()
    assert all(v.dtype is torch.float64 for v in td.double().values(True, True))
    assert td.double()["s"] == "text" and td.double()["tc"].z == "z"
    applied = td.apply(lambda x: x + 1)
    assert all((applied[k] == td[k] + 1).all() for k in td.keys(True, True))
    assert applied["n", "tag"] == "x"


def test_non_tensor_values_still_take_part_where_entries_do() -> None:
    td = _mixed()
    assert td.depth == 1 and TensorDict({"n": {"m": {"s": "deep"}}}).depth == 2
    assert set(td.filter_non_tensor_data().keys(True)) == {"a", "n", ("n", "b"), "tc"} | {
        ("tc", "X")
    }
    from tensorbox import merge_tensordicts

    merged = merge_tensordicts(td, TensorDict({"s": "other"}, batch_size=[2]))
    assert merged["s"] == "text" and merged["n", "tag"] == "x"
    assert td._fast_apply(lambda x: None, filter_empty=True) is not None  # "s" is kept


@given(
    st.dictionaries(
        st.sampled_from(["p", "q", "r"]),
        st.one_of(st.just("str"), st.integers(0, 3), st.just("nested")),
        max_size=3,
    )
)
def test_leaves_only_is_keys_minus_containers_and_values(spec: dict[str, object]) -> None:
    src: dict[str, object] = {}
    for k, kind in spec.items():
        if kind == "str":
            src[k] = f"v{k}"
        elif kind == "nested":
            src[k] = {"t": torch.zeros(2), "w": "w"}
        else:
            src[k] = torch.full((2, int(kind)), 1.0)  # type: ignore[call-overload]
    td = TensorDict(src, batch_size=[2])
    expected = [
        k
        for k in td.keys(True)
        if isinstance(td.get(k), torch.Tensor)  # the oracle: what torch calls a tensor
    ]
    assert td.keys(True, True) == expected


# ---------------------------------------------------------------- backward


def test_backward_refuses_a_gradient_that_is_not_a_container() -> None:
    x = torch.randn(3, requires_grad=True)
    out = TensorDict(a=x * 2)
    with pytest.raises(TypeError, match=r"gradient must be a TensorDict or tensorclass .* Tensor"):
        out.backward(torch.ones(3))
    out.backward(TensorDict(a=torch.ones(3)))
    assert x.grad is not None and x.grad.tolist() == [2.0] * 3


# ---------------------------------------------------------------- robust_key=


@pytest.mark.parametrize("archive", [False, True])
def test_robust_key_is_accepted_and_keys_with_separators_round_trip(tmp_path, archive) -> None:
    td = TensorDict(
        {"empty": torch.empty(0, dtype=torch.int64), "n": {"robust/key": torch.ones(2, 0)}},
        batch_size=[],
    )
    prefix = tmp_path / ("data.tdz" if archive else "data")
    td.memmap(prefix, robust_key=True)
    back = TensorDict.load_memmap(prefix, robust_key=False)
    assert back["n", "robust/key"].shape == (2, 0) and back["empty"].dtype is torch.int64
    with pytest.raises(
        TypeError, match=r"memmap: robust_key must be a bool or None, got 1 \(int\)"
    ):
        td.memmap(tmp_path / "other", robust_key=1)
    with pytest.raises(TypeError, match="load_memmap: robust_key must be a bool or None"):
        TensorDict.load_memmap(prefix, robust_key="yes")
    with pytest.raises(TypeError, match="memmap_: robust_key must be a bool or None"):
        td.clone().memmap_(tmp_path / "third", robust_key=0)


# ---------------------------------------------------------------- `with` undoes the last op


def test_with_unlock_on_a_view_relocks_without_writing_back(tmp_path) -> None:
    td = TensorDict({"a": torch.zeros(4, 3, 2)}, batch_size=[4, 3]).memmap_(tmp_path)
    view = td.transpose(0, 1)
    with view.unlock_():
        view.set(("new", "x"), torch.ones(3, 4))
    assert view.is_locked and ("new", "x") in view.keys(True) and "new" not in td
    plain = TensorDict({"a": torch.zeros(4, 3)}, batch_size=[4, 3])
    with plain.permute(1, 0) as p:  # a view used as a context still writes back
        p["a"] = p["a"] + 1
    assert (plain["a"] == 1).all()
    with p.unlock_():  # one `with` per unlock_(): the next one writes back again
        pass
    with p:
        p["a"] = p["a"] + 1
    assert (plain["a"] == 2).all()


def test_with_lock_restores_the_state_before() -> None:
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    with td.lock_():
        with td.unlock_():
            assert not td.is_locked
        assert td.is_locked
    assert not td.is_locked
    with pytest.raises(Exception, match="cannot set 'b': the TensorDict is locked"), td.lock_():
        td["b"] = torch.zeros(2)
    assert not td.is_locked


# ---------------------------------------------------------------- archives: tensordict's names


def _tree() -> TensorDict:
    return TensorDict(
        {"a": torch.randn(3, 4), "b": {"c": torch.ones(3, 2), "n": {"d": torch.arange(3)}}},
        batch_size=[3],
    )


def test_pack_unpack_memmap_and_is_memmap_archive(tmp_path) -> None:
    from tensorbox import is_memmap_archive, pack_memmap, unpack_memmap

    td = _tree()
    td.memmap(tmp_path / "plain")
    archive = pack_memmap(tmp_path / "plain", tmp_path / "packed.tdz")
    assert archive == tmp_path / "packed.tdz" and is_memmap_archive(archive)
    assert not is_memmap_archive(tmp_path / "plain") and not is_memmap_archive(tmp_path / "no")
    assert (TensorDict.load_memmap(archive) == td).all()
    assert unpack_memmap(archive, tmp_path / "out") == tmp_path / "out"
    assert (TensorDict.load_memmap(tmp_path / "out") == td).all()
    td.save(tmp_path / "weights.bin", archive=True)  # any file name
    assert is_memmap_archive(tmp_path / "weights.bin")
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="is not an archive of a saved tree"):
        unpack_memmap(tmp_path / "junk.zip", tmp_path / "x")
    with pytest.raises(ValueError, match="compresslevel=3 is not supported"):
        pack_memmap(tmp_path / "plain", tmp_path / "c.tdz", compression="deflate", compresslevel=3)


@pytest.mark.parametrize("name", ["tree", "tree.tdz"])
def test_load_memmap_subpath(tmp_path, name) -> None:
    td = _tree()
    td.save(tmp_path / name)
    for sub in ("b", ("b",), "b/n", ("b", ("n",))):
        expected = td.get(tuple(sub.split("/")) if isinstance(sub, str) else sub)
        got = TensorDict.load_memmap(tmp_path / name, subpath=sub, num_threads=4)
        assert (got == expected).all()
    with pytest.raises(ValueError, match=r"no container is saved under \('b', 'zz'\)"):
        TensorDict.load_memmap(tmp_path / name, subpath="b/zz")
    with pytest.raises(ValueError, match=r"no container is saved under \('a',\)"):
        TensorDict.load_memmap(tmp_path / name, subpath="a")  # a tensor, not a container


@pytest.mark.parametrize("name", ["tree", "tree.tdz"])
def test_existsok_false_is_a_file_exists_and_runtime_error(tmp_path, name) -> None:
    from tensorbox.errors import TreeExistsError

    td = _tree()
    td.save(tmp_path / name)
    for kind in (TreeExistsError, FileExistsError, RuntimeError):
        with pytest.raises(kind, match="already holds a saved tree"):
            td.memmap(tmp_path / name, existsok=False)
    td.save(tmp_path / name)  # replacing is the default
