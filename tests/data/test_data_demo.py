"""The demo (``make demo`` = ``python benchmarks/demo.py``), its folder handling, and the
doctests of the benchmark harness it shares with ``benchmarks/dataload.py``."""

from __future__ import annotations

import doctest
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import demo

# Heavy: runs the demo in an interpreter of its own. The quick loop (`make check`) leaves the module
# out without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]


def test_cache_dir_order(monkeypatch, tmp_path):
    monkeypatch.delenv("TENSORBOX_CACHE", raising=False)
    assert demo.cache_dir() == Path(".cache", "tensorbox-demo")
    monkeypatch.setenv("TENSORBOX_CACHE", str(tmp_path))
    assert demo.cache_dir() == tmp_path
    assert demo.cache_dir("/x") == Path("/x")


def test_root_with_or_without_train_and_val(tmp_path):
    (tmp_path / "flat" / "a").mkdir(parents=True)
    train, val, what = demo.demo_folders(str(tmp_path / "flat"), tmp_path, small=True)
    assert train == val == tmp_path / "flat" and "both train and val" in what
    for split in ("train", "val"):
        (tmp_path / "split" / split / "a").mkdir(parents=True)
    train, val, _ = demo.demo_folders(str(tmp_path / "split"), tmp_path, small=True)
    assert (train.name, val.name) == ("train", "val")


@pytest.mark.parametrize("name", ["benchmarks.harness.reference", "benchmarks.harness.pipelines"])
def test_harness_doctests(name):
    # Outside the package, so tests/meta/test_docs.py does not collect these.
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, f"{result} in {name}"


@pytest.mark.slow
def test_small_demo_runs_end_to_end(tmp_path):
    env = dict(os.environ, TENSORBOX_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "demo.py"), "--small"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tensorbox / per-image" in proc.stdout
