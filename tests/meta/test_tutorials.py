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
from tests.servers import S3Server

# Heavy: runs each tutorial in an interpreter of its own. The quick loop (`make check`) leaves the
# module out without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.slow  # ~15 s idle, a minute on a loaded machine: pytest -m slow
def test_ddp_tutorial_reading_from_s3(tmp_path: Path, s3_server: S3Server) -> None:
    """The same run with the dataset in a bucket of moto's S3 server, credentials and
    endpoint from the AWS_* variables as on a cluster."""
    import s3fs

    s3fs.S3FileSystem(**s3_server.storage_options()).mkdir("tbx-ddp")
    env = dict(
        os.environ,
        TENSORBOX_CACHE=str(tmp_path / "cache"),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_ENDPOINT_URL=s3_server.endpoint_url,
        AWS_DEFAULT_REGION="us-east-1",
    )
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    script = str(ROOT / "tutorials" / "ddp.py")
    proc = subprocess.run(
        [*launch, script, "--small", "--data", "s3://tbx-ddp/train.tdz"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"ddp.py:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    assert "at s3://tbx-ddp/train.tdz" in proc.stdout
    assert "the same 3 batches and losses" in proc.stdout
