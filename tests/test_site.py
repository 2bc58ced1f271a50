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


needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are not installed (the docs extra)",
)


def _build(config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # Not --quiet: it hides the warnings from the counter that strict mode aborts on.
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs_mkdocs
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The site's own configuration, on one page with a broken link and a broken anchor."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Start\n\n[gone](nope.md), [here](#nowhere)\n")
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    text = text[: text.index("\nnav:")].replace("docs_dir: docs", f"docs_dir: {docs}")
    text = text.replace("tools/mkdocs_hooks.py", str(ROOT / "tools" / "mkdocs_hooks.py"))
    config = tmp_path / "mkdocs.yml"
    config.write_text(text, encoding="utf-8")
    proc = _build(config, tmp_path / "site")
    assert proc.returncode != 0
    assert "contains a link 'nope.md', but the target is not found" in proc.stderr
    assert "'#nowhere', but there is no such anchor" in proc.stderr


@needs_mkdocs
def test_site_builds_strict(tmp_path: Path) -> None:
    proc = _build(ROOT / "mkdocs.yml", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    for page in _nav_pages():
        built = tmp_path / ("index.html" if page == "index.md" else f"{page[:-3]}/index.html")
        assert built.is_file(), page
    assert (tmp_path / "search" / "search_index.json").is_file()
