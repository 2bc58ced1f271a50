"""Registration with torch: pytree node (tree_map, torch.func, torch.compile) and collate.

A TensorDict flattens into its tensor and nested-container entries; keys, batch
size, device and non-tensor values travel in the context, which is plain data
(hashable tuples), so ``torch.compile`` can guard on it.

>>> import torch
>>> from torch.utils._pytree import tree_map
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.ones(2), batch_size=[2])
>>> tree_map(lambda t: t * 3, td)["a"].tolist()
[3.0, 3.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree
from torch.utils.data._utils import collate as _collate

from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.pickling import safe_globals
from tensorbox._core.tensordict import TensorDict

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["register_collection"]


def _flatten(td: Any) -> tuple[list[Any], Any]:
    keys, children, fixed = [], [], []
    for k, v in td._tensordict.items():
        if type(v) is NonTensorData:
            fixed.append((k, v))
        else:
            keys.append(k)
            children.append(v)
    return children, (tuple(keys), tuple(td._batch_size), td._device, tuple(fixed))


def _unflatten(children: Any, context: Any, cls: type[TensorCollection] = TensorDict) -> Any:
    keys, bs, device, fixed = context
    store = dict(zip(keys, children))
    store.update(fixed)
    return cls._new_unsafe(store, torch.Size(bs), device)


def _flatten_with_keys(td: Any) -> tuple[list[tuple[Any, Any]], Any]:
    children, ctx = _flatten(td)
    return [(pytree.MappingKey(k), c) for k, c in zip(ctx[0], children)], ctx


def _collate_batch(batch: Any, *, collate_fn_map: Any = None) -> Any:
    """DataLoader hands us either a batch already gathered by ``__getitems__`` or a
    list of single samples; the first passes through, the second is stacked."""
    if getattr(type(batch), "_is_tensor_collection", False):
        return batch
    return torch.stack(list(batch), 0)


def register_collection(cls: type, name: str) -> None:
    """Make ``cls`` a pytree node and teach the default collate to pass it through."""
    pytree.register_pytree_node(
        cls,
        _flatten,
        lambda c, ctx: _unflatten(c, ctx, cls),
        serialized_type_name=name,
        flatten_with_keys_fn=_flatten_with_keys,
    )
    _collate.default_collate_fn_map[cls] = _collate_batch
    safe_globals(cls)  # torch.load(weights_only=True) may rebuild it: it opens no file


register_collection(TensorDict, "tensorbox.TensorDict")
