"""Shared test configuration: hypothesis profiles, and ``tests.strategies`` importable.

* ``ci`` (the default, ``make test``): 40 examples per property, no deadline (a loaded
  2-core machine must not turn slow examples into failures), derandomized so a run is
  reproducible.
* ``quick`` (``make check``, ``pytest --quick`` without HYPOTHESIS_PROFILE): as ``ci``
  with 15 examples; the edit-test loop trades the rarer cases for time, ``make test``
  still tries them.
* ``dev``: 300 examples, random seeds; ``HYPOTHESIS_PROFILE=dev``.
* ``thorough``: 2,000 examples, random seeds, and 20 times its own count for a test that
  sets one; for nightly-style runs that hunt for rare cases:
  ``HYPOTHESIS_PROFILE=thorough python -m pytest`` (hours on 2 cores).

Fixtures: ``small_tmpfs``, a tiny file system to fill up (full-disk tests).
"""

from __future__ import annotations

import os
import re
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
settings.register_profile("quick", settings.get_profile("ci"), max_examples=15)
settings.register_profile(
    "dev",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=2000,
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
        # Lazy: a child process still closing a file must not leave the mount behind.
        subprocess.run(["umount", "--lazy", str(mnt)], check=True)


# The quick loop (`make check`, `pytest --quick`) leaves out the tests marked `heavy`:
# those that start an interpreter (each one imports torch: seconds of CPU), a process
# pool, a producer process, torch.compile, matplotlib or an external checker (mypy,
# ruff, mkdocs). `make test` runs them all. Each test is marked where it lives: a module
# heavy as a whole sets `pytestmark = pytest.mark.heavy` at its top, a single test has
# `@pytest.mark.heavy`, a single parameter set `pytest.param(..., marks=pytest.mark.heavy)`.
# --quick does not even import a module marked as a whole (collecting it costs each xdist
# worker seconds), so that mark is read from the module's source, by HEAVY_MODULE below;
# tests/meta/test_quick_loop.py checks that it reads every such mark.
HEAVY_MODULE = re.compile(r"^pytestmark = (\[[^\]\n]*)?pytest\.mark\.heavy\b", re.MULTILINE)


def heavy_module(path: Path) -> bool:
    """Whether the test module at ``path`` is marked heavy as a whole (read, not imported)."""
    return bool(HEAVY_MODULE.search(path.read_text(encoding="utf-8")))


# Under the thorough profile, a property test that sets its own max_examples (tuned
# for the quick default) runs THOROUGH_FACTOR times as many; the others take the
# profile's 2,000. Hypothesis reads the test's settings when it runs, so they can be
# replaced here, after collection.
THOROUGH_FACTOR = 20


def _thorough(items: list[pytest.Item]) -> None:
    done: set[int] = set()
    for item in items:
        fn = getattr(item, "obj", None)
        own = getattr(fn, "_hypothesis_internal_use_settings", None)
        if own is None or id(fn) in done or own.max_examples == settings.default.max_examples:
            continue
        done.add(id(fn))
        scaled = settings(own, max_examples=own.max_examples * THOROUGH_FACTOR)
        fn._hypothesis_internal_use_settings = scaled  # type: ignore[union-attr]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the edit-test loop (make check): leave out the slow, heavy and mds tests, "
        "without importing the modules marked heavy as a whole",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("quick"):
        chosen = config.option.markexpr
        quick = "not slow and not heavy and not mds"
        config.option.markexpr = f"({chosen}) and {quick}" if chosen else quick
        if "HYPOTHESIS_PROFILE" not in os.environ:
            settings.load_profile("quick")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if (
        config.getoption("quick")
        and collection_path.name.startswith("test_")
        and collection_path.suffix == ".py"
        and heavy_module(collection_path)
    ):
        return True
    return None  # let pytest decide


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("HYPOTHESIS_PROFILE") == "thorough":
        _thorough(items)


# Real servers on loopback (redis, S3, HTTP), started on first use, one per session.
from tests.servers import (  # noqa: E402, F401
    http_server,
    redis_process,
    redis_proxy,
    redis_server,
    s3_server,
    silent_server,
)
