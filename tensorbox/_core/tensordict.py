"""TensorDict: a nested mapping of string keys to tensors that share leading batch dims.

The class adds its constructor to ``TensorCollection``, which holds every container
method (see ``_container``): storage is one plain ``dict`` per level plus a
``torch.Size`` batch size, an optional device and a lock flag.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"obs": torch.zeros(4, 3), "info": {"step": torch.arange(4)}}, batch_size=[4])
>>> td["info", "step"][2].item()
2
>>> td[1:3].batch_size
torch.Size([2])
>>> td[torch.tensor([0, 3])]["obs"].shape
torch.Size([2, 3])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import torch

from tensorbox._core.container import TensorCollection
from tensorbox._core.entries import fill_entries
from tensorbox._core.shape import as_batch_size
from tensorbox._core.tree import as_device, common_batch_size, set_batch_size_nested, set_locked

__all__ = ["TensorDict", "TensorDictBase", "is_tensor_collection"]


def is_tensor_collection(obj: Any) -> bool:
    """True for a TensorDict or a tensorclass instance (or either class).

    >>> import torch; from tensorbox import TensorDict, is_tensor_collection
    >>> is_tensor_collection(TensorDict()), is_tensor_collection(torch.zeros(1))
    (True, False)
    """
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "_is_tensor_collection", False)


class TensorDictBase(TensorCollection):
    """The abstract base of ``TensorDict``, as tensordict's: for ``isinstance`` checks and
    annotations. TensorDict instances are instances of it; tensorclass instances are not
    (test for either with ``is_tensor_collection``). Its classmethods build TensorDicts:
    ``TensorDictBase.load_memmap(path)`` is ``TensorDict.load_memmap(path)``.

    >>> import torch
    >>> from tensorbox import TensorDict, TensorDictBase, tensorclass
    >>> isinstance(TensorDict(a=torch.zeros(2)), TensorDictBase)
    True
    >>> @tensorclass
    ... class Point:
    ...     x: torch.Tensor
    >>> isinstance(Point(x=torch.zeros(2)), TensorDictBase)
    False
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if cls is TensorDictBase:
            raise TypeError(
                "TensorDictBase is abstract: build a TensorDict (or call a classmethod such "
                "as TensorDictBase.load_memmap, which gives one)"
            )
        return super().__new__(cls)

    @classmethod
    def _concrete(cls) -> type[Any]:
        return TensorDict if cls is TensorDictBase else cls

    @classmethod
    def load_memmap(cls, prefix: Any, **kwargs: Any) -> Self:
        """``TensorDict.load_memmap`` (for ``TensorDictBase.load_memmap(path)``)."""
        out: Self = TensorCollection.load_memmap.__func__(cls._concrete(), prefix, **kwargs)  # type: ignore[attr-defined]
        return out

    load = load_memmap

    @classmethod
    def from_dict(cls, *args: Any, **kwargs: Any) -> Any:
        """``TensorDict.from_dict`` (for ``TensorDictBase.from_dict(...)``)."""
        return TensorDict.from_dict.__func__(cls._concrete(), *args, **kwargs)  # type: ignore[attr-defined]


# Unlike tensordict's, the base is not registered as a Mapping: a container iterates its
# rows, so code that takes Mappings as dicts (torch's DataLoader ``default_convert`` with
# ``batch_size=None``) would index it with its own rows and fail. Pass ``to_dict()``.


class TensorDict(TensorDictBase):
    """A dict of tensors (and nested TensorDicts) sharing leading batch dims.

    Args:
        source: a mapping of keys to tensors, nested mappings, TensorDicts,
            tensorclass instances or plain Python values (kept as non-tensor data).
        batch_size: the leading dims every leaf shares (int or sequence). Default ``[]``.
        device: if given, every leaf is moved there now and on every later ``set``.
        names: not supported (dim names); must be None. Kept so that tensordict
            code passing ``names=None`` keeps working.
        lock: lock the container once built (see ``lock_()``).
        **kwargs: more entries, as in ``dict(**kwargs)``.

    >>> td = TensorDict(a=torch.zeros(2, 5), batch_size=2)
    >>> td
    TensorDict(batch_size=[2], device=None, fields={a: float32[5]})
    """

    __slots__ = ()

    def __init__(
        self,
        source: Mapping[str, Any] | None = None,
        batch_size: Sequence[int] | int | torch.Size | None = None,
        device: torch.device | str | int | None = None,
        *,
        names: Sequence[str] | None = None,
        lock: bool = False,
        **kwargs: Any,
    ) -> None:
        if source is not None and kwargs:
            raise ValueError(
                "TensorDict: pass the entries as source or as keyword arguments, not both"
            )
        if names is not None:
            raise TypeError(
                f"names={names!r}: tensorbox has no named batch dims; drop the argument "
                "(to store an entry called 'names', pass it inside the source dict)"
            )
        self._batch_size = as_batch_size(batch_size)
        self._device = None if device is None else as_device(device)
        self._locked = False
        self._tensordict = {}
        if source is not None:
            if type(source) is dict:
                pass
            elif getattr(type(source), "_is_tensor_collection", False):
                source = source._tensordict  # type: ignore[attr-defined]  # a container
            elif not isinstance(source, Mapping):
                raise TypeError(
                    f"TensorDict source must be a mapping of keys to values, "
                    f"got {type(source).__name__}"
                )
            fill_entries(self, source, ())
        if kwargs:
            fill_entries(self, kwargs, ())
        if lock:
            set_locked(self, True)

    @classmethod
    def from_dict(
        cls,
        source: Mapping[str, Any],
        batch_size: Sequence[int] | int | None = None,
        *,
        auto_batch_size: bool = False,
        batch_dims: int | None = None,
        device: torch.device | str | None = None,
    ) -> Self:
        """Build from a (nested) dict. ``auto_batch_size=True`` takes the longest common
        leading shape of all leaves (at most ``batch_dims`` dims when given).

        >>> TensorDict.from_dict({"a": torch.zeros(3, 4), "b": {"c": torch.zeros(3, 4, 5)}},
        ...                      auto_batch_size=True).batch_size
        torch.Size([3, 4])
        """
        if batch_size is not None and batch_dims is not None:
            raise ValueError(
                "from_dict: pass batch_size or batch_dims, not both (batch_dims bounds the "
                "batch size that auto_batch_size finds)"
            )
        out = cls(source, batch_size=batch_size, device=device)
        if (auto_batch_size or batch_dims is not None) and batch_size is None:
            set_batch_size_nested(out, common_batch_size(out, batch_dims))
        return out
