"""Trees behind URLs: memory://, moto's S3 server and an HTTP server with Range support,
all on loopback (tests/servers.py); the cache is a temporary folder per test."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import TensorDict, cli
from tensorbox._storage import remote
from tests.servers import HTTPServer, S3Server

pytest.importorskip("fsspec")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> remote.RangeCache:
    c = remote.RangeCache(str(tmp_path / "cache"), max_bytes=1 << 30)
    monkeypatch.setattr(remote.cache, "_default", c)
    return c


def _td(n: int = 10, fill: float = 0.0) -> TensorDict:
    return TensorDict(
        {"x": torch.arange(n), "n": {"y": torch.full((n, 3), fill)}, "label": "hi"}, [n]
    )


def _equal(a: TensorDict, b: TensorDict) -> bool:
    return bool(torch.equal(a["x"], b["x"]) and torch.equal(a["n", "y"], b["n", "y"]))


@pytest.mark.heavy
def test_import_tensorbox_loads_no_remote_package() -> None:
    code = (
        "import sys, tensorbox; tensorbox.TensorDict.load_memmap\n"
        "print([m for m in ('fsspec', 's3fs', 'gcsfs', 'aiohttp', 'redis') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- URLs ------------------------------------------------------------------------


def test_split_url() -> None:
    assert remote.split_url("data/ds.tdz") is None
    assert remote.split_url(Path("s3://not/a/url/when/a/path")) is None
    assert remote.split_url("HTTPS://h/x.tdz::sub") == ("https", "https://h/x.tdz", "sub")
    with pytest.raises(ValueError, match=r"'foo://x': unknown URL scheme 'foo'.*s3://"):
        remote.split_url("foo://x")


def test_url_never_becomes_a_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"memmap\('s3://data/ds'\): a folder tree cannot be saved to object storage.*archive=True",
    ):
        _td().memmap("s3://data/ds")
    with pytest.raises(ValueError, match=r"memmap_\('memory://b/ds'\): a folder tree cannot"):
        _td().memmap_("memory://b/ds")
    with pytest.raises(
        ValueError, match=r"memmap_like\('memory://b/ds'\): memmap_like allocates files"
    ):
        _td().memmap_like("memory://b/ds")
    with pytest.raises(ValueError, match="unknown URL scheme 'foo'"):
        TensorDict.load_memmap("foo://host/ds.tdz")
    assert os.listdir(tmp_path) == []  # no folder named 's3:' or 'memory:'


@pytest.mark.heavy
def test_missing_filesystem_package_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['adlfs'] = None\n"
        "import importlib.util as u; real = u.find_spec\n"
        "u.find_spec = lambda n, *a: None if n == 'adlfs' else real(n, *a)\n"
        "from tensorbox import TensorDict\n"
        "try:\n    TensorDict.load_memmap('az://c/ds.tdz')\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        "'az://c/ds.tdz': az:// URLs need the 'adlfs' package: pip install 'tensorbox[azure]'"
        in out.stdout
    )


# ---- memory:// -------------------------------------------------------------------


def test_memory_round_trip_and_refusals() -> None:
    td = _td()
    saved = td.memmap("memory://bucket/rt.tdz", archive=True)
    assert _equal(saved, td) and saved.is_locked
    back = TensorDict.load_memmap("memory://bucket/rt.tdz")
    assert _equal(back, td) and back["label"] == "hi"
    assert torch.equal(TensorDict.load_memmap("memory://bucket/rt.tdz::n")["y"], td["n", "y"])
    with pytest.raises(
        ValueError, match=r"load_memmap\('memory://bucket/rt.tdz'\): mode='r\+'.*read-only"
    ):
        TensorDict.load_memmap("memory://bucket/rt.tdz", mode="r+")
    with pytest.raises(FileNotFoundError, match=r"'memory://bucket/none\.tdz': no such object"):
        TensorDict.load_memmap("memory://bucket/none.tdz")
    out: list[str] = []
    assert cli.show("memory://bucket/rt.tdz", out) == 0 and out[0].startswith(
        "memory://bucket/rt.tdz:"
    )
    out = []
    assert cli.verify("memory://bucket/rt.tdz", out, read=True) == 0


# ---- S3 (moto) -------------------------------------------------------------------


def test_s3_archive_round_trip_and_replacement(
    s3_server: S3Server, cache: remote.RangeCache
) -> None:
    import s3fs

    opts = s3_server.storage_options()
    fs = s3fs.S3FileSystem(**opts)
    fs.mkdir("tbx-test")
    url = "s3://tbx-test/ds.tdz"
    _td(fill=1.0).memmap(url, archive=True, storage_options=opts)
    for d in os.listdir(cache.directory):
        os.unlink(os.path.join(cache.directory, d))  # read through the server, not the save
    first = TensorDict.load_memmap(url, storage_options=opts)
    assert first["n", "y"].sum().item() == 30.0
    _td(fill=2.0).memmap(url, archive=True, storage_options=opts)  # replaced remotely
    second = TensorDict.load_memmap(url, storage_options=opts)
    assert second["n", "y"].sum().item() == 60.0  # the new object, never the cached old one
    assert first["n", "y"].sum().item() == 30.0  # an open tree keeps its generation
    with pytest.raises(ValueError, match=r"memmap\('s3://tbx-test/folder'\): a folder tree"):
        _td().memmap("s3://tbx-test/folder", storage_options=opts)


def test_s3_missing_bucket(s3_server: S3Server) -> None:
    with pytest.raises(OSError, match=r"s3://no-such-bucket/ds\.tdz"):
        TensorDict.load_memmap(
            "s3://no-such-bucket/ds.tdz", storage_options=s3_server.storage_options()
        )


# ---- HTTP with Range -------------------------------------------------------------


def _serve(http_server: HTTPServer, name: str, td: TensorDict, tmp_path: Path) -> str:
    td.memmap(str(tmp_path / name), archive=True)
    os.replace(tmp_path / name, http_server.root / name)
    return f"{http_server.url}/{name}"


def test_http_second_read_moves_nothing(http_server: HTTPServer, tmp_path: Path) -> None:
    url = _serve(http_server, "a.tdz", _td(1000, fill=3.0), tmp_path)
    size = (http_server.root / "a.tdz").stat().st_size
    before = http_server.bytes_sent
    assert TensorDict.load_memmap(url)["n", "y"].sum().item() == 9000.0
    assert http_server.bytes_sent - before == size  # the object once
    before = http_server.bytes_sent
    assert TensorDict.load_memmap(url)["x"][999].item() == 999
    assert http_server.bytes_sent == before  # from the cache: no body bytes at all


def test_http_replaced_between_reads(http_server: HTTPServer, tmp_path: Path) -> None:
    url = _serve(http_server, "b.tdz", _td(fill=1.0), tmp_path)
    assert TensorDict.load_memmap(url)["n", "y"].sum().item() == 30.0
    _serve(http_server, "b.tdz", _td(fill=5.0), tmp_path)
    assert TensorDict.load_memmap(url)["n", "y"].sum().item() == 150.0


def test_http_server_dying_mid_read_caches_nothing(
    http_server: HTTPServer, tmp_path: Path, cache: remote.RangeCache
) -> None:
    url = _serve(http_server, "c.tdz", _td(1000), tmp_path)
    http_server.cut_replies_after(100)
    try:
        with pytest.raises(OSError, match=r"c.tdz"):
            TensorDict.load_memmap(url)
    finally:
        http_server.cut_replies_after(None)
    # nothing half-written, no temporary left (the folder is not even made)
    assert not os.path.exists(cache.directory) or os.listdir(cache.directory) == []
    assert TensorDict.load_memmap(url)["x"][5].item() == 5


def test_read_ranges_coalesces_adjacent(http_server: HTTPServer) -> None:
    (http_server.root / "r.bin").write_bytes(bytes(range(256)) * 64)
    fs, path = remote.filesystem(f"{http_server.url}/r.bin")
    before = http_server.bytes_sent
    got = remote.read_ranges(fs, path, "r", [(0, 10), (10, 30), (4000, 4010)], gap=0)
    assert got == [bytes(range(10)), bytes(range(10, 30)), (bytes(range(256)) * 64)[4000:4010]]
    assert http_server.bytes_sent - before == 40


# ---- the cache and coalescing ----------------------------------------------------


@given(
    ranges=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 50)), max_size=20),
    gap=st.integers(0, 100),
)
def test_coalesce_covers_every_range_once(ranges: list[tuple[int, int]], gap: int) -> None:
    rs = [(s, s + n) for s, n in ranges]
    groups = remote.coalesce(rs, gap)
    seen = sorted(i for g in groups for i in g[2])
    assert seen == list(range(len(rs)))
    for s, e, members in groups:
        assert all(s <= rs[i][0] and rs[i][1] <= e for i in members)
    for (_, e1, _), (s2, _, _) in itertools.pairwise(groups):
        assert s2 - e1 > gap  # groups closer than gap were merged


def test_cache_evicts_least_recently_used(tmp_path: Path) -> None:
    c = remote.RangeCache(str(tmp_path / "c"), max_bytes=250)
    paths: list[str] = []
    for i in range(3):
        tmp = c.new_tmp()
        Path(tmp).write_bytes(b"x" * 100)
        paths.append(c.put_file({"k": i}, tmp))
        os.utime(paths[-1], (i, i))  # an order the test controls
    assert not os.path.exists(paths[0]) and os.path.exists(paths[2])
    assert c.get({"k": 0}) is None and c.get({"k": 2}) == paths[2]
