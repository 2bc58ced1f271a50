"""Every example in the docs runs.

* Each ```python block of ``docs/*.md`` (and the README), concatenated in order,
  runs as a script in a fresh interpreter: a doc page is read top to bottom.
* Every module docstring example (doctest) in the package runs.

A doc block that spawns processes must guard itself with
``if __name__ == "__main__":`` because the page runs as a script.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tensorbox
from tests.checkout import checkout_env

# Heavy: runs every example of the docs and every doctest. The quick loop (`make check`) leaves the
# module out without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _code(page: Path) -> str:
    return "\n\n".join(m.group(1) for m in BLOCK.finditer(page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", [p for p in PAGES if _code(p)], ids=lambda p: p.name)
def test_doc_page_runs(page: Path, tmp_path: Path) -> None:
    script = tmp_path / f"{page.stem}_doc.py"
    script.write_text(_code(page), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=checkout_env(),  # this checkout's package, even in a second worktree
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, (
        f"{page.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )


def _modules() -> list[str]:
    names = ["tensorbox"]
    for info in pkgutil.walk_packages(tensorbox.__path__, "tensorbox."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules())
def test_module_doctests(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_readme_has_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text
