"""The container's methods on its key structure: which keys there are, and where.

``select``/``exclude``/``rename_key_``/``flatten_keys``/``unflatten_keys``/
``split_keys``/``replace``/``empty`` and their relatives. A method whose job is "which
entries, under which keys" belongs here; reading and writing the entry at a key is
:mod:`tensorbox._core.methods.entries`. Part of the container base
(``TensorCollection`` mixes this class in); the key-structure work itself is done by
the operation module ``_core.keyops``, over the private contract.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict({"a": torch.zeros(3, 2), "n": {"b": torch.ones(3)}}, batch_size=[3])
>>> td.select(("n", "b")).keys(include_nested=True, leaves_only=True)
[('n', 'b')]
>>> sorted(td.flatten_keys(".").keys())
['a', 'n.b']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Self, overload

import torch
from torch import Tensor

from tensorbox._core import keyops as _keyops
from tensorbox._core import tree as _tree
from tensorbox._core.backing import UNLOCK as _UNLOCK
from tensorbox._core.methods.base import MISSING, MixinBase, is_container
from tensorbox._core.methods.entries import entry_parent
from tensorbox._core.nestedkey import NestedKey, format_key, unravel_key
from tensorbox.errors import LockedError, TensorDictKeyError

if TYPE_CHECKING:
    from tensorbox._core.tensordict import TensorDict

__all__ = ["StructureMethods"]


class StructureMethods(MixinBase):
    """Mixin of ``TensorCollection``: the key structure (select, exclude, rename, flatten)."""

    __slots__ = ()

    # ------------------------------------------------------------ key structure

    def rename_key_(self, old: NestedKey, new: NestedKey, safe: bool = False) -> Self:
        """Move the entry ``old`` to ``new``; ``safe=True`` refuses to replace an entry."""
        if self._locked:
            raise LockedError(f"cannot rename {old!r}: the container is locked{_UNLOCK}")
        if safe and new in self:
            raise KeyError(f"rename_key_: {new!r} exists already (safe=True refuses to replace it)")
        self._write(lambda: self.set(new, self.pop(old)))  # one commit on a saved tree
        return self

    @overload
    def select(
        self,
        *keys: NestedKey,
        inplace: bool = False,
        strict: bool = True,
        as_tensordict: Literal[False] = False,
    ) -> Self: ...
    @overload
    def select(
        self,
        *keys: NestedKey,
        inplace: bool = False,
        strict: bool = True,
        as_tensordict: Literal[True],
    ) -> TensorDict: ...
    def select(
        self,
        *keys: NestedKey,
        inplace: bool = False,
        strict: bool = True,
        as_tensordict: bool = False,
    ) -> Self | TensorDict:
        """Only the given (possibly nested) keys; missing keys raise unless ``strict=False``.

        ``as_tensordict=True`` gives a plain TensorDict of them (for a tensorclass, whose
        own ``select`` keeps the class, with the other fields reading None).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2), "c": torch.ones(2)}}, [2])
        >>> td.select("a", ("n", "b")).keys(include_nested=True, leaves_only=True)
        ['a', ('n', 'b')]
        """
        if as_tensordict:
            if inplace:
                raise ValueError(
                    "select: as_tensordict=True gives a new TensorDict; drop inplace=True"
                )
            picked = _keyops.select(self, keys, False, strict)  # the tensors are shared
            plain: TensorDict = _tree.new_plain(
                dict(picked._tensordict), picked._batch_size, picked._device
            )
            return plain
        if inplace:  # on a saved tree, saved at once
            return self._write(_keyops.select, self, keys, inplace, strict)  # type: ignore[no-any-return]
        out: Self = _keyops.select(self, keys, inplace, strict)
        return out

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> Self:
        """Everything but the given (possibly nested) keys.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2), "c": torch.ones(2)}}, [2])
        >>> td.exclude(("n", "b")).keys(include_nested=True, leaves_only=True)
        ['a', ('n', 'c')]
        """
        out: Self = (
            self._write(_keyops.exclude, self, keys, inplace)
            if inplace
            else _keyops.exclude(self, keys, inplace)
        )
        return out

    def split_keys(
        self,
        *key_sets: Iterable[NestedKey] | Mapping[NestedKey, NestedKey],
        inplace: bool = False,
        default: Any = MISSING,
        strict: bool = True,
    ) -> tuple[Self, ...]:
        """One container per key set, then one with the remaining keys.

        A key set given as a mapping renames: ``{old: new}``. ``strict`` (default)
        refuses a missing key; with ``strict=False`` a missing key is skipped, or set to
        ``default`` when one is given. ``inplace`` removes the keys from this container,
        which is then the last result. Nested containers left empty are dropped.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b={"c": torch.zeros(2)}, d=torch.ones(2), batch_size=[2])
        >>> parts = td.split_keys(["a"], {("b", "c"): "c"})
        >>> [sorted(p.keys()) for p in parts]
        [['a'], ['c'], ['d']]
        """
        sets = [dict(ks) if isinstance(ks, Mapping) else {k: k for k in ks} for ks in key_sets]
        have = set(self.keys(True))
        taken: list[NestedKey] = []
        out = []
        for ks in sets:
            present = [k for k in ks if _as_key(k) in have]
            missing = [k for k in ks if _as_key(k) not in have]
            if missing and strict:
                raise KeyError(
                    f"split_keys: key {format_key(unravel_key(missing[0]))} not found "
                    "(pass strict=False to skip missing keys)"
                )
            part = self.select(*present)
            renamed = [src for src in present if _as_key(ks[src]) != _as_key(src)]
            for src in renamed:
                part.rename_key_(src, ks[src])
            _drop_emptied(part, renamed)
            if default is not MISSING and default is not None:
                for k in missing:
                    part.set(ks[k], default)
            taken.extend(present)
            out.append(part)
        if inplace:
            self.exclude(*taken, inplace=True)
            rest: Any = self
        else:
            rest = self.exclude(*taken)
        _drop_emptied(rest, taken)
        return (*out, rest)

    def separates(
        self,
        *keys: NestedKey,
        default: Any = MISSING,
        strict: bool = True,
        filter_empty: bool = True,
    ) -> Self:
        """Move the entries ``keys`` out of this container into a new one, which is
        returned (same batch size and device; nested entries keep their parents' batch
        sizes).

        A missing key raises ``KeyError`` unless ``default`` is given (the result then
        holds ``default`` there) or ``strict=False`` (skipped). ``filter_empty`` (default)
        drops the nested containers here that the move left empty. Nothing moves when
        a key is refused, or on a locked container (``LockedError``).

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b={"c": torch.ones(2)}, batch_size=[2])
        >>> moved = td.separates("a", ("b", "c"))
        >>> moved.keys(True, True), list(td.keys())
        (['a', ('b', 'c')], [])
        """
        have = set(self.keys(True))
        present = [k for k in keys if _as_key(k) in have]
        missing = [k for k in keys if _as_key(k) not in have]
        if missing and strict and default is MISSING:
            raise TensorDictKeyError(
                f"separates: key {format_key(unravel_key(missing[0]))} not found (pass "
                "default= to fill it in the result, or strict=False to skip it)"
            )
        if present and self._locked:
            raise LockedError(f"separates: the container is locked{_UNLOCK}")
        out = self.select(*present)
        self.exclude(*present, inplace=True)
        if filter_empty:
            _drop_emptied(self, present)
        if default is not MISSING:
            for k in missing:
                out.set(k, default)
        return out

    def flatten_keys(self, separator: str = ".", inplace: bool = False) -> Self:
        """One level with keys joined by ``separator``: ``{"a": {"b": x}}`` -> ``{"a.b": x}``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> list(td.flatten_keys().keys()), list(td.flatten_keys("/").keys())
        (['a.b'], ['a/b'])
        """
        out: Self = _keyops.flatten_keys(self, separator)
        if inplace:
            return self._replace_entries(out)
        out._writeback = (self, "unflatten_keys", (separator,))
        return out

    def _replace_entries(self, new: MixinBase) -> Self:
        """Take ``new``'s entries in place (an ``inplace=True`` key-structure op)."""
        if self._locked:
            raise LockedError(f"cannot restructure a locked container in place{_UNLOCK}")
        self._write(setattr, self, "_tensordict", new._tensordict)
        return self

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> Self:
        """The inverse of ``flatten_keys``."""
        out: Self = _keyops.unflatten_keys(self, separator)
        if inplace:
            return self._replace_entries(out)
        out._writeback = (self, "flatten_keys", (separator,))
        return out

    def create_nested(self, key: NestedKey) -> Self:
        """Set an empty ``TensorDict`` with this batch size and device at ``key``
        (replacing what was there; missing parents are created).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(batch_size=[3]).create_nested(("a", "b"))
        >>> td["a", "b"].batch_size
        torch.Size([3])
        """
        self.set(key, _tree.new_plain({}, self._batch_size, self._device))
        return self

    def filter_empty_(self) -> Self:
        """Remove, in place, nested containers that hold no leaf (tensor or non-tensor
        value) at any depth."""
        for key in list(self.keys()):
            value = self._tensordict[key]
            if is_container(value) and value.filter_empty_().is_empty():
                self.del_(key)
        return self

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
        if not (is_container(src) or isinstance(src, Mapping)):
            raise TypeError(
                f"replace: expected a mapping or a container of entries, got {type(src).__name__}"
            )
        if not (list(src.keys()) if is_container(src) else src):
            src = None
        if src is None and not kwargs:
            return self
        out = self.copy()  # type: ignore[attr-defined]
        if src is not None:
            out.update(src)
        if kwargs:
            out.update(kwargs)
        return out  # type: ignore[no-any-return]

    def empty(self, recurse: bool = False) -> Self:
        """A container with this batch size and device but no entries (``recurse=True``
        keeps the nested levels, emptied, as tensordict).

        >>> from tensorbox import TensorDict
        >>> e = TensorDict(a=torch.zeros(2), batch_size=[2]).empty()
        >>> list(e.keys()), e.batch_size
        ([], torch.Size([2]))
        """
        if recurse:
            return self.apply(lambda t: None, filter_empty=False)
        return self.exclude(*self.keys())

    @classmethod
    def fromkeys(cls, keys: Iterable[str], value: Any = 0) -> Self:
        """A container (batch size ``[]``) with ``value`` as a tensor at every key.

        >>> from tensorbox import TensorDict
        >>> TensorDict.fromkeys(["a", "b"], 1.0)["b"]
        tensor(1.)
        """
        return cls.from_dict({k: torch.as_tensor(value) for k in keys})

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

    # ----------------------------------------------------------------------------
    # tensordict's compatibility names: other spellings of methods of this job, and
    # stand-ins kept so that code written for tensordict runs unchanged. New code and
    # the docs use the names above.
    @property
    def sorted_keys(self) -> list[str]:
        """The top-level keys, sorted.

        >>> from tensorbox import TensorDict
        >>> TensorDict(b=torch.zeros(1), a=torch.zeros(1)).sorted_keys
        ['a', 'b']
        """
        return sorted(self.keys())

    @property
    def depth(self) -> int:
        """How many levels of nesting hold entries: 0 when no entry is nested.

        >>> from tensorbox import TensorDict
        >>> TensorDict({"a": {"b": {"c": 0}}, "d": 0}).depth
        2
        """
        keys = _tree.keys_list(self, True, True)  # type: ignore[arg-type]
        return max((len(k) - 1 for k in keys if isinstance(k, tuple)), default=0)


def _as_key(key: NestedKey) -> NestedKey:
    path = unravel_key(key)
    return path[0] if len(path) == 1 else path


def _drop_emptied(obj: Any, removed: Iterable[NestedKey]) -> None:
    """Remove the nested containers that the removal of ``removed`` left empty."""
    parents = sorted(
        {unravel_key(k)[:i] for k in removed for i in range(1, len(unravel_key(k)))},
        key=len,
        reverse=True,
    )
    for path in parents:
        node = obj.get(path, None)
        if is_container(node) and not list(node.keys()) and hasattr(obj, "del_"):
            obj.del_(path)


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
        value = entry_parent(obj, path, what)._get_value(path[-1])
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
