"""``TensorClass._from_tensordict``: tensordict's private builder, which torchrl calls.

torchrl builds tensorclasses with ``Cls._from_tensordict(td)``, often from an empty
container (``Text._from_tensordict(result.empty())``) and fills the fields afterwards.
So, unlike the public ``from_tensordict``, a required field the container does not hold
is no error: it reads None until set. ``non_tensordict`` (tensordict's second argument)
holds more field values. ``__post_init__`` runs, as in ``from_tensordict``.

>>> import torch
>>> from tensorbox import TensorClass, TensorDict
>>> class Text(TensorClass):
...     prompt: str
...     tokens: torch.Tensor
>>> t = Text._from_tensordict(TensorDict(batch_size=[2]))
>>> t.prompt is None, t.batch_size
(True, torch.Size([2]))
>>> Text._from_tensordict(TensorDict(batch_size=[]), {"prompt": "hi"}).prompt
'hi'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorbox._tensorclass.build import set_field
from tensorbox._tensorclass.fields import MISSING
from tensorbox.errors import TensorDictKeyError

__all__ = ["from_tensordict_lenient"]


def from_tensordict_lenient(
    cls: Any,
    tensordict: Any,
    non_tensordict: Mapping[str, Any] | None = None,
    safe: bool = True,
    *,
    lenient: bool = True,
    run_post_init: bool = True,
    what: str = "_from_tensordict",
) -> Any:
    """An instance of ``cls`` sharing ``tensordict``'s entries (see the module doc);
    ``safe`` is tensordict's keyword, accepted: keys that are not fields are always refused.

    The public ``from_tensordict`` builds through here with ``lenient=False``: a required
    field the container lacks is then an error instead of reading None."""
    if not getattr(type(tensordict), "_is_tensor_collection", False):
        raise TypeError(
            f"{cls.__name__}.{what} expects a TensorDict, got {type(tensordict).__name__}"
        )
    store = tensordict._tensordict
    extra = dict(non_tensordict or {})
    unknown = sorted((set(store) | set(extra)) - cls.__tc_names__)
    if unknown:
        raise TensorDictKeyError(
            f"{cls.__name__}.{what}: keys {unknown!r} are not fields of "
            f"{cls.__name__} (fields: {[f.name for f in cls.__tc_fields__]!r})"
        )
    out = cls._new_unsafe({}, tensordict._batch_size, tensordict._device)
    for f in cls.__tc_fields__:
        if f.name in store:
            out._tensordict[f.name] = store[f.name]  # already a valid entry
        elif f.name in extra:
            set_field(out, f.name, extra[f.name])
        elif f.default is not MISSING:
            set_field(out, f.name, f.default)
        elif f.default_factory is not MISSING:
            set_field(out, f.name, f.default_factory())
        elif not lenient:
            raise TensorDictKeyError(
                f"{cls.__name__}.{what}: required field {f.name!r} is missing "
                f"(keys: {sorted(store)!r})"
            )
        # else: no entry, the field reads None until set
    if run_post_init and hasattr(out, "__post_init__"):
        out.__post_init__()
    return out
