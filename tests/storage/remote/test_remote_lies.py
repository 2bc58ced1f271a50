"""Trees behind URLs when the world lies: a server without validators (or with a
modification time only), a reply of other bytes than asked for, a dead or failing
server, another writer racing a save, an archive whose index claims gigabytes, and a
local cache that is evicted, deleted, appended to or flipped under an open tree.

Every server is real and on loopback: an HTTP server that can drop its validators,
shift its ``Content-Range`` or answer 503 (below), and moto's S3 server."""

from __future__ import annotations

import errno
import functools
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict, unpack
from tensorbox._storage import remote
from tensorbox._storage.remote_tree import RemoteTensor
from tensorbox.errors import FormatError
from tests.servers import S3Server, _RangeHandler, _RangeHTTPServer, free_port

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
MiB = 1 << 20


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> remote.RangeCache:
    c = remote.RangeCache(str(tmp_path / "cache"), max_bytes=1 << 30)
    monkeypatch.setattr(remote.cache, "_default", c)
    return c


class _Liar(_RangeHTTPServer):
    validators = "etag"  # "etag" (and Last-Modified), "last-modified" (fixed), "none"
    shift = 0  # added to every ranged reply's bytes and Content-Range
    status: int | None = None  # every request answered with this error
    loop = False  # every request redirected to itself


class _LyingHandler(_RangeHandler):
    server: _Liar  # type: ignore[assignment]

    def _headers(self, st: os.stat_result, length: int, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if self.server.validators == "etag":
            self.send_header("ETag", f'"{st.st_size:x}-{st.st_mtime_ns:x}"')
        if self.server.validators != "none":  # one second for every version
            self.send_header("Last-Modified", "Sat, 28 Nov 2026 04:00:00 GMT")

    def _refused(self) -> bool:
        if self.server.loop:
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        if self.server.status is not None:
            self.send_error(self.server.status)
            return True
        return False

    def do_HEAD(self) -> None:
        if not self._refused():
            super().do_HEAD()

    def do_GET(self) -> None:
        if self._refused():
            return
        found = self._target()
        if found is None:
            return
        path, st = found
        rng = self.headers.get("Range")
        if not rng:
            self._headers(st, st.st_size, 200)
            self.end_headers()
            self.wfile.write(Path(path).read_bytes())
            return
        a, _, b = rng.removeprefix("bytes=").partition("-")
        start = min(int(a) + self.server.shift, st.st_size - 1)
        end = min(int(b) + 1 + self.server.shift, st.st_size)
        self._headers(st, end - start, 206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{st.st_size}")
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start)
        self.server.sent += len(body)
        self.wfile.write(body)


@dataclass
class Liar:
    root: Path
    url: str
    server: _Liar

    def serve(self, name: str, td: TensorDict, tmp_path: Path) -> str:
        """``td`` saved as an archive at ``name`` (replacing what was there at once)."""
        tmp = tmp_path / f"{name}.{os.getpid()}.new"
        td.memmap(str(tmp), archive=True)
        os.replace(tmp, self.root / name)
        return f"{self.url}/{name}"


@pytest.fixture
def liar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Liar]:
    root = tmp_path_factory.mktemp("liar")
    server = _Liar(("127.0.0.1", 0), functools.partial(_LyingHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Liar(root, f"http://127.0.0.1:{server.server_address[1]}", server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def _td(seed: int, n: int = 4096) -> TensorDict:
    """Rows of 4 KiB (a part each): the same shapes for every seed, other values."""
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {"x": torch.randint(0, 1 << 30, (n, 1024), dtype=torch.int32, generator=g)}, [n]
    )


# ---- 3: servers without a strong validator; replies of other bytes -------------------


@pytest.mark.parametrize("validators", ["none", "last-modified"])
def test_a_same_size_replacement_is_never_served_as_the_old_archive(
    liar: Liar, tmp_path: Path, validators: str
) -> None:
    liar.server.validators = validators
    a, b = _td(1), _td(2)
    url = liar.serve("ds.tdz", a, tmp_path)
    old = TensorDict.load_memmap(url)
    assert torch.equal(old["x"][:8], a["x"][:8])
    assert torch.equal(old["x"] + 0, a["x"])  # all of it now in the cache
    size = (liar.root / "ds.tdz").stat().st_size
    liar.serve("ds.tdz", b, tmp_path)  # same size, same (or no) Last-Modified
    assert (liar.root / "ds.tdz").stat().st_size == size
    new = TensorDict.load_memmap(url)  # never the cached index or leaves of the old one
    assert torch.equal(new["x"][100:108], b["x"][100:108])
    assert torch.equal(new["x"] + 0, b["x"])


@pytest.mark.parametrize("validators", ["none", "last-modified"])
def test_a_tree_open_while_its_archive_is_replaced_never_mixes_them(
    liar: Liar, tmp_path: Path, validators: str
) -> None:
    liar.server.validators = validators
    a, b = _td(1), _td(2)
    url = liar.serve("mix.tdz", a, tmp_path)
    td = TensorDict.load_memmap(url)
    assert torch.equal(td["x"][:4], a["x"][:4])
    liar.serve("mix.tdz", b, tmp_path)  # same size: only the content tells them apart
    with pytest.raises(OSError, match=r"mix\.tdz'.*changed since the tree was opened"):
        td["x"][2000:2004]
    assert torch.equal(td["x"][:4], a["x"][:4])  # what arrived before stays A's


def test_a_reply_of_other_bytes_than_asked_for_is_refused(liar: Liar, tmp_path: Path) -> None:
    a = _td(1)
    url = liar.serve("shift.tdz", a, tmp_path)
    td = TensorDict.load_memmap(url)
    liar.server.shift = 4096  # 206, with a Content-Range naming the bytes it sends
    with pytest.raises(OSError, match=r"shift\.tdz'.*Content-Range 'bytes \d+-\d+/\d+'"):
        td["x"][7]
    liar.server.shift = 0
    assert torch.equal(td["x"][7], a["x"][7])  # nothing of the lie was kept


def test_folder_files_without_a_strong_validator_are_refused_unless_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec

    a = _td(1, 64)
    a.memmap(str(tmp_path / "tree"))
    # memory:// names a file's version by its creation time only
    fsspec.filesystem("memory").put(str(tmp_path / "tree"), "/tbx-weak/tree", recursive=True)
    td = TensorDict.load_memmap("memory://tbx-weak/tree")
    with pytest.raises(OSError, match=r"tree/x\.memmap'.*TENSORBOX_TRUST_WEAK_VALIDATORS=1"):
        td["x"][3]
    monkeypatch.setenv("TENSORBOX_TRUST_WEAK_VALIDATORS", "1")
    assert torch.equal(td["x"][3], a["x"][3])


# ---- 4: a dead or failing server is not a missing object -----------------------------


def test_a_dead_server_is_not_a_missing_object() -> None:
    url = f"http://127.0.0.1:{free_port()}/ds.tdz"  # nothing listens there
    with pytest.raises(ConnectionError, match=r"ds\.tdz': cannot reach the server") as err:
        TensorDict.load_memmap(url)
    assert not isinstance(err.value, FileNotFoundError)


def test_503_on_head_and_get_is_not_a_missing_object(liar: Liar, tmp_path: Path) -> None:
    url = liar.serve("busy.tdz", _td(1, 16), tmp_path)
    liar.server.status = 503
    with pytest.raises(OSError, match=r"busy\.tdz': the server answered HTTP 503") as err:
        TensorDict.load_memmap(url)
    assert not isinstance(err.value, FileNotFoundError)
    liar.server.status = 404
    with pytest.raises(FileNotFoundError, match=r"busy\.tdz': no such object \(HTTP 404\)"):
        TensorDict.load_memmap(url)


def test_redirects_in_a_loop_are_named(liar: Liar, tmp_path: Path) -> None:
    url = liar.serve("loop.tdz", _td(1, 16), tmp_path)
    liar.server.loop = True
    with pytest.raises(OSError, match=r"loop\.tdz': the request failed \(TooManyRedirects\)"):
        TensorDict.load_memmap(url)


# ---- 6: size claims bounded before allocating ----------------------------------------


def test_an_index_claiming_3_gib_is_refused_before_reading_it(liar: Liar) -> None:
    claim = 3 << 30
    path = liar.root / "huge.tdz"
    with open(path, "wb") as f:  # sparse: an end record after a 3 GiB "directory"
        f.truncate(claim)
        f.seek(claim)
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, claim, 0, 0))
    sent_before = _sent(liar)
    with pytest.raises(FormatError, match=r"huge\.tdz: its zip index claims 3221225472 bytes"):
        TensorDict.load_memmap(f"{liar.url}/huge.tdz")
    assert _sent(liar) - sent_before < 1 * MiB


def _sent(liar: Liar) -> int:
    return liar.server.sent


# ---- 1, 2, 11: the cache, damaged or evicted under an open tree -----------------------


def _cache_files(cache: remote.RangeCache) -> list[Path]:
    return sorted(p for p in Path(cache.directory).iterdir() if not p.name.startswith("."))


def test_eviction_under_a_tree_still_filling_never_serves_zeros(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache
) -> None:
    a = _td(1)
    url = liar.serve("evict.tdz", a, tmp_path)
    first = TensorDict.load_memmap(url)
    assert torch.equal(first["x"][:10], a["x"][:10])
    for p in _cache_files(cache):  # what an eviction does (another upload, a full cache)
        p.unlink()
    assert torch.equal(first["x"][2000:2010], a["x"][2000:2010])  # still filling
    second = TensorDict.load_memmap(url)
    assert type(second["x"]) is RemoteTensor
    assert torch.equal(second["x"][2000:2010], a["x"][2000:2010])
    assert torch.equal(second["x"][:10], a["x"][:10])
    assert torch.equal(first["x"] + 0, a["x"]) and torch.equal(second["x"] + 0, a["x"])


@pytest.mark.parametrize("damage", ["delete", "append", "marks"])
def test_a_damaged_leaf_file_is_dropped_and_fetched_again(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache, damage: str
) -> None:
    a = _td(1)
    url = liar.serve("dmg.tdz", a, tmp_path)
    td = TensorDict.load_memmap(url)
    assert torch.equal(td["x"][3000:3002], a["x"][3000:3002])  # parts past the first
    del td
    leaf = max(_cache_files(cache), key=lambda p: p.stat().st_size)
    if damage == "delete":
        leaf.unlink()
    elif damage == "append":
        with open(leaf, "ab") as f:
            f.write(struct.pack("<4I", 0, 1, 2, 3))  # what names parts 0..3 as here
    else:
        with open(leaf, "r+b") as f:  # the first part's mark: neither 0 nor 1
            f.seek(a["x"].nbytes)
            f.write(b"\x07")
    back = TensorDict.load_memmap(url)
    assert torch.equal(back["x"][:4], a["x"][:4])  # never zeros
    assert torch.equal(back["x"][3000:3002], a["x"][3000:3002])
    assert torch.equal(back["x"] + 0, a["x"])


def test_the_cache_bound_holds_for_leaf_files(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache
) -> None:
    cache.max_bytes = 4 * MiB
    g = torch.Generator().manual_seed(0)
    leaves = {
        f"k{i}": torch.randint(0, 255, (256, 4096), dtype=torch.uint8, generator=g)
        for i in range(24)
    }
    url = liar.serve("bound.tdz", TensorDict(leaves, [256]), tmp_path)
    td = TensorDict.load_memmap(url)
    for k, v in leaves.items():  # 24 MiB read through a 4 MiB cache
        assert torch.equal(td[k] + 0, v)
        assert _used(cache) <= cache.max_bytes
    solo = liar.serve("solo.tdz", TensorDict({"y": torch.arange(2 * MiB)}, []), tmp_path)
    y = TensorDict.load_memmap(solo)["y"]  # one 16 MiB leaf: served, not kept
    assert torch.equal(y + 0, torch.arange(2 * MiB))
    assert _used(cache) <= cache.max_bytes


def _used(cache: remote.RangeCache) -> int:
    return sum(
        min(p.stat().st_size, p.stat().st_blocks * 512)
        for p in Path(cache.directory).iterdir()
        if p.name.endswith(".bin")
    )


def test_a_flipped_byte_in_a_cached_meta_json_is_fetched_again(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache
) -> None:
    a = _td(1, 64)
    url = liar.serve("flip.tdz", a, tmp_path)
    assert torch.equal(TensorDict.load_memmap(url)["x"][1], a["x"][1])
    flipped = 0
    for p in _cache_files(cache):
        raw = p.read_bytes()
        at = raw.find(b'"dtype"')
        if at >= 0:
            p.write_bytes(raw[:at] + b'"dtypf"' + raw[at + 7 :])
            flipped += 1
    assert flipped
    for _ in range(2):  # and the next open finds a good copy again
        assert torch.equal(TensorDict.load_memmap(url)["x"][5], a["x"][5])


def test_a_flipped_byte_in_a_cached_folder_meta_json_is_fetched_again(
    s3_server: S3Server, tmp_path: Path, cache: remote.RangeCache
) -> None:
    import s3fs

    opts = s3_server.storage_options()
    fs = s3fs.S3FileSystem(**opts)
    fs.mkdir("tbx-flip")
    a = _td(1, 64)
    a.memmap(str(tmp_path / "tree"))
    fs.put(str(tmp_path / "tree"), "tbx-flip/tree", recursive=True)
    assert torch.equal(
        TensorDict.load_memmap("s3://tbx-flip/tree", storage_options=opts)["x"][1], a["x"][1]
    )
    flipped = 0
    for p in _cache_files(cache):
        raw = p.read_bytes()
        at = raw.find(b'"dtype"')
        if at >= 0:
            p.write_bytes(raw[:at] + b'"dtypf"' + raw[at + 7 :])
            flipped += 1
    assert flipped
    back = TensorDict.load_memmap("s3://tbx-flip/tree", storage_options=opts)
    assert torch.equal(back["x"][5], a["x"][5])


# ---- 12: errors name the cache and the URL ------------------------------------------------


def test_a_full_cache_disk_names_the_cache_and_the_url(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _td(1, 64)
    url = liar.serve("full.tdz", a, tmp_path)
    td = TensorDict.load_memmap(url)

    def full(*args: object) -> int:  # the disk under the cache is full (ENOSPC)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(
        OSError,
        match=rf"{cache.directory}/\w+\.bin: cannot write the local cache of '{url}' "
        r"\(No space left",
    ) as err:
        td["x"][3]
    assert err.value.errno == errno.ENOSPC
    monkeypatch.undo()


def test_an_s3_save_to_a_dead_endpoint_names_the_url(tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    opts = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{free_port()}"},
    }
    with pytest.raises(
        OSError, match=r"'s3://nowhere/ds\.tdz': the upload failed, nothing was written"
    ) as err:
        _td(1, 16).memmap("s3://nowhere/ds.tdz", archive=True, storage_options=opts)
    assert type(err.value) is OSError  # not botocore's EndpointConnectionError


# ---- 5: another writer's upload between a save's PUT and its HEAD -------------------------


def test_a_save_never_adopts_another_writers_upload(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: remote.RangeCache
) -> None:
    """fsspec's put returns nothing that ties the object to the saved bytes, and another
    writer's upload can land right after it: the save keeps its copy under its tree id
    alone, never under an identity read after the put (which would be the other's)."""
    import s3fs

    opts = s3_server.storage_options()
    fs = s3fs.S3FileSystem(**opts)
    fs.mkdir("tbx-race")
    ours, theirs = _td(1, 256), _td(2, 256)
    theirs.memmap(str(tmp_path / "theirs.tdz"), archive=True)
    real_put, real_identity = remote.FsspecTransport.put_file, remote.FsspecTransport.identity
    raced, looked = [], []

    def put_then_another(
        self: remote.FsspecTransport, local: str, rel: str = "", create: bool = False
    ) -> object:
        reply = real_put(self, local, rel, create)  # the other writer's put lands right after ours
        other = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        other.put_file(str(tmp_path / "theirs.tdz"), "tbx-race/ds.tdz")
        raced.append(True)
        return reply

    def look(self: remote.FsspecTransport, rel: str = "") -> dict[str, object]:
        looked.append(rel)  # an identity read after the put: the other writer's by now
        return real_identity(self, rel)

    monkeypatch.setattr(remote.FsspecTransport, "put_file", put_then_another)
    monkeypatch.setattr(remote.FsspecTransport, "identity", look)
    saved = ours.memmap("s3://tbx-race/ds.tdz", archive=True, storage_options=opts)
    monkeypatch.setattr(remote.FsspecTransport, "put_file", real_put)
    monkeypatch.setattr(remote.FsspecTransport, "identity", real_identity)
    assert raced and not looked  # the save asked the server nothing after its put
    assert torch.equal(saved["x"], ours["x"])  # the saver keeps its own bytes
    # No copy is kept under the other upload's identity, which a look after the put
    # would have read (tied to the saved bytes by nothing):
    theirs_id = real_identity(remote.FsspecTransport("s3://tbx-race/ds.tdz", opts))
    ours_tree = remote._local_tree_id(saved["x"].filename)  # the saved copy's own index
    adopted = {"object": theirs_id, "tree": ours_tree, "part": "whole"}
    assert not os.path.exists(cache.path_for(adopted))
    assert os.path.exists(cache.path_for({"url": "s3://tbx-race/ds.tdz", "tree": ours_tree,
                                          "part": "whole"}))  # fmt: skip
    assert fs.size("tbx-race/ds.tdz") == (tmp_path / "theirs.tdz").stat().st_size
    unpack("s3://tbx-race/ds.tdz", str(tmp_path / "out"), storage_options=opts)
    assert torch.equal(TensorDict.load_memmap(str(tmp_path / "out"))["x"], theirs["x"])
    back = TensorDict.load_memmap("s3://tbx-race/ds.tdz", storage_options=opts)
    assert torch.equal(back["x"] + 0, theirs["x"])


# ---- unpack(url): the cache's whole copy of an archive ------------------------------------


def _whole_copy(cache: remote.RangeCache, size: int) -> Path:
    """The cache's whole copy of an archive of ``size`` bytes."""
    (found,) = [p for p in _cache_files(cache) if p.stat().st_size == size]
    return found


@pytest.mark.parametrize("where", ["data", "index", "cut"])
def test_a_damaged_whole_copy_in_the_cache_is_fetched_again_by_unpack(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache, where: str
) -> None:
    a = _td(1, 64)
    url = liar.serve("whole.tdz", a, tmp_path)
    unpack(url, str(tmp_path / "one"))
    size = (liar.root / "whole.tdz").stat().st_size
    copy = _whole_copy(cache, size)
    raw = bytearray(copy.read_bytes())
    if where == "data":  # a byte of the leaf's data: its CRC-32 no longer matches
        raw[size // 2] ^= 0xFF
    elif where == "index":  # a byte of the central directory: another tree id
        raw[size - 40] ^= 0xFF
    else:
        del raw[size // 2 :]
    copy.write_bytes(bytes(raw))
    unpack(url, str(tmp_path / "two"))  # never "the archive is damaged"
    assert torch.equal(TensorDict.load_memmap(str(tmp_path / "two"))["x"], a["x"])
    assert _whole_copy(cache, size).read_bytes() == (liar.root / "whole.tdz").read_bytes()


def test_unpack_of_a_damaged_remote_archive_names_the_url(liar: Liar, tmp_path: Path) -> None:
    url = liar.serve("bad.tdz", _td(1, 64), tmp_path)
    path = liar.root / "bad.tdz"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # the leaf's data, under its recorded CRC-32
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=rf"{url}: the archive is damaged \(.*CRC-32"):
        unpack(url, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


_KILLED_MID_WRITE = """
import os, signal, sys
import tensorbox._storage.remote as remote

class Killed:  # the process dies right after the first bytes of the fetch land
    def __init__(self, *args):
        self.f = open(*args)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()
    def write(self, data):
        self.f.write(data)
        self.f.flush()
        os.kill(os.getpid(), signal.SIGKILL)

remote.open = Killed  # what fetch_archive writes its file with
from tensorbox import unpack
unpack(sys.argv[1], sys.argv[2])
"""


def test_files_left_by_a_killed_fetch_are_deleted_by_the_next_scan(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache
) -> None:
    import subprocess
    import sys

    a = _td(1, 1024)
    url = liar.serve("killed.tdz", a, tmp_path)
    env = {**os.environ, "TENSORBOX_CACHE": cache.directory}
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", _KILLED_MID_WRITE, url, str(tmp_path / "out")], env=env
        )
        assert out.returncode == -9
    left = [p for p in Path(cache.directory).iterdir() if p.name.startswith(".part-")]
    assert len(left) == 2 and all(p.stat().st_size > 0 for p in left)
    mine = Path(cache.new_tmp())  # one this (live) process is writing
    cache.evict()  # any scan (the first write of a process, a bound passed)
    assert [p for p in Path(cache.directory).iterdir() if p.name.startswith(".part-")] == [mine]
    mine.unlink()
    unpack(url, str(tmp_path / "out"))
    assert torch.equal(TensorDict.load_memmap(str(tmp_path / "out"))["x"], a["x"])


@pytest.mark.parametrize("planted", ["symlink", "folder"])
def test_a_symlink_or_folder_in_place_of_a_cache_file_is_dropped(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache, planted: str
) -> None:
    a = _td(1, 64)
    url = liar.serve("planted.tdz", a, tmp_path)
    assert torch.equal(TensorDict.load_memmap(url)["x"] + 0, a["x"])  # index and leaf kept
    victim = tmp_path / "victim"
    kept = _cache_files(cache)
    assert len(kept) == 2
    for p in kept:
        p.unlink()
        if planted == "symlink":  # in a shared cache folder: bytes written through it
            p.symlink_to(victim)  # would land in another user's file
        else:
            p.mkdir()
    back = TensorDict.load_memmap(url)
    assert torch.equal(back["x"][3], a["x"][3]) and torch.equal(back["x"] + 0, a["x"])
    assert not victim.exists()
    assert all(p.is_file() and not p.is_symlink() for p in _cache_files(cache))


@pytest.mark.parametrize(
    "name", ["TENSORBOX_CACHE_BYTES", "TENSORBOX_REMOTE_TIMEOUT", "TENSORBOX_REMOTE_GAP"]
)
def test_a_setting_that_is_no_number_is_named(
    liar: Liar, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    url = liar.serve("env.tdz", _td(1, 16), tmp_path)
    monkeypatch.setattr(remote.cache, "_default", None)
    monkeypatch.setenv(name, "10G")
    with pytest.raises(ValueError, match=rf"\${name}='10G': expected a"):
        TensorDict.load_memmap(url)["x"][3]


def test_an_archive_larger_than_the_cache_bound_unpacks_and_saves(
    liar: Liar, tmp_path: Path, cache: remote.RangeCache
) -> None:
    import uuid

    cache.max_bytes = 1 * MiB
    a = _td(1, 1024)  # 4 MiB
    url = liar.serve("big.tdz", a, tmp_path)
    unpack(url, str(tmp_path / "out"))  # its whole copy was deleted as it was put
    assert torch.equal(TensorDict.load_memmap(str(tmp_path / "out"))["x"], a["x"])
    assert _used(cache) <= cache.max_bytes
    saved = a.memmap(f"memory://tbx-big/{uuid.uuid4().hex}.tdz", archive=True)
    assert _used(cache) <= cache.max_bytes  # the saved copy is read from its mapping
    assert torch.equal(saved["x"], a["x"])
