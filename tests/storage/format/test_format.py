"""The on-disk format: key encoding, meta.json reading and validation, tensordict trees."""

from __future__ import annotations

import json
import os
import re
import shutil
import unicodedata
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict
from tensorbox._core.encoding import DTYPES, check_json_value, dtype_name
from tensorbox._storage.folder import FolderStore
from tensorbox._storage.format import spec as fmt
from tensorbox._storage.format.metafile import write_meta
from tensorbox._storage.format.names import decode_key, encode_key, is_plain_name
from tensorbox._storage.format.parse import leaf_spec
from tensorbox._storage.store import JsonEntry, Node, iter_nodes
from tensorbox.errors import FormatError, IncompleteTreeError

DATA = Path(__file__).resolve().parents[2] / "fixtures"


def _read(path: str) -> Node:
    """The checked root node of the folder tree at ``path``."""
    return FolderStore(path).node()


def _walk(path: str) -> list[tuple[tuple[str, ...], Node]]:
    return list(iter_nodes(FolderStore(path)))


# ---------------------------------------------------------------- key encoding


@pytest.mark.parametrize(
    ("key", "leaf", "node"),
    [
        ("obs", "obs", "obs"),
        ("layer.0.weight", "layer.0.weight", "layer%2E0%2Eweight"),
        ("Obs", "^obs", "^obs"),
        ("weird key", "weird%20key", "weird%20key"),
        ("a/b", "a%2Fb", "a%2Fb"),
        ("..", "%2E.", "%2E%2E"),
        (".", "%2E", "%2E"),
        ("", "%", "%"),
        ("é", "%C3%A9", "%C3%A9"),
        ("con", "%63on", "%63on"),
        ("nul.txt", "%6Eul.txt", "nul%2Etxt"),
        ("meta.json", "meta.json", "meta%2Ejson"),
        ("x^%~", "x%5E%25%7E", "x%5E%25%7E"),
    ],
)
def test_encode_key_examples(key: str, leaf: str, node: str) -> None:
    assert encode_key(key) == leaf
    assert encode_key(key, node=True) == node
    assert decode_key(leaf) == key
    assert decode_key(node) == key


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_encode_key_is_reversible_and_safe(key: str) -> None:
    for node in (False, True):
        name = encode_key(key, node=node)
        if "~" in name:  # a long name, cut and hashed: meta.json keeps the key
            assert len(name) <= 200
        else:
            assert decode_key(name) == key
        assert is_plain_name(name)
        assert not name.startswith(".")
        assert name.isascii()
        assert not any(c.isupper() for c in re.sub("%[0-9A-F]{2}", "", name))
        if node:
            assert "." not in name  # no collision with files or meta.json


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12), st.text(max_size=12))
def test_distinct_keys_never_share_a_name_even_case_folded(a: str, b: str) -> None:
    if a == b:
        return
    for node in (False, True):
        na, nb = encode_key(a, node=node), encode_key(b, node=node)
        assert na.casefold() != nb.casefold()
        assert unicodedata.normalize("NFD", na) != unicodedata.normalize("NFD", nb)


def test_keys_differing_in_case_or_normalisation_get_different_names() -> None:
    names = {encode_key(k) for k in ("A", "a", "é", "e\u0301", "\uff21")}
    assert len({n.casefold() for n in names}) == 5


def test_long_keys_are_cut_with_a_hash() -> None:
    a, b = "k" * 300, "k" * 299 + "j"
    na, nb = encode_key(a), encode_key(b)
    assert na != nb and len(na) <= 200 and "~" in na
    assert len(encode_key("é" * 200).encode()) <= 200
    with pytest.raises(ValueError, match="not a name made by encode_key"):
        decode_key(na)


def test_decode_key_refuses_foreign_names() -> None:
    with pytest.raises(ValueError, match=r"not a name made by encode_key \(at 'B'\)"):
        decode_key("aB")


def test_dtype_names_cover_torch_dtypes() -> None:
    assert DTYPES["bfloat16"] is torch.bfloat16
    assert dtype_name(torch.complex64) == "complex64"
    with pytest.raises(TypeError, match=r"key 'q' has dtype torch.quint8, which the tensorbox"):
        dtype_name(torch.quint8, "key 'q'")


def test_check_json_value() -> None:
    assert check_json_value({"a": [1, 2.5, None, True, "s"]}, "k") is False
    assert check_json_value([float("nan")], "k") is True
    assert check_json_value(2**70, "k") is True
    with pytest.raises(TypeError, match=r"k: value \(1, 2\) of type tuple cannot be saved"):
        check_json_value([(1, 2)], "k")
    with pytest.raises(TypeError, match=r"k: dict key 1 of type int cannot be saved"):
        check_json_value({1: 2}, "k")


# ---------------------------------------------------------------- reading


def _tree(path: Path, entries: dict, files: dict[str, bytes] | None = None, **fields) -> Path:
    """A one-node tree with a hand-written meta.json."""
    tmp_path = path
    meta = {
        "format": "tensorbox",
        "version": 1,
        "type": "TensorDict",
        "batch_size": [2],
        "device": None,
        "entries": entries,
    }
    meta.update(fields)
    tmp_path.mkdir(exist_ok=True)
    for name, data in (files or {}).items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    return tmp_path


def _tensor(shape=(2, 3), dtype="float32", file="x.memmap") -> dict:
    return {"kind": "tensor", "dtype": dtype, "shape": list(shape), "file": file}


def test_read_node_valid(tmp_path: Path) -> None:
    path = _tree(
        tmp_path,
        {
            "x": _tensor(),
            "s": {"kind": "json", "value": "hi"},
            "t": {"kind": "json", "value": [[1], [2]], "stacked": True},
        },
        {"x.memmap": bytes(24)},
    )
    node = _read(str(path))
    assert node.batch_size == (2,) and node.type == "TensorDict" and not node.legacy
    x = node.entries["x"]
    assert (x.dtype, x.shape, x.path, x.nbytes) == (
        torch.float32,
        (2, 3),
        str(path / "x.memmap"),
        24,
    )
    st = os.stat(path / "x.memmap")
    assert x.ident == (st.st_dev, st.st_ino)
    assert node.entries["s"] == JsonEntry("hi", False)
    assert node.entries["t"].value.tolist() == [[1], [2]]


def test_missing_meta_is_incomplete(tmp_path: Path) -> None:
    (tmp_path / "x.memmap").write_bytes(bytes(8))
    with pytest.raises(IncompleteTreeError, match=r"meta.json is missing: the save .* did not"):
        _read(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"no saved tree at .*nope"):
        _read(str(tmp_path / "nope"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"format": "tensorbox", "version": 1, "ty', "is not valid JSON"),
        ("", "is not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"format": "other"}', "'format' is 'other', expected 'tensorbox'"),
        ('{"format": "tensorbox", "version": 5}', "format version 5; .* newer: upgrade"),
        ('{"format": "tensorbox", "version": "1"}', "'version' is '1', expected an int"),
        ('{"format": "tensorbox", "version": true}', "'version' is True, expected an int"),
        ('{"format": "tensorbox", "version": 1}', r"missing fields \['batch_size'"),
        ("[" * 100_000, "is not valid JSON"),
    ],
)
def test_bad_documents(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "meta.json").write_text(text)
    with pytest.raises(FormatError, match=match) as info:
        _read(str(tmp_path))
    assert "meta.json" in str(info.value)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"batch_size": [-1]}, r"'batch_size' is \[-1\]; -1 is not an int >= 0"),
        ({"batch_size": [True]}, r"True is not an int >= 0"),
        ({"batch_size": [2.0]}, r"2.0 is not an int >= 0"),
        ({"batch_size": 2}, "'batch_size' is 2, expected a list"),
        ({"batch_size": [1] * 65}, "expected a list of at most 64 ints"),
        ({"batch_size": [2**40, 2**40]}, "too large for a tensor"),
        ({"device": "warp:9"}, "'device' is 'warp:9', expected a device or null"),
        ({"device": 3}, "'device' is 3"),
        ({"type": ""}, "'type' is '', expected a non-empty str"),
        ({"entries": []}, r"'entries' is \[\], expected an object"),
        ({"extra": 1}, r"unexpected fields \['extra'\]"),
    ],
)
def test_bad_node_fields(tmp_path: Path, fields: dict, match: str) -> None:
    _tree(tmp_path, **{"entries": {}, **fields})
    with pytest.raises(FormatError, match=match):
        _read(str(tmp_path))


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("x", r"entry 'k' is 'x'; expected an object with 'kind'"),
        ({"kind": "blob"}, r"entry 'k' is .*'kind' one of \['jagged', 'json', 'node', 'tensor'\]"),
        ({**_tensor(), "extra": 1}, r"has fields .*a 'tensor' entry of format version 1 has"),
        ({"kind": "tensor", "dtype": "float32"}, r"has fields \['dtype', 'kind'\]"),
        (_tensor(dtype="float33"), "dtype 'float33' is not one of"),
        (_tensor(dtype=7), "dtype 7 is not one of"),
        (_tensor(shape=(3,)), r"shape \[3\] does not start with batch_size \[2\]"),
        (
            _tensor(shape=(2, 10**12)),
            r"x.memmap is 24 bytes, but float32 of shape \[2, 1000000000000\] needs 8000000000000",
        ),
        (_tensor(shape=(2, 2**61)), "too large for a tensor"),
        (_tensor(shape=(2, "3")), r"'3' is not an int >= 0"),
        (
            _tensor(shape=(2, 4)),
            "x.memmap is 24 bytes, but float32 of shape \\[2, 4\\] needs 32: the file is truncated",
        ),
        (_tensor(file="y.memmap"), r"y.memmap is missing \(.*entry 'k'\)"),
        (_tensor(file="../x.memmap"), r"file '../x.memmap' is not a plain file name"),
        (_tensor(file=".."), r"file '..' is not a plain file name"),
        (_tensor(file="/etc/passwd"), "is not a plain file name"),
        (_tensor(file="a\0b"), "is not a plain file name"),
        ({"kind": "node", "dir": "../.."}, "dir '../..' is not a plain directory name"),
        ({"kind": "node", "dir": "x.memmap"}, "x.memmap is not a directory"),
        ({"kind": "node", "dir": "sub"}, "sub is missing"),
        ({"kind": "json"}, "entry 'k' has no 'value'"),
        ({"kind": "json", "value": 1, "stacked": 1}, "'stacked' is 1, expected true or false"),
        (
            {"kind": "json", "value": [1], "stacked": True},
            r"stacked value does not have the shape of batch_size \[2\]",
        ),
        ({"kind": "json", "value": "ab", "stacked": True}, "stacked value does not have the shape"),
    ],
)
def test_bad_entries(tmp_path: Path, entry: object, match: str) -> None:
    _tree(tmp_path, {"k": entry}, {"x.memmap": bytes(24)})
    with pytest.raises(FormatError, match=match):
        _read(str(tmp_path))


def test_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(bytes(24))
    tree = tmp_path / "tree"
    _tree(tree, {"k": _tensor(file="link.memmap")}, {"x.memmap": bytes(24)})
    (tree / "link.memmap").symlink_to(outside)
    with pytest.raises(
        FormatError, match=r"link.memmap is a symlink to .*outside.bin.*outside the tree"
    ):
        _read(str(tree))
    (tree / "link.memmap").unlink()
    (tree / "link.memmap").symlink_to(tree / "x.memmap")  # inside: allowed
    assert _read(str(tree)).entries["k"].path == str(tree / "x.memmap")
    (tmp_path / "elsewhere").mkdir()
    (tree / "sub").symlink_to(tmp_path / "elsewhere")
    _tree(tree, {"k": {"kind": "node", "dir": "sub"}})
    with pytest.raises(FormatError, match=r"sub is not a directory \(symlinks are refused\)"):
        _read(str(tree))
    (tree / "meta.json").unlink()
    (tree / "meta.json").symlink_to(outside)
    with pytest.raises(FormatError, match=r"meta\.json cannot be read"):
        _read(str(tree))


def test_fast_path_agrees_with_the_checked_path(tmp_path: Path) -> None:
    """read_node checks the usual tensor entry inline; anything unusual takes the long
    way (tensor_entry). Both must give the same entries and the same errors."""
    files = {
        "x.memmap": bytes(24),
        "%C3%A9.memmap": bytes(24),
        "\u00e9.memmap": bytes(24),  # a name no tensorbox writer makes: still a plain name
        "e.memmap": b"",
        "long.memmap": bytes(40),  # longer than needed: fine
    }
    entries = {
        "x": _tensor(),
        "hex": _tensor(file="%C3%A9.memmap"),
        "utf": _tensor(file="\u00e9.memmap"),
        "empty": _tensor(shape=(2, 0)),
        "empty2": _tensor(shape=(2, 0, 2**61), file="e.memmap"),
        "long": _tensor(shape=(2, 5), dtype="int32", file="long.memmap"),
    }
    entries["empty"]["file"] = "e.memmap"
    path = _tree(tmp_path, entries, files)
    node = _read(str(path))
    for key, e in entries.items():
        where = f"{path / 'meta.json'}: entry {key!r}"
        files = FolderStore(str(path)).open_node("")
        files.close()  # no directory descriptor: the checked way, which names problems
        slow = files.leaf(leaf_spec(e["file"], e["dtype"], e["shape"], (2,), where), where)
        assert node.entries[key] == slow
    bad = [
        (_tensor(file="short.memmap"), {"short.memmap": bytes(8)}, r"short.memmap is 8 bytes"),
        (_tensor(file="gone.memmap"), {}, r"gone.memmap is missing"),
        (_tensor(shape=(3, 2)), {"x.memmap": bytes(24)}, r"does not start with batch_size"),
        (_tensor(dtype="float128"), {"x.memmap": bytes(24)}, r"dtype 'float128'"),
        (_tensor(shape=(2, 2**62, 2)), {"x.memmap": bytes(24)}, r"too large"),
        (_tensor(file="sub"), {}, r"sub is not a regular file"),
    ]
    for i, (entry, more, match) in enumerate(bad):
        tree = tmp_path / f"bad{i}"
        _tree(tree, {"k": entry}, more)
        (tree / "sub").mkdir()
        with pytest.raises(FormatError, match=match):
            _read(str(tree))


def test_nan_and_big_ints_round_trip_through_write_meta(tmp_path: Path) -> None:
    value = [float("nan"), float("inf"), 2**80, "ü"]
    meta = fmt.node_meta("TensorDict", [], None, {"v": {"kind": "json", "value": value}})
    write_meta(str(tmp_path), meta, std_json=True, fsync=True)
    got = _read(str(tmp_path)).entries["v"].value
    assert got[1:] == value[1:] and got[0] != got[0]
    assert os.listdir(tmp_path) == ["meta.json"]  # no temporary file left


def test_write_meta_replaces_atomically(tmp_path: Path) -> None:
    write_meta(str(tmp_path), fmt.node_meta("TensorDict", [1], "cpu", {}))
    write_meta(str(tmp_path), fmt.node_meta("TensorDict", [2], "cpu", {}))
    assert _read(str(tmp_path)).batch_size == (2,)
    assert os.listdir(tmp_path) == ["meta.json"]


# ---------------------------------------------------------------- tensordict trees


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    for name in ("tensordict_mmap_example", "tensordict_0_15_tree"):
        shutil.copytree(DATA / name, tmp_path / name)
    return tmp_path


def test_reads_tensordict_format_0(legacy: Path) -> None:
    nodes = dict(_walk(str(legacy / "tensordict_mmap_example")))
    assert nodes[()].legacy and nodes[()].version == 0 and nodes[()].batch_size == (2, 1)
    nested = nodes[("nested",)].entries
    int64 = nested["int64"]
    assert (int64.dtype, int64.shape, int64.nbytes) == (torch.int64, (2, 1), 16)
    assert int64.path == str(legacy / "tensordict_mmap_example/nested/int64.memmap")
    assert nested["bfloat16"].dtype is torch.bfloat16
    assert nested["string"] == JsonEntry(["a string!"], False)


def test_reads_tensordict_format_1(legacy: Path) -> None:
    nodes = dict(_walk(str(legacy / "tensordict_0_15_tree")))
    root = nodes[()]
    assert root.version == 1 and list(root.entries) == [
        "obs", "label", "mask", "nested", "note", "weird key",
    ]  # fmt: skip
    assert root.entries["weird key"].path.endswith("weird%20key.memmap")
    assert root.entries["note"] == JsonEntry("hello", False)
    assert nodes[("nested", "deep")].entries["x"].dtype is torch.int16


def test_legacy_trees_are_checked_too(legacy: Path) -> None:
    root = legacy / "tensordict_0_15_tree"
    (root / "obs.memmap").write_bytes(bytes(40))
    with pytest.raises(
        FormatError, match=r"obs.memmap is 40 bytes, but float32 of shape \[3, 4\] needs 48"
    ):
        _read(str(root))
    meta = json.loads((root / "meta.json").read_text())
    meta["_format_version"] = 7
    (root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FormatError, match="tensordict format version 7; tensorbox reads 0 and 1"):
        _read(str(root))
    meta["_format_version"] = 1
    meta["_class"] = "tensordict:LazyStackedTensorDict"
    (root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        FormatError, match=r"a lazy stack without elements \(no sub-directory '0'\)"
    ):
        _read(str(root))
    meta["_class"] = "tensordict:LazyStackedTensorDictOfTheFuture"
    (root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(
        FormatError, match="of class 'tensordict:LazyStackedTensorDictOfTheFuture'; tensorbox reads"
    ):
        _read(str(root))
    meta["_class"] = "tensordict:TensorDict"
    meta["obs"] = {"type": "LazyStackedTensorDict"}
    (root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FormatError, match=r"obs is missing .*meta\.json: entry 'obs'"):
        _read(str(root))
    meta["obs"] = {"dtype": "torch.float32", "shape": [3, 4], "file": "x", "is_nested": True}
    (root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FormatError, match="nested \\(jagged\\) tensors are not supported"):
        _read(str(root))
    meta["obs"] = {"dtype": "torch.float32", "shape": [3, 4]}
    (root / "obs.memmap").write_bytes(bytes(48))
    meta["weird key"] = [1]
    (root / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(FormatError, match=r"entry 'weird key' is \[1\], expected an object"):
        _read(str(root))


def test_reads_tensordict_non_tensor_stacks(legacy: Path) -> None:
    root = legacy / "tensordict_0_15_tree"
    meta = json.loads((root / "meta.json").read_text())
    meta["tags"] = {"type": "NonTensorStack"}
    (root / "meta.json").write_text(json.dumps(meta))
    (root / "tags").mkdir()
    stack = {"_type": "<class 'tensordict.tensorclass.NonTensorStack'>", "stack_dim": 0}
    (root / "tags" / "meta.json").write_text(json.dumps({**stack, "data": ["a", "b", "c"]}))
    assert _read(str(root)).entries["tags"].value.tolist() == ["a", "b", "c"]
    (root / "tags" / "meta.json").write_text(json.dumps({**stack, "stack_dim": 1, "data": []}))
    with pytest.raises(FormatError, match="only stacks along dim 0 are supported"):
        _read(str(root))
    (root / "tags" / "meta.json").write_text(json.dumps({**stack, "data": ["a"]}))
    with pytest.raises(
        FormatError, match=r"stacked value does not have the shape of batch_size \[3\]"
    ):
        _read(str(root))


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000  # valid JSON, deeper than any parser's recursion
    text = json.dumps(fmt.node_meta("TensorDict", [], None, {"v": {"kind": "json", "value": 0}}))
    (tmp_path / "meta.json").write_text(text.replace('"value": 0', f'"value": {deep}'))
    with pytest.raises(FormatError, match="is not valid JSON"):
        _read(str(tmp_path))
    # Nodes nested deeper than MAX_DEPTH (each level a directory) are refused too.
    d = tmp_path / "tree"
    levels = [d]
    for _ in range(fmt.MAX_DEPTH + 1):
        levels.append(levels[-1] / "n")
    levels[-1].mkdir(parents=True)
    for level in levels:
        entries = {"n": {"kind": "node", "dir": "n"}} if level != levels[-1] else {}
        write_meta(str(level), fmt.node_meta("TensorDict", [], None, entries))
    with pytest.raises(FormatError, match=f"nodes are nested more than {fmt.MAX_DEPTH} deep"):
        list(_walk(str(d)))
    with pytest.raises(FormatError, match=f"nodes are nested more than {fmt.MAX_DEPTH} deep"):
        TensorDict.load_memmap(d)
    assert TensorDict.load_memmap(levels[-50]).batch_size == ()  # a shallower part loads
