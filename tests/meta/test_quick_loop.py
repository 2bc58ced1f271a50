"""The quick loop (``make check``, ``pytest --quick``) sees every ``heavy`` mark.

A test is marked heavy where it lives. A module marked as a whole is left out of the
quick loop's collection without being imported: tests/conftest.py reads its
``pytestmark`` line from the source (``heavy_module``). A spelling that reading misses
would put the module's slow imports back into every ``make check``; one it misreads
would drop quick tests from it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import heavy_module

TESTS = Path(__file__).resolve().parents[1]
MODULES = sorted(p for p in TESTS.rglob("test_*.py") if "fixtures" not in p.parts)


def _marked_heavy_as_a_whole(module: Path) -> bool:
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", None) == "pytestmark" for t in targets) and node.value:
                return any(
                    isinstance(n, ast.Attribute) and n.attr == "heavy" for n in ast.walk(node.value)
                )
    return False


def test_the_quick_loop_reads_every_module_mark() -> None:
    wrong = [
        f"{m.relative_to(TESTS)}: marked {_marked_heavy_as_a_whole(m)}, read {heavy_module(m)}"
        for m in MODULES
        if _marked_heavy_as_a_whole(m) != heavy_module(m)
    ]
    assert not wrong, "write `pytestmark = pytest.mark.heavy` on one line: " + "; ".join(wrong)


def test_the_reading_tells_the_spellings_apart(tmp_path: Path) -> None:
    cases = {
        "pytestmark = pytest.mark.heavy\n": True,
        "pytestmark = [pytest.mark.heavy, pytest.mark.filterwarnings('x')]\n": True,
        "pytestmark = [pytest.mark.filterwarnings('x'), pytest.mark.heavy]\n": True,
        "pytestmark = pytest.mark.heavyweight\n": False,
        "pytestmark = pytest.mark.slow\n# pytest.mark.heavy\n": False,
        "def f():\n    pytestmark = pytest.mark.heavy\n": False,
        "@pytest.mark.heavy\ndef test_x():\n    pass\n": False,
    }
    for i, (source, expected) in enumerate(cases.items()):
        module = tmp_path / f"test_{i}.py"
        module.write_text(source)
        assert heavy_module(module) is expected, source
        assert _marked_heavy_as_a_whole(module) is expected, source
