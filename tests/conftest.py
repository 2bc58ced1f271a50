"""Shared test configuration: hypothesis profiles, and ``tests.strategies`` importable.

* ``ci`` (the default): few examples, no deadline (a loaded 2-core machine must not
  turn slow examples into failures), derandomized so a run is reproducible.
* ``dev``: more examples, random seeds; select with ``HYPOTHESIS_PROFILE=dev``.

Fixtures: ``small_tmpfs``, a tiny file system to fill up (full-disk tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# `python -m pytest` puts the repository root on sys.path, a bare `pytest` does not;
# test modules import the shared strategies as `tests.strategies` either way.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def small_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """An 8 MiB tmpfs, where this process may mount one (root in a container)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True
    )
    if proc.returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


# Real servers on loopback (redis, S3, HTTP), started on first use, one per session.
from tests.servers import http_server, redis_server, s3_server  # noqa: E402, F401
