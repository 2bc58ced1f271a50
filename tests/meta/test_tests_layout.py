"""tests/ mirrors the package: every test module sits in the folder of what it tests.

The folders and what each holds are listed in tests/README.md; a test module at the top
of tests/, or in a folder the map does not name, is one a newcomer would not find.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _folders() -> set[str]:
    text = (TESTS / "README.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `tests/([a-z/_]+)/` \|", text, re.MULTILINE))


def test_every_test_module_is_in_a_mapped_folder() -> None:
    folders = _folders()
    assert {"core", "storage/format", "compat", "meta"} <= folders
    stray = [
        str(p.relative_to(TESTS))
        for p in sorted(TESTS.rglob("test_*.py"))
        if "fixtures" not in p.parts and p.parent.relative_to(TESTS).as_posix() not in folders
    ]
    assert not stray, f"test modules outside the folders of tests/README.md: {stray}"


def test_every_mapped_folder_holds_tests() -> None:
    empty = sorted(f for f in _folders() if not any((TESTS / f).glob("test_*.py")))
    assert not empty, f"tests/README.md maps folders that hold no test module: {empty}"


def test_module_names_are_unique() -> None:
    # No __init__.py: pytest imports each test module by its bare name.
    seen: dict[str, Path] = {}
    for p in sorted(TESTS.rglob("test_*.py")):
        assert p.name not in seen, f"{p} and {seen[p.name]}: one name, two modules"
        seen[p.name] = p
