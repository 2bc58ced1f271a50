"""Model weights as TensorDicts: ``from_module``, ``to_module``, ``state_dict``.

A module's parameters and buffers become a TensorDict nested like the module
tree (``td["encoder", "layers", "0", "linear1", "weight"]``), whose leaves *are*
the module's own ``nn.Parameter`` and buffer objects (no copy). Saved with
``memmap``, that tree is a directory per submodule and a file per tensor, so
loading a whole model or one sub-tree is opening files, not unpickling.

>>> import torch
>>> from torch import nn
>>> from tensorbox import TensorDict
>>> model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
>>> params = TensorDict.from_module(model)
>>> params["0", "weight"] is model[0].weight
True
>>> sorted(params["1"].keys())
['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']

``to_module`` swaps tensors into a module (zero copy; plain tensors are wrapped
as ``nn.Parameter`` with the original ``requires_grad``) and returns what it took
out, so the swap can be undone; it is also a context manager:

>>> zeros = params.apply(lambda t: torch.zeros_like(t))
>>> with zeros.to_module(model):
...     bool((model[0].weight == 0).all()), isinstance(model[0].weight, nn.Parameter)
(True, True)
>>> model[0].weight is params["0", "weight"]
True

``state_dict``/``load_state_dict`` speak ``nn.Module``'s dotted keys:

>>> list(params.state_dict())[:2]
['0.weight', '0.bias']
>>> _ = params.load_state_dict(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).state_dict())

Decisions (see docs/weights.md):

* Non-persistent buffers (``register_buffer(..., persistent=False)``) are left
  out, as ``nn.Module.state_dict`` leaves them out, so a from_module tree and a
  module's state dict always have the same keys. ``to_module`` never requires
  them but accepts them (``from_module(m, non_persistent=True)`` includes them).
* ``None`` parameters and buffers (``bias=False``) and submodules without any
  tensor (``nn.ReLU``) get no entry.
* Tied parameters appear under every owner's key as the same tensor object.
  ``to_module`` keeps them tied: every owner gets the value found under the
  first owner's key (module order, as in ``state_dict``).
* ``as_module=True`` returns a ``ParamTree``: an ``nn.Module`` skeleton holding
  the same parameter objects (for optimizers, ``.to()``, registration in another
  module), with ``.td`` giving the TensorDict view.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor, nn

from tensorbox._core.chunks import CHUNK_BYTES, copy_chunked
from tensorbox._core.tensordict import TensorDict
from tensorbox._core.tree import is_coll
from tensorbox.errors import WeightsMismatchError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = [
    "CHUNK_BYTES",
    "IncompatibleKeys",
    "ParamTree",
    "SwappedWeights",
    "WeightsMismatchError",
    "copy_chunked",
    "from_module",
    "load_state_dict",
    "state_dict",
    "to_module",
]

_Path = tuple[str, ...]
_SCALAR = torch.Size([])
_PASSIVE = torch._C._disabled_torch_function_impl


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(strict=False)`` skipped, as ``nn.Module`` returns it.

    >>> import torch; from tensorbox import TensorDict; from tensorbox.weights import load_state_dict
    >>> td = TensorDict({"weight": torch.zeros(2), "bias": torch.zeros(1)})
    >>> load_state_dict(td, {"weight": torch.ones(2), "extra": torch.ones(1)}, strict=False)
    IncompatibleKeys(missing_keys=['bias'], unexpected_keys=['extra'])
    """

    missing_keys: list[str]
    unexpected_keys: list[str]


# ------------------------------------------------------------ module walking


class _Slot(NamedTuple):
    """One place a module keeps a tensor: ``owner._parameters[name]`` or ``_buffers``."""

    owner: nn.Module
    name: str
    is_param: bool
    tensor: Tensor
    optional: bool  # a non-persistent buffer: never "missing"


def _slots(module: nn.Module, prefix: _Path, out: dict[_Path, _Slot]) -> dict[_Path, _Slot]:
    """Every tensor slot of the tree, in ``state_dict`` order (params, buffers, children)."""
    for name, p in module._parameters.items():
        if p is not None:
            out[(*prefix, name)] = _Slot(module, name, True, p, False)
    skip = module._non_persistent_buffers_set
    for name, b in module._buffers.items():
        if b is not None:
            out[(*prefix, name)] = _Slot(module, name, False, b, name in skip)
    for name, child in module._modules.items():
        if child is not None:
            _slots(child, (*prefix, name), out)
    return out


def _tree(module: nn.Module, non_persistent: bool, keep_empty: bool = False) -> TensorDict | None:
    """The nested TensorDict of one module, or None when its subtree holds no tensor
    (an empty TensorDict with ``keep_empty``)."""
    entries: dict[str, Any] = {k: p for k, p in module._parameters.items() if p is not None}
    skip = () if non_persistent else module._non_persistent_buffers_set
    for k, b in module._buffers.items():
        if b is not None and k not in skip:
            entries[k] = b
    for k, child in module._modules.items():
        sub = None if child is None else _tree(child, non_persistent, keep_empty)
        if sub is not None:
            entries[k] = sub
    return TensorDict._new_unsafe(entries, _SCALAR, None) if entries or keep_empty else None


def from_module(
    module: nn.Module,
    as_module: bool = False,
    *,
    non_persistent: bool = False,
    filter_empty: bool = True,
) -> TensorDict | ParamTree:
    """Parameters and persistent buffers of ``module``, nested by submodule.

    The leaves are the module's own tensor objects (``td["0", "weight"] is
    module[0].weight``), so writes in place go both ways. ``non_persistent=True``
    also takes buffers registered with ``persistent=False``. ``as_module=True``
    returns a ``ParamTree`` (an ``nn.Module`` holding the same objects).
    ``filter_empty=False`` keeps an empty entry for submodules without tensors.

    >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    >>> td = from_module(model)
    >>> td["0", "weight"] is model[0].weight, list(from_module(model, filter_empty=False).keys())
    (True, ['0', '1'])
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"from_module expects an nn.Module, got {type(module).__name__}")
    if as_module:
        return ParamTree(module, non_persistent=non_persistent)
    td = _tree(module, non_persistent, keep_empty=not filter_empty)
    return TensorDict._new_unsafe({}, _SCALAR, None) if td is None else td


# ------------------------------------------------------------------ checking


def _dotted(path: _Path) -> str:
    return ".".join(path)


def _shape(t: Any) -> str:
    if not isinstance(t, Tensor):
        return f"a {type(t).__name__}, not a tensor"
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def _listing(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f", ... and {len(keys) - limit} more" if len(keys) > limit else "")


def _report(
    what: str,
    missing: list[str],
    unexpected: list[str],
    mismatched: list[tuple[str, Tensor, Tensor]],
    fix: str,
) -> WeightsMismatchError:
    """One error listing every disagreement, so a user fixes them all in one go."""
    lines = [
        f"{what}: {len(missing)} missing, {len(unexpected)} unexpected, "
        f"{len(mismatched)} with a different shape"
    ]
    if missing:
        lines.append(f"  missing (in the target, not in the source): {_listing(missing)}")
    if unexpected:
        lines.append(f"  unexpected (in the source, not in the target): {_listing(unexpected)}")
    for k, src, dst in mismatched[:8]:
        lines.append(f"  shape mismatch at {k!r}: source {_shape(src)}, target {_shape(dst)}")
    if len(mismatched) > 8:
        lines.append(f"  ... and {len(mismatched) - 8} more shape mismatches")
    lines.append(f"  fix: {fix}")
    return WeightsMismatchError("\n".join(lines))


def _leaves(td: Any) -> dict[_Path, Tensor]:
    if isinstance(td, ParamTree):
        td = td.td
    if not is_coll(td):  # a TensorDict or a tensorclass: its fields, as TensorDict.state_dict
        raise TypeError(
            f"expected a TensorDict (or tensorclass) of weights, got {type(td).__name__}"
        )
    return _collect(td, (), {})


def _collect(td: TensorCollection, prefix: _Path, out: dict[_Path, Tensor]) -> dict[_Path, Tensor]:
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            out[(*prefix, k)] = v
        elif is_coll(v):
            _collect(v, (*prefix, k), out)
    return out


# ------------------------------------------------------------------ to_module


class SwappedWeights(TensorDict):
    """What ``to_module`` took out of a module: a TensorDict that can put it back.

    ``old.to_module(module)`` restores by hand; as a context manager the restore
    happens on exit (also on an exception). Results of operations on it are plain
    TensorDicts.

    >>> import torch; from tensorbox import TensorDict
    >>> net = torch.nn.Linear(2, 1)
    >>> zeros = TensorDict.from_module(net).apply(torch.zeros_like)
    >>> with zeros.to_module(net) as old:     # old: a SwappedWeights
    ...     net(torch.ones(2)).item()
    0.0
    >>> net.weight is old["weight"]           # restored on exit
    True
    """

    __slots__ = ("_inplace", "_module")
    _inplace: bool
    _module: nn.Module

    @classmethod
    def _new_unsafe(
        cls, source: dict[str, Any], batch_size: torch.Size, device: torch.device | None
    ) -> Any:
        return TensorDict._new_unsafe(source, batch_size, device)

    def __enter__(self) -> SwappedWeights:
        return self

    def __exit__(self, *exc: object) -> None:
        to_module(self, self._module, inplace=self._inplace, return_swap=False, strict=False)


def _mirror(td: TensorCollection, prefix: _Path, values: dict[_Path, Tensor]) -> dict[str, Any]:
    """``td``'s structure with the leaves found in ``values`` (others, and empty nodes, left out)."""
    out: dict[str, Any] = {}
    for k, v in td._tensordict.items():
        path = (*prefix, k)
        if isinstance(v, Tensor):
            if path in values:
                out[k] = values[path]
        elif is_coll(v):
            sub = _mirror(v, path, values)
            if sub:
                out[k] = TensorDict._new_unsafe(sub, _SCALAR, None)
    return out


def _as_slot_value(slot: _Slot, value: Tensor) -> Tensor:
    """What goes into the slot for ``value``, sharing its storage.

    A parameter stays a parameter (with its ``requires_grad``); a tensor that already
    requires grad goes in as it is, so gradients still reach where it came from. A
    passive subclass (``MemoryMappedTensor``: torch function disabled, every op returns
    a plain tensor) goes in as a plain tensor over the same storage: ``nn.Parameter()``
    refuses such subclasses, and a model should not carry one.
    """
    cls = type(value)
    if cls is nn.Parameter or torch._C._functorch.is_functorch_wrapped_tensor(value):
        # under vmap/grad transforms a tensor reports requires_grad=False; wrapping it
        # in a Parameter would cut it from the graph the transform tracks
        return value
    passive = cls is Tensor or cls.__torch_function__ is _PASSIVE
    if not passive or value.requires_grad:
        return value  # a Parameter-like subclass, or a tensor in an autograd graph
    if slot.is_param:  # what nn.Parameter() does for a plain tensor, minus its checks
        return Tensor._make_subclass(nn.Parameter, value, slot.tensor.requires_grad)
    return value if cls is Tensor else value.as_subclass(Tensor)


def to_module(
    td: TensorDict | ParamTree,
    module: nn.Module,
    *,
    inplace: bool = False,
    return_swap: bool = True,
    strict: bool = True,
    chunk_bytes: int | None = None,
    preserve_module_state: bool = True,
) -> SwappedWeights | None:
    """Put the weights of ``td`` into ``module``; return what the module held before.

    ``inplace=False`` (default) swaps the tensors in: zero copy, the module now
    uses ``td``'s storage (a memory-mapped file, another device...) and adopts its
    dtype and device, like ``load_state_dict(assign=True)``. ``inplace=True``
    copies into the existing tensors (in bounded chunks), which keep their
    identity, device and dtype; the returned swap is then a copy of the old values.

    Everything is checked before anything changes: missing keys, unexpected keys
    and shape mismatches raise one ``WeightsMismatchError`` listing all of them.
    ``strict=False`` lets missing and unexpected keys pass (shape mismatches
    never do). ``preserve_module_state=False`` puts each tensor in as it is, where the
    default turns a plain tensor going into a parameter's place into an ``nn.Parameter``
    over the same storage.

    >>> import torch; from tensorbox.weights import from_module, to_module
    >>> net = torch.nn.Linear(2, 1)
    >>> ones = from_module(net).apply(torch.ones_like)
    >>> old = to_module(ones, net)            # zero copy: net now holds ones' tensors
    >>> net(torch.ones(2)).item()
    3.0
    >>> _ = to_module(old, net)               # and back
    """
    leaves = _leaves(td)
    slots = _slots(module, (), {})
    missing = [_dotted(p) for p, s in slots.items() if p not in leaves and not s.optional]
    unexpected = [_dotted(p) for p in leaves if p not in slots]
    mismatched = [
        (_dotted(p), t, slots[p].tensor)
        for p, t in leaves.items()
        if p in slots and t.shape != slots[p].tensor.shape
    ]
    if mismatched or (strict and (missing or unexpected)):
        raise _report(
            f"to_module: the weights do not fit {type(module).__name__}",
            missing if strict else [],
            unexpected if strict else [],
            mismatched,
            "build the weights with TensorDict.from_module(<a module of the same "
            "architecture>), or select the sub-tree of a submodule and pass that submodule "
            "(td['encoder'].to_module(model.encoder)); tensorbox.weights.to_module(..., "
            "strict=False) skips missing and unexpected keys",
        )
    # Group the slots by the tensor they hold now: tied parameters (and submodules
    # reached by two paths) form one group and get one new tensor, so they stay tied.
    groups: dict[int, list[_Path]] = {}
    for p, s in slots.items():
        if p in leaves:
            groups.setdefault(id(s.tensor), []).append(p)
    old: dict[_Path, Tensor] = {}
    if inplace:  # memory-mapped destinations: a full disk raises before the first copy
        _reserve_all((slots[ps[0]].tensor, (_dotted(ps[0]),)) for ps in groups.values())
    with torch.no_grad():
        for paths in groups.values():
            first = slots[paths[0]]
            value = leaves[paths[0]]
            if inplace:
                if return_swap:
                    saved = first.tensor.detach().clone()
                    old.update((p, saved) for p in paths)
                if value is not first.tensor:
                    copy_chunked(first.tensor, value, chunk_bytes)
                continue
            new = _as_slot_value(first, value) if preserve_module_state else value
            for p in paths:
                s = slots[p]
                old[p] = s.tensor
                slot: dict[str, Any] = s.owner._parameters if s.is_param else s.owner._buffers
                slot[s.name] = new
    if not return_swap:
        return None
    swap = object.__new__(SwappedWeights)
    swap._tensordict, swap._batch_size, swap._device, swap._locked = (
        _mirror(td.td if isinstance(td, ParamTree) else td, (), old),
        _SCALAR,
        None,
        False,
    )
    swap._module, swap._inplace = module, inplace
    return swap


# ------------------------------------------------------------ chunked copies


# ----------------------------------------------------------------- state dicts


def state_dict(
    td: TensorDict | ParamTree,
    *,
    keep_vars: bool = False,
    flatten: bool = True,
    destination: dict[str, Any] | None = None,
    prefix: str = "",
) -> dict[str, Any]:
    """A flat ``{"dotted.key": tensor}`` dict, as ``nn.Module.state_dict()`` gives it.

    Tensors are detached unless ``keep_vars=True`` (then parameters stay parameters).
    As in tensordict, the result is an ``OrderedDict`` whose ``_metadata`` attribute
    maps each node's dotted prefix (``""`` the root) to its ``batch_size`` and
    ``device``; ``flatten=False`` nests a dict per node instead of dotted keys;
    ``destination`` is filled in place, ``prefix`` is put before every key.

    >>> import torch; from tensorbox import TensorDict; from tensorbox.weights import state_dict
    >>> td = TensorDict({"enc": {"w": torch.zeros(2)}, "b": torch.zeros(1)})
    >>> dict(state_dict(td))
    {'enc.w': tensor([0., 0.]), 'b': tensor([0.])}
    >>> state_dict(td)._metadata["enc"]
    {'batch_size': torch.Size([]), 'device': None}
    >>> state_dict(td, flatten=False)["enc"]["w"]
    tensor([0., 0.])
    """
    out: Any = OrderedDict() if destination is None else destination
    meta: OrderedDict[str, dict[str, Any]] = OrderedDict()
    root = td.td if isinstance(td, ParamTree) else td
    _leaves(root)  # the type check, with its message

    def walk(node: Any, path: _Path, into: Any) -> None:
        meta[_dotted(path)] = {"batch_size": node.batch_size, "device": node.device}
        if _is_tc(node):  # tensordict's record of a tensorclass: its name and plain fields
            meta[_dotted(path)].update(
                _type=type(node).__qualname__, _non_tensor=_plain_fields(node)
            )
        for k, v in node._tensordict.items():
            if isinstance(v, Tensor):
                v = v if keep_vars else v.detach()
                if flatten:
                    into[prefix + _dotted((*path, k))] = v
                else:
                    into[k if path else prefix + k] = v
            elif is_coll(v):
                if flatten:
                    walk(v, (*path, k), into)
                else:
                    sub: Any = OrderedDict()
                    walk(v, (*path, k), sub)
                    into[k if path else prefix + k] = sub

    walk(root, (), out)
    with contextlib.suppress(AttributeError):  # a plain dict destination takes no attribute
        out._metadata = meta
    return out  # type: ignore[no-any-return]


def _is_tc(node: Any) -> bool:
    return hasattr(type(node), "__dataclass_fields__")


def _plain_fields(node: Any) -> dict[str, Any]:
    """A tensorclass's non-tensor fields (``None`` for a field without an entry)."""
    out: dict[str, Any] = {}
    for name in (f.name for f in type(node).__tc_fields__):
        v = node._tensordict.get(name)
        if v is None:
            out[name] = None
        elif not isinstance(v, Tensor) and not is_coll(v):
            out[name] = getattr(node, name)
    return out


def _node_at(td: Any, prefix: str) -> Any:
    node = td
    for k in prefix.split(".") if prefix else ():
        node = node._tensordict.get(k) if is_coll(node) else None
    return node if is_coll(node) else None


def _plain_updates(td: Any, meta: Any) -> list[tuple[Any, str, Any]]:
    """``(node, field, value)`` for the ``_non_tensor`` records of a state dict's
    ``_metadata`` that land on a tensorclass of ``td``; a name that is no field of it
    is an error (a ``KeyError``), as in tensordict."""
    out: list[tuple[Any, str, Any]] = []
    if not isinstance(meta, Mapping):
        return out
    for prefix, rec in meta.items():
        plain = rec.get("_non_tensor") if isinstance(rec, Mapping) else None
        if not isinstance(plain, Mapping):
            continue
        node = _node_at(td, prefix)
        if node is None or not _is_tc(node):
            continue
        for name, value in plain.items():
            if name not in type(node).__tc_names__:
                raise WeightsMismatchError(
                    f"load_state_dict: _metadata[{prefix!r}]['_non_tensor'] names {name!r}, "
                    f"which is no field of {type(node).__name__}; key {name!r} was not expected"
                )
            if value is not None or name in node._tensordict:
                out.append((node, name, value))
    return out


def _legacy_tensorclass(state_dict: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """tensordict's old tensorclass form ``{"_tensordict": {...}, "_non_tensordict": {...}}``
    as (tensor entries, plain fields)."""
    plain = state_dict.get("_non_tensordict") or {}
    return _flat_input(state_dict["_tensordict"]), dict(plain)


def _flat_input(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A state dict in any of tensordict's forms, as flat dotted keys: nested dicts are
    joined with ``.``; the legacy ``__batch_size``/``__device`` entries are dropped."""
    out: dict[str, Any] = {}

    def walk(d: Mapping[str, Any], pre: str) -> None:
        for k, v in d.items():
            if k in ("__batch_size", "__device"):
                continue
            if isinstance(v, Mapping) and not is_coll(v):
                walk(v, f"{pre}{k}.")
            else:
                out[pre + k] = v

    walk(state_dict, "")
    return out


def load_state_dict(
    td: TensorDict | ParamTree,
    state_dict: Mapping[str, Tensor] | TensorDict,
    strict: bool = True,
    *,
    chunk_bytes: int | None = None,
) -> IncompatibleKeys:
    """Copy a dotted-key state dict into the matching leaves of ``td``, in place.

    As ``nn.Module.load_state_dict``: ``strict`` makes missing and unexpected keys
    an error, shape mismatches always are, and nothing is written unless
    everything fits. Copies go in chunks of ``chunk_bytes``, so loading a large
    checkpoint into a memory-mapped tree never holds a whole tensor in memory.

    >>> import torch; from tensorbox.weights import from_module, load_state_dict
    >>> net = torch.nn.Linear(2, 1)
    >>> weights = from_module(net)            # the module's own tensors
    >>> load_state_dict(weights, {"weight": torch.ones(1, 2), "bias": torch.zeros(1)})
    IncompatibleKeys(missing_keys=[], unexpected_keys=[])
    >>> net.weight.tolist()                   # copied in place, so the module sees it
    [[1.0, 1.0]]
    """
    meta = getattr(state_dict, "_metadata", None)
    plain: list[tuple[Any, str, Any]] = []
    if (
        _is_tc(td)
        and isinstance(state_dict, Mapping)
        and set(state_dict) == {"_tensordict", "_non_tensordict"}
    ):
        state_dict, fields = _legacy_tensorclass(state_dict)
        meta = {"": {"_non_tensor": fields}}
    if isinstance(state_dict, TensorDict | ParamTree):
        state_dict = _flat(state_dict, keep_vars=True)
    elif any(isinstance(v, Mapping) for v in state_dict.values()) or "__batch_size" in state_dict:
        state_dict = _flat_input(state_dict)  # nested (flatten=False) or legacy form
    leaves = {_dotted(p): t for p, t in _leaves(td).items()}
    if meta is not None and not isinstance(td, ParamTree):
        plain = _plain_updates(td, meta)
    missing = [k for k in leaves if k not in state_dict]
    unexpected = [k for k in state_dict if k not in leaves]
    mismatched = [
        (k, v, leaves[k])
        for k, v in state_dict.items()
        if k in leaves and (not isinstance(v, Tensor) or v.shape != leaves[k].shape)
    ]
    if mismatched or (strict and (missing or unexpected)):
        raise _report(
            "load_state_dict: the state dict does not fit the TensorDict",
            missing if strict else [],
            unexpected if strict else [],
            mismatched,
            "compare the keys with list(td.state_dict()); strict=False skips missing and "
            "unexpected keys",
        )
    todo = [(leaves[k], v, k) for k, v in state_dict.items() if k in leaves and v is not leaves[k]]
    _reserve_all((t, (k,)) for t, _, k in todo)  # a full disk raises before the first copy
    for t, v, _ in todo:
        copy_chunked(t, v, chunk_bytes)
    for node, name, value in plain:
        setattr(node, name, value)
    return IncompatibleKeys(missing, unexpected)


_flat = state_dict  # load_state_dict's argument shadows the function's name


def _reserve_all(pairs: Any) -> None:
    """Reserve the file bytes of each memory-mapped ``(tensor, key)`` destination: on a
    sparse file, a full disk is an ``OSError`` naming the key before anything is copied."""
    from tensorbox._storage.reserve import reserve_all as reserve

    reserve(pairs)


# ------------------------------------------------------------------ as_module


class ParamTree(nn.Module):
    """The parameters and buffers of a module in an ``nn.Module`` with nothing else.

    Same tree, same names, same objects as the source module: give
    ``tree.parameters()`` to an optimizer, move it with ``.to()``, register it in
    another module. ``tree.td`` is the TensorDict view (built fresh on each access,
    because ``Module.to`` replaces buffer objects); ``tree["encoder"]`` indexes it.

    >>> tree = ParamTree(nn.Linear(2, 3))
    >>> [n for n, _ in tree.named_parameters()]
    ['weight', 'bias']
    """

    def __init__(self, module: nn.Module, *, non_persistent: bool = False) -> None:
        super().__init__()
        self._copy_tree(module, non_persistent, {id(module): self})

    def _copy_tree(self, module: nn.Module, non_persistent: bool, memo: dict[int, Any]) -> None:
        self._parameters.update((k, p) for k, p in module._parameters.items() if p is not None)
        for k, b in module._buffers.items():
            persistent = k not in module._non_persistent_buffers_set
            if b is not None and (persistent or non_persistent):
                self.register_buffer(k, b, persistent=persistent)
        for k, child in module._modules.items():
            if child is None or _tree(child, non_persistent) is None:
                continue
            if id(child) not in memo:  # a shared submodule stays shared
                memo[id(child)] = sub = ParamTree.__new__(ParamTree)
                nn.Module.__init__(sub)
                sub._copy_tree(child, non_persistent, memo)
            self._modules[k] = memo[id(child)]

    @property
    def td(self) -> TensorDict:
        """The TensorDict view: leaves are this tree's parameter and buffer objects."""
        td = _tree(self, True)
        return TensorDict._new_unsafe({}, _SCALAR, None) if td is None else td

    def __getitem__(self, key: Any) -> Any:
        return self.td[key]

    def to_module(self, module: nn.Module, **kwargs: Any) -> SwappedWeights | None:
        """Put these weights into ``module`` (see ``tensorbox.weights.to_module``)."""
        return to_module(self.td, module, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Always raises ``TypeError``: a ``ParamTree`` holds weights, it computes nothing.

        It is an ``nn.Module`` only so that ``.parameters()``, ``.to()`` and optimizers
        see the weights; put them into a model with ``to_module`` and call the model.
        """
        raise TypeError(
            "a ParamTree holds weights only and cannot be called; put them into a model "
            "with tree.to_module(model) and call the model"
        )
