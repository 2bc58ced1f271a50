"""The code base stays ruff-clean (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Heavy: runs ruff. The quick loop (`make check`) leaves the module out without importing it
# (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> list[str] | None:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    return [found] if found else None


@pytest.mark.skipif(_ruff() is None, reason="ruff is not installed")
def test_ruff_check_is_clean() -> None:
    cmd = _ruff()
    assert cmd is not None
    proc = subprocess.run(
        [*cmd, "check", "tensorbox", "tests", "benchmarks", "tutorials", "tools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
