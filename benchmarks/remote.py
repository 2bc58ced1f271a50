"""Streaming training images from S3-compatible object storage: tensorbox vs LitData.

One local moto S3 server (a ``moto_server`` process on loopback), behind a byte-counting
TCP relay, and one set of synthetic images ``[N, 3, 64, 64]`` uint8 with int64 targets:

- **tensorbox, s3://**: the images saved as one archive object
  (``td.memmap("s3://bench/ds.tdz", archive=True)``), opened with
  ``TensorDict.load_memmap(url)`` and read by ``BatchLoader`` (shuffled, 2 threads);
  *cold*: an empty local cache; *warm*: the same cache, the tree opened again;
- **LitData, s3://**: the same images ``optimize()``d (16 MB chunks) and uploaded to the
  same server, read by ``StreamingDataset`` + ``StreamingDataLoader`` (shuffled, 2
  workers), in LitData's own virtual environment (``--litdata-python``); *cold*: an
  empty cache folder; *warm*: the same cache folder, a new process;
- **tensorbox, s3://, obstore**: the cold epoch again, through the obstore transport
  (``storage_options={"transport": "obstore", ...}``), when obstore is installed;
- **tensorbox, local**: the same archive read from a local file.

Each epoch's "training step" is ``batch.float().mean()``. Reported per contender,
medians over ``--repeats`` interleaved rounds: images/s over a whole epoch, the seconds
from opening to the first batch, and the bytes the server sent during the epoch (the
relay's count). The machine's load average is recorded with the results.

    python benchmarks/remote.py --images 4096 --repeats 3 \\
        --litdata-python /work/bench-venv/bin/python --json benchmarks/results/remote.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _results
from tensorbox import TensorDict
from tensorbox._storage import remote
from tensorbox.data import BatchLoader

HERE = Path(__file__).resolve().parent
BATCH = 256


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Relay:
    """A TCP relay on loopback that counts the bytes the server sends to its clients."""

    def __init__(self, upstream: int) -> None:
        self.upstream, self.sent = upstream, 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
                if count:
                    with self.lock:
                        self.sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _train(loader: Any, t0: float) -> tuple[float, float, int]:
    first, n, total = None, 0, 0.0
    for b in loader:
        x = b["images"]
        total += float(x.float().mean())
        n += int(x.shape[0])
        if first is None:
            first = time.perf_counter() - t0
    return first or 0.0, time.perf_counter() - t0, n


def _lit(cmd: list[str], env: dict[str, str]) -> str:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"LitData's side failed:\n{out.stderr[-4000:]}")
    return out.stdout


def tensorbox_epoch(where: str, opts: dict[str, Any] | None, seed: int) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    td = TensorDict.load_memmap(where, storage_options=opts)
    loader = BatchLoader(td, BATCH, seed=seed, num_threads=2, num_replicas=1)
    return _train(loader, t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--litdata-python", default=os.environ.get("LITDATA_PYTHON"))
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="tbx-remote-bench-"))
    port = _free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return _run(args, work, port)
    finally:
        moto.terminate()
        moto.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, work: Path, port: int) -> int:
    results = _results.start("remote")
    for _ in range(300):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    relay = Relay(port)
    endpoint = f"http://127.0.0.1:{relay.port}"
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_ENDPOINT_URL=endpoint,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",  # LitData reads through obstore, which wants https unless told
    )
    opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
    obstore_opts: dict[str, Any] | None = {
        "transport": "obstore", "endpoint": endpoint, "region": "us-east-1",
        "access_key_id": "testing", "secret_access_key": "testing",
        "client_options": {"allow_http": True},
    }  # fmt: skip
    if importlib.util.find_spec("obstore") is None:
        print("obstore is not installed: no obstore row")
        obstore_opts = None
    import s3fs

    s3fs.S3FileSystem(**opts).mkdir("bench")
    g = torch.Generator().manual_seed(0)
    n = args.images
    images = torch.randint(0, 256, (n, 3, 64, 64), dtype=torch.uint8, generator=g)
    targets = torch.randint(0, 1000, (n,), generator=g)
    data = TensorDict({"images": images, "targets": targets}, [n])
    url = "s3://bench/ds.tdz"
    data.memmap(url, archive=True, storage_options=opts)
    local = str(work / "ds.tdz")
    data.memmap(local, archive=True)
    size = os.path.getsize(local)
    lit_url = "s3://bench/litdata"
    lit = args.litdata_python
    if lit:
        np.save(work / "images.npy", images.numpy())
        np.save(work / "targets.npy", targets.numpy())
        _lit(
            [lit, str(HERE / "_remote_litdata.py"), "prepare", str(work / "images.npy"),
             str(work / "targets.npy"), str(work / "lit"), lit_url],
            env,
        )  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {}

    def record(name: str, first: float, seconds: float, seen: int, moved: int) -> None:
        runs.setdefault(name, []).append(
            {"images_per_s": seen / seconds, "first_batch_s": first, "bytes": moved, "n": seen}
        )
        print(f"  {name:<22} {seen / seconds:9.0f} images/s  first batch {first:6.3f} s  "
              f"{moved / 2**20:8.1f} MiB moved", flush=True)  # fmt: skip

    loads = []
    for r in range(args.repeats):
        print(f"round {r + 1}/{args.repeats}", flush=True)
        loads.append(os.getloadavg()[0])
        # tensorbox from s3://, cold then warm
        remote.cache._default = remote.RangeCache(str(work / f"cache-{r}"), 20 << 30)
        mark = relay.sent
        first, secs, seen = tensorbox_epoch(url, opts, r)
        record("tensorbox s3 cold", first, secs, seen, relay.sent - mark)
        mark = relay.sent
        first, secs, seen = tensorbox_epoch(url, opts, r + 100)
        record("tensorbox s3 warm", first, secs, seen, relay.sent - mark)
        if obstore_opts is not None:  # the same, cold, through the obstore transport
            remote.cache._default = remote.RangeCache(str(work / f"cache-ob-{r}"), 20 << 30)
            mark = relay.sent
            first, secs, seen = tensorbox_epoch(url, obstore_opts, r)
            record("tensorbox s3 cold, obstore", first, secs, seen, relay.sent - mark)
        # LitData from s3://, cold then warm
        if lit:
            cache = str(work / f"lit-cache-{r}")
            for name in ("litdata s3 cold", "litdata s3 warm"):
                mark = relay.sent
                out = _lit(
                    [lit, str(HERE / "_remote_litdata.py"), "epoch", lit_url, cache, str(BATCH)],
                    env,
                )
                got = json.loads(out.strip().splitlines()[-1])
                record(name, got["first"], got["seconds"], got["images"], relay.sent - mark)
        # tensorbox, local file
        first, secs, seen = tensorbox_epoch(local, None, r)
        record("tensorbox local", first, secs, seen, 0)
    loads.append(os.getloadavg()[0])
    med = {
        name: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for name, rs in runs.items()
    }
    print(f"\nmedians of {args.repeats} rounds, {n} images 3x64x64 uint8 ({size / 2**20:.1f} MiB "
          f"archive), batch {BATCH}; load average {min(loads):.2f}..{max(loads):.2f} "
          f"({os.cpu_count()} cores)")  # fmt: skip
    print(f"{'':<22} {'images/s':>10} {'first batch s':>14} {'MiB moved/epoch':>16}")
    for name, m in med.items():
        print(f"{name:<22} {m['images_per_s']:10.0f} {m['first_batch_s']:14.3f} "
              f"{m['bytes'] / 2**20:16.1f}")  # fmt: skip
    if not lit:
        print("LitData: not run (no --litdata-python)")
    if args.json:
        _results.write(
            args.json,
            {
                **results,
                "images": n,
                "image_shape": [3, 64, 64],
                "archive_bytes": size,
                "batch": BATCH,
                "repeats": args.repeats,
                "load_average_1min": loads,
                "cpus": os.cpu_count(),
                "litdata": bool(lit),
                "medians": med,
                "runs": runs,
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
