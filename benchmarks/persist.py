"""Save and load times of tensorbox trees against tensordict, torch.save and safetensors.

Run: ``python benchmarks/persist.py`` (about two minutes) or ``--small`` (under a minute).

Layouts (``--small`` divides the sizes by 8 and uses a smaller model):

- 8 leaves x 32 MiB, 512 leaves x 512 KiB (float32, 256 MiB each);
- the weights of ``nn.Transformer(768, 12, 6, 6, 3072)`` (~100M parameters, ~180 leaves).

For each: save time (a fresh directory each time; files land in the page cache),
lazy-open time (nothing read) and open + read-all time (every byte copied into
process memory), medians over ``--repeat`` runs (and the best save, since this VM's
page-cache allocation speed swings by 2-4x). The floor is plain ``os.write``
of each leaf's bytes to its own file. torch's intra-op threads are pinned with
``torch.set_num_threads`` (``--torch-threads``, default 1) and printed, since they
change copy speeds and collapse when other processes compete. tensorbox runs three
ways: its default (``num_threads=0``: a save this large writes from up to four threads,
the caller among them), ``num_threads=1`` (the calling thread only) and ``--threads``.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from benchmarks import _results
from tensorbox import TensorDict


def _layouts(small: bool) -> dict[str, dict[str, torch.Tensor]]:
    div = 8 if small else 1
    g = torch.Generator().manual_seed(0)
    big = {f"w{i}": torch.rand((32 << 20) // 4 // div, generator=g) for i in range(8)}
    many = {f"w{i}": torch.rand((512 << 10) // 4 // div, generator=g) for i in range(512)}
    dims = (256, 4, 2, 2, 1024) if small else (768, 12, 6, 6, 3072)
    model = torch.nn.Transformer(*dims[:1], nhead=dims[1], num_encoder_layers=dims[2],
                                 num_decoder_layers=dims[3], dim_feedforward=dims[4])  # fmt: skip
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {"8 x 32 MiB": big, "512 x 512 KiB": many, "transformer": weights}


def _read_all(tensors: Any) -> None:
    for t in tensors:
        t.clone()


def _nested(flat: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Dotted state-dict keys as nested dicts, the way a TensorDict of a model holds them."""
    out: dict[str, Any] = {}
    for key, t in flat.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = t
    return out


def _leaves(td: Any) -> list[torch.Tensor]:
    return [v for _, v in td.items(include_nested=True, leaves_only=True)]


class Case:
    """One way to save and load: ``save(path)``, then ``open(path)`` (lazy), ``read(path)``."""

    def __init__(self, label: str, save: Callable, open_: Callable | None, read: Callable | None):
        self.label, self.save, self.open, self.read = label, save, open_, read
        self.times: dict[str, list[float]] = {"save": [], "open": [], "read": []}

    def run_once(self, path: str) -> None:
        for what, fn in (("save", self.save), ("open", self.open), ("read", self.read)):
            if fn is None:
                continue
            gc.collect()
            start = time.perf_counter()
            result = fn(path)
            self.times[what].append(time.perf_counter() - start)
            del result  # unmapping files is not part of the time

    def medians(self) -> tuple[float, float | None, float | None]:
        def med(k: str) -> float | None:
            return statistics.median(self.times[k]) * 1e3 if self.times[k] else None

        return med("save") or float("nan"), med("open"), med("read")


def cases(layout: dict[str, torch.Tensor], threads: int) -> list[Case]:
    def floor(out: str) -> None:
        os.mkdir(out)
        for i, t in enumerate(layout.values()):
            fd = os.open(os.path.join(out, f"{i}.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            os.write(fd, t.view(-1).view(torch.uint8).numpy())
            os.close(fd)

    td = TensorDict(_nested(layout))
    found = [Case("write() floor, one file per leaf", floor, None, None)]
    # The default (num_threads=0: threads for a large save), one thread, and --threads
    for n in dict.fromkeys((0, 1, threads)):
        found.append(
            Case(
                "tensorbox (default)" if n == 0 else f"tensorbox (num_threads={n})",
                lambda out, n=n: td.memmap(out, num_threads=n),
                TensorDict.load_memmap,
                lambda out: _read_all(_leaves(TensorDict.load_memmap(out))),
            )
        )
    try:
        import tensordict
    except ImportError:
        pass
    else:
        ttd = tensordict.TensorDict(_nested(layout), batch_size=[])
        found.append(
            Case(
                f"tensordict {tensordict.__version__} memmap",
                lambda out: ttd.memmap(out, num_threads=0),
                tensordict.TensorDict.load_memmap,
                lambda out: _read_all(tensordict.TensorDict.load_memmap(out).values(True, True)),
            )
        )
    found.append(
        Case(
            "torch.save (open: mmap=True)",
            lambda out: torch.save(layout, out),
            lambda out: torch.load(out, mmap=True, weights_only=True),
            lambda out: torch.load(out, weights_only=True),
        )
    )
    try:
        from safetensors import safe_open
        from safetensors.torch import save_file
    except ImportError:
        print("  (safetensors is not installed: skipped)")
    else:

        def lazy_open(out: str) -> None:
            with safe_open(out, "pt") as f:
                f.keys()

        def read_all(out: str) -> None:
            with safe_open(out, "pt") as f:
                _read_all(f.get_tensor(k) for k in f.keys())  # noqa: SIM118 (not a dict)

        found.append(
            Case("safetensors save_file", lambda out: save_file(layout, out), lazy_open, read_all)
        )
    return found


def bench(layout: dict[str, torch.Tensor], root: str, repeat: int, threads: int) -> list[Case]:
    """Every case once per round, rounds repeated, so a slow spell of the machine hits all.

    Each save writes to a new path; the outputs are deleted between rounds, then synced,
    so that no save pays for deleting the previous one (ext4 here is mounted with
    ``discard``: freeing blocks slows the next metadata operations).
    """
    found = cases(layout, threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tensordict's deprecation notices
        for r in range(repeat):
            paths = [os.path.join(root, f"r{r}-{i}") for i in range(len(found))]
            # Rotate the order: how fast the VM hands out page-cache memory depends on
            # how recently memory was freed, which favours whoever runs first.
            k = r % len(found)
            for case, path in zip(found[k:] + found[:k], paths, strict=True):
                case.run_once(path)
            for path in paths:
                shutil.rmtree(path, ignore_errors=True)
                if os.path.isfile(path):
                    os.unlink(path)
            os.sync()
            time.sleep(0.5)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="small sizes, 3 repeats")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="rounds (default 7: each case once in each position)",
    )
    parser.add_argument("--threads", type=int, default=4, help="tensorbox num_threads to compare")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="also write the medians as JSON (figures.py)"
    )
    args = parser.parse_args()
    results: dict = _results.start("persist")
    results |= {"layouts": [], "save_ms": {}, "open_ms": {}, "open_read_ms": {}}
    torch.set_num_threads(args.torch_threads)
    repeat = args.repeat or (3 if args.small else 7)
    root = tempfile.mkdtemp(prefix="tbx-bench-", dir=args.dir)
    print(
        f"torch {torch.__version__}, torch.set_num_threads({args.torch_threads}), "
        f"{os.cpu_count()} CPUs, median of {repeat}, files in {root} (page cache: warm)"
    )
    try:
        for name, layout in _layouts(args.small).items():
            mib = sum(t.numel() * t.element_size() for t in layout.values()) / 2**20
            results["layouts"].append(f"{name} ({len(layout)} leaves, {mib:.0f} MiB)")
            print(f"\n{name}: {len(layout)} leaves, {mib:.0f} MiB")
            print(
                f"| {'':34} | {'save ms':>9} | {'(best)':>7} | {'GB/s':>5} | {'open ms':>8} "
                f"| {'open+read ms':>12} |"
            )
            print(f"|{'-' * 36}|{'-' * 10}:|{'-' * 8}:|{'-' * 6}:|{'-' * 9}:|{'-' * 13}:|")
            for case in bench(layout, root, repeat, args.threads):
                save, lazy, full = case.medians()
                gbs = mib * 2**20 / 1e9 / (save / 1e3)
                lz = "" if lazy is None else f"{lazy:8.2f}"
                fl = "" if full is None else f"{full:12.1f}"
                best = min(case.times["save"]) * 1e3
                for key, v in (("save_ms", save), ("open_ms", lazy), ("open_read_ms", full)):
                    results[key].setdefault(case.label, []).append(v)
                print(
                    f"| {case.label:34} | {save:9.1f} | {best:7.1f} | {gbs:5.2f} | {lz:>8} "
                    f"| {fl:>12} |"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        results["settings"] = {
            "rounds": repeat,
            "torch_threads": args.torch_threads,
            "tensorbox_threads": args.threads,
            "small": args.small,
        }
        _results.write(args.json, results)


if __name__ == "__main__":
    main()
