"""The format bridges against tensordict and against each format's own library.

Every figure is a median over ``--rounds`` rounds; within a round the methods of one
task run in a rotating order (interleaved), so drift on a shared machine hits all alike.

Tasks (sizes at ``--scale 1``; the issue's figures):

* **parquet read**: a 1M-row, 8-column Parquet file (4 float32, 2 int64, 2 float64)
  to a container: ``TensorDict.from_parquet`` (tensorbox, tensordict) against
  ``pyarrow.parquet.read_table`` + ``torch.from_numpy`` per column (the library floor).
* **parquet write**: the container back to a file: ``to_parquet`` against
  ``pyarrow.parquet.write_table`` of a table built from the tensors.
* **pandas / Arrow**: a 1M-row, 8-column frame (4 float32, 2 int64, a categorical, a
  datetime in microseconds) to a container and back: ``from_pandas``/``to_pandas``
  and ``from_arrow``/``to_arrow`` (tensorbox, tensordict where it has them) against
  pandas / pyarrow doing the same conversion by hand: ``torch.from_numpy`` per column
  (a copy for pandas, whose arrays are read-only), the categorical's codes, the
  datetimes as int64 nanoseconds; and back ``pd.DataFrame`` / ``pa.table`` of the
  tensors' arrays with ``Categorical.from_codes`` / a dictionary array and the
  datetimes in their unit.
* **safetensors load**: a 500 MB checkpoint (an MLP of 16 square float32 layers) to
  a ready model: ``load_memmap`` + ``to_module`` (tensorbox), ``from_safetensors`` +
  ``to_module`` (tensordict), ``safetensors.torch.load_file`` + ``load_state_dict(
  assign=True)``; then the same followed by a pass over every weight (``+read``).
* **safetensors one layer**: one layer's tensors: ``from_safetensors(prefix=...)``
  against ``safe_open(...).get_tensor`` of those keys.
* **h5 / zarr random batch**: 256 random rows of a 200k x 64 float32 array:
  ``PersistentTensorDict.get_at`` (tensorbox, tensordict) against h5py / zarr indexed
  directly with the sorted rows.

Usage::

    python benchmarks/interop.py               # the issue's sizes
    python benchmarks/interop.py --scale 0.1   # a tenth of them
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

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorbox

warnings.filterwarnings("ignore")


def interleaved(methods: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in methods}
    names = list(methods)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            t0 = time.perf_counter()
            out = methods[name]()
            times[name].append(time.perf_counter() - t0)
            del out
    return {k: statistics.median(v) for k, v in times.items()}


def report(title: str, medians: dict[str, float], base: str) -> None:
    print(f"\n{title}")
    print(f"  {'method':34s} {'median':>10s} {'vs ' + base:>12s}")
    for name, t in medians.items():
        print(f"  {name:34s} {t * 1e3:8.1f}ms {t / medians[base]:11.2f}x")


def parquet(tmp: Path, scale: float, rounds: int, td_mod) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = int(1_000_000 * scale)
    rng = np.random.default_rng(0)
    cols = {}
    for i in range(4):
        cols[f"f{i}"] = rng.random(n, dtype=np.float32)
    for i in range(2):
        cols[f"i{i}"] = rng.integers(0, 1 << 40, n)
    for i in range(2):
        cols[f"d{i}"] = rng.random(n)
    path = tmp / "t.parquet"
    pq.write_table(pa.table(cols), path)

    def floor_read():
        t = pq.read_table(path)
        return {c: torch.from_numpy(t[c].to_numpy()) for c in t.column_names}

    methods = {
        "pyarrow read_table + from_numpy": floor_read,
        "tensorbox from_parquet": lambda: tensorbox.TensorDict.from_parquet(path),
    }
    if td_mod is not None:
        methods["tensordict from_parquet"] = lambda: td_mod.TensorDict.from_parquet(path)
    report(
        f"parquet read: {n} rows x 8 columns",
        interleaved(methods, rounds),
        "pyarrow read_table + from_numpy",
    )

    ours = tensorbox.TensorDict.from_parquet(path).clone()
    out = tmp / "out.parquet"

    def floor_write():
        pq.write_table(pa.table({k: v.numpy() for k, v in ours.items()}), out)

    methods = {
        "pyarrow write_table": floor_write,
        "tensorbox to_parquet": lambda: ours.to_parquet(out),
    }
    if td_mod is not None:
        theirs = td_mod.TensorDict({k: v for k, v in ours.items()}, batch_size=[n])
        methods["tensordict to_parquet"] = lambda: theirs.to_parquet(out)
    report(
        f"parquet write: {n} rows x 8 columns", interleaved(methods, rounds), "pyarrow write_table"
    )


def tables(tmp: Path, scale: float, rounds: int, td_mod) -> None:
    import pandas as pd
    import pyarrow as pa

    n = int(1_000_000 * scale)
    rng = np.random.default_rng(0)
    cols = {f"f{i}": rng.random(n, dtype=np.float32) for i in range(4)}
    cols |= {f"i{i}": rng.integers(0, 1 << 40, n) for i in range(2)}
    cols["kind"] = pd.Categorical.from_codes(rng.integers(0, 5, n), list("abcde"))
    cols["when"] = pd.Series(rng.integers(0, 1 << 50, n).astype("datetime64[us]"))
    df = pd.DataFrame(cols)
    numbers = [c for c in df.columns if c not in ("kind", "when")]

    def pandas_in():
        out = {c: torch.from_numpy(df[c].to_numpy().copy()) for c in numbers}
        out["kind"] = torch.from_numpy(df["kind"].cat.codes.to_numpy().copy())
        ns = df["when"].to_numpy().astype("datetime64[ns]").view(np.int64)
        out["when"] = torch.from_numpy(ns)
        return out

    methods = {
        "pandas: from_numpy per column": pandas_in,
        "tensorbox from_pandas": lambda: tensorbox.TensorDict.from_pandas(df),
    }
    if td_mod is not None:
        methods["tensordict from_pandas"] = lambda: td_mod.TensorDict.from_pandas(df)
    report(
        f"from_pandas: {n} rows x 8 columns (a categorical, a datetime)",
        interleaved(methods, rounds),
        "pandas: from_numpy per column",
    )

    ours = tensorbox.TensorDict.from_pandas(df)
    plain = pandas_in()

    def pandas_out():
        out = {c: plain[c].numpy() for c in numbers}
        out["kind"] = pd.Categorical.from_codes(plain["kind"].numpy(), list("abcde"))
        out["when"] = plain["when"].numpy().view("datetime64[ns]").astype("datetime64[us]")
        return pd.DataFrame(out)

    methods = {"pandas: DataFrame of the arrays": pandas_out, "tensorbox to_pandas": ours.to_pandas}
    if td_mod is not None:
        theirs = td_mod.TensorDict.from_pandas(df)
        methods["tensordict to_pandas"] = theirs.to_pandas
    report(
        f"to_pandas: {n} rows x 8 columns (a categorical, a datetime)",
        interleaved(methods, rounds),
        "pandas: DataFrame of the arrays",
    )

    table = pa.Table.from_pandas(df, preserve_index=False)

    def arrow_in(copy=True):
        # the table views pandas' read-only memory: from_arrow copies it (copy=None)
        out = {
            c: torch.from_numpy(table[c].to_numpy().copy() if copy else table[c].to_numpy())
            for c in numbers
        }
        kind = table["kind"].combine_chunks()
        out["kind"] = torch.from_numpy(kind.indices.to_numpy().copy())
        ns = table["when"].to_numpy().astype("datetime64[ns]").view(np.int64)
        out["when"] = torch.from_numpy(ns)
        return out

    methods = {
        "pyarrow: from_numpy per column": arrow_in,
        "tensorbox from_arrow": lambda: tensorbox.from_arrow(table),
        "pyarrow: views of the numbers": lambda: arrow_in(copy=False),
        "tensorbox from_arrow(copy=False)": lambda: tensorbox.from_arrow(table, copy=False),
    }
    report(
        f"from_arrow: {n} rows x 8 columns (a dictionary, a timestamp)",
        interleaved(methods, rounds),
        "pyarrow: from_numpy per column",
    )

    def arrow_out():
        out = {c: pa.array(plain[c].numpy()) for c in numbers}
        out["kind"] = pa.DictionaryArray.from_arrays(
            pa.array(plain["kind"].numpy()), pa.array(list("abcde"))
        )
        ns = pa.array(plain["when"].numpy(), pa.timestamp("ns"))
        out["when"] = ns.cast(pa.timestamp("us"))
        return pa.table(out)

    methods = {"pyarrow: table of the arrays": arrow_out, "tensorbox to_arrow": ours.to_arrow}
    report(
        f"to_arrow: {n} rows x 8 columns (a dictionary, a timestamp)",
        interleaved(methods, rounds),
        "pyarrow: table of the arrays",
    )


def make_mlp(width: int, layers: int) -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def safetensors(tmp: Path, scale: float, rounds: int, td_mod) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    layers = 16
    width = int((500e6 * scale / 4 / layers) ** 0.5)
    model = make_mlp(width, layers)
    path = tmp / "model.safetensors"
    save_file(model.state_dict(), str(path))
    size = os.path.getsize(path) / 1e6
    target = make_mlp(width, layers).to("meta")

    def st_load():
        target.load_state_dict(load_file(str(path)), assign=True)
        return target

    def tb_load():
        tensorbox.TensorDict.load_memmap(path).to_module(target)
        return target

    def read_all(fn):
        def run():
            m = fn()
            return sum(float(p.sum()) for p in m.parameters())

        return run

    methods = {
        "safetensors load_file + assign": st_load,
        "tensorbox load_memmap + to_module": tb_load,
    }
    if td_mod is not None:

        def td_load():
            td_mod.from_safetensors(path).to_module(target)
            return target

        methods["tensordict from_safetensors+to_module"] = td_load
    report(
        f"safetensors load to a ready model: {size:.0f} MB",
        interleaved(methods, rounds),
        "safetensors load_file + assign",
    )
    report(
        f"safetensors load + read every weight: {size:.0f} MB",
        interleaved({k: read_all(v) for k, v in methods.items()}, rounds),
        "safetensors load_file + assign",
    )

    keys = [f"7.{k}" for k in ("weight", "bias")]

    def so_layer():
        with safe_open(str(path), "pt") as f:
            return {k: f.get_tensor(k) for k in keys}

    methods = {
        "safe_open get_tensor (one layer)": so_layer,
        "tensorbox from_safetensors(prefix)": lambda: tensorbox.from_safetensors(path, prefix="7"),
    }
    report(
        "safetensors partial: one layer",
        interleaved(methods, rounds),
        "safe_open get_tensor (one layer)",
    )


def random_batches(tmp: Path, scale: float, rounds: int, td_mod) -> None:

    n, width = int(200_000 * scale), 64
    data = torch.randn(n, width)
    td = tensorbox.TensorDict({"x": data}, [n])
    rng = np.random.default_rng(0)
    batches = [np.sort(rng.choice(n, 256, replace=False)) for _ in range(rounds * 8)]
    it = iter(range(10**9))

    for backend in ("h5", "zarr"):
        path = tmp / f"d.{backend}"
        ours = td.to_h5(path) if backend == "h5" else td.to_zarr(path, chunks=(1024,))
        raw = ours.file["x"]

        def lib(raw=raw, backend=backend):
            idx = batches[next(it) % len(batches)]
            if backend == "h5":
                return torch.from_numpy(raw[idx])
            return torch.from_numpy(raw.get_orthogonal_selection((idx,)))

        def tb(ours=ours):
            idx = batches[next(it) % len(batches)]
            return ours.get_at("x", torch.from_numpy(idx))

        methods = {f"{backend} library, sorted rows": lib, "tensorbox get_at": tb}
        if td_mod is not None:
            src = td_mod.TensorDict({"x": data}, [n])
            theirs = (
                src.to_h5(tmp / f"td.{backend}")
                if backend == "h5"
                else src.to_zarr(tmp / f"td.{backend}", chunks=(1024,))
            )

            def tdr(theirs=theirs):
                idx = batches[next(it) % len(batches)]
                return theirs.get_at("x", torch.from_numpy(idx))

            methods["tensordict get_at"] = tdr
        report(
            f"{backend}: 256 random rows of {n} x {width} float32",
            interleaved(methods, rounds * 4),
            f"{backend} library, sorted rows",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--only", choices=["parquet", "tables", "safetensors", "batches"])
    args = parser.parse_args()
    torch.set_num_threads(2)
    try:
        import tensordict as td_mod
    except ImportError:
        td_mod = None
        print("tensordict not installed: its rows are left out")
    tmp = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        for name, task in (
            ("parquet", parquet),
            ("tables", tables),
            ("safetensors", safetensors),
            ("batches", random_batches),
        ):
            if args.only in (None, name):
                task(tmp, args.scale, args.rounds, td_mod)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
