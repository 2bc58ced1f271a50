"""The documentation site: every page is in the nav, the site builds in strict mode
(broken links and anchors fail), and the start page's tour is the README's.

The build runs when mkdocs and its Material theme are installed (the ``docs`` extra);
it takes a few seconds.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAV_PAGE = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?([\w./-]+\.md)\s*$", re.M)


def _nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return NAV_PAGE.findall(text[text.index("\nnav:") :])


def test_every_page_is_in_the_nav() -> None:
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    listed = _nav_pages()
    missing = [p for p in pages if p not in listed]
    assert not missing, f"add these pages to the nav of mkdocs.yml: {missing}"
    assert len(listed) == len(set(listed)) and set(listed) <= set(pages)


def test_the_start_page_tour_is_the_readmes() -> None:
    tour = re.compile(r"## A 20-line tour\n\n```python\n(.*?)```", re.S)
    readme = tour.search((ROOT / "README.md").read_text(encoding="utf-8"))
    index = tour.search((ROOT / "docs" / "index.md").read_text(encoding="utf-8"))
    assert readme and index and readme.group(1) == index.group(1)


def test_images_in_the_docs_exist() -> None:
    for page in (ROOT / "docs").glob("*.md"):
        for src in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / src).is_file(), f"{page.name}: {src} is missing"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are not installed (the docs extra)",
)
def test_site_builds_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in _nav_pages():
        built = tmp_path / ("index.html" if page == "index.md" else f"{page[:-3]}/index.html")
        assert built.is_file(), page
    assert (tmp_path / "search" / "search_index.json").is_file()
