"""``docs/design.md``'s job tables are the map of the package: every module under
``tensorbox/`` has a row, and every row names modules that exist.

Three tables: "Where each job lives" (paths under ``tensorbox/``), "The storage
layer" (under ``tensorbox/_storage/``) and "The bridges" (under ``tensorbox/interop/``).
In the first cell of a row, each backticked name is a module (``x.py``) or a package
(``x/``, every module under it); a bare file name sits in the folder of the name before
it in the same cell (``_core/shape.py``, ``nestedkey.py``). The storage layer and the bridges
have their own tables, so their package rows in the first table cover nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "tensorbox"
DESIGN = ROOT / "docs" / "design.md"

#: heading of each job table -> the folder its paths are relative to
TABLES = {
    "## Where each job lives": "",
    "## The storage layer": "_storage/",
    "## The bridges": "interop/",
}
#: packages with a table of their own: their row in another table covers nothing
OWN_TABLE = {root for root in TABLES.values() if root}


def _section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    nxt = text.find("\n## ", start + len(heading))
    return text[start : nxt if nxt >= 0 else len(text)]


def read_tables(text: str) -> dict[str, list[tuple[str, str]]]:
    """For each table: (first cell, job) of each row."""
    out: dict[str, list[tuple[str, str]]] = {}
    for heading, root in TABLES.items():
        rows = []
        for line in _section(text, heading).splitlines():
            if line.startswith("| `"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                rows.append((cells[0], cells[1] if len(cells) > 1 else ""))
        out[root] = rows
    return out


def covered(root: str, cell: str) -> tuple[set[str], set[str], list[str]]:
    """(modules named, package folders named, names that exist nowhere) of one cell."""
    files: set[str] = set()
    folders: set[str] = set()
    missing: list[str] = []
    folder = root
    for name in re.findall(r"`([^`]+)`", cell):
        if not re.fullmatch(r"[\w./]+", name):
            continue
        if name.endswith("/"):
            path = root + name
            if not (PKG / path).is_dir():
                missing.append(path)
            elif path not in OWN_TABLE:
                folders.add(path)
            folder = path
            continue
        if not name.endswith(".py"):
            continue
        path = root + name if "/" in name else folder + name
        folder = path.rpartition("/")[0] + "/" if "/" in path else ""
        (files.add if (PKG / path).is_file() else missing.append)(path)
    return files, folders, missing


def test_the_three_tables_are_there() -> None:
    tables = read_tables(DESIGN.read_text(encoding="utf-8"))
    assert all(len(rows) >= 5 for rows in tables.values()), {k: len(v) for k, v in tables.items()}


def test_every_module_has_a_row_and_every_row_names_real_modules() -> None:
    tables = read_tables(DESIGN.read_text(encoding="utf-8"))
    files: set[str] = set()
    folders: set[str] = set()
    stale: list[str] = []
    empty: list[str] = []
    for root, rows in tables.items():
        for cell, job in rows:
            f, d, m = covered(root, cell)
            files |= f
            folders |= d
            stale += m
            if len(job) < 10:
                empty.append(cell)
    modules = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py"))
    unmapped = [m for m in modules if m not in files and not m.startswith(tuple(folders))]
    assert unmapped == [], f"modules in no job table of docs/design.md (add a row): {unmapped}"
    assert stale == [], f"rows of docs/design.md naming no module: {stale}"
    assert empty == [], f"rows without a job: {empty}"


@pytest.mark.parametrize(
    "cell, names",
    [
        ("`_core/shape.py`, `nestedkey.py`", {"_core/shape.py", "_core/nestedkey.py"}),
        (
            "`archive/store.py`, `crc32.py`",
            {"_storage/archive/store.py", "_storage/archive/crc32.py"},
        ),
    ],
)
def test_a_bare_name_sits_in_the_folder_before_it(cell: str, names: set[str]) -> None:
    root = "_storage/" if cell.startswith("`archive") else ""
    assert covered(root, cell)[0] == names


def test_a_module_missing_from_the_tables_is_found(tmp_path: Path) -> None:
    text = DESIGN.read_text(encoding="utf-8").replace("| `_core/ports.py` |", "| `_core/gone.py` |")
    tables = read_tables(text)
    named = set().union(*(covered(r, c)[0] for r, rows in tables.items() for c, _ in rows))
    missing = set().union(*(set(covered(r, c)[2]) for r, rows in tables.items() for c, _ in rows))
    assert "_core/ports.py" not in named and "_core/gone.py" in missing
