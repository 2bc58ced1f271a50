"""Any torch pytree (nested tuples, lists, dicts, namedtuples of tensors) as a TensorDict,
and back: ``TensorDict.from_pytree`` / ``td.to_pytree()``.

Each leaf is stored under the keys of its path in the tree: a sequence index becomes
``"0"``, ``"1"``..., a ``str`` dict key or a namedtuple field stays itself, any other dict
key becomes its ``repr``. Numbers become tensors, as on any set. The tree's structure
(torch's ``TreeSpec``, which keeps the original keys, whatever their type) is kept as the
non-tensor entry ``"_pytree_spec"`` of the root, so ``to_pytree`` rebuilds the same
containers; a container without it gives its own nesting as dicts. The spec is a Python
object: such a container is not saved with ``memmap`` (the error names the key).

>>> import torch
>>> from tensorbox import TensorDict
>>> tree = ([torch.zeros(2), torch.ones(2)], {"x": torch.arange(2), 7: torch.ones(1)})
>>> td = TensorDict.from_pytree(tree)
>>> td["0", "1"].tolist(), td["1", "x"].tolist(), td["1", "7"].tolist()
([1.0, 1.0], [0, 1], [1.0])
>>> back = td.to_pytree()
>>> type(back).__name__, sorted(map(str, back[1])), back[1][7].tolist()
('tuple', ['7', 'x'], [1.0])
"""

from __future__ import annotations

from typing import Any

import torch.utils._pytree as _pt

__all__ = ["SPEC_KEY", "from_pytree", "to_pytree"]

#: The root entry that keeps the tree's structure.
SPEC_KEY = "_pytree_spec"


def _part(entry: Any) -> str:
    if isinstance(entry, _pt.SequenceKey):
        return str(entry.idx)
    if isinstance(entry, _pt.MappingKey):
        return entry.key if isinstance(entry.key, str) else repr(entry.key)
    if isinstance(entry, _pt.GetAttrKey):
        return str(entry.name)
    return str(entry)


def _paths(tree: Any) -> tuple[list[tuple[tuple[str, ...], Any]], Any]:
    pairs, spec = _pt.tree_flatten_with_path(tree)
    return [(tuple(_part(e) for e in path), leaf) for path, leaf in pairs], spec


def from_pytree(tree: Any, *, cls: Any, batch_size: Any = None, **kwargs: Any) -> Any:
    """A container of ``tree``'s leaves, keyed by their paths, remembering the structure."""
    pairs, spec = _paths(tree)
    out = cls(batch_size=batch_size, **kwargs)
    for path, leaf in pairs:
        if not path:  # the tree is one leaf
            path = ("0",)
        out.set(path, leaf)
    out.set_non_tensor(SPEC_KEY, spec)
    return out


def to_pytree(td: Any) -> Any:
    """The pytree ``td`` was built from (its containers and keys), or nested dicts."""
    spec = td.get_non_tensor(SPEC_KEY) if SPEC_KEY in td else None
    if spec is None:
        return td.exclude(SPEC_KEY).to_dict()
    skeleton = _pt.tree_unflatten([None] * spec.num_leaves, spec)
    paths, _ = _paths(skeleton)
    leaves = [td.get(path or ("0",)) for path, _ in paths]
    return _pt.tree_unflatten(leaves, spec)
