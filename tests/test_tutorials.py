"""Each tutorial runs end to end in its small mode (``--small``), as CI does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("*.py"))


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.name)
def test_tutorial_small_mode(script: Path, tmp_path: Path) -> None:
    env = dict(os.environ, TENSORBOX_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(script), "--small"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"{script.name}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
