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
# ruff, mkdocs). `make test` runs them all. The modules below are heavy as a whole, and
# --quick does not even import them (collecting them costs each xdist worker seconds).
HEAVY_MODULES = frozenset(
    {
        "test_api_reference",
        "test_buffer",
        "test_compile",
        "test_data_demo",
        "test_data_ingest",
        "test_data_package",
        "test_data_synth_start",
        "test_ddp",
        "test_distributed",
        "test_docs",
        "test_lint",
        "test_save_syscalls",
        "test_site",
        "test_tutorials",
        "test_typing",
        "test_typing_readme",
    }
)


# Single tests of otherwise quick modules: "module.py::test" (every parameter set) or
# "module.py::test[id]" (that one). tests/test_quick_loop.py checks that each names a test.
HEAVY_TESTS = frozenset(
    {
        "test_bench_results.py::test_the_charts_draw_from_the_results",
        "test_buffer_redis.py::test_batches_match_the_local_buffer",
        "test_buffer_redis.py::test_a_transform_that_raises_surfaces_with_its_traceback",
        "test_buffer_redis.py::test_a_killed_producer_surfaces_naming_the_batch",
        "test_interop_package.py::test_import_tensorbox_loads_no_interop_library",
        "test_interop_safetensors.py::test_a_checkpoint_is_a_store_on_the_seam",
        "test_layout.py::test_the_graph_is_the_same_under_any_hash_seed",
        "test_redis_store.py::test_import_tensorbox_loads_no_redis",
        "test_redis_store.py::test_pickle_attaches_to_the_same_keys",
        "test_references.py::test_dataloader_workers_start_after_the_tree_was_saved_over[spawn]",
        "test_remote.py::test_import_tensorbox_loads_no_remote_package",
        "test_remote.py::test_missing_filesystem_package_names_the_extra",
        "test_remote_lazy.py::test_dataloader_workers_fetch_only_the_share",
        "test_remote_share.py::test_s3_refuses_a_wrong_key",  # moto in a process of its own
        "test_tensordict_guides.py::test_tensordict_submodules_switch_by_the_package_name",
        "test_guides_differential.py::test_same_results_as_tensordict[dataloader_workers]",
        "test_commit.py::test_two_writers_and_a_reader_never_see_a_torn_or_mixed_tree",
        "test_extend.py::test_kill_readers_and_two_producers",
        "test_data_dataset.py::test_workers_open_the_same_files_by_name",
        "test_persist.py::test_save_killed_midway_leaves_the_old_tree",
        "test_persist.py::test_spawned_workers_share_the_files",
        "test_memmap_tensor.py::test_huge_expanded_tensor_is_written_in_bounded_memory",
        "test_cli.py::test_as_a_program",
        "test_tensorclass.py::test_pytree_roundtrip_and_compile",
        "test_cli_polish.py::test_closed_pipe_is_quiet",
        "test_cli_polish.py::test_usage_errors_exit_2",
        # waits out a timeout or starts a process: seconds each, nothing a quick loop needs
        "test_redis_store.py::test_no_server",
        "test_buffer_redis.py::test_no_producer_is_an_error_not_a_hang",
        "test_remote_lazy.py::test_batch_loader_fetches_only_its_share",
        "test_remote_lazy.py::test_silent_server_times_out",
        "test_remote_share.py::test_half_of_the_rows_alone_with_no_gap",
        "test_lazy_legacy.py::test_environment_variable_gives_the_starting_mode",
        "test_archive.py::test_written_by_tensordict_when_installed",
    }
)


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
        "without importing the heavy modules (tests/conftest.py lists them)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("quick"):
        chosen = config.option.markexpr
        quick = "not slow and not heavy and not mds"
        config.option.markexpr = f"({chosen}) and {quick}" if chosen else quick
        if "HYPOTHESIS_PROFILE" not in os.environ:
            settings.load_profile("quick")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.getoption("quick") and collection_path.stem in HEAVY_MODULES:
        return True
    return None  # let pytest decide


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("HYPOTHESIS_PROFILE") == "thorough":
        _thorough(items)
    for item in items:
        test = f"{item.path.name}::{item.name}"
        if (
            item.path.stem in HEAVY_MODULES
            or test in HEAVY_TESTS
            or test.split("[")[0] in HEAVY_TESTS
        ):
            item.add_marker(pytest.mark.heavy)


# Real servers on loopback (redis, S3, HTTP), started on first use, one per session.
from tests.servers import (  # noqa: E402, F401
    http_server,
    redis_process,
    redis_server,
    s3_server,
    silent_server,
)
