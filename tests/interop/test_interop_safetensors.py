"""``.safetensors`` read and write, with ``safetensors.torch`` as the oracle."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import FormatError, TensorDict, from_safetensors, to_safetensors

st_torch = pytest.importorskip("safetensors.torch")
SafetensorError = pytest.importorskip("safetensors").SafetensorError

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.float64,
    torch.int32,
]


@st.composite
def state_dicts(draw):
    names = draw(
        st.lists(
            st.sampled_from(["w", "b", "l0.w", "l0.b", "l1.x.y", "e"]),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    # drop names that nest under another one (a tensor cannot also be a node)
    names = [n for n in names if not any(m != n and n.startswith(m + ".") for m in names)]
    out = {}
    for n in names:
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        dtype = draw(st.sampled_from(DTYPES))
        out[n] = torch.randint(0, 2 if dtype is torch.bool else 50, shape).to(dtype)
    return out


@given(state_dicts())
def test_files_written_by_safetensors_read_the_same(tmp_path_factory, sd):
    path = tmp_path_factory.mktemp("s") / "m.safetensors"
    st_torch.save_file(sd, str(path))
    td = from_safetensors(path)
    for name, t in sd.items():
        got = td[tuple(name.split("."))]
        assert got.dtype == t.dtype and torch.equal(got, t)


@given(state_dicts())
def test_files_we_write_read_the_same_in_safetensors(tmp_path_factory, sd):
    path = tmp_path_factory.mktemp("s") / "m.safetensors"
    td = TensorDict()
    for k, v in sd.items():
        td.set(tuple(k.split(".")), v)
    to_safetensors(td, path)
    back = st_torch.load_file(str(path))
    assert back.keys() == sd.keys()
    for name, t in sd.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t)


def test_one_mapping_zero_copy_copy_on_write(tmp_path):
    path = tmp_path / "m.safetensors"
    st_torch.save_file({"a": torch.zeros(4), "b": torch.ones(4)}, str(path))
    td = TensorDict.load_memmap(path)  # the same API as a saved tree
    a, b = td["a"], td["b"]
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    a += 5  # a private mapping: the file keeps its bytes
    assert st_torch.load_file(str(path))["a"].sum() == 0


def test_partial_load_into_a_module(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    path = tmp_path / "model.safetensors"
    st_torch.save_file(model.state_dict(), str(path))
    layer = from_safetensors(path, prefix="1")
    assert set(layer.keys()) == {"weight", "bias"}
    fresh = torch.nn.Linear(4, 2)
    layer.to_module(fresh)
    assert torch.equal(fresh.weight, model[1].weight)
    whole = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    from_safetensors(path).to_module(whole)
    assert torch.equal(whole[0].bias, model[0].bias)
    only = from_safetensors(path, keys=["0.bias"])
    assert list(only.keys(True, True)) == [("0", "bias")]


def _write_raw(path, header, data=b""):
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


@pytest.mark.parametrize(
    ("header", "data", "match"),
    [
        (
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
            b"\0" * 4,
            r"'a' has data_offsets \[0, 8\]",
        ),
        (
            {"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}},
            b"\0" * 4,
            r"'a' has dtype 'Q9'",
        ),
        (
            {"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}},
            b"\0" * 4,
            r"'a' has shape \[-1\]",
        ),
        (
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}},
            b"\0" * 4,
            r"'a' spans 4 bytes, and shape \[2\] of F32 needs 8",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
            },
            b"\0" * 8,
            r"entries 'a' and 'b' overlap",
        ),
    ],
)
def test_damaged_headers_are_refused_naming_the_file(tmp_path, header, data, match):
    path = tmp_path / "bad.safetensors"
    _write_raw(path, header, data)
    with pytest.raises(FormatError, match=rf"bad\.safetensors: .*{match}"):
        from_safetensors(path)


def test_truncated_and_non_json_files(tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(FormatError, match=r"t\.safetensors: 2 bytes, too short"):
        from_safetensors(path)
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(FormatError, match=r"header size 1000 does not fit"):
        from_safetensors(path)
    path.write_bytes(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(FormatError, match="the header is not JSON"):
        from_safetensors(path)


def test_non_tensor_entries_and_collisions_are_refused(tmp_path):
    with pytest.raises(TypeError, match=r"entry 'note' is a NonTensorData"):
        to_safetensors(TensorDict({"note": "x", "w": torch.ones(1)}), tmp_path / "x.safetensors")
    with pytest.raises(KeyError, match=r"key 'a.b' nests under 'a', which is a tensor"):
        from_safetensors(_collide(tmp_path))
    td = TensorDict({"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}})
    with pytest.raises(KeyError, match=r"two entries are both named 'a.b'"):
        to_safetensors(td, tmp_path / "y.safetensors")


def _collide(tmp_path):
    path = tmp_path / "c.safetensors"
    st_torch.save_file({"a": torch.ones(1), "a.b": torch.ones(1)}, str(path))
    return path


@pytest.mark.heavy
def test_a_checkpoint_is_a_store_on_the_seam(tmp_path):
    """show, verify and load_memmap read a .safetensors file through the one loader."""
    import subprocess
    import sys

    from tensorbox._storage.store import iter_nodes, verify
    from tensorbox.interop._safetensors_layout import SafetensorsStore

    path = tmp_path / "model.safetensors"
    sd = {"enc.0.weight": torch.randn(4, 3), "enc.0.bias": torch.randn(4), "head": torch.ones(2)}
    st_torch.save_file(sd, str(path))
    store = SafetensorsStore(path)
    assert [keys for keys, _ in iter_nodes(store)] == [(), ("enc",), ("enc", "0")]
    assert verify(store) == (3, 3, 4 * 3 * 4 + 4 * 4 + 2 * 4)
    td = TensorDict.load_memmap(path)
    assert not td.is_locked and torch.equal(td["enc", "0", "weight"], sd["enc.0.weight"])
    on_meta = TensorDict.load_memmap(path, device="meta")
    assert on_meta["head"].device.type == "meta"
    out = subprocess.run(
        [sys.executable, "-m", "tensorbox", "show", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "(format safetensors)" in out and "'weight': float32 [4, 3]" in out


def test_a_checkpoint_opens_read_only(tmp_path):
    path = tmp_path / "model.safetensors"
    st_torch.save_file({"a": torch.zeros(2)}, str(path))
    with pytest.raises(
        ValueError, match=r"model.safetensors is a .safetensors file, which opens read-only"
    ):
        TensorDict.load_memmap(path, mode="r+")
    with pytest.raises(KeyError, match=r"no tensor under the prefix 'b'"):
        from_safetensors(path, prefix="b")
    with pytest.raises(KeyError, match=r"no tensor 'zz' in the file"):
        from_safetensors(path, keys=["zz"])


def _raw_header(path, text, data):
    """A file whose header is ``text`` as given (byte by byte: JSON tools would merge keys)."""
    blob = text.encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


@pytest.mark.parametrize(
    ("text", "twice"),
    [
        # one tensor named twice, at two ranges: a JSON parser keeps the last
        (
            '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
            "a",
        ),
        # one field named twice inside an entry
        (
            '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"data_offsets":[4,8]}}',
            "data_offsets",
        ),
        # the metadata twice
        (
            '{"__metadata__":{"x":"1"},"__metadata__":{"x":"2"},'
            '"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
            "__metadata__",
        ),
    ],
)
def test_a_name_given_twice_is_refused(tmp_path, text, twice):
    path = tmp_path / "twice.safetensors"
    _raw_header(path, text, struct.pack("<2f", 1.0, 2.0))
    with pytest.raises(FormatError, match=rf"twice\.safetensors: the header names '{twice}' twice"):
        from_safetensors(path)
    with pytest.raises(FormatError, match=rf"names '{twice}' twice"):
        TensorDict.load_memmap(path)


def test_a_key_that_spells_a_field_name_still_loads(tmp_path):
    """The cheap count that finds repeated names costs a careful parse here, no refusal."""
    path = tmp_path / "odd.safetensors"
    sd = {"dtype": torch.ones(1), "shape.data_offsets": torch.zeros(2)}
    st_torch.save_file(sd, str(path))
    td = from_safetensors(path)
    assert torch.equal(td["dtype"], sd["dtype"])
    assert torch.equal(td["shape", "data_offsets"], sd["shape.data_offsets"])


def _f32(begin, end, n):
    return {"dtype": "F32", "shape": [n], "data_offsets": [begin, end]}


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (
            {"a": _f32(0, 12, 3)},
            r"'a' has data_offsets \[0, 12\]; expected \[begin, end\] within the 8",
        ),
        ({"a": _f32(8, 4, 1)}, r"'a' has data_offsets \[8, 4\]"),
        ({"a": _f32(0, 8, 2), "b": _f32(4, 8, 1)}, r"entries 'a' and 'b' overlap"),
        ({"a": _f32(0, 8, 2), "b": _f32(0, 8, 2)}, r"entries 'a' and 'b' overlap"),
        ({"a": _f32(0, 4, 2)}, r"'a' spans 4 bytes, and shape \[2\] of F32 needs 8"),
    ],
)
def test_ranges_are_checked_against_the_library(tmp_path, header, match):
    """Each file is refused by safetensors itself too (the oracle), and by us with a
    FormatError naming the file and the key."""
    path = tmp_path / "r.safetensors"
    _write_raw(path, header, b"\0" * 8)
    with pytest.raises(SafetensorError, match="Error while deserializing header"):
        st_torch.load_file(str(path))
    with pytest.raises(FormatError, match=rf"r\.safetensors: .*{match}"):
        from_safetensors(path)


def test_writing_is_a_save_through_the_seam(tmp_path):
    """One class both ways: the saver writes through the store's Writer, and the saved
    copy it returns is read back from the new file (safetensors is the oracle)."""
    from tensorbox._storage.persist import save_to
    from tensorbox.interop._safetensors_layout import SafetensorsStore

    path = tmp_path / "m.safetensors"
    td = TensorDict(
        {"enc": {"w": torch.arange(6.0).view(2, 3)}, "h": torch.ones(1, dtype=torch.float16)}
    )
    saved = save_to(td, SafetensorsStore(path, mode="w"))
    assert torch.equal(saved["enc", "w"], td["enc", "w"]) and saved["h"].dtype == torch.float16
    oracle = st_torch.load_file(str(path))
    assert sorted(oracle) == ["enc.w", "h"] and torch.equal(oracle["enc.w"], td["enc", "w"])
    store = SafetensorsStore(path)
    with pytest.raises(
        FormatError, match=r"m\.safetensors: a \.safetensors file has no meta\.json"
    ):
        store.read_meta("")
    to_safetensors(td, path, metadata={"format": "pt", "n": 3})
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        assert f.metadata() == {"format": "pt", "n": "3"}


def test_a_refused_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "m.safetensors"
    to_safetensors(TensorDict({"w": torch.ones(2)}), path)
    before = path.read_bytes()
    for bad, match in (
        (TensorDict({"w": torch.zeros(2), "note": "x"}), r"entry 'note' is a NonTensorData"),
        (TensorDict({"w": torch.zeros(2, dtype=torch.complex128)}), r"entry 'w' has dtype"),
        (TensorDict({"a": torch.zeros(1), "a.b": torch.zeros(1)}), r"key 'a.b' nests under 'a'"),
    ):
        with pytest.raises((TypeError, KeyError), match=rf"m\.safetensors'\): {match}|{match}"):
            to_safetensors(bad, path)
        assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]
