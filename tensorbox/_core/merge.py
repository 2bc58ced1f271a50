"""``merge_tensordicts``: the entries of several containers in one, as tensordict's function.

>>> import torch
>>> from tensorbox import TensorDict, merge_tensordicts
>>> a = TensorDict({"x": torch.tensor(0), "n": {"p": torch.tensor(0)}})
>>> b = TensorDict({"x": torch.tensor(1), "n": {"q": torch.tensor(1)}})
>>> out = merge_tensordicts(a, b)
>>> sorted(out.keys(True, True), key=str), out["x"].item()
([('n', 'p'), ('n', 'q'), 'x'], 0)
>>> merge_tensordicts(a, b, callback_exist=lambda *v: torch.stack(v))["x"].tolist()
[0, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tensorbox._core.nestedkey import NestedKey, unravel_key
from tensorbox._core.tree import is_coll, keys_list, new_plain

__all__ = ["merge_tensordicts"]


def merge_tensordicts(
    *tensordicts: Any,
    callback_exist: Callable[..., Any] | Mapping[NestedKey, Callable[..., Any]] | None = None,
) -> Any:
    """A new TensorDict (the first input's batch size and device) with every leaf of every
    input; the values are not copied. A leaf several inputs hold takes the first input's
    value, unless every input holds it and ``callback_exist`` (a function, or a dict of
    functions by key) combines them: ``callback_exist(*values)``.

    >>> import torch
    >>> from tensorbox import TensorDict, merge_tensordicts
    >>> merge_tensordicts(TensorDict(a=torch.zeros(1)), TensorDict(b=torch.ones(1))).keys()
    dict_keys(['a', 'b'])
    """
    if len(tensordicts) < 2:
        raise ValueError(f"merge_tensordicts takes at least two containers, got {len(tensordicts)}")
    for i, td in enumerate(tensordicts):
        if not is_coll(td):
            raise TypeError(f"merge_tensordicts: argument {i} is a {type(td).__name__}")
    by_key: dict[tuple[str, ...], list[Any]] = {}
    for td in tensordicts:
        for key in keys_list(td, True, True):  # non-tensor values merge too
            by_key.setdefault(unravel_key(key), []).append(td.get(key))
    first = tensordicts[0]
    out = new_plain({}, first.batch_size, first.device)
    for path, values in by_key.items():
        fn = callback_exist
        if isinstance(fn, Mapping):
            fn = fn.get(path if len(path) > 1 else path[0], fn.get(path))
        value = fn(*values) if fn is not None and len(values) == len(tensordicts) else values[0]
        out.set(path, value)
    return out
