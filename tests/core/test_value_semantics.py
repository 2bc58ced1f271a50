"""Same value semantics as tensordict: numbers on set, per-row values, field types, torch.save, tensordict tensorclass trees."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tensorbox import BatchSizeError, NonTensorData, TensorClass, TensorDict
from tensorbox._storage.persist import saved_type
from tensorbox.errors import FormatError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tensordict_tensorclass_tree"


class Sample(TensorClass):
    images: torch.Tensor
    labels: torch.Tensor
    subset: str


def test_a_tensordict_tensorclass_tree_loads_as_the_class_passed() -> None:
    s = Sample.load_memmap(FIXTURE, mode="r")
    assert type(s) is Sample and s.batch_size == (3,) and s.subset == "train"
    assert s.labels.tolist() == [0, 1, 2] and s.images.dtype == torch.uint8
    assert torch.equal(s.images, torch.arange(24, dtype=torch.uint8).reshape(3, 2, 4))


def test_without_a_class_it_loads_as_a_tensordict_that_remembers_the_type() -> None:
    """tensordict's tree names ``__main__.Sample``; with two classes named ``Sample``
    registered here (this module's and the one below) none stands for it. (With one, that
    one would: whether this test passed hung on which other test modules had run.)"""

    class Sample(TensorClass):  # a second class of the name, registered by defining it
        x: torch.Tensor

    td = TensorDict.load_memmap(FIXTURE, mode="r")
    assert type(td) is TensorDict and sorted(td.keys()) == ["images", "labels", "subset"]
    assert saved_type(td) == "__main__:Sample"


def test_pickled_fields_are_refused_naming_the_file(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(FIXTURE, tree)
    (tree / "other.pickle").write_bytes(b"\x80\x04N.")
    with pytest.raises(FormatError, match=r"other\.pickle: .* tensorbox never unpickles"):
        TensorDict.load_memmap(tree)


def test_torch_save_embeds_mapped_leaves_and_loads_weights_only(tmp_path: Path) -> None:
    td = TensorDict(a=torch.arange(4.0), s="x", n={"b": torch.ones(4)}, batch_size=[4])
    saved = td.memmap(tmp_path / "t")
    s = Sample(torch.zeros(2, 1, dtype=torch.uint8), torch.arange(2), "v", batch_size=[2])
    torch.save({"td": saved, "tc": s.memmap(tmp_path / "c")}, tmp_path / "f.pt")
    shutil.rmtree(tmp_path / "t")  # a file that held paths could not load now
    shutil.rmtree(tmp_path / "c")
    assert str(tmp_path).encode() not in (tmp_path / "f.pt").read_bytes()  # bytes, no paths
    back = torch.load(tmp_path / "f.pt")  # weights_only=True, torch's default
    assert (back["td"] == td).all() and back["td"]["s"] == "x"
    assert type(back["tc"]) is Sample and back["tc"].subset == "v"
    assert back["tc"].labels.tolist() == [0, 1]


def test_pickle_between_processes_still_sends_file_references(tmp_path: Path) -> None:
    import pickle

    saved = TensorDict(a=torch.zeros(10_000), batch_size=[10_000]).memmap(tmp_path / "t")
    assert len(pickle.dumps(saved)) < 4096  # a reference, not 40 kB of floats


def test_python_numbers_become_tensors_on_set_and_reach_the_disk(tmp_path: Path) -> None:
    datum = TensorDict({"image": torch.zeros(2, 2), "label": 0, "ok": True, "xy": [1.5, 2.0]}, [])
    assert datum["label"].dtype == torch.int64 and datum["ok"].dtype == torch.bool
    assert datum["xy"].tolist() == [1.5, 2.0]
    assert TensorDict(tag="a", names_=["a", "b"])["names_"] == ["a", "b"]  # strings stay
    data = datum.expand(4).memmap_like(tmp_path / "d")  # the saving guide's pattern
    for i in range(4):
        data[i] = TensorDict(
            {"image": torch.full((2, 2), float(i)), "label": i, "ok": i % 2 == 0, "xy": [i, -i]}, []
        )
    back = TensorDict.load_memmap(tmp_path / "d")
    assert back["label"].tolist() == [0, 1, 2, 3] and back["ok"].tolist() == [True, False] * 2
    with pytest.raises(
        BatchSizeError,
        match=r"key 'n': the value 3 becomes a tensor of shape "
        r"\(\), which does not start with batch_size \(4,\); .* NonTensorData",
    ):
        TensorDict({"n": 3}, [4])
    assert TensorDict({"n": NonTensorData(3)}, [4])["n"] == 3


class Tagged(TensorClass):
    x: torch.Tensor
    name: str = "a"
    note: str | None = None
    weight: float = 1.0


def test_a_simple_annotation_refuses_a_value_of_another_type() -> None:
    with pytest.raises(
        TypeError,
        match=r"Tagged.name is annotated str, got \[4\] \(a list\); "
        r"pass the batch size by keyword: batch_size=\[4\]",
    ):
        Tagged(torch.zeros(4), [4])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Tagged.weight is annotated float, got 'x'"):
        Tagged(torch.zeros(2), weight="x", batch_size=[2])  # type: ignore[arg-type]
    t = Tagged(torch.zeros(2), note=None, weight=2, batch_size=[2])  # an int for a float
    assert t.note is None and t.weight == 2
    with pytest.raises(TypeError, match=r"a list must hold one str per row of batch_size \[2\]"):
        Tagged(torch.zeros(2), ["a", "b", "c"], batch_size=[2])


def test_per_row_values_follow_rows_and_stay_per_row() -> None:
    t = Tagged(torch.zeros(3), ["a", "b", "a"], batch_size=[3])
    assert t.name == ["a", "b", "a"] and t[1].name == "b"
    assert t[torch.tensor([0, 2])].name == ["a", "a"]  # rows of a stack: a stack (tensordict)
    a = Tagged(torch.zeros(3), "set-a", batch_size=[3])
    b = Tagged(torch.ones(3), "set-b", batch_size=[3])
    stacked = torch.stack([a, b])
    assert stacked[0].name == ["set-a"] * 3 and stacked[1, 0].name == "set-b"
    assert stacked[:, 0].name == ["set-a", "set-b"]
    both = torch.cat([a, b])
    assert both[:3].name == ["set-a"] * 3 and both[2:4].name == ["set-a", "set-b"]
    both[3:] = a  # every row the same now: still one value per row, as tensordict
    assert both.name == ["set-a"] * 6
