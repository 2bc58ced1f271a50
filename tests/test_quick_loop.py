"""The quick loop's lists (tests/conftest.py) name tests that exist.

A renamed test or module would otherwise drop out of the `heavy` mark without a word and
slow `make check` down again (or, for a module, stop being left out of its collection).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import HEAVY_MODULES, HEAVY_TESTS

TESTS = Path(__file__).parent


def _test_names(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith("test")
    } | {node.name for node in tree.body if isinstance(node, ast.ClassDef)}


def test_every_heavy_module_exists() -> None:
    missing = sorted(m for m in HEAVY_MODULES if not (TESTS / f"{m}.py").is_file())
    assert not missing, f"tests/conftest.py HEAVY_MODULES names no file: {missing}"


def test_every_heavy_test_exists_outside_the_heavy_modules() -> None:
    wrong = []
    for entry in sorted(HEAVY_TESTS):
        file, _, test = entry.partition("::")
        module = TESTS / file
        if Path(file).stem in HEAVY_MODULES:
            wrong.append(f"{entry}: the whole module is heavy already")
        elif not module.is_file() or test.split("[")[0] not in _test_names(module):
            wrong.append(f"{entry}: no such test")
    assert not wrong, "tests/conftest.py HEAVY_TESTS: " + "; ".join(wrong)
