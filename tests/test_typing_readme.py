"""The README's tour type checks clean under ``mypy --strict`` (and pyright in strict
mode, when a ``pyright`` executable is on the PATH: it is a Node program, not in the
Python extras). The decorator form's known limits are pinned too, so the docs' claim
(docs/tensorclass.md, "Type checking") stays true.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOUR = re.compile(r"## A 20-line tour\n\n```python\n(.*?)```", re.S)


def _tour() -> str:
    found = TOUR.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert found, "README.md lost its tour"
    return found.group(1)


def _decorator_form(code: str) -> str:
    """The tour as it read before: ``@tensorclass`` and ``torch.stack``."""
    code = re.sub(r"class Sample\(TensorClass\):.*\n", "@tensorclass\nclass Sample:\n", code)
    code = code.replace("import TensorClass, TensorDict", "import TensorDict, tensorclass")
    return code.replace("tensorbox.stack([td, td]", "torch.stack([td, td]")


def _mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(ROOT / ".cache" / "mypy"),
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            str(path),
        ],
        cwd=ROOT,  # this checkout's package
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_readme_tour_checks_under_mypy_strict(tmp_path: Path) -> None:
    tour = tmp_path / "tour.py"
    tour.write_text(_tour(), encoding="utf-8")
    proc = _mypy(tour)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The decorator form: what the docs say a checker reports, and why the README avoids it.
    old = tmp_path / "tour_decorator.py"
    old.write_text(_decorator_form(_tour()), encoding="utf-8")
    out = _mypy(old).stdout
    assert 'Unexpected keyword argument "batch_size" for "Sample"' in out
    assert '"Sample" has no attribute "memmap"' in out
    assert 'List item 0 has incompatible type "TensorDict"; expected "Tensor"' in out


@pytest.mark.skipif(shutil.which("pyright") is None, reason="pyright is not on the PATH")
def test_readme_tour_checks_under_pyright(tmp_path: Path) -> None:
    (tmp_path / "tour.py").write_text(_tour(), encoding="utf-8")
    config = {"pythonVersion": "3.11", "typeCheckingMode": "strict", "extraPaths": [str(ROOT)]}
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    proc = subprocess.run(
        ["pyright", "--pythonpath", sys.executable, "tour.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "0 errors" in proc.stdout, proc.stdout + proc.stderr
