"""A saved ``MetaData`` loads back as a ``MetaData`` (format version 4: the ``meta`` field
of a ``json`` entry), in tensorbox's layout, in an archive and in tensordict's layout,
where tensordict itself is the oracle; trees without the field load as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tensordict
import torch

from tensorbox import MetaData, NonTensorData, TensorDict
from tensorbox.errors import FormatError


def _tree() -> TensorDict:
    return TensorDict(
        {"x": torch.zeros(3), "run": MetaData("run-1"), "n": {"cfg": MetaData({"lr": 0.1})}},
        [3],
    )


def _is_meta(td: Any, key: Any, value: Any) -> None:
    got = td.get(key)
    assert isinstance(got, MetaData) and got.data == value


@pytest.mark.parametrize(
    "save",
    [
        pytest.param(lambda td, p: td.memmap(p), id="folder"),
        pytest.param(lambda td, p: td.memmap(p, archive=True), id="archive"),
        pytest.param(lambda td, p: td.memmap(p, format="tensordict"), id="tensordict layout"),
    ],
)
def test_a_saved_metadata_loads_as_metadata(tmp_path: Path, save: Any) -> None:
    save(_tree(), tmp_path / "t")
    back = TensorDict.load_memmap(tmp_path / "t")
    _is_meta(back, "run", "run-1")
    _is_meta(back, ("n", "cfg"), {"lr": 0.1})
    # metadata of the whole batch: a stack of two loaded trees keeps one value
    assert isinstance(torch.stack([back, back]).get("run"), MetaData)


def test_the_entry_says_meta_and_only_its_node_is_version_4(tmp_path: Path) -> None:
    td = _tree()
    td["n"]["plain"] = "not metadata"
    td["m"] = TensorDict({"y": torch.ones(3)}, [3])
    td.memmap(tmp_path / "t")
    root = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert root["version"] == 4
    assert root["entries"]["run"] == {"kind": "json", "value": "run-1", "meta": True}
    sub = json.loads((tmp_path / "t" / "n" / "meta.json").read_text())
    assert sub["entries"]["plain"] == {"kind": "json", "value": "not metadata"}
    assert json.loads((tmp_path / "t" / "m" / "meta.json").read_text())["version"] == 2
    back = TensorDict.load_memmap(tmp_path / "t")
    assert type(back.get(("n", "plain"))) is NonTensorData
    assert not isinstance(back.get(("n", "plain")), MetaData)


def test_tensordict_reads_and_writes_metadata_as_tensorbox_does(tmp_path: Path) -> None:
    _tree().memmap(tmp_path / "ours", format="tensordict")
    theirs = tensordict.TensorDict.load_memmap(tmp_path / "ours")
    assert isinstance(theirs.get("run"), tensordict.MetaData)
    assert theirs.get(("n", "cfg")).data == {"lr": 0.1}
    tensordict.TensorDict({"x": torch.zeros(2), "run": tensordict.MetaData("r")}, [2]).memmap(
        tmp_path / "td"
    )
    _is_meta(TensorDict.load_memmap(tmp_path / "td"), "run", "r")


def test_a_tensordict_tree_with_metadata_takes_a_write_through(tmp_path: Path) -> None:
    # the commit takes the old tree apart: tensordict's MetaData sub-node is the tree's,
    # not a user's folder to keep (which the new tree's own "run" would collide with)
    tensordict.TensorDict({"x": torch.zeros(2), "run": tensordict.MetaData("r")}, [2]).memmap(
        tmp_path / "t"
    )
    TensorDict.load_memmap(tmp_path / "t").set_("run", "s")
    theirs = tensordict.TensorDict.load_memmap(tmp_path / "t")
    assert isinstance(theirs.get("run"), tensordict.MetaData) and theirs.get("run").data == "s"


def test_a_tree_without_the_field_loads_as_before(tmp_path: Path) -> None:
    TensorDict({"x": torch.zeros(2), "s": "a"}, [2]).memmap(tmp_path / "t")
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["version"] == 2 and "meta" not in meta["entries"]["s"]
    got = TensorDict.load_memmap(tmp_path / "t").get("s")
    assert type(got) is NonTensorData and not got.meta


def _edit(path: Path, version: int, entry: dict[str, Any]) -> None:
    meta = json.loads((path / "meta.json").read_text())
    meta["version"] = version
    meta["entries"]["run"] = entry
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("version", "entry", "match"),
    [
        (
            3,
            {"kind": "json", "value": "r", "meta": True},
            r"'run' has a 'meta' field, which format version 4 added",
        ),
        (
            4,
            {"kind": "json", "value": "r", "meta": 1},
            r"'run': 'meta' is 1, expected true or false",
        ),
        (
            4,
            {"kind": "json", "value": ["a", "b"], "stacked": True, "meta": True},
            r"'run': 'meta' is True, .*false for a stacked value",
        ),
    ],
)
def test_a_bad_meta_field_is_refused_naming_the_entry(
    tmp_path: Path, version: int, entry: dict[str, Any], match: str
) -> None:
    TensorDict({"run": MetaData("r")}, [2]).memmap(tmp_path / "t")
    _edit(tmp_path / "t", version, entry)
    with pytest.raises(FormatError, match=match):
        TensorDict.load_memmap(tmp_path / "t")


def test_a_write_through_keeps_the_kind(tmp_path: Path) -> None:
    td = _tree().memmap(tmp_path / "t")
    td.set_("run", "run-2")  # a commit of the tree: the MetaData is saved again
    _is_meta(TensorDict.load_memmap(tmp_path / "t"), "run", "run-2")


WRITES = {
    "set_": lambda m, td: td.set_("run", "b"),
    "set_ NonTensorData": lambda m, td: td.set_("run", m.NonTensorData("b")),
    "update_": lambda m, td: td.update_({"run": "b"}),
    "update inplace": lambda m, td: td.update({"run": "b"}, inplace=True),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_value_written_over_metadata_stays_metadata_as_in_tensordict(write: Any) -> None:
    kinds = []
    for m in (tensordict, __import__("tensorbox")):
        td = m.TensorDict({"run": m.MetaData("a"), "x": torch.zeros(3)}, [3])
        write(m, td)
        kinds.append(isinstance(td.get("run"), m.MetaData))
    assert kinds == [True, True]
