"""Entry-level writes, copies and queries shared by ``TensorDict`` and ``TensorClass``.

``set_at_`` and ``update_at_`` write into the selected batch rows of existing
entries, in place (locked containers included, as ``td[index] = ...``);
``get_at`` reads them; ``replace`` is a shallow copy with some entries
replaced; ``set_non_tensor``/``get_non_tensor``/``is_non_tensor``, ``create_nested``,
``clear``, ``depth``, ``cat_tensors`` and ``stack_tensors`` complete the set. tensordict's names and semantics, built on the containers' public
``get``, ``keys``, ``copy``, ``update`` and row assignment (``td[index] = ...``),
which already handles tensors, nested containers and non-tensor values.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.zeros(3, 2), batch_size=[3])
>>> td.set_at_("a", 1.0, 1)["a"][:, 0].tolist()
[0.0, 1.0, 0.0]
>>> td.replace(a=torch.ones(3))["a"].tolist(), td["a"].shape
([1.0, 1.0, 1.0], torch.Size([3, 2]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import torch
from torch import Tensor

from tensorbox._core.keys import NestedKey, format_key, unravel_key
from tensorbox._core.mixin_base import MixinBase
from tensorbox._core.shape import normalize_index
from tensorbox.errors import TensorDictKeyError

_MISSING: Any = object()  # "absent", returned by get() as a marker (not "argument not given")

__all__ = ["EntryMethods"]


def _is_coll(v: Any) -> bool:
    return getattr(type(v), "_is_tensor_collection", False) or hasattr(v, "_tensordict")


def _parent(obj: Any, path: tuple[str, ...], what: str) -> Any:
    """The container holding the existing entry ``path``, or a ``TensorDictKeyError``."""
    node = obj if len(path) == 1 else obj.get(path[:-1], _MISSING)
    if node is _MISSING or not _is_coll(node) or path[-1] not in node:
        raise TensorDictKeyError(
            f"{what}: key {format_key(path)} not found; it writes into an existing entry "
            "(add a new one with set())"
        )
    return node


class EntryMethods(MixinBase):
    """Mixin of ``TensorDict`` and ``TensorClass``: writes at a batch index, ``replace``,
    non-tensor entries, nesting helpers."""

    __slots__ = ()

    def set_at_(
        self, key: NestedKey, value: Any, index: Any, *, non_blocking: bool = False
    ) -> Self:
        """Write ``value`` into the rows ``index`` of the existing entry ``key``, in place.

        ``index`` addresses this container's batch dims; ``value`` broadcasts to the
        selected rows (a tensor, a number, a container for a nested entry, or a value
        for a non-tensor entry). ``non_blocking`` is accepted for tensordict
        compatibility (copies between devices are synchronous).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=TensorDict(b=torch.zeros(2, 3), batch_size=[2, 3]), batch_size=[2])
        >>> td.set_at_(("a", "b"), torch.ones(3), 0)["a", "b"].sum().item()
        3.0
        """
        path = unravel_key(key)
        parent = _parent(self, path, "set_at_")
        # ``...`` spans this container's batch dims, not those of a deeper parent
        parent[normalize_index(index, len(self.batch_size))] = {path[-1]: value}
        return self

    def update_at_(
        self,
        input_dict_or_td: Mapping[NestedKey, Any] | Any,
        idx: Any,
        clone: bool = False,
        *,
        non_blocking: bool = False,
        keys_to_update: Sequence[NestedKey] | None = None,
    ) -> Self:
        """Write every entry of ``input_dict_or_td`` into the rows ``idx`` of the entry
        with the same key here, in place; every key must already exist.

        ``keys_to_update`` restricts the write to those keys; ``clone`` copies the input
        tensors first (for an input that aliases this container).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3, 2), b=torch.zeros(3), batch_size=[3])
        >>> src = TensorDict(a=torch.ones(2), b=torch.tensor(2.0), batch_size=[])
        >>> td.update_at_(src, 1)["b"].tolist()
        [0.0, 2.0, 0.0]
        """
        wanted = None
        if keys_to_update is not None:
            wanted = {unravel_key(k) for k in keys_to_update}
            if not wanted:
                return self
        if _is_coll(input_dict_or_td):
            src: Any = input_dict_or_td
            if wanted is not None:
                have = {unravel_key(k) for k in src.keys(True)}
                src = src.select(*(k for k in wanted if k in have))
            if clone:
                src = src.clone()
            missing = [k for k in src.keys(True, True) if k not in self.keys(True)]
            if missing:
                raise TensorDictKeyError(
                    f"update_at_: key {format_key(unravel_key(missing[0]))} is not in the "
                    "destination; update_at_ writes into existing entries only (set() it first)"
                )
            self[idx] = src  # type: ignore[index]
            return self
        if not isinstance(input_dict_or_td, Mapping):
            raise TypeError(
                "update_at_: expected a TensorDict, a tensorclass or a mapping, got "
                f"{type(input_dict_or_td).__name__}"
            )
        items = [(unravel_key(k), v) for k, v in input_dict_or_td.items()]
        if wanted is not None:
            items = [(k, v) for k, v in items if any(k[: len(w)] == w for w in wanted)]
        for path, _ in items:  # every key checked before anything is written
            _parent(self, path, "update_at_")
        for path, v in items:
            if clone and (isinstance(v, Tensor) or _is_coll(v)):
                v = v.clone()
            self.set_at_(path, v, idx)
        return self

    def copy_at_(
        self, tensordict: Any, idx: Any, non_blocking: bool = False, *, fast: bool | None = True
    ) -> Self:
        """``update_at_`` under tensordict's copy-oriented name: write the entries of
        ``tensordict`` into the rows ``idx`` of the same entries here, in place.

        ``fast`` is accepted for compatibility: tensorbox has one path, which handles
        tensors and non-tensor values alike.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
        >>> td.copy_at_(TensorDict(a=torch.ones(2), batch_size=[2]), slice(1, 3))["a"].tolist()
        [0.0, 1.0, 1.0]
        """
        return self.update_at_(tensordict, idx, non_blocking=non_blocking)

    def get_at(self, key: NestedKey, index: Any, default: Any = None) -> Any:
        """The rows ``index`` of the entry ``key`` (``default`` when ``key`` is missing,
        as ``get``).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.arange(4), batch_size=[4]).get_at("a", slice(1, 3)).tolist()
        [1, 2]
        """
        path = unravel_key(key)
        try:
            parent = _parent(self, path, "get_at")
        except TensorDictKeyError:
            return default
        index = normalize_index(index, len(self.batch_size))
        value = parent.get(path[-1])
        if isinstance(value, Tensor) or _is_coll(value):
            return value[index]
        return parent[index].get(path[-1])  # non-tensor: the rows' values

    def replace(self, *args: Any, **kwargs: Any) -> Self:
        """A shallow copy with some entries replaced (tensors shared, this one unchanged).

        Takes one mapping or container of entries, and/or top-level entries as keyword
        arguments; nested containers present on both sides are merged. With nothing
        to replace, returns ``self``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.zeros(2), batch_size=[2])
        >>> sorted(td.replace({"a": torch.ones(2)}, c=torch.ones(2)).keys())
        ['a', 'b', 'c']
        """
        if len(args) > 1:
            raise TypeError(
                f"replace takes one mapping or container of entries, got {len(args)} "
                "positional arguments (pass the others as keyword arguments)"
            )
        src: Any = args[0] if args else {}
        if not (_is_coll(src) or isinstance(src, Mapping)):
            raise TypeError(
                f"replace: expected a mapping or a container of entries, got {type(src).__name__}"
            )
        if not (list(src.keys()) if _is_coll(src) else src):
            src = None
        if src is None and not kwargs:
            return self
        out = self.copy()  # type: ignore[attr-defined]
        if src is not None:
            out.update(src)
        if kwargs:
            out.update(kwargs)
        return out  # type: ignore[no-any-return]

    # ------------------------------------------------------ non-tensor entries

    def set_non_tensor(self, key: NestedKey, value: Any) -> Self:
        """Store ``value`` at ``key`` as non-tensor data, as it is (no conversion to a
        tensor); missing parents are created.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(batch_size=[2]).set_non_tensor(("meta", "n"), 3)
        >>> td.get_non_tensor(("meta", "n")), td.is_non_tensor(("meta", "n"))
        (3, True)
        """
        from tensorbox._core.nontensor import NonTensorData

        self.set(key, NonTensorData(value))
        return self

    def get_non_tensor(self, key: NestedKey, default: Any = _MISSING) -> Any:
        """The value at ``key`` (a non-tensor's Python value; any other entry as ``get``
        gives it); ``default`` when missing, else a ``TensorDictKeyError``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(tag="train", batch_size=[]).get_non_tensor("tag")
        'train'
        """
        path = unravel_key(key)
        try:
            parent = _parent(self, path, "get_non_tensor")
        except TensorDictKeyError:
            if default is _MISSING:
                raise TensorDictKeyError(
                    f"get_non_tensor: key {format_key(path)} not found"
                ) from None
            return default
        return parent.get(path[-1])

    def is_non_tensor(self, key: NestedKey) -> bool:
        """Whether the entry at ``key`` is non-tensor data (neither a tensor nor a
        container); a missing key raises ``TensorDictKeyError``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), tag="train", batch_size=[2])
        >>> td.is_non_tensor("tag"), td.is_non_tensor("x")
        (True, False)
        """
        path = unravel_key(key)
        value = _parent(self, path, "is_non_tensor").get(path[-1])
        return not (isinstance(value, Tensor) or _is_coll(value))

    # ---------------------------------------------------------------- nesting

    def create_nested(self, key: NestedKey) -> Self:
        """Set an empty ``TensorDict`` with this batch size and device at ``key``
        (replacing what was there; missing parents are created).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(batch_size=[3]).create_nested(("a", "b"))
        >>> td["a", "b"].batch_size
        torch.Size([3])
        """
        from tensorbox import TensorDict

        empty = TensorDict(batch_size=self.batch_size, device=self.device)  # type: ignore[attr-defined]
        self.set(key, empty)
        return self

    def clear(self) -> Self:
        """Remove every entry (refused on a locked container).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), batch_size=[2])
        >>> list(td.clear().keys()), td.batch_size
        ([], torch.Size([2]))
        """
        self.exclude(*self.keys(), inplace=True)
        return self

    @property
    def depth(self) -> int:
        """How many levels of nesting hold entries: 0 when no entry is nested.

        >>> from tensorbox import TensorDict
        >>> TensorDict({"a": {"b": {"c": 0}}, "d": 0}).depth
        2
        """
        keys = self.keys(True, True)
        return max((len(k) - 1 for k in keys if isinstance(k, tuple)), default=0)

    # ------------------------------------------------------- merging entries

    def cat_tensors(
        self,
        *keys: NestedKey,
        out_key: NestedKey,
        dim: int = 0,
        keep_entries: bool = False,
    ) -> Self:
        """Set ``out_key`` to ``torch.cat`` of the tensors at ``keys`` along tensor dim
        ``dim``; the entries at ``keys`` are removed unless ``keep_entries``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2, 1), b=torch.ones(2, 1), batch_size=[2])
        >>> td.cat_tensors("a", "b", out_key="c", dim=-1)["c"].tolist(), sorted(td.keys())
        ([[0.0, 1.0], [0.0, 1.0]], ['c'])
        """
        return _merge(self, keys, out_key, keep_entries, "cat_tensors", lambda t: torch.cat(t, dim))  # type: ignore[no-any-return]

    def stack_tensors(
        self,
        *keys: NestedKey,
        out_key: NestedKey,
        dim: int = 0,
        keep_entries: bool = False,
    ) -> Self:
        """Set ``out_key`` to ``torch.stack`` of the tensors at ``keys`` along tensor dim
        ``dim``; the entries at ``keys`` are removed unless ``keep_entries``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
        >>> td.stack_tensors("a", "b", out_key="ab", dim=1)["ab"].tolist()
        [[0.0, 1.0], [0.0, 1.0]]
        """
        return _merge(  # type: ignore[no-any-return]
            self, keys, out_key, keep_entries, "stack_tensors", lambda t: torch.stack(t, dim)
        )

    def cat_from_tensordict(
        self, dim: int = 0, *, sorted: bool | Sequence[NestedKey] | None = None, out: Any = None
    ) -> Tensor:
        """Every tensor leaf concatenated along dim ``dim`` into one tensor (leaves in key
        order; ``sorted=True`` sorts the keys, a list of keys gives the order).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2, 1), b=torch.ones(2, 2), batch_size=[2]).cat_from_tensordict(-1).shape
        torch.Size([2, 3])
        """
        return torch.cat(_leaf_list(self, sorted), dim, out=out)

    def stack_from_tensordict(
        self, dim: int = 0, *, sorted: bool | Sequence[NestedKey] | None = None, out: Any = None
    ) -> Tensor:
        """Every tensor leaf stacked along a new dim ``dim`` (see ``cat_from_tensordict``)."""
        return torch.stack(_leaf_list(self, sorted), dim, out=out)

    def filter_empty_(self) -> Self:
        """Remove, in place, nested containers that hold no tensor at any depth."""
        for key in list(self.keys()):
            value = self._tensordict[key]
            if _is_coll(value) and value.filter_empty_().is_empty():
                self.del_(key)  # type: ignore[attr-defined]
        return self

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype every tensor leaf shares, or None when they differ (or there are none)."""
        dtypes = {t.dtype for _, t in self.items(True, True) if isinstance(t, Tensor)}
        return dtypes.pop() if len(dtypes) == 1 else None


def _merge(
    obj: Any,
    keys: tuple[NestedKey, ...],
    out_key: NestedKey,
    keep: bool,
    what: str,
    fn: Any,
) -> Any:
    tensors = []
    for key in keys:
        path = unravel_key(key)
        value = _parent(obj, path, what).get(path[-1])
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{what}: the entry at {format_key(path)} is a {type(value).__name__}, not a tensor"
            )
        tensors.append(value)
    try:
        merged = fn(tensors)
    except (RuntimeError, IndexError) as err:
        raise ValueError(
            f"{what}: cannot merge {', '.join(format_key(unravel_key(k)) for k in keys)}: {err}"
        ) from None
    obj.set(out_key, merged)  # first, so a refused set loses nothing
    if not keep:
        out = unravel_key(out_key)
        obj.exclude(*(k for k in keys if unravel_key(k) != out), inplace=True)
    return obj


def _leaf_list(obj: Any, order: bool | Sequence[NestedKey] | None) -> list[Tensor]:
    keys = [k for k, v in obj.items(True, True) if isinstance(v, Tensor)]
    if order is True:
        keys.sort(key=lambda k: (k,) if isinstance(k, str) else k)
    elif order:
        keys = list(order)
    return [obj.get(k) for k in keys]
