"""Training checkpoints as trees: weights, optimizer, loader and random states in one
memory-mapped directory, written from rank 0 while the other ranks wait.

A checkpoint is a ``TensorDict`` saved with ``memmap`` (a file per tensor, a JSON
description, no pickle), holding:

- ``"model"``: the module's parameters and buffers, nested by submodule
  (``TensorDict.from_module``);
- ``"optimizer"``, ``"scheduler"``, ``"loader"``, ``"extra"``: Python state dicts mapped
  to trees by
  :func:`state_to_tree` (below);
- ``"rng"``: the random states of every rank (torch, CUDA when present, numpy, Python),
  stacked along a first dim of size world size, so that each rank resumes its own
  streams (dropout, augmentations drawn from global generators).

The mapping of a state dict to a tree (:func:`state_to_tree`), exact both ways:

- every tensor becomes a leaf at the path of its keys, each key written with ``str``
  (``optimizer.state_dict()["state"][0]["exp_avg"]`` is ``tree["state", "0",
  "exp_avg"]``); list and tuple items are keyed by their position (``"0"``, ``"1"``...);
- everything else, and the structure itself, goes into one JSON string at the key
  ``"_layout"``: dicts (their keys with their types: ``0`` stays an ``int``), lists,
  tuples, ``None``, ``bool``, ``int``, ``str`` and ``float`` (written with ``repr``:
  ``inf``, ``nan`` and ``-0.0`` come back as they were);
- :func:`state_from_tree` rebuilds the dict with fresh tensors (never views of the
  checkpoint's files, which an optimizer would otherwise write into).

>>> import torch
>>> from torch import nn
>>> model = nn.Linear(2, 2)
>>> opt = torch.optim.Adam(model.parameters(), lr=1e-3)
>>> model(torch.ones(1, 2)).sum().backward(); opt.step()
>>> tree = state_to_tree(opt.state_dict())
>>> tree["state", "0", "exp_avg"].shape, tree["state", "0", "step"].item()
(torch.Size([2, 2]), 1.0)
>>> back = state_from_tree(tree)
>>> back["param_groups"][0]["betas"], list(back["state"])
((0.9, 0.999), [0, 1])
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from tensorbox import TensorDict, stack
from tensorbox.errors import FormatError

__all__ = [
    "LAYOUT_KEY",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "state_from_tree",
    "state_to_tree",
]

#: The key of a state tree's JSON description.
LAYOUT_KEY = "_layout"
_VERSION = 1


# ------------------------------------------------------------------ state dicts <-> trees


def _encode(value: Any, path: tuple[str, ...], tensors: dict[tuple[str, ...], Tensor]) -> Any:
    if isinstance(value, Tensor):
        tensors[path] = value.detach()
        return {"tensor": 1}
    if isinstance(value, Mapping) and not getattr(type(value), "_is_tensor_collection", False):
        items: list[Any] = []
        seen: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(k, bool) or not isinstance(k, int | str):
                raise TypeError(
                    f"state key {k!r} at {'/'.join(path) or 'the root'} is a "
                    f"{type(k).__name__}; a state tree keeps int and str keys only"
                )
            name = str(k)
            if name in seen:
                raise ValueError(
                    f"keys {seen[name]!r} and {k!r} at {'/'.join(path) or 'the root'} would both "
                    f"be written as {name!r}: rename one"
                )
            if not path and name == LAYOUT_KEY:
                raise ValueError(f"the state has a key {LAYOUT_KEY!r}, which the tree reserves")
            seen[name] = k
            kind = "int" if isinstance(k, int) else "str"
            items.append([kind, k, _encode(v, (*path, name), tensors)])
        return {"dict": items}
    if isinstance(value, list | tuple):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_encode(v, (*path, str(i)), tensors) for i, v in enumerate(value)]}
    if isinstance(value, float):
        return {"float": repr(value)}
    if value is None or isinstance(value, bool | int | str):
        return {"value": value}
    raise TypeError(
        f"state value {value!r} at {'/'.join(path) or 'the root'} is a {type(value).__name__}; "
        "a state tree holds tensors, dicts, lists, tuples, None, bool, int, float and str"
    )


def state_to_tree(state: Mapping[str, Any]) -> TensorDict:
    """``state`` (``optimizer.state_dict()``, a scheduler's, a loader's...) as a tree;
    see the module docstring for the mapping. Tensors are not copied."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state_to_tree expects a dict, got {type(state).__name__}")
    tensors: dict[tuple[str, ...], Tensor] = {}
    layout = {"version": _VERSION, "root": _encode(state, (), tensors)}
    nested: dict[str, Any] = {}
    for path, t in tensors.items():
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = t
    nested[LAYOUT_KEY] = json.dumps(layout, allow_nan=False)
    return TensorDict(nested, batch_size=[])


def _decode(node: Any, path: tuple[str, ...], tree: Any) -> Any:
    if "tensor" in node:
        t = tree.get(path if len(path) > 1 else path[0], None) if path else None
        if not isinstance(t, Tensor):
            raise ValueError(f"it names a tensor at {'/'.join(path)!r}, where the tree has none")
        out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
        return out.copy_(t)  # a plain tensor of its own: never a view of the files
    if "dict" in node:
        return {
            (int(k) if kind == "int" else k): _decode(v, (*path, str(k)), tree)
            for kind, k, v in node["dict"]
        }
    for kind, cls in (("list", list), ("tuple", tuple)):
        if kind in node:
            return cls(_decode(v, (*path, str(i)), tree) for i, v in enumerate(node[kind]))
    if "float" in node:
        return float(node["float"])
    return node["value"]


def state_from_tree(tree: Any) -> dict[str, Any]:
    """The state dict that ``state_to_tree`` mapped to ``tree``, exactly (fresh tensors)."""
    try:
        raw = tree._get_value(LAYOUT_KEY)
    except KeyError:
        raw = None
    if not isinstance(raw, str):
        raise ValueError(
            f"the tree has no {LAYOUT_KEY!r} string: it was not written by state_to_tree "
            f"(keys: {sorted(tree.keys())!r})"
        )
    try:
        layout = json.loads(raw)
        version = layout.get("version") if isinstance(layout, dict) else None
    except (ValueError, RecursionError) as err:
        raise FormatError(f"the tree's {LAYOUT_KEY!r} is not JSON ({err})") from None
    if version != _VERSION:
        raise FormatError(
            f"state tree layout version {version!r} is not {_VERSION}: "
            "written by another tensorbox version"
        )
    try:
        out = _decode(layout["root"], (), tree)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as err:
        # A damaged or edited layout: a clear refusal rather than the decoder's own error.
        raise FormatError(
            f"the tree's {LAYOUT_KEY!r} does not describe a state written by state_to_tree "
            f"({type(err).__name__}: {err})"
        ) from None
    if not isinstance(out, dict):
        raise FormatError(f"the tree's {LAYOUT_KEY!r} describes a {type(out).__name__}, not a dict")
    return out


# ------------------------------------------------------------------ random states


def rng_state() -> TensorDict:
    """This process's random states as tensors: torch's CPU generator, every CUDA
    device's (when CUDA is initialised), numpy's and Python's global generators."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    if name != "MT19937":  # pragma: no cover - numpy's legacy global generator is MT19937
        raise ValueError(f"numpy's global generator is {name!r}, expected 'MT19937'")
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": torch.tensor(int(pos)),
            "gauss": torch.tensor([float(has_gauss), float(gauss)], dtype=torch.float64),
        },
        "python": {
            "internal": torch.tensor(internal, dtype=torch.int64),
            "version": torch.tensor(int(version)),
            "gauss": torch.tensor([gauss_next is not None, gauss_next or 0.0], dtype=torch.float64),
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.stack(torch.cuda.get_rng_state_all())
    return TensorDict(state, batch_size=[])


def set_rng_state(state: Any) -> None:
    """Restore what :func:`rng_state` recorded."""
    torch.set_rng_state(state["torch"].to(torch.uint8).clone())
    keys = state["numpy", "keys"].numpy().astype(np.uint32)
    has_gauss, gauss = state["numpy", "gauss"].tolist()
    np.random.set_state(("MT19937", keys, int(state["numpy", "pos"]), int(has_gauss), gauss))
    flag, gauss_next = state["python", "gauss"].tolist()
    internal = tuple(int(x) for x in state["python", "internal"].tolist())
    random.setstate((int(state["python", "version"]), internal, gauss_next if flag else None))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"].to(torch.uint8).unbind(0)))


# ------------------------------------------------------------------ checkpoints


def _group() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module | None = None,
    optimizer: Any = None,
    scheduler: Any = None,
    loader: Any = None,
    extra: Mapping[str, Any] | None = None,
    fsync: bool = True,
) -> Path:
    """Write a checkpoint tree to ``path`` from rank 0; call it on every rank.

    Under ``torch.distributed`` every rank's random states are gathered (one collective
    of small tensors, no pickle), rank 0 writes the tree (a whole-tree commit: a
    crash leaves the previous checkpoint at ``path`` intact) and all ranks meet at a
    barrier, so that nobody moves on before the checkpoint exists. Without a process
    group it simply writes. ``model`` is the module itself (``ddp.module`` for a
    ``DistributedDataParallel``); ``optimizer``, ``scheduler`` (a learning-rate
    scheduler) and ``loader`` are anything with a ``state_dict()``; ``extra`` a state
    dict of your own (the step, the loss...).
    """
    rank, world = _group()
    rng = rng_state()
    if world > 1:
        import tensorbox.distributed as tbd

        rngs = tbd.all_gather(rng)
    else:
        rngs = stack([rng])
    if rank == 0:
        parts: dict[str, Any] = {"rng": rngs}
        if model is not None:
            parts["model"] = TensorDict.from_module(model).detach()
        for key, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("loader", loader)):
            if obj is not None:
                parts[key] = state_to_tree(obj.state_dict())
        if extra is not None:
            parts["extra"] = state_to_tree(extra)
        TensorDict(parts, batch_size=[]).memmap(path, fsync=fsync)
    if world > 1:
        dist.barrier()
    return Path(path)


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module | None = None,
    optimizer: Any = None,
    scheduler: Any = None,
    loader: Any = None,
    rng: bool = True,
) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote into the objects given; return ``extra``.

    Every rank opens the tree at ``path`` (a shared file system, or a copy per machine)
    and reads what it needs: the weights are copied into ``model`` in place, the
    optimizer's and loader's states are loaded, and with ``rng`` this rank's random
    states are restored (the checkpoint must then come from the same world size).
    """
    tree = TensorDict.load_memmap(path, mode="r")
    keys = set(tree.keys())
    if model is not None:
        if "model" not in keys:
            raise KeyError(
                f"checkpoint {os.fspath(path)!r} has no 'model' (keys: {sorted(keys)!r})"
            )
        TensorDict.from_module(model).load_state_dict(tree["model"])
    for key, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("loader", loader)):
        if obj is not None:
            if key not in keys:
                raise KeyError(
                    f"checkpoint {os.fspath(path)!r} has no {key!r} (keys: {sorted(keys)!r})"
                )
            obj.load_state_dict(_state_at(tree, path, key))
    if rng:
        rank, world = _group()
        saved = int(tree["rng"].batch_size[0])
        if saved != world:
            raise ValueError(
                f"checkpoint {os.fspath(path)!r} holds the random states of {saved} rank(s), "
                f"but this run has {world}: pass rng=False to resume with fresh random "
                "streams (the batches stay those of the loader's state)"
            )
        set_rng_state(tree["rng"][rank])
    return _state_at(tree, path, "extra") if "extra" in keys else {}


def _state_at(tree: Any, path: str | os.PathLike[str], key: str) -> dict[str, Any]:
    """The state dict under ``key``; a damaged one is a FormatError naming the checkpoint."""
    try:
        return state_from_tree(tree[key])
    except FormatError as err:
        raise FormatError(f"checkpoint {os.fspath(path)!r}, {key!r}: {err}") from None
