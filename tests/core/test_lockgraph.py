"""The lock graph (tensordict's rule): a container held by a locked parent cannot be
unlocked on its own; weak references only, so a gone parent frees the child."""

from __future__ import annotations

import gc

import pytest
import torch

from tensorbox import LockedError, TensorDict, tensorclass


@tensorclass
class _Pair:
    x: torch.Tensor


def _tree() -> TensorDict:
    return TensorDict(
        {"a": {"b": {"c": torch.zeros(2)}}, "p": _Pair(x=torch.zeros(2), batch_size=[2])},
        batch_size=[2],
    )


@pytest.mark.parametrize("key", ["a", ("a", "b"), "p"])
def test_child_of_a_locked_parent_refuses_to_unlock(key: object) -> None:
    td = _tree().lock_()
    child = td[key]
    with pytest.raises(LockedError, match="held by a locked TensorDict"):
        child.unlock_()
    assert child.is_locked and td.is_locked
    td.unlock_()
    assert not child.is_locked
    child.lock_().unlock_()  # the parent is unlocked: the child is free again


def test_a_gone_parent_frees_the_child() -> None:
    td = _tree().lock_()
    child = td["a"]
    del td
    gc.collect()
    assert not child.unlock_().is_locked


def test_two_locked_roots_sharing_a_child() -> None:
    td = _tree().lock_()
    other = TensorDict({"a": td["a"]}, [2]).lock_()
    with pytest.raises(LockedError, match="a container inside it is held by a locked"):
        other.unlock_()
    with pytest.raises(LockedError, match="part of a locked graph"):
        td.unlock_()
    both = TensorDict({"td": td, "other": other}, [2]).lock_()
    both.unlock_()  # the whole graph is inside: everything unlocks
    assert not td.is_locked and not other.is_locked and not td["a", "b"].is_locked
    both.lock_()
    del both, other
    gc.collect()
    td.unlock_()


def test_lock_context_and_setter_keep_the_graph() -> None:
    td = _tree()
    with td.lock_(), pytest.raises(LockedError):
        td["a"].is_locked = False
    assert not td["a"].is_locked
    td["a"].lock_().unlock_()


def test_a_lock_set_in_one_pass_records_no_parent() -> None:
    td = TensorDict({"a": {"b": torch.zeros(1)}}, [1], lock=True)
    assert td["a"].unlock_().is_locked is False


def _live_locked(refs: list) -> int:  # type: ignore[type-arg]
    return len({id(r()) for r in refs if r() is not None and r().is_locked})


def test_every_locked_ancestor_is_recorded() -> None:
    td = TensorDict({("a", "b", "c", "d"): 1.0}, []).lock_()
    a, b, c = td["a"], td["a", "b"], td["a", "b", "c"]
    assert td._lock_parents_weakrefs == []
    assert [_live_locked(x._lock_parents_weakrefs) for x in (a, b, c)] == [1, 2, 3]
    td.unlock_()
    assert [_live_locked(x._lock_parents_weakrefs) for x in (a, b, c)] == [0, 0, 0]
    td.lock_()
    del td
    gc.collect()
    assert [_live_locked(x._lock_parents_weakrefs) for x in (b, c)] == [1, 2]
    with pytest.raises(LockedError, match="held by a locked TensorDict"):
        c.unlock_()
    a.unlock_()
    assert not c.is_locked
