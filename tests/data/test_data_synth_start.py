"""``make_image_folder`` never hangs on how the caller was started.

Spawned workers re-run the main script; called from an unguarded script or from
standard input they cannot start, so generation runs in threads there. A worker that
dies raises instead of being restarted forever. Each case runs a real interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.checkout import checkout_env

# Heavy: starts interpreters and process pools. The quick loop (`make check`) leaves the module out
# without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

pytest.importorskip("PIL")

CALL = (
    "make_image_folder(sys.argv[1], num_images=6, num_classes=2, min_size=16, max_size=24, "
    "num_workers=2)"
)
HEAD = """\
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
from tensorbox.data import make_image_folder
from tensorbox.data import _synth
"""


def _run(tmp_path: Path, source: str, *, stdin: bool = False) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(source, encoding="utf-8")
    args = [sys.executable, "-" if stdin else str(script), str(tmp_path / "imgs")]
    return subprocess.run(
        args,
        input=source if stdin else None,
        cwd=tmp_path,
        env=checkout_env(),
        capture_output=True,
        text=True,
        timeout=180,  # a hang fails here rather than stalling the suite
    )


@pytest.mark.parametrize("stdin", [False, True], ids=["unguarded-script", "stdin"])
def test_unguarded_call_uses_threads(tmp_path: Path, stdin: bool) -> None:
    proc = _run(tmp_path, HEAD + CALL + "\nprint('made')\n", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "made\n"  # once: no worker re-ran the script
    assert "making images in 2 threads, not processes" in proc.stderr
    assert "tensorbox make_image_folder: 6 img, " in proc.stderr  # the summary line
    assert (
        len(list((tmp_path / "imgs").rglob("*.jpg")) + list((tmp_path / "imgs").rglob("*.png")))
        == 6
    )


def test_guard_detection(tmp_path: Path) -> None:
    """Calls under the guard (either way round, directly or through a function) may
    spawn; calls in top-level code outside it may not."""
    source = HEAD + textwrap.dedent(
        """
        def probe():
            return _synth._spawn_can_start()

        outside = probe()
        if __name__ == "__main__":
            print(outside, probe(), _synth._spawn_can_start())
        if "__main__" == __name__:
            print(probe())
        """
    )
    proc = _run(tmp_path, source)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False True True\nTrue\n"


def test_a_worker_that_dies_raises(tmp_path: Path) -> None:
    # The script kills any process that re-runs it as a worker (__mp_main__).
    source = (
        "import os\n"
        "if __name__ != '__main__':\n"
        "    os._exit(3)\n" + HEAD + "if __name__ == '__main__':\n    " + CALL + "\n"
    )
    proc = _run(tmp_path, source)
    assert proc.returncode == 1
    assert "RuntimeError: make_image_folder: a worker process died" in proc.stderr
    assert not (tmp_path / "imgs").exists()
