"""What the core needs from the layers above it, and where each need is met.

The core (``tensorbox/_core``) imports nothing above it, lazily or not
(``tests/meta/test_layout.py``). A container method whose job lives higher up (saving a
tree, copying weights into a module, sending over ``torch.distributed``, converting to
Arrow) asks this module for a *port*: a named need with a typed protocol. The package
face, ``tensorbox/__init__.py``, is the composition root: it binds every port to a
module path (``"tensorbox._storage.api"``) or to an attribute of one
(``"tensorbox._core.tensordict:TensorDict"``), and the module is imported on first use
of the port, as the face's own lazy table does for public names.

The same mechanism holds the late-bound classes the core cannot name without an import
cycle (the plain ``TensorDict`` its operations build, the lazy-legacy views, the
sub-view and lazy-stack classes) and the storage layer's hooks the container's write
gates call (:class:`Backing`, :func:`reserve`).

A port nobody bound is an error that says so (:class:`PortUnboundError`), never a
silent ``None``:

>>> from tensorbox._core import ports
>>> ports.plain().__name__                 # bound by the package face
'TensorDict'
>>> callable(ports.persistence().load_memmap)
True
>>> try:
...     ports.port("no-such-port")
... except ports.PortUnboundError as err:
...     print(str(err)[:58])
the core's port 'no-such-port' is bound to nothing: the pa
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol, cast

from tensorbox.errors import TensorboxError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "Backing",
    "Distributed",
    "FileRefs",
    "Persistence",
    "PortUnboundError",
    "MERGED",
    "Weights",
    "backing",
    "bind",
    "bound",
    "distributed",
    "file_refs",
    "formats",
    "install",
    "lazystack",
    "legacy_view",
    "live",
    "persistence",
    "plain",
    "port",
    "reserve",
    "subview",
    "unbind",
    "weights",
]


class PortUnboundError(TensorboxError, LookupError):
    """A port of the core was used before anything was bound to it."""


# ----------------------------------------------------------------- the protocols


class Persistence(Protocol):
    """Saving and opening trees (``tensorbox._storage.api``)."""

    def memmap(self, td: Any, prefix: Any, **kwargs: Any) -> Any:
        """Write a copy of ``td`` under ``prefix`` (a folder, an archive or a URL)."""
        ...

    def memmap_(self, td: Any, prefix: Any, **kwargs: Any) -> Any:
        """Write ``td`` under ``prefix`` and map its leaves back, in place."""
        ...

    def memmap_like(self, td: Any, prefix: Any, **kwargs: Any) -> Any:
        """Allocate files of ``td``'s structure under ``prefix``, unfilled."""
        ...

    def load_memmap(self, cls: Any, prefix: Any, **kwargs: Any) -> Any:
        """Open the tree saved at ``prefix`` lazily."""
        ...

    def is_memmap(self, td: Any) -> bool:
        """True when every tensor leaf of ``td`` maps a file of a saved tree."""
        ...

    def saved_type(self, td: Any) -> str | None:
        """The container type a loaded tree was saved as, when it differs."""
        ...

    def wants_archive(self, prefix: Any, archive: bool | None, compression: Any) -> bool:
        """Whether a save to ``prefix`` writes one archive file (``archive=None``: by name)."""
        ...

    def refuse_existing(
        self,
        prefix: Any,
        existsok: bool,
        storage_options: Any = None,
        archive: bool | None = None,
    ) -> None:
        """Raise ``TreeExistsError`` when ``existsok`` is False and ``prefix`` holds a tree
        (or, at a URL, an object)."""
        ...

    def extend_(self, td: Any, rows: Any, *, fsync: bool = False) -> Any:
        """Append ``rows`` to ``td`` along batch dim 0 (committed on a saved tree)."""
        ...

    def make_new(self, td: Any, key: Any, shape: Any, dtype: Any) -> Tensor:
        """A new zero-filled mapped leaf at ``key`` (``make_memmap``)."""
        ...

    def make_from_tensor(self, td: Any, key: Any, tensor: Any, copy_data: bool) -> Tensor:
        """A new mapped copy of ``tensor`` at ``key``."""
        ...

    def make_from_storage(self, td: Any, key: Any, storage: Any, shape: Any, dtype: Any) -> Tensor:
        """A new mapped leaf at ``key`` reading ``storage``."""
        ...


class FileRefs(Protocol):
    """Pickling a file-backed leaf as a reference to its file
    (``tensorbox._storage.fileref``)."""

    def shareable(self, tensor: Tensor) -> Any:
        """``tensor``, or a reference to the file it maps."""
        ...

    def restore(self, ref: Any) -> Any:
        """The tensor a reference names (the file mapped again)."""
        ...


class Backing(Protocol):
    """What the container's write gates call on a node of a saved tree
    (``tensorbox._storage.writethrough``)."""

    def through(self, node: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """Run the write ``fn(*args)`` on ``node`` and commit its tree (undone on failure)."""
        ...

    def write_rows(self, node: Any, index: Any, value: Any) -> None:
        """``node[index] = value``, non-tensor values included, committed to the tree."""
        ...

    def guarded(self, node: Any, value: Any, index: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)``, a write of the entries ``value`` into the rows ``index`` (None:
        whole entries) of ``node``, and commit its tree: all or nothing."""
        ...


class Weights(Protocol):
    """Containers of ``nn.Module`` weights (``tensorbox.weights``)."""

    def from_module(self, module: Any, **kwargs: Any) -> Any:
        """The parameters and buffers of ``module``, nested by submodule."""
        ...

    def to_module(self, td: Any, module: Any, **kwargs: Any) -> Any:
        """Put ``td``'s tensors into ``module``; returns what was there."""
        ...

    def state_dict(self, td: Any, **kwargs: Any) -> dict[str, Any]:
        """``td`` as an ``nn.Module``-style state dict."""
        ...

    def load_state_dict(self, td: Any, state_dict: Any, **kwargs: Any) -> None:
        """Copy a state dict into ``td``'s leaves."""
        ...


class Distributed(Protocol):
    """Containers over ``torch.distributed`` (``tensorbox.distributed``)."""

    def send(self, td: Any, dst: int, **kwargs: Any) -> None:
        """Send ``td`` to rank ``dst``."""
        ...

    def isend(self, td: Any, dst: int, **kwargs: Any) -> Any:
        """Start a send of ``td`` to rank ``dst``."""
        ...

    def recv(self, td: Any, src: int, **kwargs: Any) -> Any:
        """Receive from rank ``src`` into ``td``."""
        ...

    def irecv(self, td: Any, src: int, **kwargs: Any) -> Any:
        """Start a receive from rank ``src`` into ``td``."""
        ...

    def recv_structure(self, src: int, **kwargs: Any) -> Any:
        """A new container received from rank ``src``."""
        ...

    def broadcast_(self, td: Any, src: int, **kwargs: Any) -> Any:
        """Rank ``src``'s ``td`` copied into every rank's, in place."""
        ...

    def broadcast(self, td: Any, src: int, **kwargs: Any) -> Any:
        """Rank ``src``'s ``td`` on every rank."""
        ...

    def all_reduce_(self, td: Any, op: Any, **kwargs: Any) -> Any:
        """Reduce every leaf over the group, in place."""
        ...

    def all_gather(self, td: Any, **kwargs: Any) -> Any:
        """Every rank's ``td`` stacked along a new first dim."""
        ...


# ------------------------------------------------------------------ the bindings

#: port name -> ``"module"`` or ``"module:attribute"`` (filled by the composition root).
_PATHS: dict[str, str] = {}
#: port name -> the object bound (filled on first use, or by :func:`install`).
_BOUND: dict[str, Any] = {}
#: the keys ``K`` of the ports ``"merge.K"``: entries that describe their node's other
#: entries, which ``update`` merges through the port instead of replacing.
MERGED: set[str] = set()


def _note(name: str, bound: bool) -> None:
    if name.startswith("merge."):
        (MERGED.add if bound else MERGED.discard)(name[len("merge.") :])


def bind(paths: dict[str, str]) -> None:
    """Bind ports to module paths (``"pkg.mod"``) or attributes (``"pkg.mod:Name"``),
    imported on first use. The package face calls this once, at import."""
    for name, path in paths.items():
        _PATHS[name] = path
        _BOUND.pop(name, None)
        _note(name, True)


def unbind(name: str) -> str | None:
    """Forget the binding of ``name``; returns its path (None if it had none)."""
    _BOUND.pop(name, None)
    _note(name, False)
    return _PATHS.pop(name, None)


def install(name: str, obj: Any) -> None:
    """Bind ``name`` to ``obj`` itself (a test's or another backend's implementation)."""
    _BOUND[name] = obj
    _note(name, True)


def bound(name: str) -> Any | None:
    """The object bound to ``name`` if it was loaded or installed already, else None
    (imports nothing)."""
    return _BOUND.get(name)


def port(name: str) -> Any:
    """The object bound to the port ``name``, imported on first use.

    Raises :class:`PortUnboundError` when nothing is bound to it.
    """
    try:
        return _BOUND[name]
    except KeyError:
        pass
    path = _PATHS.get(name)
    if path is None:
        raise PortUnboundError(
            f"the core's port {name!r} is bound to nothing: the package face "
            "(tensorbox/__init__.py, the composition root) binds each port at import; bind "
            f"it with tensorbox._core.ports.bind({{{name!r}: 'module' or 'module:Name'}}) "
            f"(bound now: {sorted(_PATHS)})"
        )
    module, _, attr = path.partition(":")
    obj: Any = import_module(module)
    if attr:
        obj = getattr(obj, attr)
    _BOUND[name] = obj
    return obj


# ------------------------------------------------------- typed accessors, by port


def persistence() -> Persistence:
    """Saving and opening trees."""
    return cast(Persistence, port("persistence"))


def file_refs() -> FileRefs:
    """Pickling file-backed leaves by reference (loaded on the first pickle)."""
    return cast(FileRefs, port("file_refs"))


def backing() -> Backing:
    """The hook the write gates of a saved tree's nodes call."""
    return cast(Backing, port("backing"))


def weights() -> Weights:
    """Module weights."""
    return cast(Weights, port("weights"))


def distributed() -> Distributed:
    """Containers over ``torch.distributed``."""
    return cast(Distributed, port("distributed"))


def formats(name: str) -> Any:
    """The converter module of the format ``name`` (``"arrow"``, ``"safetensors"``...):
    it offers ``from_<name>``/``to_<name>`` functions."""
    return port(f"format.{name}")


def reserve(leaf: Tensor, key: tuple[str, ...]) -> None:
    """Reserve a file-backed leaf's bytes before an in-place copy into it (so that a full
    disk under a sparse file is an ``OSError``, never a SIGBUS)."""
    port("reserve")(leaf, key)


def live() -> Any:
    """The live key-value store container class (``TensorDictStore``)."""
    return port("live")


def plain() -> Any:
    """The plain ``TensorDict`` class: new nested levels are always plain TensorDicts."""
    try:
        return _BOUND["plain"]
    except KeyError:
        return port("plain")


def legacy_view() -> Callable[[Any, str, tuple[Any, ...]], Any]:
    """``fn(td, op, args)``: tensordict's lazy-legacy shape view of ``td``, or None."""
    return cast(Callable[[Any, str, tuple[Any, ...]], Any], port("legacy_view"))


def subview() -> Any:
    """The class of ``_get_sub_tensordict``'s row views."""
    return port("subview")


def lazystack() -> Any:
    """``LazyStackedTensorDict`` (for ``to_lazystack``)."""
    return port("lazystack")
