"""Trees behind URLs read lazily (``tensorbox._storage.remote_tree``): bytes moved counted
by the loopback HTTP server, folder trees and archives on moto's S3 server, failures
(a server dying mid-read, a replaced tree, refused credentials, a silent server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorbox
from tensorbox import TensorDict, pack, unpack
from tensorbox._storage import remote
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.remote_tree import RemoteTensor
from tensorbox.data import BatchLoader
from tests.servers import HTTPServer, S3Server

pytest.importorskip("fsspec")
MiB = 1 << 20


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> remote.RangeCache:
    c = remote.RangeCache(str(tmp_path / "cache"), max_bytes=1 << 30)
    monkeypatch.setattr(remote.cache, "_default", c)
    return c


def _serve(http_server: HTTPServer, name: str, td: TensorDict, tmp_path: Path) -> str:
    td.memmap(str(tmp_path / name), archive=True)
    os.replace(tmp_path / name, http_server.root / name)
    return f"{http_server.url}/{name}"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> TensorDict:
    """64 leaves of 1 MiB each (64 MiB), distinct contents."""
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            f"k{i:02d}": torch.randint(0, 255, (256, 4096), dtype=torch.uint8, generator=g)
            for i in range(64)
        },
        [256],
    )


def test_one_leaf_of_a_64_mib_archive_moves_about_one_mib(
    http_server: HTTPServer, tmp_path: Path, big: TensorDict, cache: remote.RangeCache
) -> None:
    url = _serve(http_server, "big.tdz", big, tmp_path)
    before = http_server.bytes_sent
    td = TensorDict.load_memmap(url)
    opened = http_server.bytes_sent - before
    assert opened <= 256 << 10  # the index and meta.json: nothing per leaf
    assert type(td["k07"]) is RemoteTensor and td["k07"].shape == (256, 4096)
    assert http_server.bytes_sent - before == opened  # shapes and dtypes cost nothing
    assert torch.equal(td["k07"] + 0, big["k07"])
    moved = http_server.bytes_sent - before
    assert MiB <= moved <= 2 * MiB  # one leaf, not the 64 MiB object
    assert type(td["k07"]) is MemoryMappedTensor  # whole now: a mapping of the cache
    assert td["k07"].untyped_storage().filename is None or True
    # rows only: 3 rows of another leaf, a few pages
    mark = http_server.bytes_sent
    assert torch.equal(td["k20"][[3, 100, 255]], big["k20"][[3, 100, 255]])
    assert http_server.bytes_sent - mark <= 64 << 10
    # a second read, in a new open, moves nothing
    mark = http_server.bytes_sent
    again = TensorDict.load_memmap(url)
    assert torch.equal(again["k07"].sum(0), big["k07"].sum(0))
    assert torch.equal(again["k20"][100], big["k20"][100])
    assert http_server.bytes_sent == mark


def test_cache_off_and_prefetch(
    http_server: HTTPServer, tmp_path: Path, cache: remote.RangeCache
) -> None:
    td = TensorDict({"x": torch.arange(5000), "n": {"y": torch.randn(5000, 8)}}, [5000])
    url = _serve(http_server, "opts.tdz", td, tmp_path)
    mem = TensorDict.load_memmap(url, cache=False)
    assert torch.equal(mem["n", "y"][10:20], td["n", "y"][10:20])
    assert torch.equal(mem["x"] * 1, td["x"])
    assert type(mem["x"]) is torch.Tensor  # whole, in memory
    assert not os.path.exists(cache.directory)  # nothing written to disk
    full = TensorDict.load_memmap(url, prefetch=True)
    assert all(type(t) is MemoryMappedTensor for t in full.values(True, True))
    mark = http_server.bytes_sent
    assert torch.equal(full["n", "y"], td["n", "y"])
    assert http_server.bytes_sent == mark


def test_server_dying_mid_read(
    http_server: HTTPServer, tmp_path: Path, big: TensorDict, cache: remote.RangeCache
) -> None:
    url = _serve(http_server, "die.tdz", big, tmp_path)
    td = TensorDict.load_memmap(url)
    http_server.cut_replies_after(1000)
    try:
        with pytest.raises(OSError, match=r"die\.tdz.*failed 3 times"):
            td["k03"].sum()
    finally:
        http_server.cut_replies_after(None)
    assert not [
        f
        for f in os.listdir(cache.directory)
        if f.endswith((".have", ".bin"))
        and os.path.getsize(os.path.join(cache.directory, f)) > 200_000
    ]
    assert type(td["k03"]) is RemoteTensor  # nothing recorded: fetched again below
    assert torch.equal(td["k03"][7], big["k03"][7])


def test_tree_replaced_between_reads(http_server: HTTPServer, tmp_path: Path) -> None:
    a = TensorDict({"x": torch.zeros(16384, 16)}, [16384])
    url = _serve(http_server, "rep.tdz", a, tmp_path)
    first = TensorDict.load_memmap(url)
    assert first["x"][0].sum().item() == 0.0
    _serve(http_server, "rep.tdz", TensorDict({"x": torch.ones(16384, 16)}, [16384]), tmp_path)
    with pytest.raises(OSError, match=r"rep\.tdz'.*changed since the tree was opened"):
        first["x"][8000]  # never bytes of the new object under the old tree
    assert first["x"][0].sum().item() == 0.0  # what it fetched before stays consistent
    second = TensorDict.load_memmap(url)
    assert second["x"][0].sum().item() == 16.0 and second["x"][8000].sum().item() == 16.0


def test_credentials_refused(http_server: HTTPServer, tmp_path: Path) -> None:
    url = _serve(http_server, "secret.tdz", TensorDict({"x": torch.arange(3)}, [3]), tmp_path)
    http_server.require_token("s3cr3t")
    try:
        with pytest.raises(PermissionError, match=r"secret\.tdz'.*access refused.*credentials"):
            TensorDict.load_memmap(url)
        opts = {"headers": {"Authorization": "Bearer s3cr3t"}}
        assert TensorDict.load_memmap(url, storage_options=opts)["x"].tolist() == [0, 1, 2]
    finally:
        http_server.require_token(None)


@pytest.mark.heavy
def test_silent_server_times_out(silent_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSORBOX_REMOTE_TIMEOUT", "0.5")
    with pytest.raises(OSError, match=r"127\.0\.0\.1.*ds\.tdz"):
        TensorDict.load_memmap(silent_server)


_ROWS = torch.arange(300 * 700, dtype=torch.float64).reshape(300, 700)


@pytest.fixture(scope="module")
def rows_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    saved = remote.cache._default
    remote.cache._default = remote.RangeCache(str(tmp_path_factory.mktemp("rows-cache")))
    try:
        TensorDict({"x": _ROWS}, [300]).memmap("memory://rows/t.tdz", archive=True)
    finally:
        remote.cache._default = saved
    return "memory://rows/t.tdz"


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(st.integers(-300, 299), min_size=1, max_size=20),
    a=st.integers(0, 300),
    b=st.integers(0, 300),
)
def test_row_reads_match_torch(rows_url: str, rows: list[int], a: int, b: int) -> None:
    src = _ROWS
    t = TensorDict.load_memmap(rows_url, cache=False)["x"]
    assert torch.equal(t[rows], src[rows])
    assert torch.equal(t[a:b], src[a:b])
    picked = torch.tensor(rows) % 300
    assert torch.equal(torch.index_select(t, 0, picked), src[picked])
    assert torch.equal(t[rows[0]], src[rows[0]])
    mask = torch.zeros(300, dtype=torch.bool)
    mask[picked] = True
    assert torch.equal(t[mask], src[mask])
    assert torch.equal(t.sum(0), src.sum(0))


# ---- S3 (moto) -------------------------------------------------------------------


def test_s3_folder_tree_and_pack_unpack(s3_server: S3Server, tmp_path: Path) -> None:
    import s3fs

    opts = s3_server.storage_options()
    fs = s3fs.S3FileSystem(**opts)
    fs.mkdir("tbx-folders")
    td = TensorDict({"x": torch.arange(100), "n": {"y": torch.randn(100, 3)}, "s": "hi"}, [100])
    td.memmap(str(tmp_path / "tree"))
    fs.put(str(tmp_path / "tree"), "tbx-folders/tree", recursive=True)  # as a sync tool would
    back = TensorDict.load_memmap("s3://tbx-folders/tree", storage_options=opts)
    assert type(back["n", "y"]) is RemoteTensor and back["s"] == "hi"
    assert torch.equal(back["n", "y"][5:9], td["n", "y"][5:9])
    assert torch.equal(back["x"] + 0, td["x"])
    sub = TensorDict.load_memmap("s3://tbx-folders/tree/n", storage_options=opts)
    assert torch.equal(sub["y"] * 1, td["n", "y"])
    with pytest.raises(FileNotFoundError, match=r"s3://tbx-folders/none"):
        TensorDict.load_memmap("s3://tbx-folders/none", storage_options=opts)
    # pack to a URL, unpack from one
    assert pack(str(tmp_path / "tree"), "s3://tbx-folders/p.tdz", storage_options=opts) == (2, 2)
    unpack("s3://tbx-folders/p.tdz", str(tmp_path / "out"), storage_options=opts)
    assert torch.equal(TensorDict.load_memmap(tmp_path / "out")["n", "y"], td["n", "y"])
    with pytest.raises(
        ValueError, match=r"unpack\(\.\.\., 's3://tbx-folders/x'\): a folder tree cannot"
    ):
        unpack("s3://tbx-folders/p.tdz", "s3://tbx-folders/x", storage_options=opts)


def test_s3_credentials_from_environment(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir("tbx-env")
    td = TensorDict({"x": torch.arange(1000)}, [1000])
    td.memmap("s3://tbx-env/ds.tdz", archive=True)  # no storage_options: the AWS_* variables
    back = TensorDict.load_memmap("s3://tbx-env/ds.tdz")
    assert torch.equal(back["x"][990:], td["x"][990:])
    s3fs.S3FileSystem.clear_instance_cache()


# ---- data-parallel reading -------------------------------------------------------


@pytest.mark.heavy
def test_batch_loader_fetches_only_its_share(
    http_server: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rows alone, whatever their distance (a small dataset's rows are close together:
    # by default, parts closer than 256 KiB are read with what lies between them)
    monkeypatch.setenv("TENSORBOX_REMOTE_GAP", "0")
    n = 512
    data = TensorDict(
        {
            "images": torch.randint(0, 255, (n, 3, 32, 32), dtype=torch.uint8),
            "targets": torch.arange(n),
        },
        [n],
    )
    url = _serve(http_server, "ddp.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    mark = http_server.bytes_sent
    loader = BatchLoader(td, 32, seed=3, num_replicas=4, rank=1, num_threads=1)
    seen = []
    for batch in loader:
        seen.append(batch["targets"])
        assert torch.equal(batch["images"], data["images"][batch["targets"]])
    rows = torch.cat(seen)
    assert len(rows) == n // 4
    moved = http_server.bytes_sent - mark
    image_bytes = data["images"][0].numel()
    # a quarter of the images (3 KiB each, one page per row) and the small targets leaf
    assert moved <= (n // 4) * 4096 + n * 8 + (64 << 10)
    assert moved >= (n // 4) * image_bytes - (128 << 10)  # the tail read at open holds some


def test_prefetch_is_public_and_fetches_rows(http_server: HTTPServer, tmp_path: Path) -> None:
    data = TensorDict({"a": torch.randn(2000, 64), "b": torch.arange(2000)}, [2000])
    url = _serve(http_server, "pf.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    fut = tensorbox.prefetch(td, torch.tensor([1, 2, 1500]))
    assert fut.result() is None
    mark = http_server.bytes_sent
    assert torch.equal(td["a"][[1, 2, 1500]], data["a"][[1, 2, 1500]])
    assert torch.equal(td["b"][1500], data["b"][1500])
    assert http_server.bytes_sent == mark  # fetched already
    with pytest.raises(TypeError, match=r"prefetch: rows must be .* got str"):
        tensorbox.prefetch(td, "rows")
    assert tensorbox.prefetch(td).result() is None
    assert all(type(t) is MemoryMappedTensor for t in td.values(True, True))


def test_close_rows_are_read_with_what_lies_between(
    http_server: HTTPServer, tmp_path: Path
) -> None:
    data = TensorDict({"a": torch.randn(1000, 1024)}, [1000])  # 4 KiB rows: a part each
    url = _serve(http_server, "dense.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    mark = http_server.bytes_sent
    assert torch.equal(td["a"][[10, 30]], data["a"][[10, 30]])  # 80 KiB apart: one range
    assert 21 * 4096 <= http_server.bytes_sent - mark <= 24 * 4096
    mark = http_server.bytes_sent
    assert torch.equal(td["a"][11:30], data["a"][11:30])  # kept: nothing moves
    assert http_server.bytes_sent == mark


@pytest.mark.heavy
def test_dataloader_workers_fetch_only_the_share(
    http_server: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    monkeypatch.setenv("TENSORBOX_REMOTE_GAP", "0")
    n = 256
    data = TensorDict({"images": torch.randint(0, 255, (n, 4096), dtype=torch.uint8)}, [n])
    url = _serve(http_server, "dl.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    sampler = BatchSampler(DistributedSampler(range(n), num_replicas=2, rank=0, seed=1), 16, False)
    mark = http_server.bytes_sent
    loader = DataLoader(td, sampler=sampler, batch_size=None, num_workers=2,
                        collate_fn=lambda b: b, multiprocessing_context="fork")  # fmt: skip
    got = torch.cat([b["images"] for b in loader])
    assert got.shape == (n // 2, 4096)
    rows = torch.tensor(list(DistributedSampler(range(n), num_replicas=2, rank=0, seed=1)))
    assert torch.equal(got.sort(0).values, data["images"][rows].sort(0).values)
    moved = http_server.bytes_sent - mark
    assert (n // 2) * 4096 - (128 << 10) <= moved <= (n // 2) * 4096 + (64 << 10)
