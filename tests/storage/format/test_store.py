"""The storage seam: the format's checks and the one saver/loader over a store with no files.

``MemoryStore`` holds a tree as a dict of bytes: these tests build ``meta.json`` and leaf
bytes by hand (no container class), and check that every store gives the same tree.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict
from tensorbox._storage.archive.store import ArchiveStore
from tensorbox._storage.folder import FolderStore
from tensorbox._storage.memory import MemoryStore
from tensorbox._storage.persist import load_from, save_to
from tensorbox._storage.store import JsonEntry, NodeEntry, TensorEntry, iter_nodes, verify
from tensorbox.errors import FormatError, IncompleteTreeError

_ID = "0" * 32


def _meta(entries: dict, batch: list[int] = [2], version: int = 2, **extra: object) -> bytes:  # noqa: B006
    doc = {
        "format": "tensorbox",
        "version": version,
        "type": "TensorDict",
        "batch_size": batch,
        "device": None,
        "entries": entries,
        **extra,
    }
    return json.dumps(doc).encode()


def _leaf(file: str = "x.memmap", dtype: str = "float32", shape: list[int] = [2, 3]) -> dict:  # noqa: B006
    return {"kind": "tensor", "dtype": dtype, "shape": shape, "file": file, "id": _ID}


def test_a_hand_built_tree_reads_without_a_container_class() -> None:
    x = np.arange(6, dtype="<f4").tobytes()
    store = MemoryStore(
        {
            "meta.json": _meta(
                {
                    "x": _leaf(),
                    "s": {"kind": "json", "value": "hi"},
                    "n": {"kind": "node", "dir": "n"},
                }
            ),
            "x.memmap": x,
            "n/meta.json": _meta({"y": _leaf("y.memmap", "int8", [2])}),
            "n/y.memmap": b"\x01\x02",
        }
    )
    top = store.node()
    assert type(top.entries["x"]) is TensorEntry and top.entries["x"].nbytes == 24
    assert top.entries["s"] == JsonEntry("hi", False)
    assert top.entries["n"] == NodeEntry("n")
    assert [k for k, _ in iter_nodes(store)] == [(), ("n",)]
    assert store.tensor(top.entries["x"], "r").tolist() == [[0, 1, 2], [3, 4, 5]]
    assert verify(store) == (2, 2, 26)


@pytest.mark.parametrize(
    ("files", "error", "match"),
    [
        ({}, FileNotFoundError, "no saved tree in memory"),
        ({"x.memmap": b""}, IncompleteTreeError, r"memory::meta\.json is missing"),
        ({"meta.json": b"{"}, FormatError, r"memory::meta\.json is not valid JSON"),
        (
            {"meta.json": _meta({"x": _leaf()})},
            FormatError,
            r"memory::x\.memmap is missing \(.*entry 'x'\)",
        ),
        (
            {"meta.json": _meta({"x": _leaf()}), "x.memmap": bytes(20)},
            FormatError,
            r"memory::x\.memmap is 20 bytes, but float32 of shape \[2, 3\] needs 24",
        ),
        (
            {"meta.json": _meta({"x": _leaf(shape=[3])})},
            FormatError,
            r"does not start with batch_size \[2\]",
        ),
        ({"meta.json": _meta({"x": _leaf(file="../x")})}, FormatError, "is not a plain file name"),
        (
            {"meta.json": _meta({"n": {"kind": "node", "dir": "n"}})},
            FormatError,
            r"memory::n/meta\.json is missing",
        ),
        ({"meta.json": _meta({}, version=9)}, FormatError, "format version 9.*upgrade tensorbox"),
        ({"meta.json": _meta({}, extra=1)}, FormatError, r"unexpected fields \['extra'\]"),
    ],
)
def test_the_format_checks_name_the_store_file(files: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        store = MemoryStore(files)
        list(iter_nodes(store))
        verify(store)


def test_a_child_must_extend_its_parents_batch() -> None:
    store = MemoryStore(
        {
            "meta.json": _meta({"n": {"kind": "node", "dir": "n"}}, batch=[2]),
            "n/meta.json": _meta({}, batch=[3]),
        }
    )
    with pytest.raises(
        FormatError,
        match=r"memory::n/meta\.json: batch_size \[3\] does not start with its parent's \[2\]",
    ):
        list(iter_nodes(store))


def test_a_damaged_leaf_fails_verify_by_its_checksum() -> None:
    td = TensorDict(a=torch.arange(4.0), batch_size=[4])
    store = MemoryStore()
    save_to(td, store, checksum=True)
    store.files["a.memmap"] = bytes(16)
    with pytest.raises(
        FormatError, match=r"memory::a\.memmap: the bytes do not match the recorded SHA-256"
    ):
        verify(store)


def _tree() -> TensorDict:
    return TensorDict(
        {
            "x": torch.arange(12.0).reshape(3, 4),
            "lab": torch.tensor([1, 2, 3]),
            "name": "run",
            "n": {"y": torch.ones(3, 2, dtype=torch.bfloat16), "deep": {"z": torch.zeros(3, 0)}},
        },
        batch_size=[3],
    )


def test_every_store_holds_the_same_tree(tmp_path: Path) -> None:
    td = _tree()
    memory = MemoryStore()
    save_to(td, memory)
    td.memmap(tmp_path / "folder")
    td.memmap(tmp_path / "one.tbx", archive=True)
    stores = [
        memory,
        FolderStore(str(tmp_path / "folder")),
        ArchiveStore(str(tmp_path / "one.tbx")),
    ]
    loaded = [load_from(s) for s in stores]
    for back in loaded:
        assert (back == td).all() and back["name"] == "run"
        assert back["n", "y"].dtype is torch.bfloat16

    # the same meta.json in every store (but the random file ids): one writer of the format
    def no_ids(raw: bytes) -> dict:
        doc = json.loads(raw)
        for e in doc["entries"].values():
            e.pop("id", None)
        return doc

    folder_meta = (tmp_path / "folder" / "n" / "meta.json").read_bytes()
    assert no_ids(memory.files["n/meta.json"]) == no_ids(folder_meta)
    shapes = [[(k, n.batch_size, sorted(n.entries)) for k, n in iter_nodes(s)] for s in stores]
    assert shapes[0] == shapes[1] == shapes[2]


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(0, 5),
    feature=st.lists(st.integers(0, 3), max_size=2),
    dtype=st.sampled_from([torch.float32, torch.int64, torch.uint8, torch.bool, torch.float16]),
)
def test_memory_round_trip_against_torch(rows: int, feature: list[int], dtype: torch.dtype) -> None:
    t = (torch.arange(rows * int(np.prod(feature or [1]))) % 7).reshape(rows, *feature).to(dtype)
    td = TensorDict(a=t, b={"c": t.clone()}, batch_size=[rows])
    store = MemoryStore()
    save_to(td, store)
    back = load_from(store)
    assert torch.equal(back["a"], t) and torch.equal(back["b", "c"], t)
    assert back["a"].dtype is dtype


def test_a_save_replaces_the_whole_memory_tree_at_commit() -> None:
    store = MemoryStore()
    save_to(_tree(), store)
    save_to(TensorDict(only=torch.ones(2), batch_size=[2]), store)
    assert sorted(store.files) == ["meta.json", "only.memmap"]  # nothing of the first tree left
