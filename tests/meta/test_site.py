"""The documentation site: every page is in the nav, the site builds in strict mode
(broken links and anchors fail), the start page's tour is the README's, each page has
one name, and what a reader sees is rendered: no raw reST, no text the browser reads
as a tag, nothing fetched from the internet.

The build runs when mkdocs and its Material theme are installed (the ``docs`` extra);
it takes a few seconds.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

# Heavy: builds the site with mkdocs. The quick loop (`make check`) leaves the module out without
# importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
NAV_PAGE = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?([\w./-]+\.md)\s*$", re.M)


def _nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return NAV_PAGE.findall(text[text.index("\nnav:") :])


def test_every_page_is_in_the_nav() -> None:
    docs = ROOT / "docs"
    pages = sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.md"))
    listed = _nav_pages()
    missing = [p for p in pages if p not in listed]
    assert not missing, f"add these pages to the nav of mkdocs.yml: {missing}"
    assert len(listed) == len(set(listed)) and set(listed) <= set(pages)


def test_each_page_has_one_name() -> None:
    # The nav names no page: its nav title and browser title are its H1. An H1 is plain
    # text (markup would show in the nav and the browser's tab) and no two are the same.
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    assert re.findall(r"^\s*-\s+[^:\n]+:\s+\S+\.md\s*$", nav, re.M) == []
    titles = []
    for page in _nav_pages():
        first = (ROOT / "docs" / page).read_text(encoding="utf-8").splitlines()[0]
        assert re.fullmatch(r"# [\w ,'-]+", first), f"{page}: {first!r}"
        titles.append(first)
    assert len(titles) == len(set(titles)), titles


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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once (strict) for the tests below."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (the docs extra)")
    out = tmp_path_factory.mktemp("site")
    proc = _build(ROOT / "mkdocs.yml", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def _built(site: Path, page: str) -> Path:
    if page.endswith("index.md"):  # index.md, api/index.md: the folder's own page
        return site / page.replace("index.md", "index.html")
    return site / f"{page[:-3]}/index.html"


def test_site_builds_strict(site: Path) -> None:
    for page in _nav_pages():
        assert _built(site, page).is_file(), page
    assert (site / "search" / "search_index.json").is_file()
    # site_url set: the sitemap lists absolute addresses, and 404.html's assets resolve.
    assert "<loc>http" in (site / "sitemap.xml").read_text(encoding="utf-8")
    assert 'href="http' in (site / "404.html").read_text(encoding="utf-8")
    # code lines longer than the column wrap (Material's own scrollbar shows on hover only)
    assert "white-space: pre-wrap" in (site / "css" / "extra.css").read_text(encoding="utf-8")
    assert 'href="../css/extra.css"' in _built(site, "cli.md").read_text(encoding="utf-8")


#: Every tag the theme and Python-Markdown write. Another tag in a page is text that the
#: browser swallowed: ``root/<class>/<image>`` in prose shows as ``root//``.
HTML_TAGS = {
    *("html", "head", "body", "meta", "title", "link", "script", "style", "div", "span"),
    *("a", "p", "ul", "ol", "li", "pre", "code", "h1", "h2", "h3", "h4", "h5", "h6", "nav"),
    *("header", "footer", "main", "article", "aside", "label", "input", "button", "form"),
    *("svg", "path", "img", "table", "thead", "tbody", "tr", "th", "td", "em", "strong"),
    *("details", "summary", "hr", "br", "small", "sup", "sub", "blockquote", "dl", "dt"),
    *("dd", "section", "kbd", "abbr", "mark", "noscript", "i", "b"),
}


class _Page(HTMLParser):
    """The tags, outside-code text, title and external resources of one built page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.text: list[str] = []
        self.all: list[str] = []
        self.fetched: list[str] = []
        self.title = ""
        self.h1 = ""
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._open.append(tag)
        found = dict(attrs)
        url = found.get("src") if tag in ("script", "img") else None
        if tag == "link" and found.get("rel") in ("stylesheet", "preconnect", "preload"):
            url = found.get("href")
        if url and url.startswith(("http:", "https:", "//")):
            self.fetched.append(url)

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.all.append(data)
        if "title" in self._open:
            self.title += data
        elif "h1" in self._open and "a" not in self._open:
            self.h1 += data
        if not {"pre", "code", "script", "style"} & set(self._open):
            self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_pages_are_rendered_not_raw(site: Path) -> None:
    for page in _nav_pages():
        parsed = _parse(_built(site, page))
        unknown = parsed.tags - HTML_TAGS
        assert not unknown, f"{page}: text read as tags: {unknown}"
        text = "".join(parsed.text)
        assert "``" not in text, f"{page}: raw reST code markup"
        assert ":func:`" not in text and ":class:`" not in text, page
        assert not parsed.fetched, f"{page} fetches {parsed.fetched}"
    # shown as written (in a code span and in prose), not swallowed
    shown = "".join(_parse(_built(site, "api/data.md")).all)
    assert "root/<class>/<image>" in shown and "root//" not in shown


def test_the_browser_title_is_the_h1(site: Path) -> None:
    for page in _nav_pages():
        parsed = _parse(_built(site, page))
        title = parsed.title.removesuffix(" - tensorbox")
        assert parsed.h1.strip() == title, (page, parsed.h1, title)
        # the nav's link to the page says the same
        nav = re.compile(rf'md-ellipsis">\s*{re.escape(title)}\s*</span>')
        assert nav.search(_built(site, page).read_text(encoding="utf-8")), page
