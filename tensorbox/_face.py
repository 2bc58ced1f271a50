"""The package's faces and shims: each public name listed once, old import paths kept.

A *face* is a package's ``__init__.py`` that gathers names from its modules
(``tensorbox``, ``interop``, ``data``, ``buffer``, ``distributed``, ``_redis``). It lists
each public name once, as an import under ``if TYPE_CHECKING:`` written
``from module import name as name`` (the ``as`` form is how a typed package says
"re-exported" to mypy and pyright). Type checkers read those lines; at runtime
:func:`attach` reads the same lines from the face's source with ``ast`` and gives the
face its ``__all__``, its ``__getattr__`` and its ``__dir__``. This is the
scientific-python lazy-loader pattern, with the list kept in the face instead of a
stub file, so the face stays one file and ``mypy --strict`` checks it.

Which names load on first use is a rule about modules, not a second list of names:
``attach(..., lazy=(prefix, ...))`` loads a name on first use when its module starts
with one of the prefixes (the heavy extras); every other name is imported by
``attach``, as a plain import would. A name that is also a submodule's name
(``tensorbox.tensorclass``: the decorator and tensordict's module) is bound after that
submodule is imported, so that importing the submodule later cannot rebind it.

A *shim* is a module kept at an import path users may know (tensordict's module names,
a module since renamed) that forwards to where the names live now: :func:`forward`
gives it the ``__getattr__`` and ``__dir__`` that do so. Its docstring's first line
says it is a shim.

>>> import tensorbox, tensorbox.interop
>>> "TensorDict" in tensorbox.__all__, tensorbox.interop.__all__[:2]
(True, ['ParquetRowGroups', 'PersistentTensorDict'])
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterable
from importlib import import_module
from pathlib import Path
from typing import Any

__all__ = ["attach", "forward", "public_names"]

Getattr = Callable[[str], Any]
Dir = Callable[[], list[str]]


def public_names(path: str | Path) -> dict[str, str]:
    """``{name: module}`` for each import under the face's ``if TYPE_CHECKING:``, in order.

    Each must be ``from <absolute module> import name as name``; a name listed twice, or
    another statement in the block, is refused (``TypeError``, naming the file and line).

    >>> import tensorbox
    >>> public_names(tensorbox.__file__)["TensorDict"]
    'tensorbox._core.tensordict'
    """
    path = Path(path)
    table: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for st in node.body:
            if not isinstance(st, ast.ImportFrom) or st.level or st.module is None:
                raise TypeError(
                    f"{path}:{st.lineno}: a face's TYPE_CHECKING block holds only "
                    "`from <absolute module> import name as name` lines"
                )
            for alias in st.names:
                if alias.asname != alias.name:
                    raise TypeError(
                        f"{path}:{st.lineno}: write `{alias.name} as {alias.name}` "
                        "(the form type checkers read as re-exported)"
                    )
                if alias.name in table:
                    raise TypeError(f"{path}:{st.lineno}: {alias.name!r} is listed twice")
                table[alias.name] = st.module
    return table


def attach(
    package: str,
    file: str,
    *,
    lazy: Iterable[str] = (),
    hint: Callable[[str, ImportError], ImportError] | None = None,
) -> tuple[Getattr, Dir, list[str]]:
    """``(__getattr__, __dir__, __all__)`` for the face ``package`` whose source is ``file``.

    Names from modules under a ``lazy`` prefix load on first use; the others (and those
    that share a submodule's name) are bound now. ``hint(name, error)`` rewrites the
    ``ImportError`` of a name whose optional dependency is missing.
    """
    table = public_names(file)
    lazy = tuple(lazy)
    namespace = vars(sys.modules[package])
    folder = Path(file).parent
    submodules = {p.stem for p in folder.glob("*.py")} | {
        p.parent.name for p in folder.glob("*/__init__.py")
    }

    def load(name: str) -> Any:
        module = table[name]
        try:
            if module == package:  # ``from package import sub as sub``: a submodule
                value = import_module(f"{package}.{name}")
            else:
                value = getattr(import_module(module), name)
        except ImportError as err:
            if hint is None:
                raise
            raise hint(name, err) from err
        namespace[name] = value
        return value

    for name, module in table.items():
        where = f"{package}.{name}" if module == package else module
        if name in submodules and module != package:
            import_module(f"{package}.{name}")  # first, so that it cannot rebind ``name``
            load(name)
        elif not any(where == p or where.startswith(p + ".") for p in lazy):
            load(name)

    def __getattr__(name: str) -> Any:
        if name in table:
            return load(name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__, sorted(table)


def forward(shim: str, target: str) -> tuple[Getattr, Dir]:
    """``(__getattr__, __dir__)`` for the shim module ``shim``: every public name of
    ``target`` (imported on first use) read through it. Private names are not forwarded.

    >>> get, _ = forward("tensorbox.base", "tensorbox")
    >>> get("TensorDict").__name__
    'TensorDict'
    """

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module {shim!r} has no attribute {name!r}")
        try:
            return getattr(import_module(target), name)
        except AttributeError:
            raise AttributeError(
                f"module {shim!r} has no attribute {name!r} (it forwards to {target!r})"
            ) from None

    def __dir__() -> list[str]:
        own = vars(sys.modules[shim])
        return sorted({*own, *(n for n in dir(import_module(target)) if not n.startswith("_"))})

    return __getattr__, __dir__
