"""One ``mypy --strict`` run for every typing test of the suite.

mypy spends most of its time on torch's stubs and the package, the same work for each
target: checking the package, tests/typing_tensorclass.py and the README tour (both
its forms) in ONE run, with one cache, takes about what one of them took alone. Each
test then reads the lines that name its file. The run happens once per process
(``functools.cache``); under pytest-xdist the tests that use it share a worker
(``xdist_group("mypy")``), so two mypy processes never write one cache at once.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "mypy"  # git-ignored; a warm cache makes a rerun take seconds
TARGETS = ROOT / ".cache" / "mypy-targets"  # the README tour, written out as files
TYPING_FILE = ROOT / "tests" / "typing_tensorclass.py"
TOUR = re.compile(r"## A 20-line tour\n\n```python\n(.*?)```", re.S)


def readme_tour() -> str:
    found = TOUR.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert found, "README.md lost its tour"
    return found.group(1)


def decorator_form(code: str) -> str:
    """The tour as it read before: ``@tensorclass`` and ``torch.stack``."""
    code = re.sub(r"class Sample\(TensorClass\):.*\n", "@tensorclass\nclass Sample:\n", code)
    code = code.replace("import TensorClass, TensorDict", "import TensorDict, tensorclass")
    return code.replace("tensorbox.stack([td, td]", "torch.stack([td, td]")


@functools.cache
def run() -> tuple[dict[str, list[str]], str]:
    """``({target: its mypy lines}, full output)`` for the targets ``package``,
    ``typing_file``, ``tour`` and ``tour_decorator``."""
    TARGETS.mkdir(parents=True, exist_ok=True)
    tour, old = TARGETS / "tour.py", TARGETS / "tour_decorator.py"
    tour.write_text(readme_tour(), encoding="utf-8")
    old.write_text(decorator_form(readme_tour()), encoding="utf-8")
    paths = {
        "package": "tensorbox/",
        "typing_file": TYPING_FILE.relative_to(ROOT).as_posix(),
        "tour": tour.relative_to(ROOT).as_posix(),
        "tour_decorator": old.relative_to(ROOT).as_posix(),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(CACHE),
            "--strict",  # warn_unused_ignores included: a refusal mypy misses is an error
            "--follow-imports=silent",  # report the targets only, not torch or numpy
            "--no-error-summary",
            "tensorbox",
            *(paths[k] for k in ("typing_file", "tour", "tour_decorator")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    # 0: clean, 1: errors reported (the decorator form always has some); else mypy broke
    assert proc.returncode in (0, 1) and not proc.stderr.strip(), output
    lines = proc.stdout.splitlines()
    found = {k: [ln for ln in lines if ln.startswith(p)] for k, p in paths.items()}
    unclaimed = [ln for ln in lines if not any(ln in v for v in found.values())]
    assert not unclaimed, output  # a line naming no target: something else went wrong
    return found, output
