"""The environment for subprocesses of the tests: they import this checkout's package.

An editable install points at one checkout; a second worktree's tests must still run
their own code in the scripts they start, so the checkout's root goes first on
``PYTHONPATH``.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout_env() -> dict[str, str]:
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
