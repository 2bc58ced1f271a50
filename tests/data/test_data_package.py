"""How the data and buffer parts sit in the package: loaded lazily, built on the public API.

- ``import tensorbox`` loads neither ``tensorbox.data`` nor ``tensorbox.buffer``, nor
  Pillow, tqdm, matplotlib or the docs tools (mkdocs, its Material theme), nor does a
  small save or ``tensorbox.progress``; ``tensorbox.BatchLoader`` and friends load on
  first use.
- ``tensorbox/data`` and ``tensorbox/buffer`` use the public face
  (``tensorbox``, ``tensorbox.errors``), never the core's private modules.
- Nothing in ``tensorbox/`` imports tensordict; the demo, benchmarks and tutorials
  import no private module of tensorbox.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorbox

# Heavy: starts interpreters to see what an import loads. The quick loop (`make check`) leaves the
# module out without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "tensorbox"

_FRESH = textwrap.dedent(
    """
    import importlib.abc, sys, tempfile

    import torch  # torch.hub imports tqdm when it is installed: not tensorbox's doing

    attempts = []
    BLOCKED = ("PIL", "tqdm", "matplotlib", "mkdocs", "material")

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                attempts.append(name)
                raise ImportError(f"{name} is blocked by the test")
            return None

    for name in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
        del sys.modules[name]
    sys.meta_path.insert(0, Refuse())

    import tensorbox
    import tensorbox.progress

    tensorbox.TensorDict(a=torch.zeros(2), batch_size=[2]).memmap(tempfile.mkdtemp())
    lazy = ("tensorbox.data", "tensorbox.buffer") + BLOCKED
    loaded = sorted(m for m in sys.modules if m.startswith(lazy))
    assert not loaded and not attempts, (loaded, attempts)

    from tensorbox import BatchLoader, ImageFolderData
    assert tensorbox.BatchLoader is BatchLoader and "tensorbox.data" in sys.modules
    data = ImageFolderData(images=torch.zeros(4, 3, 2, 2, dtype=torch.uint8),
                           targets=torch.arange(4), classes=["a"], batch_size=[4])
    assert len(list(BatchLoader(data, 2, normalize="imagenet", seed=0))) == 2
    assert tensorbox.buffer.AugmentBuffer.__name__ == "AugmentBuffer"
    # The loader, the transforms and the buffer need neither Pillow nor tqdm.
    assert not attempts, attempts
    try:
        from tensorbox.data import ingest_image_folder
    except ImportError as err:
        assert "pip install tensorbox[images]" in str(err), err
    else:
        raise AssertionError("ingest_image_folder imported without Pillow")
    print("ok")
    """
)


def test_import_tensorbox_loads_data_buffer_pillow_tqdm_on_first_use():
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_lazy_names_are_listed_and_unknown_names_refused():
    assert {"BatchLoader", "ImageFolderData", "data", "buffer"} <= set(dir(tensorbox))
    assert set(tensorbox.__all__) <= set(dir(tensorbox))
    with pytest.raises(AttributeError, match="module 'tensorbox' has no attribute 'BatchLoder'"):
        tensorbox.BatchLoder  # noqa: B018


# ------------------------------------------------------------------ import rules


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(level, dotted name)`` of every module an ``import`` in ``path`` names."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            out += [(node.level, f"{base}.{a.name}" if base else a.name) for a in node.names]
    return out


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and part != "__future__" for part in dotted.split("."))


def test_data_and_buffer_use_the_public_face():
    files = [*sorted((PKG / "data").glob("*.py")), *sorted((PKG / "buffer").glob("*.py"))]
    bad = []
    for path in files:
        own = f"tensorbox.{path.parent.name}"
        for level, name in _imports(path):
            if level == 1:
                continue  # a sibling in its own package
            full = name if level == 0 else f"tensorbox.{name}"
            inside = full.startswith(own + ".")
            if full == "tensorbox._face":
                continue  # how a face lists its names (tensorbox/_face.py), not an API in use
            if level > 1 or (full.startswith("tensorbox.") and _private(full) and not inside):
                bad.append(f"{path.relative_to(ROOT)}: {'.' * level}{name}")
    assert not bad, bad


def test_nothing_in_the_package_imports_tensordict():
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(PKG.rglob("*.py"))
        for _, name in _imports(path)
        if name.split(".")[0] == "tensordict"
    ]
    assert not bad, bad


def test_scripts_outside_the_package_import_no_private_module_of_it():
    scripts = [
        *sorted((ROOT / "tutorials").glob("*.py")),
        *sorted((ROOT / "benchmarks" / "harness").glob("*.py")),
        *(ROOT / "benchmarks" / f"{name}.py" for name in ("demo", "dataload", "buffer")),
    ]
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in scripts
        for level, name in _imports(path)
        if level == 0 and name.split(".")[0] == "tensorbox" and _private(name)
    ]
    assert not bad, bad
    # The demo harness left the package; only the public image-folder helper stays.
    assert not (PKG / "demo.py").exists()
    assert not any((PKG / "data" / f"_{m}.py").exists() for m in ("pipelines", "tutorial"))
