"""The house rules of docs/design.md ("Layers"), read from the source with ``ast``.

Every import statement is read on its own: ``from X import a, b`` imports ``X.a`` when
that is a module of the package, else ``X`` (an edge per statement, never a set merged
across statements), so the answer is the same under any ``PYTHONHASHSEED``
(``test_the_graph_is_the_same_under_any_hash_seed`` checks it). Imports inside
functions count ("lazy"); those under ``if TYPE_CHECKING:`` do not, except in a face
(``tensorbox/_face.py``), where they are the names ``_face.attach`` imports.

The layers, lowest first (a module may import its own layer and those below):

0. ``tensorbox.errors``
1. ``tensorbox._core`` (the contract, keys, shapes, operations, the container base)
2. ``tensorbox._tensorclass``
3. ``tensorbox._storage``, ``tensorbox.interop``, ``tensorbox.distributed``,
   ``tensorbox.weights``
4. ``tensorbox.checkpoint``, ``tensorbox.data``, ``tensorbox.buffer``, the CLI
   (``tensorbox.cli``, ``tensorbox.__main__``) and the package face
   ``tensorbox`` (``__init__.py``)

One written-down door lets a lower layer reach a higher one: the package face, the
composition root, through its two tables of module paths (its public names that load on
first use, the ``if TYPE_CHECKING:`` imports that ``_face.attach`` reads, and
``_PORTS``, what it binds to the core's ports, ``tensorbox/_core/ports.py``). The core imports nothing above it, lazily or not;
no other import goes against the order, and once the face's tables are set aside no
import cycle exists at all, lazy imports counted.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "tensorbox"

#: Layer of each module, by the longest matching prefix.
LAYERS: dict[str, int] = {
    "tensorbox.errors": 0,
    "tensorbox._face": 0,  # how the faces list their names, and the shims' forwarder
    "tensorbox.progress": 0,  # the logger and progress reports: imports nothing of ours
    "tensorbox._core": 1,
    "tensorbox._tensorclass": 2,
    "tensorbox._storage": 3,
    "tensorbox.interop": 3,
    # TensorDictStore: a live container whose leaves sit in a Redis server (not a saved
    # tree: it sits beside storage, on the container's backing hook, and builds TensorDicts)
    "tensorbox._redis": 3,
    "tensorbox.distributed": 3,
    "tensorbox.weights": 3,
    "tensorbox.checkpoint": 4,
    "tensorbox.data": 4,
    "tensorbox.buffer": 4,
    "tensorbox": 4,
}
FACE = "tensorbox"

#: Functions over the container contract (``_core.tree``): they must not know the classes.
OP_MODULES = (
    "tensorbox._core.apply",
    "tensorbox._core.chunks",
    "tensorbox._core.elementwise",
    "tensorbox._core.entries",
    "tensorbox._core.index",
    "tensorbox._core.jagged",
    "tensorbox._core.jagged_gather",
    "tensorbox._core.jagged_pad",
    "tensorbox._core.keyops",
    "tensorbox._core.nestedkey",
    "tensorbox._core.nontensor",
    "tensorbox._core.pickling",
    "tensorbox._core.repr",
    "tensorbox._core.shape",
    "tensorbox._core.shapeops",
    "tensorbox._core.tree",
)
CLASS_MODULES = (
    "tensorbox._core.container",
    "tensorbox._core.tensordict",
    "tensorbox._tensorclass",
)


@dataclass(frozen=True, order=True)
class Edge:
    """One module imported by one import statement."""

    source: str
    target: str
    line: int
    lazy: bool  # inside a function
    door: bool = False  # the package face's tables (its lazy names, its ports)

    def __str__(self) -> str:
        how = "lazily" if self.lazy else "at load time"
        return f"{self.source}:{self.line} imports {self.target} {how}"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_pkg: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _statements(path: Path, module: str) -> list[tuple[int, bool, ast.Import | ast.ImportFrom]]:
    """Every import statement of one file: (line, inside a function, statement)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[tuple[int, bool, ast.Import | ast.ImportFrom]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:  # the ``else:`` branch runs
                    visit(sub, in_function)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                out.append((child.lineno, in_function, child))
            inner = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            visit(child, inner)

    visit(tree, False)
    return out


def _attach_lazy(tree: ast.Module) -> tuple[str, ...] | None:
    """The ``lazy=`` prefixes of the face's ``_face.attach(...)`` call; None: no call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("attach"):
            for kw in node.keywords:
                if kw.arg == "lazy":
                    return tuple(ast.literal_eval(kw.value))
            return ()
    return None


def _face_table(path: Path, module: str) -> list[tuple[int, str, bool, bool]]:
    """The modules a face (``tensorbox/_face.py``) imports by name, as
    ``(line, module, lazy, door)``: those of its public names (the imports under
    ``if TYPE_CHECKING:``, which ``_face.attach`` makes at runtime; lazy when under one of
    its ``lazy=`` prefixes) and, for the package face, those it binds to the core's ports
    (``_PORTS`` values, ``"tensorbox.module"`` or ``"tensorbox.module:attribute"``). The
    package face's lazy names and ports are its door."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[tuple[int, str, bool, bool]] = []
    lazy_prefixes = _attach_lazy(tree)
    for node in tree.body:
        if lazy_prefixes is not None and isinstance(node, ast.If):
            if ast.unparse(node.test) != "TYPE_CHECKING":
                continue
            for st in node.body:
                assert isinstance(st, ast.ImportFrom) and st.module, ast.unparse(st)
                for alias in st.names:
                    target = f"{st.module}.{alias.name}" if st.module == module else st.module
                    lazy = any(target == p or target.startswith(p + ".") for p in lazy_prefixes)
                    out.append((st.lineno, target, lazy, lazy and module == FACE))
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "_PORTS"
            and isinstance(node.value, ast.Dict)
        ):
            out += [
                (v.lineno, v.value.split(":")[0], True, True)
                for v in node.value.values
                if isinstance(v, ast.Constant)
            ]
    return out


def read_graph(root: Path = PKG) -> list[Edge]:
    """Every import edge between the modules of the package at ``root``, sorted."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    edges: set[Edge] = set()
    for module, path in files.items():
        is_pkg = path.name == "__init__.py"
        for line, lazy, st in _statements(path, module):
            targets: list[str] = []
            if isinstance(st, ast.Import):
                targets = [a.name for a in st.names]
            else:
                src = _resolve(module, is_pkg, st.level, st.module)
                for a in st.names:
                    sub = f"{src}.{a.name}"
                    targets.append(sub if sub in modules else src)
            for t in targets:
                if t in modules and t != module:
                    edges.add(Edge(module, t, line, lazy))
        if is_pkg:
            for line, name, lazy, door in _face_table(path, module):
                target = name.replace(FACE, root.name, 1)
                if target in modules and target != module:
                    edges.add(Edge(module, target, line, lazy, door=door))
    return sorted(edges)


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def through_a_door(e: Edge) -> bool:
    """The written-down exception: the face's tables (the composition root)."""
    return e.lazy and e.source == FACE and e.door


def strongly_connected(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of the graph (Tarjan, iterative), each sorted,
    largest first."""
    nodes = sorted({e.source for e in edges} | {e.target for e in edges})
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        succ[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(set(succ[start]))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(set(succ[nxt])))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return sorted(out, key=lambda c: (-len(c), c))


def knot_size(edges: list[Edge]) -> int:
    """The size of the largest import knot (strongly connected component), every
    import counted, lazy ones and the doors included."""
    return len(strongly_connected(edges)[0])


GRAPH = read_graph()
MODULES = sorted({e.source for e in GRAPH} | {e.target for e in GRAPH})


def test_the_graph_was_read() -> None:
    assert any(
        (e.source, e.target, e.lazy) == ("tensorbox", "tensorbox._core.tensordict", False)
        for e in GRAPH
    )
    assert any(e.source == FACE and e.target.startswith("tensorbox._storage") for e in GRAPH)
    # the ports' bindings are read: the face binds persistence to the storage layer
    assert any(
        e.source == FACE and e.door and e.target == "tensorbox._storage.writethrough" for e in GRAPH
    )
    assert {layer(m) for m in MODULES} == {0, 1, 2, 3, 4}


def test_each_statement_is_read_on_its_own(tmp_path: Path) -> None:
    # ``from pkg import sub`` (a module) and ``from pkg import name`` (not one) in two
    # statements: the first imports pkg.sub only, the second pkg itself. A merged set of
    # the statements' names would lose one of them, depending on the hash seed.
    pkg = tmp_path / "tensorbox"
    (pkg / "pkg").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "pkg" / "__init__.py").write_text("name = 1\n")
    (pkg / "pkg" / "sub.py").write_text("")
    (pkg / "a.py").write_text(
        "from tensorbox.pkg import sub\n"
        "from tensorbox.pkg import name\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tensorbox import b\n"
        "def f():\n    from tensorbox import b\n"
    )
    (pkg / "b.py").write_text("")
    assert [(e.target, e.line, e.lazy) for e in read_graph(pkg) if e.source == "tensorbox.a"] == [
        ("tensorbox.b", 7, True),
        ("tensorbox.pkg", 2, False),
        ("tensorbox.pkg.sub", 1, False),
    ]


@pytest.mark.heavy
def test_the_graph_is_the_same_under_any_hash_seed() -> None:
    code = (
        "import json, sys; sys.path.insert(0, 'tests/meta'); import test_layout as t; "
        "print(json.dumps([[e.source, e.target, e.line, e.lazy, e.door] for e in t.GRAPH] "
        "+ [t.strongly_connected(t.GRAPH)]))"
    )
    root = PKG.parent
    outputs = set()
    for seed in ("0", "12345"):  # and this process's own seed, compared below
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        outputs.add(proc.stdout)
    assert len(outputs) == 1
    here = [[e.source, e.target, e.line, e.lazy, e.door] for e in GRAPH]
    assert json.loads(outputs.pop())[:-1] == here


def test_no_import_against_the_layer_order() -> None:
    """A module imports its own layer and those below, except through the face's tables."""
    against = [
        f"{e} (layer {layer(e.source)} -> {layer(e.target)})"
        for e in GRAPH
        if layer(e.target) > layer(e.source) and not through_a_door(e)
    ]
    assert against == []


def test_the_core_imports_nothing_above_it() -> None:
    """``tensorbox._core`` imports only itself and the layers below, lazily or not: what
    it needs from above it reaches through its ports (``_core/ports.py``)."""
    upward = [
        str(e)
        for e in GRAPH
        if e.source.startswith("tensorbox._core") and layer(e.target) > layer(e.source)
    ]
    assert upward == []


def test_no_import_cycle_at_all() -> None:
    """Lazy imports counted; only the face's tables (the composition root) are left out."""
    knots = [
        c for c in strongly_connected([e for e in GRAPH if not through_a_door(e)]) if len(c) > 1
    ]
    assert knots == []


def test_storage_builds_containers_through_the_contract() -> None:
    """The storage layer never imports a container class (``TensorDict``, the container
    base, the package face): it builds containers with ``_core.tree`` (the contract's
    ``new_plain``/``rebuild`` and the class registry)."""
    classes = ("tensorbox._core.tensordict", "tensorbox._core.container", FACE)
    found = [
        str(e)
        for e in GRAPH
        if e.source.startswith("tensorbox._storage.")
        and layer(e.source) == 3
        and e.target in classes
    ]
    assert found == []


@pytest.mark.parametrize("module", OP_MODULES)
def test_op_modules_never_import_the_classes_at_load_time(module: str) -> None:
    bad = [
        str(e)
        for e in GRAPH
        if e.source == module
        and not e.lazy
        and (e.target.startswith(CLASS_MODULES) or e.target == FACE)
    ]
    assert bad == []


def test_data_and_buffer_use_the_public_api() -> None:
    users = ("tensorbox.data", "tensorbox.buffer")
    assert any(m.startswith(users) for m in MODULES), "the data and buffer packages were not found"
    private = [
        str(e)
        for e in GRAPH
        if e.source.startswith(users)
        and not e.target.startswith(users)
        and e.target != "tensorbox._face"  # how a face lists its names: not an API in use
        and any(part.startswith("_") for part in e.target.split(".")[1:])
    ]
    assert private == []


def test_the_chunked_copy_lives_in_the_core() -> None:
    users = sorted({e.source for e in GRAPH if e.target == "tensorbox.weights"})
    assert set(users) <= {FACE}, users
    assert any(
        e.source == "tensorbox._core.entries"
        and e.target == "tensorbox._core.chunks"
        and not e.lazy
        for e in GRAPH
    )


def test_the_knot_is_reported() -> None:
    """Every import counted, the face's tables included: the largest knot is the face's
    round trip (the face -> data/buffer -> the face), never a flat tangle."""
    knots = strongly_connected(GRAPH)
    print(f"\nimport knot (every import counted): {len(knots[0])} modules: {knots[0]}")
    assert knot_size(GRAPH) >= 1
    assert all(m == FACE or not m.startswith("tensorbox._core") for m in knots[0]), knots[0]


#: Modules still past the limit, each with the work that splits it (an entry that is no
#: longer past it fails below, so the list only shrinks).
OVER_LIMIT_PENDING: dict[str, str] = {}


def test_no_module_is_past_1000_lines() -> None:
    sizes = {
        str(p.relative_to(PKG)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(PKG.rglob("*.py"))
    }
    over = {m: n for m, n in sizes.items() if n > 1000}
    assert sorted(set(over) - set(OVER_LIMIT_PENDING)) == [], over
    assert sorted(set(OVER_LIMIT_PENDING) - set(over)) == [], "split already: drop it from the list"


if __name__ == "__main__":  # python tests/meta/test_layout.py [PACKAGE_DIR]: the knot of a tree
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else PKG
    knot = strongly_connected(read_graph(root))[0]
    print(len(knot), " ".join(knot))
