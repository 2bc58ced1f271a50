"""The container's leaf-wise methods: ``apply``, ``to``, ``clone``, casts, ``detach``...

A method whose job is "do this to every leaf" (map, move, cast, copy, detach, zero) or
"turn the leaves into something else" (``to_dict``, ``numpy``, padded tensors) belongs
here. Part of the container base (``TensorCollection`` mixes this class in). Each
method is a short call into the operation module ``_core.apply``, which walks the
entries once and builds the result with the caller's own type.

>>> import torch
>>> from tensorbox import TensorDict
>>> td = TensorDict(a=torch.ones(2), batch_size=[2])
>>> td.apply(lambda t: t * 3)["a"].tolist(), td.clone()["a"] is td["a"], td.long()["a"].dtype
([3.0, 3.0], False, torch.int64)
"""

from __future__ import annotations

import builtins
import copy as _copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import torch
from torch import Tensor

from tensorbox._core import apply as _apply
from tensorbox._core import jagged_pad as _jagged_pad
from tensorbox._core import ports as _ports
from tensorbox._core import tree as _tree
from tensorbox._core.backing import TREES as _TREES
from tensorbox._core.methods.base import MixinBase, is_container
from tensorbox._core.nestedkey import NestedKey, unravel_key
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import KEEP
from tensorbox.errors import LockedError

if TYPE_CHECKING:
    from tensorbox._core.container import TensorCollection
    from tensorbox._core.tensordict import TensorDict

__all__ = ["LeafMethods"]

_NTD = NonTensorData


def _cast(dtype: torch.dtype, name: str) -> Callable[[Any], Any]:
    def cast(self: Any) -> Any:
        return self.apply(lambda t: t.to(dtype))

    cast.__doc__ = f"""Every tensor leaf cast to ``{dtype}`` (``to(dtype)`` casts floats only).

    >>> from tensorbox import TensorDict
    >>> TensorDict(a=torch.tensor([1.5]), batch_size=[1]).{name}()["a"].dtype
    {dtype}
    """
    return cast


def _canonical(t: Tensor) -> Tensor:
    """``t`` with row-major strides (a copy only when its strides differ)."""
    strides, step = [], 1
    for n in reversed(t.shape):
        strides.append(step)
        step *= n
    if t.is_contiguous() and tuple(t.stride()) == tuple(reversed(strides)):
        return t
    return t.clone(memory_format=torch.contiguous_format).as_strided(
        t.shape, tuple(reversed(strides))
    )


class LeafMethods(MixinBase):
    """Mixin of ``TensorCollection``: leaf-wise operations and conversions."""

    __slots__ = ()

    # ---------------------------------------------------------------- leaf-wise

    def apply(
        self,
        fn: Callable[..., Any],
        *others: Any,
        batch_size: Sequence[int] | None = None,
        device: Any = KEEP,
        names: None = None,
        inplace: builtins.bool = False,
        default: Any = KEEP,
        filter_empty: builtins.bool | None = None,
        out: TensorCollection | None = None,
        is_leaf: Callable[[type], builtins.bool] | None = None,
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
        if inplace:  # fn may write into the mapped leaves themselves: their blocks first
            _reserve_leaves(self)
        # in place on a saved tree: saved at once (a whole-tree commit, see _persist_writes)
        if not inplace:
            res: Self = _apply.apply(self, *a)
        elif _TREES and id(self) in _TREES:  # nothing written into a file unless it all is
            res = _apply.apply_held(self, a, self._through)
        else:
            res = _apply.apply(self, *a)
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
        nested_keys: builtins.bool = False,
        batch_size: Sequence[int] | None = None,
        default: Any = KEEP,
        filter_empty: builtins.bool | None = None,
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

    # ----------------------------------------------------------- device, memory

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """Move to a device and/or cast. A dtype casts every leaf, as tensordict;
        ``floating_only=True`` casts the floating-point leaves only (labels and masks keep
        their dtype). ``non_blocking`` is passed to each copy.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(x=torch.zeros(2), y=torch.arange(2), batch_size=[2])
        >>> out = td.to(torch.float16)
        >>> out["x"].dtype, out["y"].dtype
        (torch.float16, torch.float16)
        >>> td.to(torch.float16, floating_only=True)["y"].dtype
        torch.int64
        """
        inplace = kwargs.pop("inplace", False)
        if getattr(self, "_packed", None) is not None:  # consolidated: one copy of the storage
            from tensorbox._core import consolidate as _consolidate

            moved = _consolidate.to(self, args, kwargs)
            if moved is not None:
                return moved  # type: ignore[no-any-return]
        out: Self = _apply.to(self, args, kwargs)
        if inplace and out is not self:  # the leaves moved, this container kept
            if self._locked:  # as tensordict: replacing leaves is a change
                raise LockedError(
                    f"to(..., inplace=True) would replace the leaves of a locked "
                    f"{type(self).__name__}; unlock_() first, or drop inplace=True"
                )
            self._tensordict, self._device = out._tensordict, out._device
            return self
        return out

    def cpu(self) -> Self:
        """Every leaf on the CPU."""
        return self.to("cpu")

    def cuda(self, device: builtins.int | str | None = None) -> Self:
        """Every leaf on a CUDA device (the current one by default)."""
        if device is None:
            return self.to(torch.device("cuda"))
        return self.to(torch.device("cuda", device) if isinstance(device, int) else device)

    def clear_device_(self) -> Self:
        """Forget the fixed device (leaves stay where they are)."""
        self._write(_tree.clear_device, self)
        return self

    def pin_memory(self, num_threads: builtins.int | None = None) -> Self:
        """Copy every leaf into page-locked memory (threads for many leaves)."""
        out: Self = _apply.pin_memory(self, num_threads)
        return out

    def is_pinned(self) -> builtins.bool:
        """True when every tensor leaf is in page-locked memory."""
        return all(v.is_pinned() for v in _tree.tensor_leaves(self))

    def share_memory_(self) -> Self:
        """Move every leaf into shared memory so worker processes see writes, and lock
        the container (as tensordict and ``memmap_()`` do): a key added afterwards would
        live in this process only. ``unlock_()`` first to add one knowingly.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2)).share_memory_()
        >>> td.is_shared(), td.is_locked
        (True, True)
        """
        out: Any = self.apply(Tensor.share_memory_, inplace=True)
        out.lock_()
        return self

    def is_shared(self) -> builtins.bool:
        """True when every tensor leaf is in shared memory."""
        return all(v.is_shared() for v in _tree.tensor_leaves(self))  # type: ignore[no-untyped-call]

    def contiguous(
        self, *, inplace: builtins.bool = False, canonical: builtins.bool = False
    ) -> Self:
        """Every leaf contiguous; ``inplace=True`` puts the contiguous leaves in this
        container (the old storage is released when nothing else holds it).
        ``canonical=True`` also copies a leaf that torch calls contiguous but whose
        strides are not the row-major ones (a size-1 dim with another stride).

        >>> from tensorbox import TensorDict
        >>> odd = torch.empty_strided((1, 4), (9, 1))
        >>> TensorDict(a=odd).contiguous(canonical=True)["a"].stride()
        (4, 1)
        """
        out: Self = _apply.map_leaves(self, _canonical if canonical else Tensor.contiguous)
        if inplace:
            self.update(out)
            return self
        return out

    # -------------------------------------------------------------------- casts

    float = _cast(torch.float32, "float")

    double = _cast(torch.float64, "double")

    half = _cast(torch.float16, "half")

    bfloat16 = _cast(torch.bfloat16, "bfloat16")

    int = _cast(torch.int32, "int")

    long = _cast(torch.int64, "long")

    bool = _cast(torch.bool, "bool")

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype every tensor leaf shares, or None when they differ (or there are none)."""
        dtypes = {t.dtype for _, t in self.items(True, True) if isinstance(t, Tensor)}
        return dtypes.pop() if len(dtypes) == 1 else None

    # ------------------------------------------------------------------- copies

    def clone(self, recurse: builtins.bool = True) -> Self:
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

    def __deepcopy__(self, memo: dict[builtins.int, Any]) -> Self:
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

    # ----------------------------------------------------------------- autograd

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
            """Every leaf's ``.data`` (detached, sharing storage), as ``Tensor.data``; locked
            when this container is (as tensordict's ``data``)."""
            out = _apply.map_leaves(self, lambda t: t.data)
            return out.lock_() if self._locked else out

    @property
    def requires_grad(self) -> builtins.bool:
        """True when some tensor leaf requires grad."""
        return any(v.requires_grad for v in _tree.tensor_leaves(self))

    def requires_grad_(self, requires_grad: builtins.bool = True) -> Self:
        """Set ``requires_grad`` on every leaf, in place."""
        return self.apply(lambda t: t.requires_grad_(requires_grad), inplace=True)

    @property
    def grad(self) -> Self | None:
        """The leaves' ``.grad`` in a container of the same structure; None when no leaf
        has a gradient (as ``Tensor.grad``).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.ones(2)).requires_grad_()
        >>> (td["a"] * 3).sum().backward()
        >>> td.grad["a"].tolist()
        [3.0, 3.0]
        """
        grads: Self | None = self.apply(lambda t: t.grad, filter_empty=True)
        if grads is not None and self._locked:  # the view of a locked tree is locked too
            cast(Any, grads).lock_()
        return grads

    def zero_grad(self, set_to_none: builtins.bool = True) -> Self:
        """Clear every leaf's gradient: ``None`` (default), or zeros in place, as
        ``nn.Module.zero_grad``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.ones(2)).requires_grad_()
        >>> td["a"].sum().backward()
        >>> td.zero_grad().grad is None
        True
        """
        for t in _tree.tensor_leaves(self):
            if t.grad is not None:
                if set_to_none:
                    t.grad = None
                else:
                    t.grad.detach_().zero_()
        return self

    def backward(
        self,
        gradient: Any = None,
        retain_graph: builtins.bool | None = None,
        create_graph: builtins.bool = False,
        inputs: Any = None,
    ) -> None:
        """``torch.autograd.backward`` over every leaf that requires grad, in one call.

        ``gradient`` is a container matching those leaves by key (it may be left out when
        every such leaf holds one element); ``inputs`` a container or a sequence of tensors.

        >>> import torch; from tensorbox import TensorDict
        >>> x = TensorDict(a=torch.ones(2)).requires_grad_()
        >>> (x * 2).backward(TensorDict(a=torch.ones(2)))
        >>> x.grad["a"].tolist()
        [2.0, 2.0]
        """
        keys = [k for k, t in _leaf_items(self) if t.requires_grad]
        if not keys:
            raise RuntimeError(
                "backward(): no leaf requires grad (call requires_grad_() on the inputs)"
            )
        outputs = [self.get(k) for k in keys]
        grads: list[Tensor] | None = None
        if gradient is not None:
            if not is_container(gradient):
                raise TypeError(
                    f"backward(): gradient must be a TensorDict or tensorclass matching the "
                    f"leaves that require grad (by key), got a {type(gradient).__name__}"
                )
            try:
                grads = [gradient.get(k, KEEP) for k in keys]
            except KeyError as err:
                raise KeyError(
                    f"backward(): gradient has no entry for a leaf that requires grad: {err}"
                ) from None
        elif any(t.numel() != 1 for t in outputs):
            raise RuntimeError(
                "backward(): gradient can be left out only when every leaf that requires "
                "grad holds one element; pass gradient=, a container matching the leaves"
            )
        if inputs is not None and is_container(inputs):
            inputs = list(_tree.tensor_leaves(inputs))
        torch.autograd.backward(
            outputs,
            grads,
            retain_graph=retain_graph,
            create_graph=create_graph,
            inputs=inputs,
        )

    # ----------------------------------------------------------------- in place

    def zero_(self) -> Self:
        """Zero every leaf in place."""
        return self.apply(Tensor.zero_, inplace=True)

    def fill_(self, key: NestedKey, value: builtins.float | builtins.bool) -> Self:
        """Fill the leaf ``key`` with ``value`` in place."""
        leaf = self.get(key, KEEP)
        if isinstance(leaf, Tensor) and type(leaf) is not Tensor and not leaf.is_nested:
            _ports.reserve(leaf, unravel_key(key))
        leaf.fill_(value)
        return self

    # ---------------------------------------------------------- new containers

    def _new_filled(
        self, size: tuple[Any, ...], make: Callable[[Tensor, tuple[builtins.int, ...]], Tensor]
    ) -> Self:
        """A container of batch size ``size``, same structure; each leaf ``make(leaf,
        shape)`` with ``shape`` the new batch dims followed by the leaf's own feature dims."""
        if len(size) == 1 and not isinstance(size[0], builtins.int):
            size = tuple(size[0])
        new_bs = torch.Size(size)
        nd = len(self.batch_size)

        def build(node: Any) -> Any:
            out: dict[str, Any] = {}
            for k, v in node._tensordict.items():
                if isinstance(v, Tensor):
                    out[k] = make(v, (*new_bs, *v.shape[nd:]))
                elif type(v) is NonTensorData:
                    out[k] = v if not v.stacked else NonTensorData(v.data.flat[0])
                else:
                    out[k] = build(v)
            bs = torch.Size((*new_bs, *node._batch_size[nd:]))
            return node._new_unsafe(out, bs, node._device)

        res: Self = build(self)
        return res

    def new_zeros(
        self,
        *size: Any,
        dtype: torch.dtype | None = None,
        device: Any = None,
        requires_grad: builtins.bool = False,
    ) -> Self:
        """A container of batch size ``size`` with this structure, every leaf zeros (of its
        own dtype and feature shape unless ``dtype``), as ``Tensor.new_zeros``.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.ones(4, 3), batch_size=[4]).new_zeros(2, 5)["a"].shape
        torch.Size([2, 5, 3])
        """
        return self._new_filled(
            size,
            lambda t, s: t.new_zeros(s, dtype=dtype, device=device, requires_grad=requires_grad),
        )

    def new_ones(
        self,
        *size: Any,
        dtype: torch.dtype | None = None,
        device: Any = None,
        requires_grad: builtins.bool = False,
    ) -> Self:
        """``new_zeros`` filled with ones.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(4), batch_size=[4]).new_ones(2)["a"].tolist()
        [1.0, 1.0]
        """
        return self._new_filled(
            size,
            lambda t, s: t.new_ones(s, dtype=dtype, device=device, requires_grad=requires_grad),
        )

    def new_empty(
        self,
        *size: Any,
        dtype: torch.dtype | None = None,
        device: Any = None,
        requires_grad: builtins.bool = False,
    ) -> Self:
        """``new_zeros`` left uninitialised.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(4), batch_size=[4]).new_empty(3).batch_size
        torch.Size([3])
        """
        return self._new_filled(
            size,
            lambda t, s: t.new_empty(s, dtype=dtype, device=device, requires_grad=requires_grad),
        )

    def new_full(
        self,
        size: Any,
        fill_value: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        requires_grad: builtins.bool = False,
    ) -> Self:
        """``new_zeros`` filled with ``fill_value``.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(4), batch_size=[4]).new_full([2], 7.0)["a"].tolist()
        [7.0, 7.0]
        """
        return self._new_filled(
            (size,) if isinstance(size, builtins.int) else tuple(size),
            lambda t, s: t.new_full(
                s, fill_value, dtype=dtype, device=device, requires_grad=requires_grad
            ),
        )

    def new_tensor(
        self,
        data: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        requires_grad: builtins.bool = False,
    ) -> Any:
        """A copy of ``data`` (a container) on this container's device unless ``device``,
        as ``Tensor.new_tensor`` (which warns that ``clone().detach()`` is preferred).

        >>> import torch, warnings; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), batch_size=[2])
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     td.new_tensor(td + 1)["a"].tolist()
        [1.0, 1.0]
        """
        if not is_container(data):
            # a tensor or array-like: every leaf's ``leaf.new_tensor(data)`` (its dtype),
            # batch size data's shape, on data's device unless ``device``
            shape = data.shape if isinstance(data, Tensor) else torch.as_tensor(data).shape
            on = device if device is not None else getattr(data, "device", None)
            made: Any = self.apply(
                lambda t: t.new_tensor(
                    data, dtype=dtype or t.dtype, device=on or t.device, requires_grad=requires_grad
                ),
                batch_size=shape,
                device=on,
            )
            return made
        dev = self._device if device is None else device
        out = data.apply(
            lambda t: t.new_tensor(t, dtype=dtype, device=dev, requires_grad=requires_grad)
        )
        return out.to(dev) if dev is not None else out

    # -------------------------------------------------------------- conversions

    def to_dict(self, *, retain_none: builtins.bool = True) -> dict[str, Any]:
        """A nested ``dict`` of tensors (plain values for non-tensor entries); tensors shared.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(1), n={"b": "x"}).to_dict()
        {'a': tensor([0.]), 'n': {'b': 'x'}}
        """
        out = {
            k: v if isinstance(v, Tensor) else v.value if type(v) is _NTD else v.to_dict()
            for k, v in self._tensordict.items()
        }
        if retain_none:  # a tensorclass field set to None has no entry: show it as None
            for f in getattr(type(self), "__tc_fields__", ()):
                out.setdefault(f.name, None)
        return out

    def to_tensordict(self, *, retain_none: builtins.bool | None = None) -> TensorDict:
        """A plain ``TensorDict`` copy: tensors cloned, nested tensorclasses converted too.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), batch_size=[2])
        >>> out = td.to_tensordict()
        >>> out["a"] is td["a"], (out == td).all()
        (False, True)
        """
        del retain_none  # None fields are stored as non-tensor data and always kept
        out: TensorDict = _tree.new_plain(
            {
                k: v.clone()
                if isinstance(v, Tensor)
                else v
                if type(v) is _NTD
                else v.to_tensordict()
                for k, v in self._tensordict.items()
            },
            self._batch_size,
            self._device,
        )
        return out

    def numpy(self) -> dict[str, Any]:
        """Nested dict of NumPy arrays (``Tensor.numpy``: shares memory; CPU, no grad).

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.ones(2), b={"c": torch.zeros(1)}).numpy()["b"]["c"]
        array([0.], dtype=float32)
        """
        out: dict[str, Any] = {}
        for k, v in self.items():
            if isinstance(v, Tensor) or is_container(v):
                out[cast(str, k)] = v.numpy()  # top-level keys: always str
            elif type(v) is _NTD:  # a non-tensor entry: its value, as tensordict
                out[cast(str, k)] = v.value
            elif v is not None:
                out[cast(str, k)] = v
        return out

    def tolist(self, *, convert_tensors: builtins.bool = False) -> Any:
        """Nested lists (one level per batch dim) of per-element ``to_dict()`` dicts.

        With ``convert_tensors`` the tensors become Python lists too.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.tensor([1, 2]), batch_size=[2]).tolist(convert_tensors=True)
        [{'a': 1}, {'a': 2}]
        """
        if self.batch_dims:
            return [x.tolist(convert_tensors=convert_tensors) for x in self.unbind(0)]  # type: ignore[attr-defined]
        d = self.to_dict()
        return _tolist(d) if convert_tensors else d

    def to_padded_tensor(
        self, padding: builtins.float = 0.0, mask_key: NestedKey | None = None
    ) -> Self:
        """Every jagged leaf padded to its longest row with ``padding`` (``[rows, longest,
        *feature]``, as ``torch.nested.to_padded_tensor``); other leaves kept as they are.
        With ``mask_key``, the ``[rows, longest]`` bool mask of the real values of the
        first jagged leaf is set under that key (on a tensorclass, a field: declare
        ``mask: torch.Tensor | None = None``). The result is a new, unlocked container
        in memory, whatever ``self`` is.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> nt = torch.nested.nested_tensor([torch.arange(2), torch.arange(1)], layout=torch.jagged)
        >>> batch = TensorDict(tokens=nt, batch_size=[2]).to_padded_tensor(-1, mask_key="mask")
        >>> batch["tokens"].tolist(), batch["mask"].tolist()
        ([[0, 1], [0, -1]], [[True, True], [True, False]])
        """
        return _jagged_pad.pad_tree(self, padding, mask_key)  # type: ignore[type-var]

    def pad_rows(
        self, index: Any, padding: builtins.float = 0.0, mask_key: NestedKey | None = None
    ) -> Self:
        """``self[index].to_padded_tensor(padding, mask_key)`` in one step: each jagged
        leaf's selected rows are gathered straight into the padding, with no jagged
        batch built in between. As a DataLoader's ``collate_fn`` over the row numbers,
        it serves padded batches: ``DataLoader(range(len(ds)), batch_size=64,
        shuffle=True, collate_fn=ds.pad_rows)``.

        >>> import torch
        >>> from tensorbox import TensorDict
        >>> nt = torch.nested.nested_tensor([torch.arange(2), torch.arange(3)], layout=torch.jagged)
        >>> TensorDict(tokens=nt, batch_size=[2]).pad_rows([1, 0], -1)["tokens"].tolist()
        [[0, 1, 2], [0, 1, -1]]
        """
        return _jagged_pad.pad_rows(self, index, padding, mask_key)  # type: ignore[type-var]

    def cat_from_tensordict(
        self,
        dim: builtins.int = 0,
        *,
        sorted: builtins.bool | Sequence[NestedKey] | None = None,
        out: Any = None,
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
        self,
        dim: builtins.int = 0,
        *,
        sorted: builtins.bool | Sequence[NestedKey] | None = None,
        out: Any = None,
    ) -> Tensor:
        """Every tensor leaf stacked along a new dim ``dim`` (see ``cat_from_tensordict``)."""
        return torch.stack(_leaf_list(self, sorted), dim, out=out)

    # ----------------------------------------------------------------------------
    # tensordict's compatibility names: other spellings of methods of this job, and
    # stand-ins kept so that code written for tensordict runs unchanged. New code and
    # the docs use the names above.

    def type(self, dst_type: torch.dtype) -> Self:
        """Every tensor leaf cast to ``dst_type`` (integer leaves too), as ``Tensor.type``.

        >>> from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2), b=torch.arange(2)).type(torch.int32)["a"].dtype
        torch.int32
        """
        out: Self = _apply.map_leaves(self, lambda t: t.type(dst_type))
        return out

    def data_ptr(self, *, storage: builtins.bool = False) -> Self:
        """Same structure, batch size ``[]``: each leaf's ``data_ptr()`` as an int64 tensor
        (with ``storage``, the address of the leaf's whole storage).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(4), batch_size=[4])
        >>> td.data_ptr()["a"].item() == td["a"].data_ptr()
        True
        """
        if storage:
            return self.apply(lambda t: torch.tensor(t.untyped_storage().data_ptr()), batch_size=[])
        return self.apply(lambda t: torch.tensor(t.data_ptr()), batch_size=[])

    def param_count(self, *, count_duplicates: builtins.bool = True) -> builtins.int:
        """The number of elements of every tensor leaf, summed (tensordict's name). With
        ``count_duplicates=False`` a tensor held under several keys counts once (the same
        tensor object; two views of one storage are two tensors).

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), b=torch.zeros(2, 3))
        >>> td["c"] = td["a"]
        >>> td.param_count(), td.param_count(count_duplicates=False)
        (12, 9)
        """
        return sum(t.numel() for t in _counted_leaves(self, count_duplicates))

    def bytes(self, *, count_duplicates: builtins.bool = False) -> builtins.int:
        """The bytes of every tensor leaf, summed (tensordict's name); a tensor held under
        several keys counts once unless ``count_duplicates``.

        >>> from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), b=torch.zeros(2, dtype=torch.int64))
        >>> td["c"] = td["a"]
        >>> td.bytes(), td.bytes(count_duplicates=True)
        (28, 40)
        """
        return sum(t.numel() * t.element_size() for t in _counted_leaves(self, count_duplicates))


def _no_names(names: Any) -> None:
    if names is not None:
        raise TypeError(f"names={names!r}: tensorbox has no named batch dims; drop the argument")


def _leaf_list(obj: Any, order: bool | Sequence[NestedKey] | None) -> list[Tensor]:
    keys = [k for k, v in obj.items(True, True) if isinstance(v, Tensor)]
    if order is True:
        keys.sort(key=lambda k: (k,) if isinstance(k, str) else k)
    elif order:
        keys = list(order)
    return [obj.get(k) for k in keys]


def _counted_leaves(obj: Any, count_duplicates: bool) -> list[Tensor]:
    leaves = [v for _, v in _leaf_items(obj)]
    if count_duplicates:
        return leaves
    return list({id(t): t for t in leaves}.values())


def _tolist(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _tolist(v) for k, v in d.items()}
    return d.tolist() if isinstance(d, Tensor) else d


def _leaf_items(td: Any) -> list[tuple[tuple[str, ...], Tensor]]:
    out: list[tuple[tuple[str, ...], Tensor]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        for k, v in node._tensordict.items():
            if isinstance(v, Tensor):
                out.append(((*path, k), v))
            elif is_container(v):
                walk(v, (*path, k))

    walk(td, ())
    return out


def _reserve_leaves(td: Any, prefix: tuple[str, ...] = ()) -> None:
    """Reserve the file blocks of every memory-mapped leaf before an in-place write of
    all of them (``apply_``, ``zero_``...): on a sparse file (``memmap_like``) and a full
    disk, an ``OSError`` naming the key before anything is written, never a SIGBUS."""
    for k, v in td._tensordict.items():
        if isinstance(v, Tensor):
            if type(v) is not Tensor and not v.is_nested:  # a plain tensor has no file
                _ports.reserve(v, (*prefix, k))
        elif is_container(v):
            _reserve_leaves(v, (*prefix, k))
