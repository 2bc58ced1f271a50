"""Each tutorial runs end to end in its small mode (``--small``), as CI does.

``tutorials/ddp.py`` is launched as its users launch it: ``torch.distributed.run`` with
2 processes on this machine (gloo over loopback).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.checkout import checkout_env

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTED = {"ddp.py"}  # run under torch.distributed.run, below
TUTORIALS = sorted(p for p in (ROOT / "tutorials").glob("*.py") if p.name not in DISTRIBUTED)


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.name)
def test_tutorial_small_mode(script: Path, tmp_path: Path) -> None:
    env = dict(checkout_env(), TENSORBOX_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(script), "--small"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"{script.name}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


def test_ddp_tutorial_with_two_processes_on_loopback(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        TENSORBOX_CACHE=str(tmp_path / "cache"),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
    )
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.run(
        [*launch, str(ROOT / "tutorials" / "ddp.py"), "--small"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"ddp.py:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    assert "the same 3 batches and losses" in proc.stdout
