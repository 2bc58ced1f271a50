"""mkdocs hooks (mkdocs.yml ``hooks:``): small fixes between GitHub's Markdown and the site's.

A page with two headings that make the same anchor (``tensorbox.TensorClass`` and
``tensorbox.tensorclass`` in docs/api/tensorclass.md) gets ``#name-1`` for the second on
GitHub, where the docs are also read, but ``#name_1`` from Python-Markdown's table of
contents. The pages keep GitHub's form; the site's build rewrites those links (in-page
or to another page).
"""

from __future__ import annotations

import re
from typing import Any

_DUPLICATE_ANCHOR = re.compile(r"\]\(([\w./-]*#[\w-]+?)-(\d+)\)")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    # Only the generated API pages have repeated headings; elsewhere a trailing "-3" is
    # a heading's own text ("version 3").
    if not page.file.src_uri.startswith("api/"):
        return markdown
    return _DUPLICATE_ANCHOR.sub(r"](\1_\2)", markdown)
