"""Static typing: tests/typing_tensorclass.py is run, then checked by mypy; the package
itself is checked by ``mypy --strict``.

The mypy runs are skipped when mypy is not installed (it is in the ``test`` extra).
One mypy run serves them and the README's typing tests (``tests/_mypy.py``); its cache
lives in ``.cache/mypy`` (git-ignored): a first run analyses torch's stubs and the
package (a minute or two on 2 cores), later runs take seconds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests import _mypy

# Heavy: runs mypy. The quick loop (`make check`) leaves the module out without importing it
# (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
TYPING_FILE = ROOT / "tests" / "typing_tensorclass.py"


def test_typing_file_runs() -> None:
    spec = importlib.util.spec_from_file_location("typing_tensorclass", TYPING_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.check()


needs_mypy = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None, reason="mypy is not installed"
)


@needs_mypy
@pytest.mark.xdist_group("mypy")
def test_mypy_accepts_the_typing_file() -> None:
    found, output = _mypy.run()  # --strict --follow-imports=silent: this file's lines only
    assert found["typing_file"] == [], output


@needs_mypy
@pytest.mark.xdist_group("mypy")
def test_mypy_strict_accepts_the_package() -> None:
    """The whole package is ``mypy --strict`` clean; an ignore that no longer hides an
    error is itself an error (``warn_unused_ignores``, part of ``--strict``)."""
    found, output = _mypy.run()
    assert found["package"] == [], output
