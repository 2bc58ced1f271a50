"""Live trees on the store protocol: in-place commit is a capability of a ``Store``.

Write-through, ``extend_`` and ``make_memmap`` talk only to the store's live-tree
methods (``Store.in_place``, ``writing``, ``generation``, ``holds``, ``append``...).
The proof of the seam: a new transactional backend, written below as ONE class (a
``Store`` that holds its trees in memory and commits by swapping a dict), registered
with one ``register_backend`` line, takes write-through, ``extend_``, ``make_memmap``
and ``memmap_like`` with nothing else changed. Before this seam, a ``Store`` could not
be registered at all, and the live-tree modules built ``FolderStore(path)`` themselves.

Stores without the capability (an archive, a URL, safetensors, HDF5, zarr, a plain
memory store) refuse each live operation with an error naming the tree.
"""

from __future__ import annotations

import ast
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict
from tensorbox._core.backing import TREES
from tensorbox._storage import backed as _backed
from tensorbox._storage import resolve as _resolve
from tensorbox._storage import writethrough as _writethrough
from tensorbox._storage.api import opened
from tensorbox._storage.memory import MemoryStore
from tensorbox._storage.resolve import resolve
from tensorbox._storage.store import TensorEntry
from tensorbox.errors import TreeExistsError

# ------------------------------------- a transactional backend: one class, one line


class LiveMemoryStore(MemoryStore):
    """Trees held in this process, under ``live://NAME``: each leaf a ``bytearray`` that
    the loaded leaves share (writes reach it), each commit a swap of the whole dict."""

    in_place = True
    TREES: ClassVar[dict[str, dict[str, Any]]] = {}  # URL -> {"files", "gen", "lock"}

    def __init__(self, url: str) -> None:  # made by the generic backend with the URL
        self.name = url
        self.tree = self.TREES.setdefault(
            url, {"files": {}, "gen": 0, "lock": threading.Lock(), "seen": set()}
        )

    @property  # type: ignore[override]
    def files(self) -> dict[str, Any]:
        return self.tree["files"]  # type: ignore[no-any-return]

    @files.setter
    def files(self, files: dict[str, Any]) -> None:  # the writer's commit: all at once
        self.tree["files"] = {name: bytearray(data) for name, data in files.items()}
        self.tree["gen"] += 1

    def writing(self) -> Any:
        return self.tree["lock"]

    def generation(self) -> Any:
        return self.tree["gen"] if self.files else None

    def tensor(self, e: TensorEntry, mode: str) -> torch.Tensor:
        if mode == "r" or not e.nbytes:
            return super().tensor(e, mode)  # a copy
        raw = torch.frombuffer(self.files[e.ident], dtype=torch.uint8, count=e.nbytes)
        self.tree["seen"].add(raw.data_ptr())  # a buffer of this tree (held by the leaf)
        return raw.view(e.dtype).view(e.shape)

    def holds(self, e: TensorEntry, t: torch.Tensor) -> bool | None:
        buf = self.files.get(e.ident)
        if buf is None:
            return None
        if not e.nbytes:  # an empty leaf: nothing to hold
            return t.numel() == 0
        ptr = t.untyped_storage().data_ptr()
        if ptr == torch.frombuffer(buf, dtype=torch.uint8).data_ptr():
            return True
        return False if ptr in self.tree["seen"] else None  # an older buffer of the tree

    def append(
        self, e: TensorEntry, rows: torch.Tensor, fsync: bool, where: str, current: Any
    ) -> torch.Tensor:
        old = self.files[e.ident]
        new = bytearray(old[: e.nbytes])  # the committed bytes, copied: never touched
        new += rows.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        self.files[e.ident] = new  # counted once the grown tree's meta.json commits
        shape = (e.shape[0] + rows.shape[0], *e.shape[1:])
        return self.tensor(e._replace(shape=shape, nbytes=len(new)), "r+")


@pytest.fixture
def live() -> Iterator[None]:
    # the one line a new transactional backend takes:
    _resolve.register_backend("live", f"{__name__}:LiveMemoryStore", schemes=("live",))
    try:
        yield
    finally:
        _resolve.unregister_backend("live")
        LiveMemoryStore.TREES.clear()


def _reload(url: str) -> Any:
    return TensorDict.load_memmap(url, mode="r")  # a copy of what is committed


def test_write_through_reaches_a_new_transactional_store(live: None) -> None:
    td = TensorDict({"a": torch.arange(3.0), "n": {"b": torch.ones(3, 2)}}, [3])
    saved = td.memmap("live://run")
    assert _backed.tree_of(saved) is not None  # live: its writes reach the store
    saved["a"][0] = 7.0  # in place, into the store's bytes
    saved[1] = {"a": torch.tensor(5.0), "n": {"b": torch.full((2,), 4.0)}}
    with saved.unlock_():
        saved["c"] = torch.zeros(3, dtype=torch.int16)  # a new key: committed at once
        saved["name"] = "run-1"
    back = _reload("live://run")
    assert back["a"].tolist() == [7.0, 5.0, 2.0]
    assert back["n", "b"][1].tolist() == [4.0, 4.0]
    assert sorted(back.keys()) == ["a", "c", "n", "name"] and back["name"] == "run-1"
    assert back["c"].dtype is torch.int16


def test_extend_grows_a_tree_in_a_new_transactional_store(live: None) -> None:
    td = TensorDict({"x": torch.arange(2), "info": {"y": torch.zeros(2, 3)}}, [2])
    saved = td.memmap("live://grow")
    rows = TensorDict({"x": torch.tensor([7, 8]), "info": {"y": torch.ones(2, 3)}}, [2])
    expected = torch.cat([td, rows], 0)  # type: ignore[list-item]  # containers route cat
    saved.extend_(rows)
    assert saved.batch_size == torch.Size([4]) and saved["info"].batch_size == torch.Size([4])
    back = _reload("live://grow")
    assert (back == expected).all() and back.batch_size == torch.Size([4])
    saved["x"][3] = -1  # the grown leaf is the store's: writes reach it
    assert _reload("live://grow")["x"].tolist() == [0, 1, 7, -1]
    # A second container, loaded live (mode defaults to r+ on a store that commits in
    # place), extends after the first; the first, now stale, is refused, not lost.
    other = TensorDict.load_memmap("live://grow")
    other.extend_(rows[:1])
    with pytest.raises(RuntimeError, match=r"'live://grow' was saved again since this container"):
        saved.extend_(rows)
    assert _reload("live://grow")["x"].tolist() == [0, 1, 7, -1, 7]


def test_make_memmap_on_a_new_transactional_store(live: None) -> None:
    saved = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap("live://mk")
    x = saved.make_memmap(("nested", "b"), (3, 4))
    x.fill_(2.0)  # into the store: make_memmap gives the tree's own leaf
    assert saved.is_locked
    assert _reload("live://mk")["nested", "b"].sum().item() == 24.0
    y = saved.make_memmap_from_tensor("c", torch.arange(3))
    assert y.tolist() == [0, 1, 2] and _reload("live://mk")["c"].tolist() == [0, 1, 2]
    storage = torch.empty(3).untyped_storage()
    with pytest.raises(RuntimeError, match=r"'live://mk' keeps no files, so no storage can"):
        saved.make_memmap_from_storage("d", storage, (3,))


def test_memmap_like_and_memmap_in_place_on_a_new_transactional_store(live: None) -> None:
    like = TensorDict(a=torch.ones(4, 2), batch_size=[4]).memmap_like("live://like")
    like[2] = {"a": torch.full((2,), 3.0)}
    assert _reload("live://like")["a"].tolist() == [[0, 0], [0, 0], [3, 3], [0, 0]]
    td = TensorDict(a=torch.arange(2), batch_size=[2])
    assert td.memmap_("live://inplace") is td
    td["a"][1] = 9
    assert _reload("live://inplace")["a"].tolist() == [0, 9]


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("extend"), st.integers(0, 3)),
        st.tuples(st.just("row"), st.integers(0, 50)),
        st.tuples(st.just("key"), st.sampled_from(["p", "q"])),
    ),
    min_size=1,
    max_size=6,
)


@given(n=st.integers(0, 3), ops=_OPS)
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_live_memory_tree_follows_the_in_memory_oracle(
    live: None, n: int, ops: list[tuple[str, Any]]
) -> None:
    """Random write-through, row writes, new keys and extend_ on the one-class backend:
    what it commits is what the same operations give in memory."""
    url = f"live://oracle-{len(LiveMemoryStore.TREES)}"
    want = TensorDict({"x": torch.arange(n * 2).view(n, 2), "n": {"y": torch.zeros(n)}}, [n])
    td = want.memmap(url)
    for step, (op, arg) in enumerate(ops):
        if op == "extend":
            rows = TensorDict(batch_size=[arg])
            for k, v in want.items(True, True):
                rows[k] = torch.full((arg, *v.shape[1:]), step, dtype=v.dtype)
            want = torch.cat([want, rows], 0)  # type: ignore[list-item,assignment]  # routed
            td.extend_(rows)
        elif op == "row" and len(want):
            i = arg % len(want)
            want["x"][i] = step
            td["x"][i] = step  # in place: reaches the store through the shared leaf
        elif op == "key" and arg not in want.keys():  # noqa: SIM118 - a container's keys
            want.set(arg, torch.full((len(want),), float(step)))
            with td.unlock_():
                td[arg] = torch.full((len(want),), float(step))  # committed at once
        back = _reload(url)
        assert back.batch_size == want.batch_size, (step, op)
        assert set(back.keys(True, True)) == set(want.keys(True, True))
        for k in want.keys(True, True):
            assert torch.equal(back.get(k), want.get(k)), (step, op, k)


def test_the_new_backend_is_one_class_and_one_line() -> None:
    """The count: a transactional backend took a Store, a Writer, a Backend class, a
    register line and edits of backed.py, writethrough.py, extend.py, make_entry.py
    (which built ``FolderStore(path)`` and took the folder's lock themselves); now one
    class and one line, and the live-tree modules name no folder."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "register_backend"
        and "LiveMemoryStore" in ast.unparse(n)
    ]
    assert len(calls) == 1
    live = [
        n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and "in_place" in ast.unparse(n)
    ]
    assert [n.name for n in live] == ["LiveMemoryStore"]  # one class: no Writer, no Backend
    storage = Path(_resolve.__file__).parent
    for module in ("backed.py", "writethrough.py", "extend.py", "make_entry.py"):
        src = (storage / module).read_text(encoding="utf-8")
        imported = [
            n.module
            for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.ImportFrom) and n.module is not None
        ] + [
            f"{n.module}.{a.name}"
            for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.ImportFrom)
            for a in n.names
        ]
        assert not [m for m in imported if "folder" in m or m.endswith(".commit")], module
        assert "FolderStore" not in src, module


# ------------------------------------- stores without the capability refuse, by name


def _stores(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """(what, store) for each built-in store that cannot commit in place."""
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    arch = str(tmp_path / "t.tdz")
    td.memmap(arch)
    with opened(arch) as (store, _):
        yield arch, store
    st = str(tmp_path / "t.safetensors")
    td.to_safetensors(st)
    with opened(st) as (store, _):
        yield st, store
    url = "memory://live-refusals/t.tdz"
    td.memmap(url, archive=True)
    with opened(url) as (store, _):
        yield url, store
    yield "memory", MemoryStore()


@pytest.mark.parametrize("what", ["extend_", "a write to a saved tree", "make_memmap"])
def test_stores_that_cannot_commit_in_place_refuse_by_name(tmp_path: Path, what: str) -> None:
    for name, store in _stores(tmp_path):
        assert not store.in_place
        shown = name if name == "memory" else str(store.name)
        with pytest.raises(ValueError, match=rf"^{what}: '{shown}' \(\w+\) cannot change a saved "
                           r"tree in place: it has no in-place commit"):  # fmt: skip
            store.live(what)
        for call in (
            store.generation,
            lambda s=store: s.holds(None, torch.zeros(1)),
            lambda s=store: s.append(None, torch.zeros(1), False, "key 'a'", None),
            lambda s=store: s.subtree("x"),
        ):
            with pytest.raises(ValueError, match=r"cannot change a saved tree in place"):
                call()


def test_h5_and_zarr_stores_refuse_live_operations(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    path = str(tmp_path / "t.h5")
    td.to_h5(path)
    with (
        opened(path) as (store, _),
        pytest.raises(ValueError, match=r"^extend_: .*t\.h5' \(GroupStore\) cannot change"),
    ):
        store.live("extend_")
    pytest.importorskip("zarr")
    zpath = str(tmp_path / "z")
    td.to_zarr(zpath)
    with (
        opened(zpath) as (store, _),
        pytest.raises(ValueError, match=r"^extend_: .*z' \(GroupStore\) cannot change"),
    ):
        store.live("extend_")


def test_the_engine_refuses_a_tree_whose_store_cannot_commit_in_place(tmp_path: Path) -> None:
    """The live-tree modules ask the store, never assume a folder: a container tied to
    an archive's store (only reachable by hand) is refused by write-through and extend_,
    naming the archive, and nothing is written."""
    arch = str(tmp_path / "t.tdz")
    TensorDict(a=torch.arange(3), batch_size=[3]).memmap(arch)
    td = TensorDict.load_memmap(arch).clone()
    with opened(arch) as (store, _):
        _backed.register(td, store, None)
        try:
            rows = TensorDict(a=torch.tensor([5]), batch_size=[1])
            with pytest.raises(ValueError, match=r"^extend_: '.*t\.tdz' \(ArchiveStore\) cannot"):
                td.extend_(rows)
            with pytest.raises(ValueError, match=r"^a write to a saved tree: '.*t\.tdz'"):
                _writethrough.commit(td, store, None)
            with td.unlock_(), pytest.raises(ValueError, match=r"t\.tdz' \(ArchiveStore\)"):
                td["b"] = torch.zeros(3)
            assert "b" not in td.keys()  # noqa: SIM118 - undone in memory as on disk
        finally:
            _backed.unregister(td)
    assert TensorDict.load_memmap(arch).batch_size == torch.Size([3])


@pytest.fixture
def plain_memory() -> Iterator[None]:
    """A store without the capability, registered alone: the generic backend refuses
    the live entry points by name."""
    _resolve.register_backend("plainmem", f"{__name__}:_PlainStore", schemes=("plainmem",))
    try:
        yield
    finally:
        _resolve.unregister_backend("plainmem")
        _PlainStore.TREES.clear()


class _PlainStore(MemoryStore):
    TREES: ClassVar[dict[str, dict[str, bytes]]] = {}

    def __init__(self, url: str) -> None:
        super().__init__(self.TREES.get(url), url)

    def writer(self, **options: Any) -> Any:
        w = super().writer(**options)
        commit = w.commit

        def publish(num_threads: int = 0) -> None:
            commit(num_threads)
            self.TREES[self.name] = self.files

        w.commit = publish  # type: ignore[method-assign]
        return w


def test_a_registered_store_without_the_capability_refuses_live_entry_points(
    plain_memory: None,
) -> None:
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    saved = td.memmap("plainmem://x")  # a whole save works
    assert _backed.tree_of(saved) is None  # but it is not live
    assert TensorDict.load_memmap("plainmem://x")["a"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"^memmap_: 'plainmem://x' \(_PlainStore\) cannot"):
        td.memmap_("plainmem://x")
    with pytest.raises(ValueError, match=r"^memmap_like: 'plainmem://y' \(_PlainStore\) cannot"):
        td.memmap_like("plainmem://y")
    with pytest.raises(ValueError, match=r"^load_memmap\(mode='r\+'\): 'plainmem://x'"):
        TensorDict.load_memmap("plainmem://x", mode="r+")
    assert not TREES or all(r.store.name != "plainmem://x" for r in TREES.values())


def test_a_save_over_a_zarr_store_refuses_before_writing(tmp_path: Path) -> None:
    """A zarr store folder is read-only: memmap, memmap_ and memmap_like to it refuse,
    naming it, and write nothing into it (a meta.json there would hide the store)."""
    pytest.importorskip("zarr")
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    zpath = str(tmp_path / "z")
    td.to_zarr(zpath)
    before = sorted(os.listdir(zpath))
    for call in (
        lambda: td.clone().memmap(zpath),
        lambda: td.clone().memmap_(zpath),
        lambda: td.memmap_like(zpath),
        lambda: td.memmap(zpath, existsok=False),
    ):
        with pytest.raises((FileExistsError, TreeExistsError), match=r"z'.*(zarr store|already)"):
            call()
        assert sorted(os.listdir(zpath)) == before
    assert type(resolve(zpath)).__name__ == "ZarrFolderBackend"
    assert torch.equal(TensorDict.load_memmap(zpath)["a"], td["a"])
