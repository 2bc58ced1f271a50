"""Row writes and reads of a Redis store: tensorbox's ``TensorDictStore`` against
tensordict's and against plain redis-py doing the same bytes with no checks (the floor).

A store of batch ``[N]`` holds ``obs`` (float32, 84 per row) and ``act`` (int64). Tasks:

* **row write**: ``store[i] = row`` for one random row (both leaves);
* **cell write**: ``store[i, j]`` of a ``[N // 8, 8]`` store, indexed beyond the first
  dim (tensorbox: one script; tensordict: its own path);
* **row read**: ``store[i]``; **batch read**: ``store[idx]`` of 256 random rows.

Each figure is the median over ``--rounds`` rounds of ``--ops`` operations (methods in a
rotating order within a round), in microseconds per operation, with the round trips per
operation counted at the client's socket (``send_packed_command`` calls). A redis-server
of its own is started on a free loopback port.

Usage::

    python benchmarks/redis_store.py            # N=10000, 300 ops, 5 rounds
    python benchmarks/redis_store.py --ops 100
"""

from __future__ import annotations

import argparse
import gc
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis
import redis.connection

from tensorbox import TensorDict, TensorDictStore

warnings.filterwarnings("ignore")

SENDS = [0]
_send = redis.connection.AbstractConnection.send_packed_command


def _counting_send(self, command, check_health=True):  # type: ignore[no-untyped-def]
    SENDS[0] += 1
    return _send(self, command, check_health)


redis.connection.AbstractConnection.send_packed_command = _counting_send  # type: ignore[method-assign]

try:  # tensordict's store talks through redis.asyncio, from a thread of its own
    import redis.asyncio.connection as _aio

    _asend = _aio.AbstractConnection.send_packed_command

    async def _counting_asend(self, command, check_health=True):  # type: ignore[no-untyped-def]
        SENDS[0] += 1
        return await _asend(self, command, check_health)

    _aio.AbstractConnection.send_packed_command = _counting_asend  # type: ignore[method-assign]
except ImportError:
    pass


def _server() -> tuple[subprocess.Popen[bytes], int]:
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tempfile.mkdtemp()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", d],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, port


def measure(methods: dict[str, Callable[[int], object]], ops: int, rounds: int) -> dict:
    """Median µs per op and round trips per op of each method (rotating order)."""
    times: dict[str, list[float]] = {k: [] for k in methods}
    trips: dict[str, float] = {}
    names = list(methods)
    g = torch.Generator().manual_seed(0)
    for r in range(-1, rounds):  # round -1 warms up (first touches, caches) unmeasured
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            picks = torch.randint(0, 1 << 30, (ops,), generator=g).tolist()
            gc.collect()
            SENDS[0] = 0
            t0 = time.perf_counter()
            for p in picks:
                methods[name](p)
            if r >= 0:
                times[name].append((time.perf_counter() - t0) / ops * 1e6)
                trips[name] = SENDS[0] / ops
    return {k: (statistics.median(v), trips[k]) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    n = args.n
    proc, port = _server()
    try:
        from tensordict.store import TensorDictStore as TDStore
    except ImportError:
        TDStore = None
    try:
        local = TensorDict(
            {"obs": torch.randn(n, 84), "act": torch.arange(n, dtype=torch.int64)}, [n]
        )
        tb = TensorDictStore.from_tensordict(local, port=port, host="127.0.0.1")
        raw = redis.Redis(host="127.0.0.1", port=port)
        raw.set("obs", local["obs"].numpy().tobytes())
        raw.set("act", local["act"].numpy().tobytes())
        td = None
        if TDStore is not None:
            import tensordict

            td = TDStore.from_tensordict(
                tensordict.TensorDict(
                    {"obs": local["obs"].clone(), "act": local["act"].clone()}, [n]
                ),
                host="127.0.0.1",
                port=port,
            )
        row = TensorDict({"obs": torch.ones(84), "act": torch.tensor(7)}, [])
        obs_b, act_b = torch.ones(84).numpy().tobytes(), torch.tensor(7).numpy().tobytes()

        def raw_write(p: int) -> None:
            i = p % n
            pipe = raw.pipeline(transaction=False)
            pipe.setrange("obs", i * 336, obs_b)
            pipe.setrange("act", i * 8, act_b)
            pipe.execute()

        def raw_read(p: int) -> None:
            i = p % n
            pipe = raw.pipeline(transaction=False)
            pipe.getrange("obs", i * 336, i * 336 + 335)
            pipe.getrange("act", i * 8, i * 8 + 7)
            o, a = pipe.execute()
            torch.frombuffer(bytearray(o), dtype=torch.float32)
            torch.frombuffer(bytearray(a), dtype=torch.int64)

        def raw_batch(p: int) -> None:
            rows = sorted(
                torch.randint(0, n, (256,), generator=torch.Generator().manual_seed(p)).tolist()
            )
            pipe = raw.pipeline(transaction=False)
            for i in rows:
                pipe.getrange("obs", i * 336, i * 336 + 335)
                pipe.getrange("act", i * 8, i * 8 + 7)
            pipe.execute()

        def idx(p: int) -> torch.Tensor:
            return torch.randint(0, n, (256,), generator=torch.Generator().manual_seed(p))

        tasks: dict[str, dict[str, Callable[[int], object]]] = {
            "row write": {
                "tensorbox": lambda p: tb.__setitem__(p % n, row),
                "redis-py (no checks)": raw_write,
            },
            "row read": {
                "tensorbox": lambda p: tb[p % n],
                "redis-py (no checks)": raw_read,
            },
            "batch read (256 rows)": {
                "tensorbox": lambda p: tb[idx(p)],
                "redis-py (no checks)": raw_batch,
            },
        }
        if td is not None:
            td_row = tensordict.TensorDict({"obs": torch.ones(84), "act": torch.tensor(7)}, [])
            tasks["row write"]["tensordict"] = lambda p: td.__setitem__(p % n, td_row)
            tasks["row read"]["tensordict"] = lambda p: td[p % n]
            tasks["batch read (256 rows)"]["tensordict"] = lambda p: td[idx(p)]
        # a write indexed beyond the first dim: [n // 8, 8] cells
        grid = TensorDictStore(batch_size=[n // 8, 8], port=port, host="127.0.0.1")
        grid["obs"] = torch.zeros(n // 8, 8, 84)
        cell = TensorDict({"obs": torch.ones(84)}, [])
        tasks["cell write [i, j]"] = {
            "tensorbox": lambda p: grid.__setitem__((p % (n // 8), p % 8), cell)
        }
        if TDStore is not None:
            tgrid = TDStore(batch_size=[n // 8, 8], port=port, host="127.0.0.1")
            tgrid["obs"] = torch.zeros(n // 8, 8, 84)
            tcell = tensordict.TensorDict({"obs": torch.ones(84)}, [])
            tasks["cell write [i, j]"]["tensordict"] = lambda p: tgrid.__setitem__(
                (p % (n // 8), p % 8), tcell
            )
        print(f"N={n}, {args.ops} ops x {args.rounds} rounds; µs per op (round trips per op)")
        print(
            f"{'task':24} "
            + " ".join(f"{m:>26}" for m in ("tensorbox", "tensordict", "redis-py (no checks)"))
        )
        for task, methods in tasks.items():
            res = measure(methods, args.ops, args.rounds)
            cells = []
            for m in ("tensorbox", "tensordict", "redis-py (no checks)"):
                if m in res:
                    us, rt = res[m]
                    cells.append(f"{us:>17,.0f} ({rt:4.1f})")
                else:
                    cells.append(f"{'-':>26}")
            print(f"{task:24} " + " ".join(f"{c:>26}" for c in cells))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
