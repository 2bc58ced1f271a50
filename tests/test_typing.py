"""Static typing: tests/typing_tensorclass.py is run, then checked by mypy; the package
itself is checked by ``mypy --strict``.

The mypy runs are skipped when mypy is not installed (it is in the ``test`` extra).
Their caches live in ``.cache/mypy`` and ``.cache/mypy-package`` (git-ignored): a first
run analyses torch's stubs (10-15 s), later runs take about a second.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TYPING_FILE = ROOT / "tests" / "typing_tensorclass.py"


def test_typing_file_runs() -> None:
    spec = importlib.util.spec_from_file_location("typing_tensorclass", TYPING_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.check()


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_accepts_the_typing_file() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(ROOT / ".cache" / "mypy"),
            "--strict",
            "--follow-imports=silent",  # report this file only, not the package's modules
            "--warn-unused-ignores",  # a refusal the checker misses becomes an error
            "--no-error-summary",
            str(TYPING_FILE.relative_to(ROOT)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_strict_accepts_the_package() -> None:
    """The whole package is ``mypy --strict`` clean; an ignore that no longer hides an
    error is itself an error (``warn_unused_ignores``, part of ``--strict``)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(ROOT / ".cache" / "mypy-package"),
            "--strict",
            "--no-error-summary",
            "tensorbox",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
