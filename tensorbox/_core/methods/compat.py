"""tensordict's private method names that user code calls, as real behaviour.

tensordict marks these methods private, yet torchrl and other libraries built on it
call them, so code moving over from tensordict meets them. tensorbox carries this
short, fixed set under the same names, with the same keywords, and nothing more
(``docs/migrating.md`` lists them); new code should use the public methods named in
each docstring.

- ``_check_batch_size()``: every leaf's leading dims match the batch size, else
  ``BatchSizeError`` (a ``RuntimeError``, as in tensordict).
- ``_check_device()``: every leaf lies on the container's device, if it has one.
- ``_has_non_tensor``: True when a non-tensor entry sits at any depth.
- ``_values_list(...)``: ``list(values(...))``, optionally in a given key order.
- ``_fast_apply(fn, ...)``: ``apply`` with tensordict's keywords for its internal one
  (``named``, ``nested_keys``, ``num_threads``, ``checked``...).
- ``_get_sub_tensordict(idx)``: a view of rows ``idx`` whose writes reach this
  container, new keys included (see ``_core/subview.py``).

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.zeros(3, 2), batch_size=[3])
>>> td._check_batch_size(), td._has_non_tensor
(None, False)
>>> sub = td._get_sub_tensordict(1)
>>> sub["b"] = torch.ones(())      # a new key: created in td, zeros in the other rows
>>> td["b"].tolist()
[0.0, 1.0, 0.0]
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any, Self

from tensorbox._core import apply as _apply
from tensorbox._core import ports as _ports
from tensorbox._core.methods.base import MixinBase
from tensorbox._core.nestedkey import NestedKey, format_key, unravel_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import KEEP, iter_shaped, keys_list
from tensorbox.errors import BatchSizeError, TensorDictKeyError

__all__ = ["CompatMethods"]

# The class of ``_get_sub_tensordict``'s views (``_core/subview.py``, a subclass of
# TensorDict: naming it here would be an import cycle) and ``LazyStackedTensorDict``
# (for ``to_lazystack``) are the ``subview`` and ``lazystack`` ports.


class CompatMethods(MixinBase):
    """Mixin of ``TensorCollection``: tensordict's private names that user code calls."""

    __slots__ = ()

    def _check_batch_size(self, *, raise_exception: builtins.bool = True) -> builtins.bool | None:
        """Check that every leaf (at any depth) starts with its container's batch size.

        Raises ``BatchSizeError`` naming the key, or returns False when
        ``raise_exception=False``; returns None (True without raising) when all fit.
        """
        for path, leaf in iter_shaped(self):  # type: ignore[arg-type]
            node: Any = self
            for part in path[:-1]:
                node = node._tensordict[part]
            bs = node._batch_size
            if leaf.is_nested or tuple(leaf.shape[: len(bs)]) == tuple(bs):
                continue
            if not raise_exception:
                return False
            raise BatchSizeError(
                f"entry {format_key(path)} has shape {tuple(leaf.shape)}, which does not "
                f"start with the batch size {tuple(bs)} of its container"
            )
        return None if raise_exception else True

    def _check_device(self, *, raise_exception: builtins.bool = True) -> builtins.bool | None:
        """Check that every tensor leaf lies on the container's device (when it has one)."""
        dev = self._device
        if dev is not None:
            for path, leaf in iter_shaped(self):  # type: ignore[arg-type]
                if leaf.device != dev:
                    if not raise_exception:
                        return False
                    raise RuntimeError(
                        f"entry {format_key(path)} is on {leaf.device}, the container on {dev}"
                    )
        return None if raise_exception else True

    @property
    def _has_non_tensor(self) -> builtins.bool:
        """True when a non-tensor entry sits at any depth (public: ``is_non_tensor(key)``)."""
        stack: list[Any] = [self]
        while stack:
            for v in stack.pop()._tensordict.values():
                if type(v) is NonTensorData:
                    return True
                if hasattr(v, "_tensordict"):
                    stack.append(v)
        return False

    def _values_list(
        self,
        include_nested: builtins.bool = False,
        leaves_only: builtins.bool = False,
        *,
        collapse: builtins.bool = False,
        is_leaf: Callable[[type], builtins.bool] | None = None,
        sorting_keys: Sequence[NestedKey] | None = None,
    ) -> list[Any]:
        """``list(values(...))``; with ``sorting_keys``, the values of those keys in that order."""
        if sorting_keys is None:
            return list(self.values(include_nested, leaves_only, is_leaf=is_leaf))  # type: ignore[attr-defined]
        found = {
            unravel_key(k): v
            for k, v in zip(
                self.keys(include_nested, leaves_only, is_leaf=is_leaf),
                self.values(include_nested, leaves_only, is_leaf=is_leaf),  # type: ignore[attr-defined]
                strict=True,
            )
        }
        try:
            return [found[unravel_key(k)] for k in sorting_keys]
        except KeyError as err:
            raise TensorDictKeyError(
                f"_values_list: key {format_key(err.args[0])} of sorting_keys is not here"
            ) from None

    def _fast_apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        batch_size: Sequence[int] | None = None,
        device: Any = KEEP,
        names: None = None,
        inplace: builtins.bool = False,
        call_on_nested: builtins.bool = False,
        default: Any = KEEP,
        named: builtins.bool = False,
        nested_keys: builtins.bool = False,
        filter_empty: builtins.bool | None = False,
        is_leaf: Callable[[type], builtins.bool] | None = None,
        propagate_lock: builtins.bool = False,
        out: Any = None,
        num_threads: int = 0,
        checked: builtins.bool = True,
        **constructor_kwargs: Any,
    ) -> Self | None:
        """``apply`` under tensordict's keywords for its internal variant.

        ``named=True`` calls ``fn(key, leaf, ...)`` (tuple keys with ``nested_keys``).
        ``num_threads`` and ``checked`` are accepted: the leaves are mapped on the
        calling thread, and results are always checked against the batch size.
        ``filter_empty=True`` gives None when no leaf is left.
        """
        if call_on_nested:
            raise TypeError(
                "_fast_apply(call_on_nested=True) is not supported: apply fn to the nested "
                "containers yourself (td.items())"
            )
        res = _apply.apply(
            self,
            fn,
            others,
            batch_size,
            device,
            False,
            named,
            nested_keys,
            (),
            default,
            filter_empty,
        )
        if filter_empty and not keys_list(res, True, True):  # non-tensor values count
            return None
        if out is not None:
            out.update(res)
            return out  # type: ignore[no-any-return]
        if inplace:
            self.update(res, inplace=True)
            return self
        if propagate_lock and self._locked:
            res.lock_()
        return res  # type: ignore[no-any-return]

    def _get_sub_tensordict(self, idx: Any) -> Any:
        """A view of the rows ``idx``: reads index this container's entries at call time,
        writes (``set``, ``update``, ``sub[key] = v``) land in these rows, and a new key
        is created here too, zeros in the other rows (public: ``td[idx] = value``)."""
        return _ports.subview()(self, idx)

    def to_lazystack(self, dim: int = 0) -> Any:
        """This container as a lazy stack of its slices along ``dim`` (tensordict's
        public name; the slices share this container's tensors)."""
        return _ports.lazystack().lazy_stack(list(self.unbind(dim)), dim)  # type: ignore[attr-defined]
