"""Trees behind URLs shared with other processes and refused to strangers: a lazy leaf
pickles by reference (a spawned DataLoader worker attaches to it and fetches its own rows
only), and moto's S3 server with its IAM authentication on refuses a wrong key.

Bytes are counted by the loopback HTTP server (tests/servers.py); the auth server is a
moto process of its own (authentication is a process-wide moto setting)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict
from tensorbox._storage import remote, remote_tree
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox._storage.remote import leaf as remote_leaf
from tensorbox._storage.remote_tree import RemoteRef, RemoteTensor
from tests.servers import HTTPServer, _wait_listening, free_port

pytest.importorskip("fsspec")
MiB = 1 << 20


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[remote.RangeCache]:
    c = remote.RangeCache(str(tmp_path / "cache"), max_bytes=1 << 30)
    monkeypatch.setattr(remote.cache, "_default", c)
    monkeypatch.setenv("TENSORBOX_CACHE", c.directory)  # what other processes use
    yield c
    remote_tree._opened.clear()


def _serve(http_server: HTTPServer, name: str, td: TensorDict, tmp_path: Path) -> str:
    td.memmap(str(tmp_path / name), archive=True)
    os.replace(tmp_path / name, http_server.root / name)
    return f"{http_server.url}/{name}"


def _elsewhere() -> None:
    """This process forgets the trees it opened, as another process never knew them."""
    remote_tree._opened.clear()


# ---- pickling by reference -----------------------------------------------------


def test_pickling_moves_nothing_and_the_copy_fetches_its_rows(
    http_server: HTTPServer, tmp_path: Path
) -> None:
    data = TensorDict(
        {"a": torch.randn(1024, 256), "b": {"c": torch.arange(1024)}}, [1024]
    )  # "a": 1 MiB, 1 KiB rows
    url = _serve(http_server, "ref.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    mark = http_server.bytes_sent
    blob = pickle.dumps(td)
    leaf = pickle.dumps(td["a"])
    assert http_server.bytes_sent == mark  # pickled by reference: nothing fetched
    assert len(blob) < 16 << 10 and len(leaf) < 8 << 10
    assert isinstance(pickle.loads(leaf), RemoteTensor)
    ref = td["a"].__reduce_ex__(4)[1][0]
    assert type(ref) is RemoteRef and ref.url == url and ref.entry.shape == (1024, 256)

    _elsewhere()
    back = pickle.loads(blob)
    assert type(back["a"]) is RemoteTensor and type(back["b", "c"]) is RemoteTensor
    mark = http_server.bytes_sent
    rows = [3, 500, 1000]
    assert torch.equal(back["a"][rows], data["a"][rows])
    assert torch.equal(back["b", "c"][rows], data["b", "c"][rows])
    # a page per row of "a" and of "b.c" (and, at most, the gap between close rows)
    assert http_server.bytes_sent - mark <= 3 * 2 * 4096 + (260 << 10)
    assert torch.equal(back.to_tensordict()["a"], data["a"])


def test_a_reference_to_a_replaced_tree_is_refused(http_server: HTTPServer, tmp_path: Path) -> None:
    url = _serve(http_server, "gone.tdz", TensorDict({"x": torch.zeros(64, 8)}, [64]), tmp_path)
    blob = pickle.dumps(TensorDict.load_memmap(url))
    _serve(http_server, "gone.tdz", TensorDict({"x": torch.ones(64, 8)}, [64]), tmp_path)
    _elsewhere()
    with pytest.raises(OSError, match=r"gone\.tdz'.*replaced since this reference"):
        pickle.loads(blob)


def test_a_whole_leaf_pickles_as_its_cached_file(http_server: HTTPServer, tmp_path: Path) -> None:
    data = TensorDict({"x": torch.arange(100)}, [100])
    url = _serve(http_server, "whole.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    td["x"].sum()  # fetched whole: a plain mapping of the cache from now on
    assert type(td["x"]) is MemoryMappedTensor
    mark = http_server.bytes_sent
    assert torch.equal(pickle.loads(pickle.dumps(td))["x"], data["x"])
    assert http_server.bytes_sent == mark


def _collate(batch: TensorDict) -> TensorDict:
    return batch


@pytest.mark.slow
def test_spawned_dataloader_workers_fetch_only_their_rows(
    http_server: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    monkeypatch.setenv("TENSORBOX_REMOTE_GAP", "0")  # rows alone, whatever their distance
    n = 256
    data = TensorDict({"images": torch.randint(0, 255, (n, 4096), dtype=torch.uint8)}, [n])
    url = _serve(http_server, "spawn.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    sampler = BatchSampler(DistributedSampler(range(n), num_replicas=2, rank=0, seed=1), 16, False)
    mark = http_server.bytes_sent
    loader = DataLoader(td, sampler=sampler, batch_size=None, num_workers=2,
                        collate_fn=_collate, multiprocessing_context="spawn")  # fmt: skip
    got = torch.cat([b["images"] for b in loader])
    rows = torch.tensor(list(DistributedSampler(range(n), num_replicas=2, rank=0, seed=1)))
    assert torch.equal(got.sort(0).values, data["images"][rows].sort(0).values)
    moved = http_server.bytes_sent - mark
    # each worker opens the tree from the shared cache (nothing moves) and fetches the
    # rows of its batches: half the images, never the leaf whole (rows in the archive's
    # head and tail, read at open, are in the cache already)
    assert (n // 2) * 4096 - (144 << 10) <= moved <= (n // 2) * 4096 + (64 << 10)
    assert type(td["images"]) is RemoteTensor  # the parent fetched nothing itself


# ---- credentials refused by S3 ---------------------------------------------------


class AuthS3:
    def __init__(self, endpoint: str, key: str, secret: str) -> None:
        self.endpoint, self.key, self.secret = endpoint, key, secret

    def options(self, key: str | None = None, secret: str | None = None) -> dict[str, object]:
        return {
            "key": key or self.key,
            "secret": secret or self.secret,
            "client_kwargs": {"endpoint_url": self.endpoint},
        }


#: moto counts the actions it lets through before it checks credentials: creating the
#: user, its key and its policy; everything after is authenticated against moto's IAM.
_UNCHECKED = 3


@pytest.fixture(scope="module")
def s3_auth() -> Iterator[AuthS3]:
    """moto's S3 server with its IAM authentication on (``INITIAL_NO_AUTH_ACTION_COUNT``),
    a process of its own on a free loopback port, and one user allowed ``s3:*``."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(_UNCHECKED))
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, proc, "moto's S3 server (auth)")
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="unchecked",
            aws_secret_access_key="unchecked",
        )
        iam.create_user(UserName="reader")
        made = iam.create_access_key(UserName="reader")["AccessKey"]
        policy = {"Version": "2012-10-17",
                  "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}  # fmt: skip
        iam.put_user_policy(UserName="reader", PolicyName="s3", PolicyDocument=json.dumps(policy))
        yield AuthS3(endpoint, made["AccessKeyId"], made["SecretAccessKey"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.heavy  # moto in a process of its own
def test_s3_refuses_a_wrong_key(s3_auth: AuthS3) -> None:
    import s3fs

    good = s3_auth.options()
    s3fs.S3FileSystem(**good).mkdir("locked")
    url = "s3://locked/ds.tdz"
    TensorDict({"x": torch.arange(3)}, [3]).memmap(url, archive=True, storage_options=good)
    assert TensorDict.load_memmap(url, storage_options=good)["x"].tolist() == [0, 1, 2]
    for bad in (s3_auth.options(secret="wrong"), s3_auth.options(key="AKIANOTAKEY")):
        with pytest.raises(PermissionError, match=r"'s3://locked/ds\.tdz'.*access refused.*cred"):
            TensorDict.load_memmap(url, storage_options=bad)
    with pytest.raises(PermissionError, match=r"s3://locked/other\.tdz.*refused"):
        TensorDict({"x": torch.arange(3)}, [3]).memmap(
            "s3://locked/other.tdz", archive=True, storage_options=s3_auth.options(secret="no")
        )


# ---- large fetches: several requests, written as they arrive -----------------------


def test_a_large_fetch_goes_out_as_a_few_requests(
    http_server: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = TensorDict({"x": torch.randint(0, 255, (6144, 4096), dtype=torch.uint8)}, [6144])
    monkeypatch.setattr(remote_leaf, "MIN_REQUEST", 8 << 20)
    url = _serve(http_server, "large.tdz", data, tmp_path)  # 24 MiB: 3 requests of 8 MiB
    td = TensorDict.load_memmap(url)
    mark, gets = http_server.bytes_sent, http_server.gets
    assert torch.equal(td["x"][::2], data["x"][::2])  # half the rows: the rest comes with them
    assert type(td["x"]) is MemoryMappedTensor  # every part here, recorded
    # three requests (the leaf's local header comes with the first: they are adjacent)
    assert http_server.gets - gets == 3
    assert 24 * MiB - (144 << 10) <= http_server.bytes_sent - mark <= 24 * MiB + (64 << 10)
    again = TensorDict.load_memmap(url)  # another open: the cache's .have file says all
    assert type(again["x"]) is MemoryMappedTensor and torch.equal(again["x"], data["x"])


def test_most_of_what_is_missing_brings_the_rest(http_server: HTTPServer, tmp_path: Path) -> None:
    data = TensorDict({"x": torch.randint(0, 255, (512, 4096), dtype=torch.uint8)}, [512])
    url = _serve(http_server, "most.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    assert torch.equal(td["x"][:200], data["x"][:200])  # under half: those rows
    assert type(td["x"]) is RemoteTensor
    mark = http_server.bytes_sent
    assert torch.equal(td["x"][200:400], data["x"][200:400])  # most of the rest: all of it
    assert type(td["x"]) is MemoryMappedTensor
    assert 312 * 4096 - (144 << 10) <= http_server.bytes_sent - mark <= 312 * 4096 + (64 << 10)


@pytest.mark.heavy
def test_half_of_the_rows_alone_with_no_gap(
    http_server: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSORBOX_REMOTE_GAP", "0")  # the rows asked for, nothing else
    data = TensorDict({"x": torch.randint(0, 255, (512, 4096), dtype=torch.uint8)}, [512])
    url = _serve(http_server, "half.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    mark = http_server.bytes_sent
    assert torch.equal(td["x"][::2], data["x"][::2])
    assert 256 * 4096 - (144 << 10) <= http_server.bytes_sent - mark <= 256 * 4096 + (64 << 10)
    assert type(td["x"]) is RemoteTensor


def test_a_large_fetch_cut_short_records_nothing(
    http_server: HTTPServer, tmp_path: Path, cache: remote.RangeCache
) -> None:
    data = TensorDict({"x": torch.randint(0, 255, (6144, 4096), dtype=torch.uint8)}, [6144])
    url = _serve(http_server, "cut.tdz", data, tmp_path)
    td = TensorDict.load_memmap(url)
    http_server.cut_replies_after(1 << 20)  # every reply: a MiB, then the connection drops
    try:
        with pytest.raises(OSError, match=r"cut\.tdz.*failed 3 times"):
            td["x"].sum()
    finally:
        http_server.cut_replies_after(None)
    have = [f for f in os.listdir(cache.directory) if f.endswith(".have")]
    assert all(os.path.getsize(os.path.join(cache.directory, f)) == 0 for f in have)
    assert type(td["x"]) is RemoteTensor  # nothing recorded: fetched again below
    assert torch.equal(td["x"][100], data["x"][100])
