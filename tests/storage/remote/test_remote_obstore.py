"""The obstore transport (``storage_options={"transport": "obstore"}``) against moto's S3
server on loopback: the same trees, promises and errors as through fsspec."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict, unpack
from tensorbox._storage import remote, remote_tree
from tensorbox._storage.remote.obstore import ObstoreTransport
from tensorbox._storage.remote.stores import open_transport
from tensorbox._storage.remote_tree import RemoteTensor
from tests.servers import S3Server, free_port

pytest.importorskip("obstore")
pytest.importorskip("s3fs")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> remote.RangeCache:
    c = remote.RangeCache(str(tmp_path / "cache"), max_bytes=1 << 30)
    monkeypatch.setattr(remote.cache, "_default", c)
    return c


def _options(endpoint: str) -> dict[str, object]:
    return {
        "transport": "obstore",
        "endpoint": endpoint,
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "region": "us-east-1",
        "client_options": {"allow_http": True},
    }


@pytest.fixture
def bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> str:
    import s3fs

    name = "tbx-ob-" + request.node.name.replace("_", "-")[:40].lower().strip("-")
    s3fs.S3FileSystem(**s3_server.storage_options()).mkdir(name)
    return name


def _td(seed: int, n: int = 512) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "x": torch.randint(0, 1 << 30, (n, 1024), dtype=torch.int32, generator=g),
            "n": {"y": torch.randn(n, 3, generator=g)},
        },
        [n],
    )


def test_save_and_read_lazily_through_obstore(
    s3_server: S3Server, bucket: str, cache: remote.RangeCache
) -> None:
    opts = _options(s3_server.endpoint_url)
    td = _td(0)
    url = f"s3://{bucket}/ds.tdz"
    saved = td.memmap(url, archive=True, storage_options=opts)
    assert torch.equal(saved["x"], td["x"])
    back = TensorDict.load_memmap(url, storage_options=opts)
    assert type(back["x"]) is RemoteTensor
    assert type(remote_tree.open_url(url, opts).src) is ObstoreTransport
    assert torch.equal(back["x"][[3, 200, 511]], td["x"][[3, 200, 511]])
    assert torch.equal(back["n", "y"] + 0, td["n", "y"])
    # fsspec reads the same object, and the same cache entries
    fs_back = TensorDict.load_memmap(url, storage_options=s3_server.storage_options())
    assert torch.equal(fs_back["x"] + 0, td["x"])


def test_a_replaced_object_answers_412_never_other_bytes(s3_server: S3Server, bucket: str) -> None:
    opts = _options(s3_server.endpoint_url)
    url = f"s3://{bucket}/swap.tdz"
    a, b = _td(1), _td(2)
    a.memmap(url, archive=True, storage_options=opts)
    td = TensorDict.load_memmap(url, storage_options=opts)
    assert torch.equal(td["x"][:2], a["x"][:2])
    b.memmap(url, archive=True, storage_options=opts)
    with pytest.raises(OSError, match=r"swap\.tdz'.*changed since the tree was opened"):
        td["x"][400:402]
    assert torch.equal(TensorDict.load_memmap(url, storage_options=opts)["x"] + 0, b["x"])


def test_a_folder_tree_through_obstore(s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    import s3fs

    td = _td(3, 64)
    td.memmap(str(tmp_path / "tree"))
    s3fs.S3FileSystem(**s3_server.storage_options()).put(
        str(tmp_path / "tree"), f"{bucket}/tree", recursive=True
    )
    opts = _options(s3_server.endpoint_url)
    back = TensorDict.load_memmap(f"s3://{bucket}/tree", storage_options=opts)
    assert torch.equal(back["x"][5], td["x"][5])
    assert torch.equal(back["n", "y"] + 0, td["n", "y"])
    with pytest.raises(FileNotFoundError, match=rf"'s3://{bucket}/none': no such object"):
        TensorDict.load_memmap(f"s3://{bucket}/none", storage_options=opts)


def test_a_save_ties_the_upload_reply_to_its_bytes(
    s3_server: S3Server, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    opts = _options(s3_server.endpoint_url)
    url = f"s3://{bucket}/race.tdz"
    ours, theirs = _td(4, 256), _td(5, 256)
    theirs.memmap(str(tmp_path / "theirs.tdz"), archive=True)
    real = ObstoreTransport.put_file

    def put_then_another(
        self: ObstoreTransport, local: str, rel: str = "", create: bool = False
    ) -> object:
        reply = real(self, local, rel, create)  # the other writer's upload lands right after ours
        other = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options())
        other.put_file(str(tmp_path / "theirs.tdz"), f"{bucket}/race.tdz")
        return reply

    monkeypatch.setattr(ObstoreTransport, "put_file", put_then_another)
    saved = ours.memmap(url, archive=True, storage_options=opts)
    monkeypatch.setattr(ObstoreTransport, "put_file", real)
    assert torch.equal(saved["x"], ours["x"])
    unpack(url, str(tmp_path / "out"), storage_options=opts)
    assert torch.equal(TensorDict.load_memmap(str(tmp_path / "out"))["x"], theirs["x"])


@pytest.mark.parametrize("transport", ["obstore", "fsspec"])
def test_existsok_false_loses_a_race_to_an_object_put_after_its_look(
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cache: remote.RangeCache,
    transport: str,
) -> None:
    """The look before the save finds nothing; another writer's object lands before the
    upload: the conditional put (If-None-Match: *, which moto honours) refuses it."""
    import s3fs

    from tensorbox._storage.remote.transport import FsspecTransport
    from tensorbox.errors import TreeExistsError

    bucket = f"tbx-exclusive-{transport}"
    s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options()).mkdir(bucket)
    if transport == "obstore":
        opts, cls = _options(s3_server.endpoint_url), ObstoreTransport
    else:
        opts, cls = dict(s3_server.storage_options()), FsspecTransport
    url = f"s3://{bucket}/taken.tdz"
    theirs = _td(7, 64)
    theirs.memmap(str(tmp_path / "theirs.tdz"), archive=True)
    real = cls.put_file

    def another_then_put(self: object, local: str, rel: str = "", create: bool = False) -> object:
        other = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options())
        other.put_file(str(tmp_path / "theirs.tdz"), f"{bucket}/taken.tdz")
        return real(self, local, rel, create)  # type: ignore[arg-type]

    monkeypatch.setattr(cls, "put_file", another_then_put)
    with pytest.raises(
        TreeExistsError,
        match=rf"'s3://{bucket}/taken\.tdz' already holds an object \(existsok=False\): another "
        "writer put it there during this save; nothing was written",
    ):
        _td(8, 64).memmap(url, archive=True, existsok=False, storage_options=opts)
    monkeypatch.setattr(cls, "put_file", real)
    assert [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs] == []  # none kept
    unpack(url, str(tmp_path / "out"), storage_options=opts)  # theirs, untouched
    assert torch.equal(TensorDict.load_memmap(str(tmp_path / "out"))["x"], theirs["x"])


def test_obstore_errors_name_the_url() -> None:
    opts = _options(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    opts["retry_config"] = {"max_retries": 0}
    with pytest.raises(OSError, match=r"'s3://nowhere/ds\.tdz': the upload failed"):
        _td(6, 8).memmap("s3://nowhere/ds.tdz", archive=True, storage_options=opts)
    with pytest.raises(ValueError, match=r"unknown transport 'carrier-pigeon'"):
        TensorDict.load_memmap("s3://b/x.tdz", storage_options={"transport": "carrier-pigeon"})
    with pytest.raises(ValueError, match=r"'memory://b/x\.tdz': the obstore transport reads"):
        open_transport("memory://b/x.tdz", {"transport": "obstore"})
