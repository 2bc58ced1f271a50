"""The house rules of docs/design.md, read from the source with ``ast``.

* no load-time import cycle anywhere in the package;
* the operation modules never import a class module at load time;
* only the container base reaches (lazily) into persistence, weights and distributed;
* ``data`` and the buffer use the public API only;
* the generic chunked copy lives in the core, not in the weights module;
* no module over 800 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tensorbox"

#: Functions over the container contract (``_tree``): they must not know the classes.
OP_MODULES = {
    "tensorbox._core.apply",
    "tensorbox._core.chunks",
    "tensorbox._core.elementwise",
    "tensorbox._core.entries",
    "tensorbox._core.index",
    "tensorbox._core.jagged",
    "tensorbox._core.jagged_gather",
    "tensorbox._core.jagged_pad",
    "tensorbox._core.keyops",
    "tensorbox._core.keys",
    "tensorbox._core.nontensor",
    "tensorbox._core.pickling",
    "tensorbox._core.repr",
    "tensorbox._core.shape",
    "tensorbox._core.shapeops",
    "tensorbox._core.tree",
}
CLASS_MODULES = (
    "tensorbox._core.container",
    "tensorbox._core.tensordict",
    "tensorbox._tensorclass",
)
#: Reached only from the container base, and only inside a method.
FAR_MODULES = ("tensorbox._storage.persist", "tensorbox.weights", "tensorbox.distributed")
CONTAINER_BASE = {"tensorbox._core.container", "tensorbox._core.methods_io"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
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


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(load-time imports, imports inside functions) of one module, as module names.

    ``from X import name`` counts as X and, when X.name is a module, as X.name too.
    Imports under ``if TYPE_CHECKING:`` are not load-time imports.
    """
    module = _module_name(path)
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    load: set[str] = set()
    lazy: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub, in_function)
                continue
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            found: set[str] = set()
            if isinstance(child, ast.Import):
                found = {a.name for a in child.names}
            elif isinstance(child, ast.ImportFrom):
                src = _resolve(module, is_pkg, child.level, child.module)
                # "src:" marks "src, unless every imported name is a submodule of it"
                found = {f"{src}:"} | {f"{src}.{a.name}" for a in child.names}
            (lazy if inner else load).update(n for n in found if n.startswith("tensorbox"))
            visit(child, inner)

    visit(tree, False)
    return load, lazy


def _package() -> dict[str, tuple[set[str], set[str]]]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        out[_module_name(path)] = _imports(path)
    names = set(out)

    def real(found: set[str]) -> set[str]:
        mods = {i for i in found if i in names}
        for i in found:
            src = i[:-1]
            if i.endswith(":") and not any(m.rpartition(".")[0] == src for m in mods):
                mods.add(src)
        return {m for m in mods if m in names}

    # ``from x import name`` counts as x.name when that is a module, else as x.
    return {m: (real(a), real(b)) for m, (a, b) in out.items()}


GRAPH = _package()


def test_the_graph_was_read() -> None:
    assert (
        "tensorbox._core.container" in GRAPH
        and "tensorbox._core.tensordict" in GRAPH["tensorbox"][0]
    )


def test_no_load_time_import_cycle() -> None:
    # Importing a package imports its __init__ first: a module that imports its own package
    # (tensorbox.data -> tensorbox) is not a cycle when the package reaches it lazily.
    seen: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> None:
        seen[m] = 1
        stack.append(m)
        for dep in sorted(GRAPH[m][0]):
            if dep == m or m.startswith(dep + "."):
                continue
            if seen.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                pytest.fail("load-time import cycle: " + " -> ".join(cycle))
            if dep not in seen:
                dfs(dep)
        stack.pop()
        seen[m] = 2

    for m in sorted(GRAPH):
        if m not in seen:
            dfs(m)


@pytest.mark.parametrize("module", sorted(OP_MODULES))
def test_op_modules_never_import_the_classes_at_load_time(module: str) -> None:
    bad = [d for d in GRAPH[module][0] if d.startswith(CLASS_MODULES) or d == "tensorbox"]
    assert bad == [], f"{module} imports {bad} at load time"


def test_only_the_container_base_reaches_persistence_weights_and_distributed() -> None:
    core = OP_MODULES | CONTAINER_BASE | {"tensorbox._core.tensordict", "tensorbox"}
    core |= {m for m in GRAPH if m.startswith("tensorbox._tensorclass")}
    offenders = {
        m: sorted(d for d in load | lazy if d.startswith(FAR_MODULES))
        for m, (load, lazy) in GRAPH.items()
        if m in core and m not in CONTAINER_BASE
    }
    assert {m: d for m, d in offenders.items() if d} == {}
    for m in CONTAINER_BASE:
        assert not [d for d in GRAPH[m][0] if d.startswith(FAR_MODULES)], m  # lazily only


def test_data_and_buffer_use_the_public_api() -> None:
    users = [
        m
        for m in GRAPH
        if m.startswith(("tensorbox.data", "tensorbox.buffer"))
    ]
    assert users, "the data and buffer packages were not found"
    private = {
        m: sorted(
            d
            for d in load | lazy
            if not d.startswith(
                ("tensorbox.data", "tensorbox.buffer")
            )
            and any(part.startswith("_") for part in d.split(".")[1:])
        )
        for m, (load, lazy) in GRAPH.items()
        if m in users
    }
    assert {m: d for m, d in private.items() if d} == {}


def test_the_chunked_copy_lives_in_the_core() -> None:
    users = [m for m, (load, lazy) in GRAPH.items() if "tensorbox.weights" in load | lazy]
    assert set(users) <= CONTAINER_BASE | {"tensorbox"}, users
    assert "tensorbox._core.chunks" in GRAPH["tensorbox._core.entries"][0]


def test_no_module_over_800_lines() -> None:
    long = {
        str(p.relative_to(PKG.parent)): n
        for p in PKG.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 800
    }
    assert long == {}
