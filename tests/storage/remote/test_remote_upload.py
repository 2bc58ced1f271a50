"""A save to a URL is the one ``Saver`` over an ``UploadStore``: its writer lays the
archive out locally and its commit uploads one object
(``tensorbox/_storage/remote/writer.py``). The copy it keeps is tied to its own bytes:
the upload's reply where the transport returns one, else the archive's tree id, which
the next open compares with the object's own index."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorbox import TensorDict
from tensorbox._storage import remote
from tensorbox._storage.remote.writer import UploadStore, UploadWriter
from tensorbox._storage.resolve import resolve
from tensorbox._storage.save import Saver
from tests.servers import S3Server

pytest.importorskip("fsspec")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> remote.RangeCache:
    c = remote.RangeCache(str(tmp_path / "cache"), max_bytes=1 << 30)
    monkeypatch.setattr(remote.cache, "_default", c)
    return c


def _td(seed: int, n: int = 64) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {"x": torch.randn(n, 8, generator=g), "n": {"i": torch.arange(n)}, "name": "run"}, [n]
    )


def _url() -> str:
    return f"memory://tbx-upload-{uuid.uuid4().hex}/ds.tdz"


def _parts(cache: remote.RangeCache) -> list[str]:
    """Files being written in the cache (a save's archive before its upload)."""
    return [n for n in os.listdir(cache.directory) if n.startswith(".part-")]


def test_a_url_save_runs_the_one_saver_and_uploads_once(
    cache: remote.RangeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, td = _url(), _td(1)
    puts: list[str] = []
    real = remote.FsspecTransport.put_file

    def put(self: remote.FsspecTransport, local: str, rel: str = "", create: bool = False) -> Any:
        puts.append(self.url_of(rel))
        return real(self, local, rel, create)

    monkeypatch.setattr(remote.FsspecTransport, "put_file", put)
    backend = resolve(url, archive=True, save=True)
    saved = td.memmap(url, archive=True)
    assert type(backend).__name__ == "RemoteBackend" and puts == [url]  # one object, once
    assert (saved == td).all() and saved.is_locked
    assert saved["x"].filename is not None  # the saved leaves map the kept copy
    assert saved["x"].filename.startswith(cache.directory) and not _parts(cache)
    back = TensorDict.load_memmap(url)
    assert (back == td).all()


def test_a_failed_upload_leaves_nothing_and_names_the_url(
    cache: remote.RangeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url()

    def refuse(
        self: remote.FsspecTransport, local: str, rel: str = "", create: bool = False
    ) -> Any:
        raise PermissionError("denied by the test server")

    monkeypatch.setattr(remote.FsspecTransport, "put_file", refuse)
    with pytest.raises(PermissionError, match=rf"'{url}': the upload was refused, nothing was"):
        _td(2).memmap(url, archive=True)
    assert not _parts(cache) and not [n for n in os.listdir(cache.directory) if "tbx-" in n]
    monkeypatch.undo()
    assert not resolve(url).exists()


def test_a_save_that_fails_before_its_commit_uploads_nothing(cache: remote.RangeCache) -> None:
    url = _url()
    bad = TensorDict({"x": torch.zeros(2), "obj": object()}, [2])
    with pytest.raises(TypeError, match=r"key 'obj'"):
        bad.memmap(url, archive=True)
    assert not resolve(url).exists() and not _parts(cache)


def test_the_writer_is_the_archive_writer_with_an_upload(cache: remote.RangeCache) -> None:
    url = _url()
    store = UploadStore(url)
    assert store.name == url and not store.in_place
    writer = store.writer(fsync=False)
    assert isinstance(writer, UploadWriter)
    writer.abort()  # nothing staged, nothing uploaded
    saved = Saver(store, "copy", True, False).run(_td(3), 0)
    assert (saved == _td(3)).all() and resolve(url).exists()
    with pytest.raises(ValueError, match=r"memmap\('http://h/x\.tdz'\): http\(s\) URLs are read"):
        UploadStore("http://h/x.tdz")
    with pytest.raises(ValueError, match=r"an archive is saved whole; drop '::'"):
        UploadStore(url, "sub")


def test_without_an_upload_reply_the_copy_is_kept_by_tree_id_and_checked_at_the_next_open(
    cache: remote.RangeCache,
) -> None:
    """fsspec's put returns no identity: the save keeps its copy under its tree id
    alone; the next open uses it once the object's own index has that tree id, and a
    replaced object (another tree id) is fetched, never served from the copy."""
    url, ours = _url(), _td(4)
    saved = ours.memmap(url, archive=True)
    tree = remote._local_tree_id(saved["x"].filename)
    by_tree = cache.path_for({"url": url, "tree": tree, "part": "whole"})
    assert os.path.isfile(by_tree)
    local, from_cache = remote.local_archive(url)
    assert from_cache and local == by_tree  # checked against the object's index: ours
    theirs = _td(5)
    theirs.memmap(url, archive=True)  # replaced (same shapes, other bytes)
    local, from_cache = remote.local_archive(url)
    assert local != by_tree
    got = TensorDict.load_memmap(local)
    assert torch.equal(got["x"], theirs["x"]) and not torch.equal(got["x"], ours["x"])


def test_an_s3_save_through_fsspec_and_through_obstore(
    s3_server: S3Server, cache: remote.RangeCache
) -> None:
    """On the loopback S3 server: fsspec (no reply: kept by tree id) and obstore (the
    upload's ETag: kept by it); both read back, and the next open uses the copy."""
    pytest.importorskip("s3fs")
    import s3fs

    bucket = f"tbx-up-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(**s3_server.storage_options()).mkdir(bucket)
    opts: dict[str, Any] = dict(s3_server.storage_options())
    td = _td(6)
    saved = td.memmap(f"s3://{bucket}/a.tdz", archive=True, storage_options=opts)
    tree = remote._local_tree_id(saved["x"].filename)
    assert os.path.isfile(
        cache.path_for({"url": f"s3://{bucket}/a.tdz", "tree": tree, "part": "whole"})
    )
    assert remote.local_archive(f"s3://{bucket}/a.tdz", opts)[1]
    pytest.importorskip("obstore")
    ob = {
        "transport": "obstore",
        "endpoint": s3_server.endpoint_url,
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "region": "us-east-1",
        "client_options": {"allow_http": True},
    }
    saved = td.memmap(f"s3://{bucket}/b.tdz", archive=True, storage_options=ob)
    tree = remote._local_tree_id(saved["x"].filename)
    by_tree = cache.path_for({"url": f"s3://{bucket}/b.tdz", "tree": tree, "part": "whole"})
    assert not os.path.exists(by_tree)  # the reply tied it: kept under the reply
    back = TensorDict.load_memmap(f"s3://{bucket}/b.tdz", storage_options=ob)
    assert (back == td).all()


def test_a_password_in_a_url_is_never_in_an_error_message(s3_server: S3Server) -> None:
    """``scheme://user:password@host/...``: every refusal and failure names the URL with
    its user information masked, never the password."""
    pytest.importorskip("aiohttp")
    td = _td(7, 4)
    secret = "hunter2pw"
    cases: list[tuple[Any, str]] = [
        (lambda: TensorDict.load_memmap(f"http://me:{secret}@127.0.0.1:9/x.tdz"), "cannot reach"),
        (lambda: td.memmap(f"http://me:{secret}@h/x.tdz", archive=True), "read-only"),
        (lambda: td.memmap(f"memory://me:{secret}@b/x"), "a folder tree cannot"),
        (lambda: td.memmap_like(f"memory://me:{secret}@b/x"), "memmap_like allocates"),
        (lambda: TensorDict.load_memmap(f"memory://me:{secret}@b/x", mode="r+"), "read-only"),
        (lambda: td.memmap(f"memory://me:{secret}@b/x.tdz::in", archive=True), "saved whole"),
    ]
    pytest.importorskip("s3fs")
    opts = dict(s3_server.storage_options())
    cases.append(
        (
            lambda: td.memmap(
                f"s3://AK:{secret}@no-bucket/x.tdz", archive=True, storage_options=opts
            ),
            "the upload failed",
        )
    )
    for call, what in cases:
        with pytest.raises((OSError, ValueError)) as info:
            call()
        text = str(info.value)
        assert what in text and "***@" in text, text
        assert secret not in text, text


def test_growing_a_tree_opened_read_only_refuses_naming_it(
    cache: remote.RangeCache, tmp_path: Path
) -> None:
    """extend_ and make_memmap on a tree behind a URL (lazy or fetched) or a local archive
    refuse, naming the URL or the archive; they never grow a copy that reaches nowhere."""
    url, td = _url(), _td(8, 4)
    td.memmap(url, archive=True)
    lazy = TensorDict.load_memmap(url)
    with pytest.raises(RuntimeError, match=rf"^extend_: .*'{url}', which is read-only"):
        lazy.extend_(td[:1])
    with pytest.raises(RuntimeError, match=rf"^make_memmap: .*'{url}', which is read-only"):
        lazy.make_memmap("new", (4,))
    fetched = TensorDict.load_memmap(url)
    fetched["x"].sum()  # whole: a mapping of the cache now
    with pytest.raises(RuntimeError, match=rf"^extend_: .*'{url}', which is read-only"):
        fetched.extend_(td[:1])
    assert lazy.batch_size == fetched.batch_size == td.batch_size
    arch = str(tmp_path / "t.tdz")
    td.memmap(arch)
    local = TensorDict.load_memmap(arch)
    with pytest.raises(RuntimeError, match=r"^make_memmap: .*t\.tdz', which is read-only"):
        local.make_memmap("new", (4,))
    with pytest.raises(RuntimeError, match=r"^make_memmap_from_tensor: .*t\.tdz', which is read"):
        local.make_memmap_from_tensor("new", torch.ones(4))
    assert "new" not in local.keys() and "new" not in lazy.keys()  # noqa: SIM118
    again = TensorDict.load_memmap(url)  # the same leaves, whole: plain mappings of the cache
    with pytest.raises(RuntimeError, match=r"^make_memmap: .*(behind a URL|read-only)"):
        again.make_memmap("new", (4,))


def test_an_upload_to_a_server_that_never_answers_ends_naming_the_url(
    silent_server: str, cache: remote.RangeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs's put waits for the server's "100 Continue" with no timeout of its own: the
    upload has a deadline ($TENSORBOX_REMOTE_TIMEOUT per started 8 MiB), then an error
    naming the URL, never a hang; nothing is kept in the cache."""
    pytest.importorskip("s3fs")
    monkeypatch.setenv("TENSORBOX_REMOTE_TIMEOUT", "2")
    endpoint = silent_server.rpartition("/")[0]
    opts = {"key": "a", "secret": "b", "client_kwargs": {"endpoint_url": endpoint}}
    with pytest.raises(TimeoutError, match=r"'s3://bkt/x\.tdz': the upload did not finish"):
        _td(9, 4).memmap("s3://bkt/x.tdz", archive=True, storage_options=opts)
    assert not _parts(cache) and not [n for n in os.listdir(cache.directory) if n.endswith(".bin")]


def test_a_save_whose_cache_cannot_be_written_names_the_cache_and_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$TENSORBOX_CACHE naming a file (or a folder that cannot be made): the error says it
    is the local cache of that URL, and how to move it; nothing is uploaded."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"")
    monkeypatch.setattr(remote.cache, "_default", remote.RangeCache(str(blocker)))
    url = _url()
    with pytest.raises(OSError, match=rf"not-a-folder: cannot write the local cache of '{url}'"):
        _td(10, 4).memmap(url, archive=True)
    monkeypatch.undo()
    assert not resolve(url).exists()


def test_a_save_that_fills_the_cache_disk_names_the_cache_and_the_url(
    small_tmpfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive is staged in the cache before its upload: a full disk there is an
    error naming the staging file and the URL, nothing is left or uploaded."""
    c = remote.RangeCache(str(small_tmpfs / "cache"))
    monkeypatch.setattr(remote.cache, "_default", c)
    url = _url()
    big = TensorDict(x=torch.randn(3 << 20), batch_size=[])  # 12 MiB, on 8 MiB
    with pytest.raises(OSError, match=rf"cannot write the local cache of '{url}' \(No space"):
        big.memmap(url, archive=True)
    assert not os.listdir(c.directory) and not resolve(url).exists()
