"""Reading trees behind URLs, the wire side (``tensorbox._storage.remote.read_into``):
an archive opens in one request (its ``meta.json`` entries lie beside the central
directory), replies are streamed into the cache and resumed where a cut stopped them,
their ETags vouch for the object (no second look at it), and archives laid out the old
way (each node's ``meta.json`` first) still read, locally and remotely."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict, unpack
from tensorbox._storage import remote
from tensorbox._storage.archive.store import write_file
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.remote import transport as remote_transport
from tensorbox._storage.remote_tree import RemoteTensor
from tensorbox.cli import main
from tests.servers import HTTPServer, S3Server

pytest.importorskip("fsspec")
MiB = 1 << 20


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> remote.RangeCache:
    c = remote.RangeCache(str(tmp_path / "cache"), max_bytes=1 << 30)
    monkeypatch.setattr(remote.cache, "_default", c)
    return c


def _tree() -> TensorDict:
    g = torch.Generator().manual_seed(1)
    return TensorDict(
        {
            "x": torch.randint(0, 255, (640, 4096), dtype=torch.uint8, generator=g),  # 2.5 MiB
            "y": torch.arange(640),
            "info": {"step": torch.arange(640.0), "deep": {"z": torch.ones(640, 2)}},
            "name": "run-1",
        },
        [640],
    )


def _same(a: TensorDict, b: TensorDict) -> None:
    assert sorted(map(str, a.keys(True, True))) == sorted(map(str, b.keys(True, True)))
    for k in a.keys(True, True):
        x, y = a[k], b[k]
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, k


def _serve(http_server: HTTPServer, name: str, path: Path) -> str:
    os.replace(path, http_server.root / name)
    return f"{http_server.url}/{name}"


def _meta_first(path: Path) -> None:
    """Rewrite the archive at ``path`` as tensorbox laid archives out before: each node's
    ``meta.json`` first, then its leaves, parents first (aligned, by the same writer)."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        data = {n: zf.read(n) for n in names}
    order: list[str] = []
    for meta in reversed([n for n in names if n.endswith("meta.json")]):  # parents first
        node = meta[: -len("meta.json")]
        order.append(meta)
        order += [
            n
            for n in names
            if not n.endswith("meta.json") and n[: len(n) - len(n.rpartition("/")[2])] == node
        ]
    assert sorted(order) == sorted(names)
    items = [(n, data[n], n.endswith(".memmap")) for n in order]
    write_file(str(path), items, [None] * len(items), 0, False)
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist()[0] == "meta.json" and zf.testzip() is None


def test_an_archive_opens_with_one_request(http_server: HTTPServer, tmp_path: Path) -> None:
    td = _tree()
    td.memmap(tmp_path / "one.tdz", archive=True)
    with zipfile.ZipFile(tmp_path / "one.tdz") as zf:
        names = zf.namelist()
    assert names[-1] == "meta.json" and names[-3:] == [
        "info/deep/meta.json",
        "info/meta.json",
        "meta.json",
    ]  # every leaf, then the descriptions, children first, beside the central directory
    url = _serve(http_server, "one.tdz", tmp_path / "one.tdz")
    gets, heads = http_server.gets, http_server.heads
    back = TensorDict.load_memmap(url)
    assert http_server.gets - gets == 1  # the tail: index and every meta.json
    assert http_server.heads - heads == 1  # the object's identity, once
    assert type(back["x"]) is RemoteTensor and back["name"] == "run-1"
    gets, heads = http_server.gets, http_server.heads
    assert torch.equal(back["x"] + 0, td["x"])
    # one request (the leaf's local header with its bytes), vouched for by its ETag
    assert (http_server.gets - gets, http_server.heads - heads) == (1, 0)
    _same(back, td)


def test_archives_with_each_meta_json_first_still_read(
    http_server: HTTPServer, tmp_path: Path
) -> None:
    td = _tree()
    path = tmp_path / "old.tdz"
    td.memmap(path, archive=True)
    _meta_first(path)
    _same(TensorDict.load_memmap(path), td)  # locally
    assert main(["verify", "--read", str(path)]) == 0
    assert unpack(str(path), str(tmp_path / "out")) == (3, 7)
    _same(TensorDict.load_memmap(tmp_path / "out"), td)
    url = _serve(http_server, "old.tdz", path)
    gets = http_server.gets
    back = TensorDict.load_memmap(url)  # remotely: the tail, then the meta.json entries
    assert http_server.gets - gets == 2
    _same(back, td)
    assert torch.equal(TensorDict.load_memmap(f"{url}::info")["deep", "z"], td["info", "deep", "z"])


def test_a_cut_reply_resumes_where_it_stopped(http_server: HTTPServer, tmp_path: Path) -> None:
    td = _tree()
    td.memmap(tmp_path / "cut.tdz", archive=True)
    url = _serve(http_server, "cut.tdz", tmp_path / "cut.tdz")
    back = TensorDict.load_memmap(url)
    http_server.cut_replies_after(1 * MiB)  # every reply: a MiB, then the connection drops
    try:
        mark, gets = http_server.bytes_sent, http_server.gets
        assert torch.equal(back["x"] * 1, td["x"])  # 2.5 MiB: three tries, each going on
    finally:
        http_server.cut_replies_after(None)
    assert http_server.gets - gets == 3
    assert td["x"].nbytes <= http_server.bytes_sent - mark <= td["x"].nbytes + 4096  # once
    assert type(back["x"]) is MemoryMappedTensor


def test_a_failing_sink_stops_the_read_at_once(http_server: HTTPServer, tmp_path: Path) -> None:
    import fsspec

    (http_server.root / "blob").write_bytes(bytes(range(256)) * 16384)  # 4 MiB
    fs = fsspec.filesystem("http")
    url = f"{http_server.url}/blob"
    seen: list[tuple[int, int]] = []

    def sink(i: int, at: int, bufs: list[memoryview]) -> None:
        seen.append((i, at))
        if at:
            raise ValueError("disk full, say")

    gets = http_server.gets
    with pytest.raises(ValueError, match="disk full, say"):
        remote.read_into(fs, [(url, url, 0, 4 * MiB)], sink)
    assert http_server.gets - gets == 1  # never tried again
    assert len(seen) == 2 and seen[0] == (0, 0)  # the first MiB or so, then the failure
    got = bytearray(4 * MiB)

    def keep(i: int, at: int, bufs: list[memoryview]) -> None:
        for b in bufs:
            got[at : at + len(b)] = b
            at += len(b)

    assert remote.read_into(fs, [(url, url, 0, 4 * MiB)], keep, etags={url: None}) is False
    assert bytes(got) == bytes(range(256)) * 16384
    tag = fs.info(url)["ETag"]  # the version the replies carry: they vouch for it
    assert remote.read_into(fs, [(url, url, 5, 9)], keep, etags={url: tag}) is True
    # a reply of another version: refused before any of its bytes reach the sink
    seen = len(got)
    got.clear()
    with pytest.raises(remote.ReplyMismatch, match=r"blob'.*changed since the tree was opened"):
        remote.read_into(fs, [(url, url, 5, 9)], keep, etags={url: '"other"'})
    assert not got and seen


def test_s3_replies_are_streamed_and_vouched_for(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    opts = s3_server.storage_options()
    s3fs.S3FileSystem(**opts).mkdir("tbx-stream")
    td = _tree()
    url = "s3://tbx-stream/ds.tdz"
    td.memmap(url, archive=True, storage_options=opts)

    def no(*a: object, **k: object) -> None:
        raise AssertionError("not streamed, or looked at again")

    back = TensorDict.load_memmap(url, storage_options=opts)
    monkeypatch.setattr(remote_transport, "_cat_ranges", no)  # whole replies: not used
    monkeypatch.setattr(remote.Transport, "identity", no)  # the ETags vouch for the object
    assert torch.equal(back["x"][::3], td["x"][::3])
    _same(back, td)
    assert type(back["x"]) is MemoryMappedTensor


def test_without_the_fast_path_reads_go_through_fsspecs_public_api(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs's or aiohttp's internals changed (the fast path is feature-detected): the same
    tree reads through fsspec's ``cat_ranges``, with the same checks."""
    import s3fs

    opts = s3_server.storage_options()
    s3fs.S3FileSystem(**opts).mkdir("tbx-public")
    td = _tree()
    url = "s3://tbx-public/ds.tdz"
    td.memmap(url, archive=True, storage_options=opts)
    monkeypatch.setattr(remote_transport, "_opener", lambda fs: None)
    back = TensorDict.load_memmap(url, storage_options=opts)
    assert torch.equal(back["x"][::3], td["x"][::3])
    _same(back, td)
    assert type(back["x"]) is MemoryMappedTensor
