"""tensordict's archive spellings: a ``.tdz`` path writes an archive without
``archive=True``, and ``compression=`` compresses the tensor entries (loaded by copying)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox import FormatError, TensorDict, tensorclass
from tensorbox._storage.memmap_tensor import MemoryMappedTensor


def sample() -> TensorDict:
    return TensorDict(
        {
            "x": torch.arange(600.0).reshape(3, 200),
            "strided": torch.arange(30).reshape(3, 10)[:, ::2],
            "n": {"m": torch.ones(3, 2, dtype=torch.bfloat16)},
            "name": "run",
        },
        [3],
    )


def same(a: TensorDict, b: TensorDict) -> bool:
    return list(a.keys(True, True)) == list(b.keys(True, True)) and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k]
        for k in a.keys(True, True)
    )


def test_a_tdz_path_writes_an_archive(tmp_path: Path) -> None:
    td = sample()
    for name, call in [("a.tdz", td.memmap), ("b.tdz", td.save), ("c.tdz", td.dumps)]:
        out = call(tmp_path / name)
        assert (tmp_path / name).is_file() and zipfile.is_zipfile(tmp_path / name)
        assert isinstance(out["x"], MemoryMappedTensor) and same(out, td)
        assert same(TensorDict.load_memmap(tmp_path / name), td)
    # str paths, and paths whose folder is named like one: tensordict's rule is the suffix
    td.save(str(tmp_path / "d.tdz"))
    assert (tmp_path / "d.tdz").is_file()


@pytest.mark.parametrize("name", ["e.TDZ", "e.tdz.bak", ".tdz", "e_tdz"])
def test_other_paths_stay_folders(tmp_path: Path, name: str) -> None:
    sample().save(tmp_path / name)
    assert (tmp_path / name / "meta.json").is_file()


def test_archive_false_writes_a_folder_at_a_tdz_path(tmp_path: Path) -> None:
    sample().memmap(tmp_path / "f.tdz", archive=False)
    assert (tmp_path / "f.tdz" / "meta.json").is_file()
    assert same(TensorDict.load_memmap(tmp_path / "f.tdz"), sample())


def test_tensorclass_tdz(tmp_path: Path) -> None:
    @tensorclass
    class Pair:
        a: torch.Tensor
        b: str

    p = Pair(a=torch.arange(4), b="x", batch_size=[4])
    out = p.save(tmp_path / "p.tdz")
    assert (tmp_path / "p.tdz").is_file() and torch.equal(out.a, p.a) and out.b == "x"
    assert torch.equal(Pair.load_memmap(tmp_path / "p.tdz").a, p.a)


def test_memmap_like_refuses_an_archive(tmp_path: Path) -> None:
    td = sample().exclude("name")
    for kwargs, path in [({}, tmp_path / "g.tdz"), ({"archive": True}, tmp_path / "g.tbx")]:
        with pytest.raises(
            ValueError, match=r"memmap_like\(.*\) would write an archive .*read-only"
        ):
            td.memmap_like(path, **kwargs)
        assert not path.exists()
    out = td.memmap_like(tmp_path / "g.tdz", archive=False)
    assert (tmp_path / "g.tdz" / "meta.json").is_file() and out["x"].shape == (3, 200)


@pytest.mark.parametrize(
    ("compression", "method"),
    [("deflate", 8), ("DEFLATED", 8), ("bzip2", 12), ("lzma", 14), (8, 8), ("stored", 0)],
)
def test_compressed_entries_load_by_copying(
    tmp_path: Path, compression: str | int, method: int
) -> None:
    td = sample()
    path = tmp_path / "c.tdz"
    out = td.save(path, compression=compression)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        kinds = {i.filename: i.compress_type for i in zf.infolist()}
    assert {k for k, m in kinds.items() if m == method} >= {"x.memmap", "n/m.memmap"}
    assert kinds["meta.json"] == kinds["n/meta.json"] == 0  # as tensordict writes them
    back = TensorDict.load_memmap(path)
    assert same(back, td) and same(out, td)
    mapped = isinstance(back["x"], MemoryMappedTensor)
    assert mapped == (method == 0) and isinstance(out["x"], MemoryMappedTensor) == mapped
    if method:
        assert path.stat().st_size < 2400  # x alone is 2400 bytes stored


def test_compression_errors(tmp_path: Path) -> None:
    td = sample()
    with pytest.raises(ValueError, match=r"compression='deflate' applies to archives only.*folder"):
        td.save(tmp_path / "folder", compression="deflate")
    with pytest.raises(ValueError, match=r"compression='zstd' is not a compression .* expected"):
        td.save(tmp_path / "h.tdz", compression="zstd")
    with pytest.raises(ValueError, match=r"compression=99 is not a compression"):
        td.save(tmp_path / "h.tbx", archive=True, compression=99)
    assert not list(tmp_path.iterdir())  # refused before anything was written


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=0, max_size=200),
    compression=st.sampled_from(["deflate", "bzip2", "lzma", None]),
)
def test_any_tensor_round_trips_compressed(
    tmp_path: Path, values: list[int], compression: str | None
) -> None:
    td = TensorDict({"v": torch.tensor(values, dtype=torch.int32), "n": {"w": torch.ones(2)}}, [])
    path = tmp_path / "r.tdz"
    td.save(path, compression=compression)
    assert same(TensorDict.load_memmap(path), td)


# ---------------------------------------------------------------- unpickled leaves


def test_unpickled_leaves_of_one_archive_share_one_mapping(tmp_path: Path) -> None:
    import gc
    import os
    import pickle

    from tensorbox._storage import mapcache as _mapcache

    path = tmp_path / "m.tbx"
    td = sample().memmap(path, archive=True)
    blob = pickle.dumps([td["x"], td["n", "m"], td["strided"]])
    x, m, s = pickle.loads(blob)
    assert [k[0] for k in list(_mapcache._SHARED)].count(os.path.realpath(path)) == 1
    assert x.untyped_storage() is m.untyped_storage() is s.untyped_storage()
    assert x.untyped_storage() is not td["x"].untyped_storage()  # its own process's copy
    assert torch.equal(x, td["x"]) and torch.equal(s, td["strided"])
    x2 = pickle.loads(pickle.dumps(td["x"]))  # a later unpickle: the same mapping, still used
    assert x2.untyped_storage() is x.untyped_storage()
    # while leaves are alive, a new archive renamed in is a new file: a new mapping, or
    # a refusal when the reference names the old file
    other = TensorDict({"x": torch.full((3, 200), 7.0)}, [3]).memmap(path, archive=True)
    with pytest.raises(FormatError, match=r"was replaced after a tensor mapping it was pickled"):
        pickle.loads(blob)
    y = pickle.loads(pickle.dumps(other["x"]))
    assert y.untyped_storage() is not x.untyped_storage() and torch.equal(y, other["x"])
    assert torch.equal(x, sample()["x"])  # the old mapping still reads the old file
    # nothing kept once no tensor uses a mapping
    del x, m, s, x2, y, td, other
    gc.collect()
    assert not [k for k in list(_mapcache._SHARED) if k[0] == os.path.realpath(path)]


def test_writable_references_are_not_shared(tmp_path: Path) -> None:
    import pickle

    td = sample().exclude("name").memmap(tmp_path / "folder")
    a, b = (pickle.loads(pickle.dumps(td["x"])) for _ in range(2))
    assert a.untyped_storage() is not b.untyped_storage()  # shared mappings of the file
    a[0, 0] = 42.0
    assert b[0, 0].item() == 42.0  # both reach the file
