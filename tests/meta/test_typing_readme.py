"""The README's tour type checks clean under ``mypy --strict`` and pyright in strict
mode (the ``test`` extra installs pyright with a Node.js of its own; without a
``pyright`` beside the interpreter or on the PATH that test skips). The decorator form's known limits are pinned
too, so the docs' claim (docs/tensorclass.md, "Type checking") stays true.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _mypy

# Heavy: runs mypy and pyright. The quick loop (`make check`) leaves the module out without
# importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
@pytest.mark.xdist_group("mypy")
def test_readme_tour_checks_under_mypy_strict() -> None:
    found, output = _mypy.run()  # the one mypy run of the suite (tests/_mypy.py)
    assert found["tour"] == [], output
    # The decorator form: what the docs say a checker reports, and why the README avoids it.
    out = "\n".join(found["tour_decorator"])
    assert 'Unexpected keyword argument "batch_size" for "Sample"' in out
    assert '"Sample" has no attribute "memmap"' in out
    assert 'List item 0 has incompatible type "TensorDict"; expected "Tensor"' in out


def _pyright() -> str | None:
    """The pyright the test extra installs beside this interpreter (a venv's bin is not on
    the PATH when pytest runs as ``.venv/bin/python -m pytest``), else one on the PATH."""
    beside = Path(sys.executable).parent / "pyright"
    return str(beside) if beside.exists() else shutil.which("pyright")


@pytest.mark.skipif(_pyright() is None, reason="pyright is not installed (the test extra has it)")
def test_readme_tour_checks_under_pyright(tmp_path: Path) -> None:
    (tmp_path / "tour.py").write_text(_mypy.readme_tour(), encoding="utf-8")
    config = {"pythonVersion": "3.11", "typeCheckingMode": "strict", "extraPaths": [str(ROOT)]}
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    proc = subprocess.run(
        [str(_pyright()), "--pythonpath", sys.executable, "tour.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "0 errors" in proc.stdout, proc.stdout + proc.stderr
