"""Shared test configuration: hypothesis profiles, and ``tests.strategies`` importable.

* ``ci`` (the default): few examples, no deadline (a loaded 2-core machine must not
  turn slow examples into failures), derandomized so a run is reproducible.
* ``dev``: more examples, random seeds; select with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
