"""``from_dict_instance``: a nested dict read back with the structure of an existing
container (the classes of its nested containers, which of its values are non-tensor).

>>> import torch; from tensorbox import TensorDict
>>> td = TensorDict(a=torch.zeros(2), label="cat")
>>> td.from_dict_instance({"a": torch.ones(2), "label": "dog"})["label"]
'dog'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import is_coll

__all__ = ["entries_like"]


def entries_like(
    template: Any,
    source: Mapping[str, Any],
    auto_batch_size: bool,
    batch_dims: int | None,
    device: Any,
) -> dict[str, Any]:
    """``source``'s entries, with each nested dict whose key holds a container in
    ``template`` built as that container's class, and each value whose key holds a
    non-tensor value there wrapped so that it stays a Python value."""
    stored = template._tensordict
    out: dict[str, Any] = {}
    for key, value in source.items():
        like = stored.get(key)
        if isinstance(value, Mapping) and is_coll(like):
            out[key] = type(like).from_dict(
                entries_like(like, value, auto_batch_size, batch_dims, device),
                auto_batch_size=auto_batch_size,
                batch_dims=batch_dims,
                device=device,
            )
        elif type(like) is NonTensorData and not isinstance(value, NonTensorData):
            out[key] = NonTensorData(value)
        else:
            out[key] = value
    return out
