"""mkdocs hooks (mkdocs.yml ``hooks:``): small fixes between GitHub's Markdown and the site's.

A page with two headings that make the same anchor (``tensorbox.TensorClass`` and
``tensorbox.tensorclass`` in docs/api.md) gets ``#name-1`` for the second on GitHub,
where the docs are also read, but ``#name_1`` from Python-Markdown's table of contents.
The pages keep GitHub's form; the site's build rewrites those in-page links.
"""

from __future__ import annotations

import re
from typing import Any

_DUPLICATE_ANCHOR = re.compile(r"\]\(#([\w-]+?)-(\d+)\)")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return _DUPLICATE_ANCHOR.sub(r"](#\1_\2)", markdown)
