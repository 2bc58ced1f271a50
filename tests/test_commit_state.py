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
from tensorbox.errors import FormatError

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
