"""A stateful property test: random sequences of saves, in-place writes, failing saves, reloads,
pickled references and copies on one path, checked against an in-memory model after every step."""

from __future__ import annotations

import copy
import pickle
import shutil
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tensorbox import NonTensorData, TensorDict
from tensorbox.errors import FormatError, LockedError

KEYS = ("a", "b", "Cap", "n/x")
ROWS = 3


def _build(values: dict[str, float], tag: str) -> TensorDict:
    flat = {k: torch.full((ROWS, 2), v) for k, v in values.items() if "/" not in k}
    td = TensorDict(flat, [ROWS])
    nested = {k.split("/")[1]: torch.full((ROWS, 2), v) for k, v in values.items() if "/" in k}
    if nested:
        td["n"] = TensorDict(nested, [ROWS])
    td["tag"] = NonTensorData(tag)
    return td


class SavedTree(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = f"{self.dir}/tree"
        self.model: dict[str, torch.Tensor] | None = None  # what the disk must hold
        self.tag = ""
        self.refs: list[tuple[bytes, dict[str, torch.Tensor], int]] = []
        self.generation = 0

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _snapshot(self, td: TensorDict) -> dict[str, torch.Tensor]:
        return {
            "/".join(k) if isinstance(k, tuple) else k: v.clone()
            for k, v in td.items(include_nested=True, leaves_only=True)
            if isinstance(v, torch.Tensor)
        }

    @rule(
        values=st.dictionaries(st.sampled_from(KEYS), st.floats(-9, 9, width=16), min_size=1),
        tag=st.text(max_size=5),
    )
    def save(self, values: dict[str, float], tag: str) -> None:
        td = _build(values, tag)
        td.memmap(self.path)
        self.model, self.tag = self._snapshot(td), tag
        self.generation += 1

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def write_a_row(self, data: st.DataObject) -> None:
        assert self.model is not None
        td = TensorDict.load_memmap(self.path)
        key = data.draw(st.sampled_from(sorted(self.model)))
        row = data.draw(st.integers(0, ROWS - 1))
        value = data.draw(st.floats(-9, 9, width=16))
        td[tuple(key.split("/"))][row] = value  # through the mapping: in place
        self.model[key][row] = value

    @precondition(lambda self: self.model is not None)
    @rule()
    def memmap_in_place(self) -> None:
        td = TensorDict.load_memmap(self.path)
        td.memmap_(self.path)  # keeps the files: nothing changes

    @precondition(lambda self: self.model is not None)
    @rule(big=st.booleans())
    def a_failing_save_changes_nothing(self, big: bool) -> None:
        td = _build({"a": 1.0}, "x")
        deep: object = 0
        for _ in range(300):
            deep = [deep]
        td["bad"] = NonTensorData(10**5000 if big else deep)
        with pytest.raises(ValueError, match="key 'bad'"):
            td.memmap(self.path)

    @precondition(lambda self: self.model is not None)
    @rule()
    def pickle_a_reference(self) -> None:
        assert self.model is not None
        td = TensorDict.load_memmap(self.path)
        self.refs.append((pickle.dumps(td), copy.deepcopy(self.model), self.generation))

    @precondition(lambda self: self.refs)
    @rule(data=st.data())
    def unpickle_a_reference(self, data: st.DataObject) -> None:
        blob, _, generation = data.draw(st.sampled_from(self.refs))
        if generation == self.generation:
            back = pickle.loads(blob)  # the same tree: the same files, as they are now
            assert self.model is not None
            assert self._snapshot(back).keys() == self.model.keys()
        else:
            with pytest.raises(FormatError, match="was replaced after a tensor mapping it"):
                pickle.loads(blob)

    @precondition(lambda self: self.model is not None)
    @rule()
    def deepcopy_reads_the_same(self) -> None:
        assert self.model is not None
        twin = copy.deepcopy(TensorDict.load_memmap(self.path))
        got = self._snapshot(twin)
        assert all(torch.equal(got[k], v) for k, v in self.model.items())

    @invariant()
    def disk_matches_the_model(self) -> None:
        if self.model is None:
            return
        td = TensorDict.load_memmap(self.path)
        got = self._snapshot(td)
        assert got.keys() == self.model.keys()
        for k, v in self.model.items():
            assert torch.equal(got[k], v), k
        assert td["tag"] == self.tag


SavedTree.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_saved_tree = SavedTree.TestCase


# ---------------------------------------------------------------- everyday writes

TENSOR_KEYS = ("a", "b", "n/x")
TEXT_KEYS = ("t", "s")
TEXT = st.text(max_size=4)


def _path(key: str) -> tuple[str, ...]:
    return tuple(key.split("/"))


class LiveTree(RuleBasedStateMachine):
    """Writes through a tree-backed container (set rows with tensors and text, add and
    delete keys, set_, memmap_ with and without prefix, reload, deepcopy, lock/unlock):
    after every step the tree on disk, and the container, hold the model's state; a step
    that raises leaves both as they were."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.paths = (f"{self.dir}/one", f"{self.dir}/two")
        self.path = self.paths[0]
        self.live: TensorDict | None = None
        self.model: dict[str, object] = {}  # key -> tensor, or text (str or list per row)

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def _state(td: TensorDict) -> dict[str, object]:
        out: dict[str, object] = {}
        for k, v in td.items(include_nested=True):  # tensors and text values, not levels
            if isinstance(v, TensorDict):
                continue
            key = "/".join(k) if isinstance(k, tuple) else k
            out[key] = v.clone() if isinstance(v, torch.Tensor) else td[k]
        return out

    def _check(self, td: TensorDict) -> None:
        got = self._state(td)
        assert got.keys() == self.model.keys()
        for k, v in self.model.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(got[k], v), k  # type: ignore[arg-type]
            else:
                assert got[k] == v, k

    @rule(
        values=st.dictionaries(st.sampled_from(TENSOR_KEYS), st.integers(-9, 9), min_size=1),
        texts=st.dictionaries(st.sampled_from(TEXT_KEYS), TEXT),
        in_place=st.booleans(),
        other=st.booleans(),
    )
    def save(self, values: dict, texts: dict, in_place: bool, other: bool) -> None:
        td = TensorDict({}, [ROWS])
        for k, v in values.items():
            td[_path(k)] = torch.full((ROWS,), float(v))
        for k, v in texts.items():
            td[k] = NonTensorData(v)
        self.path = self.paths[other]
        self.model = self._state(td)
        if in_place:
            td.memmap_(self.path)
            self.live = td
        else:
            self.live = td.memmap(self.path)

    @precondition(lambda self: self.live is not None)
    @rule()
    def reload(self) -> None:
        self.live = TensorDict.load_memmap(self.path)

    @precondition(lambda self: self.live is not None)
    @rule(data=st.data())
    def set_a_row(self, data: st.DataObject) -> None:
        assert self.live is not None
        keys = sorted(self.model)
        if not keys:
            return
        key = data.draw(st.sampled_from(keys))
        row = data.draw(st.integers(0, ROWS - 1))
        cur = self.model[key]
        if isinstance(cur, torch.Tensor):
            value: object = float(data.draw(st.integers(-9, 9)))
            value_t = torch.tensor(value)
            nested: dict = {}
            node = nested
            for part in _path(key)[:-1]:
                node = node.setdefault(part, {})
            node[_path(key)[-1]] = value_t
            self.live[row] = nested
            cur[row] = value
            return
        if data.draw(st.booleans()):  # a value the tree cannot hold: refused, nothing written
            with pytest.raises(TypeError, match=f"key '{key}': value"):
                self.live[row] = {key: object()}
            return
        text = data.draw(TEXT)
        self.live[row] = {key: text}
        if isinstance(cur, str) and cur == text:
            return
        rows = [cur] * ROWS if isinstance(cur, str) else list(cur)  # type: ignore[arg-type]
        rows[row] = text
        self.model[key] = rows

    @precondition(lambda self: self.live is not None)
    @rule(key=st.sampled_from(TEXT_KEYS), text=TEXT)
    def set_a_text(self, key: str, text: str) -> None:
        assert self.live is not None
        if key not in self.model:
            return
        self.live.set_(key, text)
        self.model[key] = text

    @precondition(lambda self: self.live is not None)
    @rule(key=st.sampled_from(TENSOR_KEYS + TEXT_KEYS), value=st.integers(-9, 9))
    def add_or_replace_a_key(self, key: str, value: int) -> None:
        assert self.live is not None
        new: object = str(value) if key in TEXT_KEYS else torch.full((ROWS,), float(value))
        if self.live.is_locked:
            with pytest.raises(LockedError, match="unlock_"):
                self.live[_path(key)] = new
            return
        self.live[_path(key)] = new
        self.model[key] = new

    @precondition(lambda self: self.live is not None and not self.live.is_locked)
    @rule(key=st.sampled_from(TENSOR_KEYS + TEXT_KEYS))
    def a_failing_key_set_changes_nothing(self, key: str) -> None:
        assert self.live is not None
        with pytest.raises(TypeError, match="value <object object at"):
            self.live[_path(key)] = object()

    @precondition(lambda self: self.live is not None)
    @rule(data=st.data())
    def delete_a_key(self, data: st.DataObject) -> None:
        assert self.live is not None
        if not self.model:
            return
        key = data.draw(st.sampled_from(sorted(self.model)))
        if self.live.is_locked:
            with pytest.raises(LockedError, match=r"cannot delete .* unlock_\(\) first"):
                del self.live[_path(key)]
            return
        del self.live[_path(key)]
        del self.model[key]

    @precondition(lambda self: self.live is not None)
    @rule()
    def a_stale_handle_is_refused(self) -> None:
        assert self.live is not None
        other = TensorDict.load_memmap(self.path)
        with other.unlock_():
            other["zz"] = torch.zeros(ROWS)  # another handle saves first
        self.model["zz"] = torch.zeros(ROWS)
        stale = self.live
        self.live = other
        stale.batch_size = [ROWS]  # no change: nothing to save, no error
        with pytest.raises(RuntimeError, match="was saved again since this container"):
            stale.memmap_()

    @precondition(lambda self: self.live is not None)
    @rule(lock=st.booleans())
    def lock_or_unlock(self, lock: bool) -> None:
        assert self.live is not None
        if lock:
            self.live.lock_()
        else:
            self.live.unlock_()

    @precondition(lambda self: self.live is not None)
    @rule()
    def memmap_without_prefix(self) -> None:
        assert self.live is not None
        self.live.memmap_()
        assert self.live.is_locked

    @precondition(lambda self: self.live is not None)
    @rule()
    def memmap_to_the_other_path(self) -> None:
        assert self.live is not None
        self.path = self.paths[self.path == self.paths[0]]
        self.live.memmap_(self.path, copy_existing=True)

    @precondition(lambda self: self.live is not None)
    @rule()
    def a_deep_copy_is_in_memory(self) -> None:
        assert self.live is not None
        twin = copy.deepcopy(self.live)
        self._check(twin)
        twin.unlock_()
        twin["zz"] = torch.zeros(ROWS)
        if any(k in self.model for k in TEXT_KEYS):
            key = next(k for k in TEXT_KEYS if k in self.model)
            twin[0] = {key: "copy"}

    @invariant()
    def disk_and_memory_match_the_model(self) -> None:
        if self.live is None:
            return
        self._check(self.live)
        self._check(TensorDict.load_memmap(self.path))


LiveTree.TestCase.settings = settings(
    max_examples=20,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_live_tree = LiveTree.TestCase
