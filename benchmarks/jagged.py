"""Jagged leaves: reading random batches of variable-length rows from a saved tree.

Two comparisons, medians over ``--repeats`` rounds (contenders alternate within each
round, so a busy neighbour process hurts them alike; page cache warm):

1. The same token rows saved as a jagged leaf (values + offsets files) and saved padded
   to the longest row (a dense ``[rows, longest]`` leaf plus the lengths): bytes on disk,
   and batches per second for random batches read as a jagged tensor (``td[idx]``), and
   read padded to the batch's longest row: ``torch.nested.to_padded_tensor`` of the
   jagged batch, ``td[idx].to_padded_tensor()`` (tensorbox's padding of it), and
   ``td.pad_rows(idx)`` (the rows gathered straight into the padding), against the
   padded tree's rows cut to the batch's longest row.
2. A ``DataLoader`` over the saved jagged tree (default collate: one ``__getitems__``
   per batch, then ``torch.nested.to_padded_tensor`` or ``tensorbox.to_padded_tensor``),
   a ``DataLoader`` over the row numbers with ``collate_fn=ds.pad_rows``, against a
   ``DataLoader`` over a Python list with one tensor per row (``pad_sequence`` as its
   collate), all shuffled, batch size ``--batch``, in the main process.

Usage::

    python benchmarks/jagged.py           # 50,000 rows, 5 rounds (about a minute)
    python benchmarks/jagged.py --small   # 4,000 rows, 3 rounds: the smoke run
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorbox
from benchmarks import _results
from tensorbox import TensorDict


def token_rows(n: int, seed: int = 0) -> list[torch.Tensor]:
    """``n`` int32 token rows with long-tailed lengths (median about 55, a few near 1,000;
    some empty)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.exp(torch.randn(n, generator=g) * 0.8 + 4.0).long().clamp(0, 1000)
    lengths[torch.randint(0, n, (max(n // 100, 1),), generator=g)] = 0
    total = int(lengths.sum())
    values = torch.randint(0, 32_000, (total,), generator=g, dtype=torch.int32)
    return list(values.split(lengths.tolist()))


def disk_bytes(path: Path) -> int:
    """Bytes the tree takes on disk (allocated blocks, meta.json files included)."""
    total = 0
    for d, _, files in os.walk(path):
        total += sum(os.stat(os.path.join(d, f)).st_blocks * 512 for f in files)
    return total


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Calls of ``fn`` per second (``fn`` returns how many batches it read)."""
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds or n == 0:
        n += fn()
    return n / elapsed


class _Rows(torch.utils.data.Dataset[torch.Tensor]):
    def __init__(self, rows: list[torch.Tensor]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.rows[i]


def _pad(batch: list[torch.Tensor]) -> torch.Tensor:
    return pad_sequence(batch, batch_first=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="4,000 rows, 3 rounds")
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=0.0, help="per contender and round")
    parser.add_argument("--json", metavar="PATH", help="also write the medians as JSON")
    args = parser.parse_args()
    results = _results.start("jagged")
    n = args.rows or (4_000 if args.small else 50_000)
    repeats = args.repeats or (3 if args.small else 5)
    seconds = args.seconds or (0.3 if args.small else 1.0)
    batch = args.batch
    torch.set_num_threads(1)

    rows = token_rows(n)
    lengths = torch.tensor([len(r) for r in rows])
    longest = int(lengths.max())
    work = Path(tempfile.mkdtemp(prefix="tbx-jagged-"))
    try:
        nt = torch.nested.nested_tensor(rows, layout=torch.jagged)
        TensorDict(tokens=nt, length=lengths, batch_size=[n]).memmap(work / "jagged")
        padded = pad_sequence(rows, batch_first=True)  # [n, longest]
        TensorDict(tokens=padded, length=lengths, batch_size=[n]).memmap(work / "padded")
        del nt, padded
        jag = TensorDict.load_memmap(work / "jagged")
        pad = TensorDict.load_memmap(work / "padded")
        g = torch.Generator().manual_seed(1)

        def index() -> torch.Tensor:
            return torch.randint(0, n, (batch,), generator=g)

        def read_jagged() -> int:
            jag[index()]["tokens"]
            return 1

        def read_jagged_padded() -> int:
            torch.nested.to_padded_tensor(jag[index()]["tokens"], 0)
            return 1

        def read_jagged_pad() -> int:
            jag[index()].to_padded_tensor(0)
            return 1

        def read_pad_rows() -> int:
            jag.pad_rows(index(), 0)
            return 1

        def read_padded() -> int:
            b = pad[index()]
            b["tokens"][:, : int(b["length"].max())]
            return 1

        def loader(dl: DataLoader[Any], pad_it: Callable[..., Any] | None) -> Callable[[], int]:
            def run() -> int:
                k = 0
                for b in dl:
                    if pad_it is not None:
                        pad_it(b["tokens"], 0)
                    k += 1
                return k

            return run

        # The loaders run whole epochs; a shorter epoch keeps the rounds short.
        sub = min(n, 200 * batch)
        jag_sub, rows_sub = jag[:sub], rows[:sub]
        dl_tbx = DataLoader(jag_sub, batch_size=batch, shuffle=True)  # type: ignore[arg-type]
        dl_rows = DataLoader(
            range(sub), batch_size=batch, shuffle=True, collate_fn=jag_sub.pad_rows
        )
        dl_list = DataLoader(_Rows(rows_sub), batch_size=batch, shuffle=True, collate_fn=_pad)
        contenders: dict[str, Callable[[], int]] = {
            "jagged tree -> jagged batch": read_jagged,
            "jagged tree -> padded (torch.nested.to_padded_tensor)": read_jagged_padded,
            "jagged tree -> padded (td[idx].to_padded_tensor())": read_jagged_pad,
            "jagged tree -> padded (td.pad_rows(idx))": read_pad_rows,
            "padded tree -> batch cut to its longest": read_padded,
            "DataLoader(jagged tree) + torch.nested.to_padded_tensor": loader(
                dl_tbx, torch.nested.to_padded_tensor
            ),
            "DataLoader(jagged tree) + tensorbox.to_padded_tensor": loader(
                dl_tbx, tensorbox.to_padded_tensor
            ),
            "DataLoader(row numbers, collate_fn=ds.pad_rows)": loader(dl_rows, None),
            "DataLoader(list of row tensors) + pad_sequence": loader(dl_list, None),
        }
        rates: dict[str, list[float]] = {k: [] for k in contenders}
        for r in range(repeats):
            order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
            for name in order:
                rates[name].append(rate(contenders[name], seconds))

        jb, pb = disk_bytes(work / "jagged"), disk_bytes(work / "padded")
        mean = float(lengths.float().mean())
        print(
            f"{n:,} int32 token rows, mean length {mean:.0f}, longest {longest}, "
            f"{int((lengths == 0).sum())} empty; batch {batch}; median of {repeats} rounds, "
            f"{torch.get_num_threads()} torch thread, page cache warm"
        )
        print(f"on disk: jagged {jb / 1e6:.1f} MB, padded {pb / 1e6:.1f} MB ({pb / jb:.1f}x)")
        print(f"{'reader':<60} {'batches/s':>10}")
        for name, values in rates.items():
            print(f"{name:<60} {statistics.median(values):>10,.0f}")
        results["settings"] = {"rows": n, "batch": batch, "rounds": repeats, "torch_threads": 1}
        results["disk_mb"] = {"jagged": jb / 1e6, "padded": pb / 1e6}
        results["batches_per_s"] = {k: statistics.median(v) for k, v in rates.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        _results.write(args.json, results)


if __name__ == "__main__":
    main()
