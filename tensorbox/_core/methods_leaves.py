"""The container's leaf-wise methods, written once: ``apply``, ``to``, ``clone``, ``detach``...

Part of the container base (``TensorCollection`` mixes this class in). Each method is
a short call into ``_apply``, which walks the entries once and builds the result
with the caller's own type.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.ones(2), batch_size=[2])
>>> td.apply(lambda t: t * 3)["a"].tolist(), td.clone()["a"] is td["a"]
([3.0, 3.0], False)
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import torch
from torch import Tensor

from tensorbox._core import apply as _apply
from tensorbox._core import tree as _tree
from tensorbox._core.keys import NestedKey
from tensorbox._core.mixin_base import MixinBase
from tensorbox._core.tree import KEEP

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection

__all__ = ["LeafMethods"]


class LeafMethods(MixinBase):
    """Mixin of ``TensorCollection``: leaf-wise operations."""

    __slots__ = ()

    # ------------------------------------------------------------- leaf-wise

    def apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        batch_size: Sequence[int] | None = None,
        device: Any = KEEP,
        names: None = None,
        inplace: bool = False,
        default: Any = KEEP,
        filter_empty: bool | None = None,
        out: TensorCollection | None = None,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> Self:
        """``fn`` on every tensor leaf (with the matching leaves of ``others``).

        A ``None`` result drops the leaf; ``batch_size`` declares a new batch size;
        ``device`` (when given) is the device of the result. ``default`` stands in for
        entries missing from ``others``; ``filter_empty=True`` drops nested containers
        left empty, ``False`` keeps them (default: drop only those ``fn`` emptied).
        ``out`` receives the results in place and is returned. With ``filter_empty=True``
        a result without any leaf is None, as in tensordict. ``is_leaf`` is accepted for
        tensordict's signature (non-tensor entries are never passed to ``fn`` here).

        >>> import torch; from tensorbox import TensorDict
        >>> a = TensorDict(x=torch.ones(2), y=torch.ones(2), batch_size=[2])
        >>> a.apply(lambda s, o: s + o, TensorDict(x=torch.ones(2)), default=0)["y"].tolist()
        [1.0, 1.0]
        """
        _no_names(names)
        a = (fn, others, batch_size, device, inplace, False, False, (), default, filter_empty)
        # in place on a saved tree: saved at once (a whole-tree commit, see _persist_writes)
        res: Self = self._write(_apply.apply, self, *a) if inplace else _apply.apply(self, *a)
        if out is not None:
            # the results replace out's entries (their dtype and shape may differ), as tensordict
            out.update(cast(Any, res))  # res is a container (a mixin's Self)
            return out  # type: ignore[return-value]
        if filter_empty and not inplace and not _tree.tensor_leaves(res):
            return None  # type: ignore[return-value]
        return res

    def apply_(self, fn: Callable[..., Any], *others: Any, **kwargs: Any) -> Self:
        """``apply`` in place: each result is written into this container."""
        return self.apply(fn, *others, inplace=True, **kwargs)

    def named_apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        nested_keys: bool = False,
        batch_size: Sequence[int] | None = None,
        default: Any = KEEP,
        filter_empty: bool | None = None,
    ) -> Self:
        """Like ``apply`` but ``fn(key, leaf, *others)``; nested keys are tuples if asked.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
        >>> out = td.named_apply(lambda key, x: x + len(key), nested_keys=True)
        >>> out["a"].tolist(), out["n", "b"].tolist()   # "a" is 1 long, ("n", "b") 2
        ([1.0, 1.0], [2.0, 2.0])
        """
        res: Self = _apply.apply(
            self, fn, others, batch_size, KEEP, False, True, nested_keys, (), default, filter_empty
        )
        return res

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """Move to a device and/or cast. A dtype casts floating-point leaves only,
        unless ``floating_only=False``. ``non_blocking`` is passed to each copy.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), y=torch.arange(2), batch_size=[2])
        >>> out = td.to(torch.float16)
        >>> out["x"].dtype, out["y"].dtype
        (torch.float16, torch.int64)
        """
        inplace = kwargs.pop("inplace", False)
        if getattr(self, "_packed", None) is not None:  # consolidated: one copy of the storage
            from tensorbox._core import consolidate as _consolidate

            moved = _consolidate.to(self, args, kwargs)
            if moved is not None:
                return moved  # type: ignore[no-any-return]
        out: Self = _apply.to(self, args, kwargs)
        if inplace and out is not self:  # the leaves moved, this container kept
            self._tensordict, self._device = out._tensordict, out._device
            return self
        return out

    def cpu(self) -> Self:
        """Every leaf on the CPU."""
        return self.to("cpu")

    def cuda(self, device: int | str | None = None) -> Self:
        """Every leaf on a CUDA device (the current one by default)."""
        if device is None:
            return self.to(torch.device("cuda"))
        return self.to(torch.device("cuda", device) if isinstance(device, int) else device)

    def clear_device_(self) -> Self:
        """Forget the fixed device (leaves stay where they are)."""
        self._write(_tree.clear_device, self)
        return self

    def pin_memory(self, num_threads: int | None = None) -> Self:
        """Copy every leaf into page-locked memory (threads for many leaves)."""
        out: Self = _apply.pin_memory(self, num_threads)
        return out

    def is_pinned(self) -> bool:
        """True when every tensor leaf is in page-locked memory."""
        return all(v.is_pinned() for v in _tree.tensor_leaves(self))

    def clone(self, recurse: bool = True) -> Self:
        """A copy; ``recurse=False`` copies the structure and shares the tensors.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), batch_size=[2])
        >>> deep, shallow = td.clone(), td.clone(recurse=False)
        >>> deep["x"].data_ptr() == td["x"].data_ptr(), shallow["x"] is td["x"]
        (False, True)
        """
        out: Self = _apply.clone(self, recurse)
        return out

    def copy(self) -> Self:
        """A shallow copy: new structure, shared tensors."""
        out: Self = _apply.clone(self, False)
        return out

    def __copy__(self) -> Self:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # Tensors are copied into fresh memory, never shared: a deep copy of a
        # memory-mapped container is independent of the files.
        def deep(v: Any) -> Any:
            if isinstance(v, Tensor):
                return v.detach().clone().requires_grad_(v.requires_grad)
            return _copy.deepcopy(v, memo)

        out = type(self)._new_unsafe(
            {k: deep(v) for k, v in self._tensordict.items()}, self._batch_size, self._device
        )
        out._locked = self._locked
        return out

    def contiguous(self) -> Self:
        """Every leaf contiguous."""
        out: Self = _apply.map_leaves(self, Tensor.contiguous)
        return out

    def detach(self) -> Self:
        """Every leaf detached from autograd."""
        out: Self = _apply.map_leaves(self, Tensor.detach)
        return out

    def detach_(self) -> Self:
        """Detach every leaf in place."""
        return self.apply(Tensor.detach_, inplace=True)

    if TYPE_CHECKING:
        # Typed Any for checkers: a tensorclass field may be called ``data`` (a common
        # name, as in tensordict) and declare its own type.
        data: Any
    else:

        @property
        def data(self) -> Self:
            """Every leaf's ``.data`` (detached, sharing storage), as ``Tensor.data``."""
            return _apply.map_leaves(self, lambda t: t.data)

    @property
    def requires_grad(self) -> bool:
        """True when some tensor leaf requires grad."""
        return any(v.requires_grad for v in _tree.tensor_leaves(self))

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Set ``requires_grad`` on every leaf, in place."""
        return self.apply(lambda t: t.requires_grad_(requires_grad), inplace=True)

    def zero_(self) -> Self:
        """Zero every leaf in place."""
        return self.apply(Tensor.zero_, inplace=True)

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Fill the leaf ``key`` with ``value`` in place."""
        self.get(key, KEEP).fill_(value)
        return self

    def share_memory_(self) -> Self:
        """Move every leaf into shared memory so worker processes see writes."""
        return self.apply(Tensor.share_memory_, inplace=True)

    def is_shared(self) -> bool:
        """True when every tensor leaf is in shared memory."""
        return all(v.is_shared() for v in _tree.tensor_leaves(self))  # type: ignore[no-untyped-call]


def _no_names(names: Any) -> None:
    if names is not None:
        raise TypeError(f"names={names!r}: tensorbox has no named batch dims; drop the argument")
