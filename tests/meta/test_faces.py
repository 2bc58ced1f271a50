"""The faces list each public name once; the shims say so and share one forwarder.

A face (``tensorbox/_face.py``) lists its public names once, as the imports under its
``if TYPE_CHECKING:``. These tests hold that the list is the only one: ``__all__`` is
read from it, each name resolves to what the line imports, and no public name reaches a
face another way (an eager import beside the list would be public at runtime and missing
from ``__all__``). They also check ``attach`` and ``forward`` on packages built here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from importlib import import_module
from pathlib import Path

import pytest

from tensorbox import _face

PKG = Path(__file__).resolve().parents[2] / "tensorbox"
FACES = (
    "tensorbox",
    "tensorbox.interop",
    "tensorbox.data",
    "tensorbox.buffer",
    "tensorbox._redis",
    "tensorbox.distributed",
)

#: The shims: old import paths kept, each forwarding to where its names live now
#: (tensordict's module names, and the former names of renamed modules).
SHIMS = {
    "tensorbox.base": ("tensorbox", "TensorDict"),
    "tensorbox.memmap": ("tensorbox", "TensorDict"),
    "tensorbox.persistent": ("tensorbox", "TensorDict"),
    "tensorbox.store": ("tensorbox", "TensorDict"),
    "tensorbox.tensordict": ("tensorbox", "TensorDict"),
    "tensorbox.tensorclass": ("tensorbox", "TensorDict"),
    "tensorbox.interop.files": ("tensorbox.interop.tabular", "from_parquet"),
    "tensorbox.interop.h5": ("tensorbox.interop._h5", "H5Backend"),
    "tensorbox.interop.zarr": ("tensorbox.interop._zarr", "ZarrBackend"),
    "tensorbox.interop.persistent": ("tensorbox.interop.hierarchical", "PersistentTensorDict"),
}
#: A module-level ``__getattr__`` not built by ``_face``, with the work that replaces it.
OWN_FORWARDER_PENDING = {
    "_storage/persist.py": "storage's own rename shim: the storage work converts or retires it"
}


def _source(module: str) -> str:
    return Path(import_module(module).__file__ or "").read_text(encoding="utf-8")


def unlisted(face: types.ModuleType) -> list[str]:
    """Public names a face holds at runtime besides its list (modules and typing aside)."""
    own = {"TYPE_CHECKING", "annotations", *getattr(face, "_KNOBS", ())}  # settable sizes
    return sorted(
        name
        for name, value in vars(face).items()
        if not name.startswith("_")
        and name not in own
        and name not in face.__all__
        and not isinstance(value, types.ModuleType)  # its submodules, or ``sys``
        and getattr(value, "__module__", None) != "typing"  # ``Any`` for its annotations
    )


@pytest.mark.parametrize("name", FACES)
def test_a_face_lists_each_public_name_once(name: str) -> None:
    face = import_module(name)
    table = _face.public_names(face.__file__ or "")
    assert face.__all__ == sorted(table)
    tree = ast.parse(_source(name))
    assigned = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    assert "__all__" not in assigned, "__all__ is read from the TYPE_CHECKING list"
    for public, module in table.items():
        value = getattr(face, public)
        if module == name:
            assert value is import_module(f"{name}.{public}")
        else:
            assert value is getattr(import_module(module), public), public
    assert unlisted(face) == []
    assert set(face.__all__) <= set(dir(face))


def test_an_eager_import_beside_the_list_is_caught(tmp_path: Path) -> None:
    face = _build(tmp_path, "tbface1", "from tbface1.mod import thing as thing\n")
    (tmp_path / "tbface1" / "__init__.py").write_text(
        (tmp_path / "tbface1" / "__init__.py").read_text() + "from tbface1.mod import other\n"
    )
    face = _reload(face)
    assert face.__all__ == ["thing"]
    assert unlisted(face) == ["other"]


def test_attach_loads_lazy_names_on_first_use_and_binds_the_rest(tmp_path: Path) -> None:
    face = _build(
        tmp_path,
        "tbface2",
        "from tbface2.mod import thing as thing\n"
        "    from tbface2.heavy import big as big\n"
        "    from tbface2 import sub as sub\n",
        lazy='("tbface2.heavy", "tbface2.sub")',
    )
    assert face.__all__ == ["big", "sub", "thing"]
    assert "thing" in vars(face) and "big" not in vars(face)
    assert {"big", "sub", "thing"} <= set(dir(face))
    assert "tbface2.heavy" not in sys.modules and "tbface2.sub" not in sys.modules
    assert face.big == 2 and face.sub.__name__ == "tbface2.sub"
    with pytest.raises(AttributeError, match="module 'tbface2' has no attribute 'nothing'"):
        _ = face.nothing


def test_a_name_that_is_also_a_submodule_stays_the_name(tmp_path: Path) -> None:
    # tensorbox.tensorclass: the decorator, and tensordict's module of the same name
    face = _build(tmp_path, "tbface3", "from tbface3.mod import thing as thing\n")
    (tmp_path / "tbface3" / "thing.py").write_text("X = 1\n")
    face = _reload(face)
    import_module("tbface3.thing")
    assert face.thing == 1  # the function's value, not the module


def test_attach_refuses_a_list_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "face.py"
    path.write_text("if TYPE_CHECKING:\n    from a import b\n")
    with pytest.raises(TypeError, match=r"face.py:2: write `b as b`"):
        _face.public_names(path)
    path.write_text("if TYPE_CHECKING:\n    from a import b as b\n    from c import b as b\n")
    with pytest.raises(TypeError, match=r"face.py:3: 'b' is listed twice"):
        _face.public_names(path)
    path.write_text("if TYPE_CHECKING:\n    import a\n")
    with pytest.raises(TypeError, match=r"face.py:2: a face's TYPE_CHECKING block holds only"):
        _face.public_names(path)


def test_a_missing_extra_is_named_by_the_hint(tmp_path: Path) -> None:
    face = _build(
        tmp_path,
        "tbface4",
        "from tbface4.mod import thing as thing\n    from tbface4.broken import gone as gone\n",
        lazy='("tbface4.broken",)',
        hint="hint=lambda name, err: ImportError(f'{name} needs the extra'),",
    )
    with pytest.raises(ImportError, match="gone needs the extra"):
        _ = face.gone


def test_importing_tensorbox_loads_none_of_the_lazy_parts() -> None:
    code = (
        "import sys, tensorbox; "
        "print(sorted(m for m in ('tensorbox.interop', 'tensorbox.data', 'tensorbox.buffer', "
        "'tensorbox._redis', 'tensorbox._storage.archive.convert') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PKG.parent
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("shim", sorted(SHIMS))
def test_a_shim_says_so_and_forwards(shim: str) -> None:
    target, forwarded = SHIMS[shim]
    module = import_module(shim)
    assert (module.__doc__ or "").startswith("A shim: "), module.__doc__
    assert f'= forward(__name__, "{target}")' in _source(shim)
    assert getattr(module, forwarded) is getattr(import_module(target), forwarded)
    assert forwarded in dir(module)
    for name in getattr(module, "__all__", ()):
        assert getattr(module, name) is getattr(import_module(target), name)
    with pytest.raises(AttributeError, match=f"module '{shim}' has no attribute '_private'"):
        _ = module._private
    with pytest.raises(AttributeError, match=f"it forwards to '{target}'"):
        _ = module.no_such_name


def test_every_forwarder_is_the_shared_one() -> None:
    """A module-level ``__getattr__`` is built by ``_face`` (a face or a shim), and every
    module that says it is a shim is one of ``SHIMS``."""
    own: list[str] = []
    shims: list[str] = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            own.append(rel)
        if (ast.get_docstring(tree) or "").startswith("A shim: "):
            shims.append(".".join(["tensorbox", *path.with_suffix("").relative_to(PKG).parts]))
    assert own == sorted(OWN_FORWARDER_PENDING)
    assert [s.removesuffix(".__init__") for s in shims] == sorted(SHIMS)


def _build(
    tmp_path: Path, name: str, block: str, lazy: str = "()", hint: str = ""
) -> types.ModuleType:
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "mod.py").write_text("thing = 1\nother = 3\n")
    (pkg / "heavy.py").write_text("big = 2\n")
    (pkg / "sub.py").write_text("")
    (pkg / "broken.py").write_text("import a_module_that_is_not_installed\n")
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from tensorbox import _face\n"
        f"if TYPE_CHECKING:\n    {block}"
        f"__getattr__, __dir__, __all__ = _face.attach(__name__, __file__, lazy={lazy}, {hint})\n"
    )
    sys.path.insert(0, str(tmp_path))
    return _reload(None, name)


def _reload(face: types.ModuleType | None, name: str = "") -> types.ModuleType:
    name = face.__name__ if face is not None else name
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]
    return import_module(name)
