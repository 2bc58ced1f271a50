"""Non-tensor values carried beside the tensors of a container.

A ``NonTensorData`` holds one Python value shared by every batch element (a
string, a number, a list...). Stacking containers whose values differ gives a
*stacked* ``NonTensorData``: a numpy object array with one value per batch
element over the stacked dims, so indexing keeps working.

>>> import numpy as np
>>> NonTensorData("a").data
'a'
>>> s = NonTensorData.stack([NonTensorData("a"), NonTensorData("b")], 0, ())
>>> s.stacked, s.tolist()
(True, ['a', 'b'])
>>> s[1].data
'b'
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from tensorbox._core.linkedlist import linked
from tensorbox._core.modeswitch import ModeSwitch, env_flag
from tensorbox._core.shape import index_dims, list_shape
from tensorbox._core.unbatched import UnbatchedTensor
from tensorbox.errors import BatchDimError, BatchSizeError

__all__ = [
    "MetaData",
    "NonTensorData",
    "NonTensorStack",
    "capture_non_tensor_stack",
    "cpu_index",
    "read",
    "set_capture_non_tensor_stack",
    "wrap",
]

#: ``[mode]``: read by ``torch.stack`` of containers holding non-tensor values.
_CAPTURE: list[bool] = [env_flag("CAPTURE_NONTENSOR_STACK")]


def capture_non_tensor_stack() -> bool:
    """True while ``torch.stack`` of equal non-tensor values keeps one value (see
    :class:`set_capture_non_tensor_stack`); off by default, as in tensordict.

    >>> from tensorbox import capture_non_tensor_stack
    >>> capture_non_tensor_stack()
    False
    """
    return _CAPTURE[0]


class set_capture_non_tensor_stack(ModeSwitch):
    """Switch tensordict's capture of equal non-tensor values on ``torch.stack``.

    Off (the default), stacking containers gives a value per row. On, values that are
    all equal stay one shared value (different ones still give a value per row). A
    context manager and a decorator, or ``.set()`` to switch for good.

    >>> import torch
    >>> from tensorbox import TensorDict, set_capture_non_tensor_stack
    >>> rows = [TensorDict(tag="x"), TensorDict(tag="x")]
    >>> torch.stack(rows)["tag"]
    LinkedList(['x', 'x'])
    >>> with set_capture_non_tensor_stack(True):
    ...     torch.stack(rows)["tag"]
    'x'
    """

    _state = _CAPTURE


class NonTensorData:
    """A non-tensor value inside a container.

    ``stacked=False``: ``data`` is one value shared by the whole batch.
    ``stacked=True``: ``data`` is a numpy object array whose shape is exactly the
    batch size of the container holding it (one value per batch element).

    ``batch_size`` and ``device`` are tensordict's arguments: the batch the value is
    declared for (``batch_size`` and ``tolist()`` report it) and a device it goes with.
    A container holding the value uses its own batch size and device instead, as
    tensordict does; shape ops and indexing keep a shared value as it is.

    ``meta=True`` (what :class:`MetaData` builds): the value is metadata of the whole
    batch, as tensordict's ``MetaData``: ``expand``, ``unsqueeze`` and a stack of equal
    values keep it one shared value instead of one value per element.

    >>> d = NonTensorData("a", batch_size=[2])
    >>> d.batch_size, d.tolist(), d.value
    (torch.Size([2]), ['a', 'a'], 'a')
    """

    __slots__ = ("_batch_size", "data", "device", "meta", "stacked")

    def __init__(
        self,
        data: Any,
        *,
        batch_size: Sequence[int] | int | None = None,
        device: Any = None,
        stacked: bool = False,
        meta: bool = False,
    ) -> None:
        self.data = data
        self.stacked = stacked
        self.meta = meta and not stacked
        self.device = None if device is None else torch.device(device)
        self._batch_size = None if batch_size is None else _batch_arg(batch_size)
        if stacked and self._batch_size is not None and self._batch_size != data.shape:
            raise ValueError(
                f"NonTensorData: batch_size {tuple(self._batch_size)} does not match the "
                f"stacked values' shape {data.shape}; leave batch_size out for a stack"
            )

    @property
    def batch_size(self) -> torch.Size:
        """The declared batch size (a stack's shape; ``torch.Size([])`` when not given)."""
        if self.stacked:
            return torch.Size(self.data.shape)
        return self._batch_size if self._batch_size is not None else torch.Size()

    @property
    def value(self) -> Any:
        """What ``td[key]`` returns: the value, or a (nested) list for a stack."""
        return self.data.tolist() if self.stacked else self.data

    def tolist(self) -> Any:
        """The value per batch element as nested lists (just the value when unbatched).

        >>> NonTensorData(0, batch_size=[2, 1]).tolist(), NonTensorData(0).tolist()
        ([[0], [0]], 0)
        """
        if not self.stacked and self._batch_size:
            return _filled(self.data, tuple(self._batch_size)).tolist()
        return self.value

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> NonTensorData:
        """Apply a batch-shape op given as a function on tensors (indexing, permute...).

        The op runs on a tensor of element numbers shaped like the batch, and the
        values are gathered with its result, so every op has torch's semantics.
        """
        if not self.stacked:
            return self
        ix = fn(torch.arange(self.data.size).reshape(self.data.shape))
        out = self.data.reshape(-1)[ix.numpy()]
        if not isinstance(out, np.ndarray) or out.ndim == 0:
            return NonTensorData(out.item() if isinstance(out, np.ndarray) else out)
        return NonTensorData(out, stacked=True)  # rows of a stack stay a stack (tensordict)

    def __getitem__(self, idx: Any) -> NonTensorData:
        idx = cpu_index(idx)  # the element numbers live on the CPU
        if not self.stacked:
            return self if self._batch_size is None else self._op(lambda t: t[idx])
        return self.map_batch(lambda t: t[idx])

    # ------------------------------------------- shape ops of a value on its own

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        """``torch.stack`` / ``torch.cat`` of values on their own give a stack.

        >>> torch.stack([NonTensorData("a"), NonTensorData("b")]).tolist()
        ['a', 'b']
        """
        kwargs = kwargs or {}
        if func in (torch.stack, torch.cat) and args and not kwargs.get("out"):
            items = list(args[0])
            dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
            if all(type(it) is NonTensorData for it in items):
                if func is torch.stack and _all_meta(items) and _all_same(items):
                    first = items[0]  # equal MetaData values stay one, with a new batch
                    size = first.batch_size
                    new = torch.stack([torch.empty(()).expand(size)] * len(items), dim).shape
                    return NonTensorData(first.data, batch_size=new, device=first.device, meta=True)
                if func is torch.stack:
                    return NonTensorStack(*items, stack_dim=dim)  # type: ignore[call-arg]  # the metaclass builds it
                arrays = [it.full(it.batch_size) for it in items]
                return NonTensorData(np.concatenate(arrays, axis=dim), stacked=True)
        return NotImplemented

    @property
    def shape(self) -> torch.Size:
        """Same as :attr:`batch_size`."""
        return self.batch_size

    def _op(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> NonTensorData:
        """A batch-shape op on this value on its own: a stack is rearranged; one shared
        value stays one value with the new batch size."""
        if self.stacked:
            return self.map_batch(fn)
        new = fn(torch.empty(()).expand(self.batch_size)).shape
        return NonTensorData(self.data, batch_size=new, device=self.device, meta=self.meta)

    def view(self, *shape: Any) -> NonTensorData:
        """The values with batch shape ``shape`` (torch's ``view`` rules).

        >>> NonTensorStack(*"abcd").view(2, 2).tolist()
        [['a', 'b'], ['c', 'd']]
        """
        return self._op(lambda t: t.reshape(*shape))

    reshape = view

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> NonTensorData:
        """Batch dims ``start_dim..end_dim`` merged into one."""
        return self._op(lambda t: t.flatten(start_dim, end_dim))

    def unsqueeze(self, dim: int) -> NonTensorData:
        """A batch dim of size 1 inserted at ``dim`` (a value per element, as tensordict)."""
        return self._grown(self._op(lambda t: t.unsqueeze(dim)))

    def squeeze(self, dim: int | None = None) -> NonTensorData:
        """Batch dims of size 1 removed (only ``dim`` when given)."""
        return self._op(lambda t: t.squeeze() if dim is None else t.squeeze(dim))

    def expand(self, *shape: Any) -> NonTensorData:
        """The batch broadcast to ``shape``. One shared value stays one value where no
        dim is added; new leading dims give a value per element, as tensordict.

        >>> NonTensorData(0, batch_size=[3]).expand(2, 3).tolist()
        [[0, 0, 0], [0, 0, 0]]
        >>> NonTensorData("a").expand(2).stacked, NonTensorData("a", batch_size=[1]).expand(3).stacked
        (True, False)
        """
        return self._grown(self._op(lambda t: t.expand(*shape)))

    def _grown(self, out: NonTensorData) -> NonTensorData:
        """``out`` (this value after a shape op) as one value per element when the op
        added batch dims to one shared value: tensordict's ``expand`` and ``unsqueeze``
        (a ``MetaData`` stays one value, as tensordict's)."""
        if out.stacked or out.meta or len(out.batch_size) <= len(self.batch_size):
            return out
        return NonTensorData(out.full(out.batch_size), stacked=True, device=self.device)

    def permute(self, *dims: Any) -> NonTensorData:
        """The batch dims reordered, as ``Tensor.permute``."""
        return self._op(lambda t: t.permute(*dims))

    def transpose(self, dim0: int, dim1: int) -> NonTensorData:
        """Batch dims ``dim0`` and ``dim1`` swapped."""
        return self._op(lambda t: t.transpose(dim0, dim1))

    def repeat(self, *sizes: Any) -> NonTensorData:
        """The batch tiled ``sizes`` times per dim, as ``Tensor.repeat``.

        >>> NonTensorStack("a", "b").repeat(2).tolist()
        ['a', 'b', 'a', 'b']
        """
        return self._op(lambda t: t.repeat(*sizes))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> NonTensorData:
        """Each element repeated ``repeats`` times along ``dim``, as ``Tensor.repeat_interleave``."""
        return self._op(lambda t: t.repeat_interleave(repeats, dim))

    def clone(self, recurse: bool = True) -> NonTensorData:
        """A copy holding a deep copy of the value(s) (``recurse=False``: the same ones).

        >>> d = NonTensorData(["x"], batch_size=[2])
        >>> c = d.clone()
        >>> c.data == d.data, c.data is d.data, c.batch_size
        (True, False, torch.Size([2]))
        """
        data = copy.deepcopy(self.data) if recurse else self.data
        if self.stacked:
            return NonTensorData(data if recurse else data.copy(), stacked=True, device=self.device)
        return NonTensorData(data, batch_size=self._batch_size, device=self.device, meta=self.meta)

    def contiguous(self, *args: Any, **kwargs: Any) -> NonTensorData:
        """The values themselves (they are always held in one array)."""
        return self

    def where(
        self, condition: Any, other: Any, *, out: NonTensorData | None = None, pad: Any = None
    ) -> NonTensorData:
        """This value where ``condition`` (a bool tensor shaped like the batch) holds, else
        ``other``'s; ``out``, when given, receives the result. ``pad`` (tensordict's filler
        for missing keys) has nothing to fill for one value.

        >>> a, b = NonTensorStack("a", "a"), NonTensorStack("b", "b")
        >>> a.where(torch.tensor([True, False]), b).tolist()
        ['a', 'b']
        """
        del pad
        cond = torch.as_tensor(condition, dtype=torch.bool).cpu()
        shape = tuple(torch.broadcast_shapes(cond.shape, self.batch_size))  # type: ignore[no-untyped-call]
        mine = _to_shape(self, shape)
        theirs = _to_shape(
            other if isinstance(other, NonTensorData) else NonTensorData(other), shape
        )
        picked = np.where(np.broadcast_to(cond.numpy(), shape), mine, theirs)
        res = NonTensorData(picked, stacked=True)
        if out is None:
            return res
        out.data, out.stacked, out._batch_size = res.data, True, None
        return out

    def unbind(self, dim: int, n: int) -> list[NonTensorData]:
        """The ``n`` slices along batch dim ``dim`` (``n`` is that dim's size)."""
        if not self.stacked:
            return [self] * n
        out = []
        for x in np.moveaxis(self.data, dim, 0):
            if isinstance(x, np.ndarray) and x.ndim:
                out.append(per_row(x))
            else:  # a 1-D array iterates over its objects
                out.append(NonTensorData(x.item() if isinstance(x, np.ndarray) else x))
        return out

    def full(self, batch_size: Sequence[int]) -> np.ndarray:
        """An object array shaped like ``batch_size`` holding one value per element."""
        if self.stacked:
            stacked: np.ndarray = self.data
            return stacked
        return _filled(self.data, tuple(batch_size))

    @staticmethod
    def stack(items: Sequence[NonTensorData], dim: int, batch_size: Sequence[int]) -> NonTensorData:
        """A value per element, even where every item holds the same one (tensordict's
        ``NonTensorStack``: rows stacked give a list of their values).

        ``batch_size`` is the common batch size of the stacked containers.
        """
        if type(items[0].data) is UnbatchedTensor:
            return _one_unbatched(items, "stack")
        if (_CAPTURE[0] or torch.compiler.is_compiling() or _all_meta(items)) and _all_same(items):
            # captured (tensordict's switch), compiled (no object arrays in a graph), or
            # metadata (tensordict's ``MetaData`` stays one value when the rows agree)
            return items[0]
        return per_row(np.stack([it.full(batch_size) for it in items], axis=dim))

    @staticmethod
    def cat(
        items: Sequence[NonTensorData], dim: int, batch_sizes: Sequence[Sequence[int]]
    ) -> NonTensorData:
        """Concatenate along batch dim ``dim``; ``batch_sizes`` are the inputs' batch sizes."""
        if _all_same(items):
            return items[0]
        if type(items[0].data) is UnbatchedTensor:
            return _one_unbatched(items, "cat")
        parts = [it.full(bs) for it, bs in zip(items, batch_sizes)]
        return per_row(np.concatenate(parts, axis=dim))

    def pad(
        self,
        pad_size: Sequence[int],
        value: Any = None,
        *,
        inplace: bool = False,
        safe: bool = True,
    ) -> NonTensorData:
        """Pad (or, with negative sizes, crop) the batch dims as ``TensorDict.pad``:
        new rows hold None. A shared value becomes a stack, so it is refused in place
        (``BatchSizeError``); a stack padded in place stays the same object.

        >>> NonTensorStack("a", "b").pad([1, 0]).tolist()
        [None, 'a', 'b']
        """
        sizes = [int(p) for p in pad_size]
        shape = tuple(self.batch_size)
        if len(sizes) % 2 or len(sizes) // 2 > len(shape):
            raise BatchDimError(
                f"pad: pad_size {sizes} must hold one (before, after) pair per padded batch "
                f"dim; the batch size {shape} has {len(shape)} dim(s)"
            )
        pairs = [(sizes[2 * i], sizes[2 * i + 1]) for i in range(len(sizes) // 2)]
        if any(n + b + a < 0 for n, (b, a) in zip(shape, pairs, strict=False)):
            raise BatchSizeError(
                f"pad: pad_size {sizes} gives a negative output size for batch_size {shape}"
            )
        if inplace and not self.stacked:
            raise BatchSizeError(
                "pad(inplace=True): a NonTensorData holding one shared value cannot preserve "
                "the identity (padding makes it a stack of values); pad it without inplace"
            )
        src = self if self.stacked else NonTensorData(self.full(shape), stacked=True)
        out = pad_values(src, pairs)
        if inplace:
            self.data = out.data
            return self
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NonTensorData):
            return NotImplemented
        if self.stacked != other.stacked:
            return False
        if self.stacked:
            same: bool = self.data.shape == other.data.shape and self.tolist() == other.tolist()
            return same
        return _same(self.data, other.data)

    __hash__ = None  # type: ignore[assignment]

    def __class_getitem__(cls, item: Any) -> type[NonTensorData]:
        """``NonTensorData[str]``: a generic spelling of the value's type, for annotations
        (``custom_data: NonTensorData[str]``); the class itself, so ``isinstance`` and
        construction work with it.

        >>> NonTensorData[str]("abc").data, isinstance(NonTensorData("x"), NonTensorData[str])
        ('abc', True)
        """
        return cls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the value (a function held as data), as tensordict's ``NonTensorData`` does:
        ``apply`` hands non-tensor entries of its other inputs to ``fn`` as they are.

        >>> NonTensorData(lambda x, y: x - y)(3, 1)
        2
        """
        return self.data(*args, **kwargs)

    def __setstate__(self, state: Any) -> None:
        """Unpickle, values pickled before ``meta`` existed included (they are not metadata)."""
        self.meta = False
        slots = state[1] if isinstance(state, tuple) else state
        for k, v in (slots or {}).items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        extra = "" if self._batch_size is None else f", batch_size={list(self._batch_size)}"
        name = "MetaData" if self.meta else "NonTensorData"
        return f"{name}({self.value!r}{extra})"


def _to_shape(v: NonTensorData, shape: tuple[int, ...]) -> np.ndarray:
    arr = v.full(shape if not v.stacked else v.data.shape)
    return np.broadcast_to(arr, shape)


def _all_meta(items: Sequence[NonTensorData]) -> bool:
    return all(it.meta for it in items)


class _MetaType(type):
    """``MetaData(value)`` builds a ``NonTensorData`` marked as metadata
    (``meta=True``); ``isinstance(x, MetaData)`` is true for those. ``MetaData[T]`` is a
    subclass whose values must be instances of ``T``."""

    _type: type | None = None

    def __instancecheck__(cls, obj: Any) -> bool:
        if type(obj) is not NonTensorData or not obj.meta:
            return False
        return cls._type is None or isinstance(obj.data, cls._type)

    def __call__(
        cls, data: Any, *, batch_size: Sequence[int] | int | None = None, device: Any = None
    ) -> NonTensorData:
        if cls._type is not None and not isinstance(data, cls._type):
            raise TypeError(
                f"MetaData[{cls._type.__name__}]: Expected data of type "
                f"{cls._type.__name__}, got {type(data).__name__} ({data!r})"
            )
        return NonTensorData(data, batch_size=batch_size, device=device, meta=True)

    def __getitem__(cls, item: Any) -> _MetaType:
        if not isinstance(item, type):  # ``MetaData[Any]``, ``MetaData["str"]``: unchecked
            return cls
        typed = _TYPED.get(item)
        if typed is None:
            typed = _TYPED[item] = _MetaType(f"MetaData[{item.__name__}]", (cls,), {})
            typed._type = item
        return typed


_TYPED: dict[type, _MetaType] = {}


class MetaData(metaclass=_MetaType):
    """tensordict's metadata of a whole batch: a ``NonTensorData`` (``meta=True``)
    whose one value stays shared through ``expand``, ``unsqueeze`` and a stack of
    equal values (a plain ``NonTensorData`` becomes one value per element there).
    ``MetaData[T]`` checks the value's type.

    >>> import torch
    >>> from tensorbox import TensorDict
    >>> td = TensorDict(m=MetaData("run-1"), s=NonTensorData("x"))
    >>> wide = td.expand(2)
    >>> wide["m"], wide["s"], isinstance(wide.get("m"), MetaData)
    ('run-1', LinkedList(['x', 'x']), True)
    >>> torch.stack([td, td])["m"]
    'run-1'
    >>> MetaData[int]("a")
    Traceback (most recent call last):
    ...
    TypeError: MetaData[int]: Expected data of type int, got str ('a')
    """


class _StackType(type):
    """``NonTensorStack(...)`` builds a stacked NonTensorData; ``isinstance(x,
    NonTensorStack)`` is true for those (a stack is a NonTensorData holding one value
    per batch element)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type(obj) is NonTensorData and obj.stacked

    def __call__(
        cls,
        *values: Any,
        stack_dim: int = 0,
        batch_size: Sequence[int] | None = None,
        device: Any = None,
    ) -> NonTensorData:
        if not values:
            raise ValueError("NonTensorStack needs at least one value")
        items = [v if type(v) is NonTensorData else NonTensorData(v) for v in values]
        first = items[0].batch_size
        for i, it in enumerate(items[1:], 1):
            if it.batch_size != first:
                raise ValueError(
                    f"NonTensorStack: value {i} has batch_size {tuple(it.batch_size)}, value 0 "
                    f"has {tuple(first)}; stacked values share a batch size"
                )
        arr = np.stack([it.full(first) for it in items], axis=stack_dim)
        out = NonTensorData(arr, stacked=True, device=device)
        if batch_size is not None and tuple(batch_size) != arr.shape:
            raise ValueError(
                f"NonTensorStack: batch_size {tuple(batch_size)} does not match the stacked "
                f"shape {arr.shape}"
            )
        return out


class NonTensorStack(metaclass=_StackType):
    """tensordict's name for non-tensor values stacked along batch dims: here a
    ``NonTensorData`` holding one value per batch element (``stacked=True``).

    >>> s = NonTensorStack("a", "b", "c")
    >>> type(s).__name__, s.batch_size, s[1].data, isinstance(s, NonTensorStack)
    ('NonTensorData', torch.Size([3]), 'b', True)
    >>> NonTensorStack.from_list([["a", "b"], ["c", "d"]])[:, 1].tolist()
    ['b', 'd']
    """

    @staticmethod
    def from_list(values: list[Any]) -> NonTensorData:
        """A stack shaped like the nested lists ``values`` (NonTensorData items unwrapped)."""
        shape = list_shape(values)
        arr = np.empty(tuple(shape), dtype=object)
        for pos in np.ndindex(*shape):
            item: Any = values
            for d, i in enumerate(pos):
                if type(item) is not list or len(item) != shape[d]:
                    raise ValueError(
                        f"NonTensorStack.from_list: the lists are ragged at {list(pos[:d])} "
                        f"(expected {shape[d]} items); give one value per element of {shape}"
                    )
                item = item[i]
            arr[pos] = item.data if type(item) is NonTensorData else item
        return NonTensorData(arr, stacked=True)


def wrap(v: NonTensorData, batch_size: torch.Size) -> Any:
    """What ``get`` of entry ``v`` in a container of ``batch_size`` gives, as in tensordict:
    a stack itself (its shape is that batch size), a shared value as a ``NonTensorData``
    reporting that batch size, an UnbatchedTensor reporting it.

    >>> wrap(NonTensorData("a"), torch.Size([2])).tolist()
    ['a', 'a']
    """
    if v.stacked:
        return v
    data = v.data
    if type(data) is UnbatchedTensor:
        return data.in_batch(batch_size)
    out = _NEW(NonTensorData)
    out.data = data
    out.stacked = False
    out.device = v.device
    out._batch_size = batch_size
    out.meta = v.meta
    return out


_NEW = object.__new__


def read(v: NonTensorData, batch_size: torch.Size, owner: Any = None, key: Any = ()) -> Any:
    """What reading entry ``v`` (at ``key`` of ``owner``) of a container of ``batch_size``
    gives: the value, an UnbatchedTensor that reports that batch size, or for a value per
    row a ``LinkedList`` whose item writes reach ``owner`` (as tensordict's)."""
    data = v.data
    if v.stacked:
        if owner is None or not data.ndim:
            return data.tolist()
        return linked(data, owner, key if type(key) is tuple else (key,), NonTensorData)
    if type(data) is UnbatchedTensor:
        return data.in_batch(batch_size)
    return data


def _one_unbatched(items: Sequence[NonTensorData], what: str) -> NonTensorData:
    """Joining containers keeps one UnbatchedTensor: the first, with a warning when the
    others hold different memory (their values are dropped)."""
    first: UnbatchedTensor = items[0].data
    if not all(first.same_data(it.data) for it in items[1:]):
        warnings.warn(
            f"{what}: the UnbatchedTensor entries have different data storage; the result "
            "keeps the first one's",
            UserWarning,
            stacklevel=4,
        )
    return items[0]


def per_row(values: np.ndarray) -> NonTensorData:
    """Values shaped like the batch, kept per row even where every row holds the same
    one (tensordict's ``NonTensorStack`` stays a stack): the rule for non-tensor values
    after any index, stack, cat or row write.

    >>> import numpy as np
    >>> per_row(np.array(["a", "a"], dtype=object)).value, per_row(np.array(["a", "b"], dtype=object)).value
    (['a', 'a'], ['a', 'b'])
    """
    return NonTensorData(values, stacked=True)


def cpu_index(index: Any) -> Any:
    """``index`` with every tensor in it moved to the CPU."""
    if isinstance(index, torch.Tensor):
        return index.cpu()
    if isinstance(index, tuple):
        return tuple(cpu_index(i) for i in index)
    return index


def _batch_arg(batch_size: Sequence[int] | int) -> torch.Size:
    dims = (batch_size,) if isinstance(batch_size, int) else tuple(batch_size)
    not_ints = "NonTensorData: batch_size {given!r} is not a sequence of ints"
    negative = "NonTensorData: batch_size {dims} has a negative dim"
    return torch.Size(index_dims(dims, not_ints, negative, batch_size))


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _all_same(items: Sequence[NonTensorData]) -> bool:
    first = items[0]
    return not first.stacked and all(
        (not it.stacked) and _same(it.data, first.data) for it in items[1:]
    )


def _filled(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.empty(shape, dtype=object)
    arr.fill(value)  # for an object array: the same object everywhere, never broadcast
    return arr


def pad_values(v: NonTensorData, pairs: list[tuple[int, int]]) -> NonTensorData:
    """A stack of per-row values, cropped or padded with None like tensors along the
    leading dims: one ``(before, after)`` pair per dim (negative sizes crop)."""
    arr = v.data
    arr = arr[
        tuple(
            slice(max(-b, 0), n - max(-a, 0)) for n, (b, a) in zip(arr.shape, pairs, strict=False)
        )
    ]
    lead = [max(b, 0) for b, _ in pairs]
    shape = tuple(
        n + lead[d] + max(pairs[d][1], 0) if d < len(pairs) else n for d, n in enumerate(arr.shape)
    )
    out = np.full(shape, None, dtype=object)
    out[tuple(slice(lead[d], lead[d] + arr.shape[d]) for d in range(len(pairs)))] = arr
    return NonTensorData(out, stacked=True, device=v.device)
