"""One ``resolve()`` (``tensorbox/_storage/resolve.py``): every entry point reads a
path or URL by the same table, and a new backend is one class plus one line.

Each test here fails on the code before the resolver: a save to ``FILE::DIR`` created a
file literally named ``a.tdz::sub``, and ``existsok=False`` never refused a URL.
"""

from __future__ import annotations

import ast
import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorbox import TensorDict
from tensorbox._storage import resolve as _resolve
from tensorbox._storage.persist import load_from, opened, save_to
from tensorbox.errors import TreeExistsError

# ------------------------------------------------ a new backend: one class, one line

TREES: dict[str, Any] = {}  # what the backend below holds: URL -> MemoryStore


class DictBackend(_resolve.Backend):
    """Trees held in this process's ``TREES``, under ``dict://NAME`` URLs."""

    name = "dict tree"
    writable = True

    def exists(self, storage_options: dict[str, Any] | None = None) -> bool:
        return self.where.path in TREES

    def save(self, obj: Any, **options: Any) -> Any:
        from tensorbox._storage.memory import MemoryStore

        store = TREES[self.where.path] = MemoryStore(name=str(self.where.path))
        return save_to(obj, store, checksum=options["checksum"])

    def load(self, cls: type, **options: Any) -> Any:
        return load_from(TREES[self.where.path], self.where.inner, cls, lock=False)

    @contextlib.contextmanager
    def opened(self) -> Iterator[tuple[Any, str]]:
        yield TREES[self.where.path], self.where.inner


@pytest.fixture
def dict_backend() -> Iterator[None]:
    # the one line a new backend takes:
    _resolve.register_backend("dict", f"{__name__}:DictBackend", schemes=("dict",))
    try:
        yield
    finally:
        _resolve.unregister_backend("dict")
        TREES.clear()


def test_a_new_backend_is_one_class_and_one_line(dict_backend: None) -> None:
    td = TensorDict(a=torch.arange(3), n={"b": torch.ones(3)}, batch_size=[3])
    td.memmap("dict://run", existsok=False)  # save, through the core's memmap
    with pytest.raises(TreeExistsError, match=r"'dict://run' already holds a saved tree"):
        td.memmap("dict://run", existsok=False)  # existsok, through the same resolver
    back = TensorDict.load_memmap("dict://run")  # load
    assert back["n", "b"].tolist() == [1.0, 1.0, 1.0]
    assert TensorDict.load_memmap("dict://run::n")["b"].tolist() == [1.0, 1.0, 1.0]  # ::DIR
    with opened("dict://run") as (store, rel):  # the CLI's entry point
        assert rel == "" and "meta.json" in store.files
    # a read-only tree kind refuses the jobs it cannot do, naming the place
    with pytest.raises(ValueError, match=r"memmap_like\('dict://run'\): a dict tree cannot"):
        td.memmap_like("dict://run")


def test_the_new_backend_touched_no_other_file() -> None:
    """The places a backend is named: its class, and the one ``register_backend`` call
    (above); the built-in ones are named once each, in the registry table."""
    here = Path(__file__).read_text(encoding="utf-8")
    calls = [
        n
        for n in ast.walk(ast.parse(here))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "register_backend"
        and "DictBackend" in ast.unparse(n)
    ]
    assert len(calls) == 1
    pkg = Path(_resolve.__file__).parents[1]
    naming = sorted(
        str(p.relative_to(pkg))
        for p in pkg.rglob("*.py")
        if "backends:FolderBackend" in p.read_text(encoding="utf-8")
    )
    assert naming == ["_storage/resolve.py"]


def test_register_backend_takes_module_colon_class() -> None:
    with pytest.raises(ValueError, match=r"the class path must be 'module:Class'"):
        _resolve.register_backend("bad", "tensorbox._storage.backends.FolderBackend")
    with pytest.raises(ValueError, match=r"no storage backend is registered as 'nope'"):
        _resolve.backend_class("nope")


# -------------------------------------------------- FILE::DIR, the same both ways


def test_file_colon_dir_means_a_sub_tree_on_save_as_on_load(tmp_path: Path) -> None:
    path = str(tmp_path / "a.tdz")
    td = TensorDict(a=torch.arange(3), n={"b": torch.ones(3)}, batch_size=[3])
    td.memmap(path, archive=True)
    assert TensorDict.load_memmap(path + "::n")["b"].tolist() == [1.0, 1.0, 1.0]
    for kwargs in ({"archive": True}, {}):  # archive=None: the file there is an archive
        with pytest.raises(
            ValueError, match=r"names the sub-tree 'n' inside the archive .*written whole"
        ):
            td.memmap(path + "::n", **kwargs)
    with pytest.raises(ValueError, match=r"names the sub-tree 'sub' inside the archive"):
        td.memmap(str(tmp_path / "new.tdz") + "::sub", archive=True)
    with pytest.raises(ValueError, match=r"memmap_\(.*a\.tdz::n'\): .*written whole"):
        td.clone().memmap_(path + "::n")
    assert sorted(os.listdir(tmp_path)) == ["a.tdz"]  # never a file named 'a.tdz::n'


def test_resolve_reads_the_table() -> None:
    assert type(_resolve.resolve(None)).__name__ == "FolderBackend"
    assert type(_resolve.resolve("x.tdz", save=True)).__name__ == "ArchiveBackend"
    assert type(_resolve.resolve("x.tdz", save=True, archive=False)).__name__ == "FolderBackend"
    assert type(_resolve.resolve("s3://b/k.tdz::n")).__name__ == "RemoteBackend"
    with pytest.raises(ValueError, match=r"unknown URL scheme 'nosuch'"):
        _resolve.resolve("nosuch://x")


# -------------------------------------------------- existsok=False at a URL


def test_existsok_false_refuses_an_object_at_a_url() -> None:
    url = f"memory://bucket/{uuid.uuid4().hex}.tdz"
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    td.memmap(url, archive=True, existsok=False)  # nothing there yet: saved
    with pytest.raises(TreeExistsError, match=r"memory://bucket/.*already holds a saved tree"):
        td.memmap(url, archive=True, existsok=False)
    td.memmap(url, archive=True)  # existsok=True (the default) replaces it
    assert TensorDict.load_memmap(url)["a"].tolist() == [0, 1, 2]


def test_existsok_false_on_local_paths_as_before(tmp_path: Path) -> None:
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    td.memmap(tmp_path / "f", existsok=False)
    td.memmap(tmp_path / "z.tdz", existsok=False)
    for name in ("f", "z.tdz"):
        with pytest.raises(TreeExistsError, match=r"already holds a saved tree"):
            td.memmap(tmp_path / name, existsok=False)
    with pytest.raises(TreeExistsError, match=r"already holds a saved tree"):
        td.memmap_like(tmp_path / "f", existsok=False)


# -------------------------------------------------- hostile and unlucky names


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("no_such_module_zz:Cls", r"'bad' \('no_such_module_zz:Cls'\): cannot import"),
        ("tensorbox._storage.backends:NoSuch", r"'bad' \(.*\): module .* has no 'NoSuch'"),
    ],
)
def test_a_backend_that_cannot_be_imported_is_named(path: str, match: str) -> None:
    _resolve.register_backend("bad", path, schemes=("bad",))
    try:
        with pytest.raises(ImportError, match=r"storage backend " + match):
            TensorDict.load_memmap("bad://x")
    finally:
        _resolve.unregister_backend("bad")


def test_a_backend_path_naming_no_backend_class_is_refused() -> None:
    _resolve.register_backend("bad", "os:path", schemes=("bad",))
    try:
        with pytest.raises(TypeError, match=r"'bad' \('os:path'\): 'path' is a module, not a"):
            TensorDict(a=torch.arange(3), batch_size=[3]).memmap("bad://x")
    finally:
        _resolve.unregister_backend("bad")


def test_a_url_scheme_in_capitals_is_the_same_scheme() -> None:
    name = f"bucket/{uuid.uuid4().hex}.tdz"
    TensorDict(a=torch.arange(3), batch_size=[3]).memmap(f"MEMORY://{name}", archive=True)
    assert TensorDict.load_memmap(f"memory://{name}")["a"].tolist() == [0, 1, 2]
    assert TensorDict.load_memmap(f"Memory://{name}")["a"].tolist() == [0, 1, 2]


def test_a_trailing_slash_names_the_same_place_on_save_and_on_load(tmp_path: Path) -> None:
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    td.memmap(str(tmp_path / "x.tdz") + "/")  # a .tdz name: an archive, the file x.tdz
    assert (tmp_path / "x.tdz").is_file()
    for name in ("x.tdz/", "x.tdz//", "x.tdz"):
        assert TensorDict.load_memmap(str(tmp_path / name))["a"].tolist() == [0, 1, 2]
    with pytest.raises(TreeExistsError, match=r"x\.tdz/' already holds a saved tree"):
        td.memmap(str(tmp_path / "x.tdz") + "/", existsok=False)


def test_file_colon_dir_of_a_safetensors_file_is_its_sub_tree(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.torch")
    path = str(tmp_path / "w.safetensors")
    st.save_file({"a.b": torch.ones(3), "c": torch.zeros(2)}, path)
    assert TensorDict.load_memmap(path + "::a")["b"].tolist() == [1.0, 1.0, 1.0]  # not a zip
    with opened(path + "::a") as (_store, rel):  # the CLI's entry point
        assert rel == ".a"  # the store's name of node a
    with pytest.raises(ValueError, match=r"w\.safetensors::a'\): a safetensors file is read-only"):
        TensorDict(b=torch.ones(3)).memmap(path + "::a")
