"""NonTensorStack (a stacked NonTensorData), MetaData, and the shape ops of a value on its own."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import MetaData, NonTensorData, NonTensorStack, TensorDict


def test_building_stacks() -> None:
    s = NonTensorStack("a", "b", "c")
    assert type(s) is NonTensorData and isinstance(s, NonTensorStack) and s.shape == (3,)
    assert not isinstance(NonTensorData("a"), NonTensorStack)
    cols = NonTensorStack(
        NonTensorData("a", batch_size=[2]), NonTensorData("b", batch_size=[2]), stack_dim=1
    )
    assert cols.tolist() == [["a", "b"], ["a", "b"]]
    nested = NonTensorStack.from_list([[1, NonTensorData("x")], ["y", 2]])
    assert nested.shape == (2, 2) and nested[0, 1].data == "x" and nested[1, 1].data == 2
    assert torch.stack([NonTensorData("p"), NonTensorData("q")]).tolist() == ["p", "q"]
    assert torch.cat([s, NonTensorStack("d")]).tolist() == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="value 1 has batch_size \\(2,\\), value 0 has \\(\\)"):
        NonTensorStack("a", NonTensorData("b", batch_size=[2]))
    with pytest.raises(ValueError, match=r"does not match the stacked shape \(2,\)"):
        NonTensorStack("a", "b", batch_size=[3])
    with pytest.raises(ValueError, match="ragged at"):
        NonTensorStack.from_list([["a", "b"], ["c"]])


@given(n=st.integers(1, 6), reps=st.integers(1, 3))
def test_shape_ops_follow_torch(n: int, reps: int) -> None:
    values = [f"v{i}" for i in range(n)]
    s = NonTensorStack(*values)
    ref = np.array(values, dtype=object)
    assert s.repeat(reps).tolist() == np.tile(ref, reps).tolist()
    assert s.repeat_interleave(reps, 0).tolist() == np.repeat(ref, reps).tolist()
    assert s.unsqueeze(0).view(n).tolist() == values and s.unsqueeze(-1).shape == (n, 1)
    assert s.flatten().tolist() == values and s.contiguous() is s
    mask = torch.arange(n) % 2 == 0
    assert s[mask].tolist() == ref[mask.numpy()].tolist()
    assert s[torch.tensor(True)].shape == (1, n) and s[torch.tensor(False)].shape == (0, n)


def test_a_shared_value_keeps_its_shape() -> None:
    d = NonTensorData(0, batch_size=[3])
    assert type(MetaData(0)) is NonTensorData and MetaData(0).meta and not d.meta
    m = MetaData(0, batch_size=[3]).expand(2, 3)  # metadata: one value, whatever the shape
    assert m.shape == (2, 3) and not m.stacked and m.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert d.expand(3).data == 0 and not d.expand(3).stacked  # no dim added: one value
    e = d.expand(2, 3)  # a dim added: a value per element, as tensordict's NonTensorStack
    assert e.shape == (2, 3) and e.stacked
    assert e.tolist() == [[0, 0, 0], [0, 0, 0]] and e[1].shape == (3,)
    assert NonTensorStack("a", "a", "b")[:2].tolist() == ["a", "a"]


def test_where_and_out() -> None:
    a, b = NonTensorStack(["a"], ["a"]), NonTensorStack(["b"], ["b"])
    out = NonTensorStack("x", "y")
    got = a.where(torch.tensor([True, False]), b, out=out, pad=0)
    assert got is out and out.tolist() == [["a"], ["b"]]
    assert NonTensorData("s", batch_size=[2]).where(torch.tensor([False, True]), "t").tolist() == [
        "t",
        "s",
    ]


def test_rows_of_a_stack_stay_a_stack() -> None:
    td = TensorDict(x=torch.zeros(3), name=NonTensorStack("a", "a", "b"), batch_size=[3])
    assert td[:2]["name"] == ["a", "a"] and td["name"] == ["a", "a", "b"]  # as tensordict
    assert TensorDict(m=MetaData("cfg"), x=torch.zeros(4, 2)).auto_batch_size_().batch_size == (
        4,
        2,
    )


@pytest.mark.parametrize("capture", [False, True])
def test_capture_non_tensor_stack_keeps_one_equal_value_as_tensordict(capture: bool) -> None:
    import tensorbox as tb

    def run(lib: object) -> tuple[object, object]:
        rows = [lib.TensorDict(tag="x", a=torch.zeros(2)), lib.TensorDict(tag="x", a=torch.ones(2))]
        mixed = [lib.TensorDict(tag="x"), lib.TensorDict(tag="y")]
        with lib.set_capture_non_tensor_stack(capture):
            return torch.stack(rows)["tag"], torch.stack(mixed)["tag"]

    got = run(tb)
    assert got == (("x" if capture else ["x", "x"]), ["x", "y"])
    assert tb.capture_non_tensor_stack() is False  # the switch restored the default
    td = pytest.importorskip("tensordict")
    with warnings.catch_warnings():  # tensordict deprecates the switch (it still works)
        warnings.simplefilter("ignore", DeprecationWarning)
        want = run(td)
    assert (want[0] if capture else list(want[0])) == got[0] and list(want[1]) == got[1]


def test_metadata_survives_pickling_and_torch_save() -> None:
    import io
    import pickle

    td = TensorDict(m=MetaData("cfg"), s=NonTensorData("x"), batch_size=[])
    buf = io.BytesIO()
    torch.save(td, buf)
    buf.seek(0)
    for back in (pickle.loads(pickle.dumps(td)), torch.load(buf, weights_only=True)):
        assert isinstance(back.get("m"), MetaData) and not isinstance(back.get("s"), MetaData)
        assert back.expand(2)["m"] == "cfg" and back.expand(2)["s"] == ["x", "x"]
    # a value pickled before the flag existed (no "meta" in its state) is not metadata
    old = NonTensorData.__new__(NonTensorData)
    old.__setstate__((None, {"data": 1, "stacked": False, "device": None, "_batch_size": None}))
    assert old.data == 1 and not old.meta and not isinstance(old, MetaData)
