"""Run the Python blocks of the README as one script (``make wheelcheck`` runs it with the
installed wheel, from outside the checkout, so the wheel is what gets imported).

    python tools/readme_tour.py README.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def main(argv: list[str]) -> int:
    text = Path(argv[0]).read_text(encoding="utf-8")
    code = "\n\n".join(m.group(1) for m in BLOCK.finditer(text))
    exec(compile(code, argv[0], "exec"), {"__name__": "__main__"})
    import tensorbox

    print(f"README tour ran against {tensorbox.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
