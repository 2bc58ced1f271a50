"""MemoryMappedTensor: a tensor whose storage is a file.

A :class:`MemoryMappedTensor` is a ``torch.Tensor`` subclass over storage that
``torch.UntypedStorage.from_file`` maps from a file. Torch's subclass machinery
is switched off (``__torch_function__`` is the disabled implementation), so
every operation returns a plain ``torch.Tensor``, except the ones that make views
of the file: indexing, ``unbind``, ``split`` and ``chunk`` give a MemoryMappedTensor
(with its ``filename``) when the result shares the file, a plain tensor when it is a
copy (``t[index_tensor]``), as tensordict's do. Arithmetic costs what it costs on a
plain tensor.

>>> import os, tempfile, torch
>>> path = os.path.join(tempfile.mkdtemp(), "x.memmap")
>>> t = MemoryMappedTensor.from_tensor(torch.arange(6).reshape(2, 3), filename=path)
>>> row = t[1]                    # a view of the file, still naming it
>>> type(row).__name__, row.filename == path, type(t[torch.tensor([0])]) is torch.Tensor
('MemoryMappedTensor', True, True)
>>> type(t + 1) is torch.Tensor   # computed values live in memory
True
>>> t[0, 0] = 7                   # "r+" (the default): writes reach the file
>>> ro = MemoryMappedTensor.from_filename(path, torch.int64, (2, 3), mode="r")
>>> ro[0].tolist()
[7, 1, 2]
>>> ro[0, 0] = -1                 # "r": copy-on-write; the file never changes
>>> MemoryMappedTensor.from_filename(path, torch.int64, (2, 3), mode="r")[0, 0].item()
7

Modes. ``"r+"`` maps the file shared (``MAP_SHARED``): writes reach the file and
every process that maps it. ``"r"`` maps it private (``MAP_PRIVATE``, opened
read-only): a write changes this process's copy of the touched pages and never the
file. A truly read-only mapping would turn a write into a segfault, since torch
has no read-only tensors.

Without a ``filename`` the tensor lives in anonymous shared memory
(``filename`` is None): nothing to clean up, and ``torch.multiprocessing``
(DataLoader workers) shares it without copying.

Pickling. A file-backed tensor, or any view of one, pickles as a reference to its
file: the receiving process maps the same file, and a reference whose file was
replaced since is refused, never mapped.

Writes. A new tensor's file is written from the tensor's own bytes, never into an
existing file (another mapping may be reading it): the new content goes to a
temporary file that replaces it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from tensorbox._core import ports as _ports
from tensorbox._storage import memmap_nested as _nested
from tensorbox._storage.filewrite import write_file
from tensorbox._storage.memmap_args import (
    MemmapDeviceError,
    MemmapFileExistsError,
    check_device,
    like_input,
    shape_from,
)
from tensorbox.errors import FormatError

__all__ = [
    "MemmapDeviceError",
    "MemmapFileExistsError",
    "MemoryMappedTensor",
]

#: Largest piece copied through RAM when writing a non-contiguous or non-CPU tensor.
# Linux writes at most 0x7FFFF000 bytes per write() call.
_MAX_WRITE = 1 << 30
_O_BINARY = getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
_MODES = ("r+", "r")
_NO_FILL: Any = object()  # full() without fill_value= takes it from the positionals


def _strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def _check_mode(mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(
            f"mode {mode!r} is not one of {_MODES!r}: 'r+' reads and writes the file, "
            "'r' never writes it (copy-on-write)"
        )


# ---------------------------------------------------------------- mapping files


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _map_storage(
    path: str, mode: str, nbytes: int, ident: tuple[int, int] | None
) -> Any:  # an UntypedStorage, carrying the _tbx_* attributes set here
    """Map ``nbytes`` of ``path``, tagged with what pickling needs (see :func:`shareable`).

    The caller checked that the file exists and is big enough: torch creates a
    missing file, and a shared mapping grows a short one.
    """
    try:
        storage = _from_file(path, mode == "r+", nbytes)
    except RuntimeError as err:
        if mode == "r+" and os.path.exists(path) and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is not writable: open it with mode='r'") from None
        raise OSError(f"cannot map {path}: {err}") from None
    # Torch keeps one Python object per storage, shared by every view, so attributes stick:
    # the file's identity (to notice a file replaced since), and the name of a private
    # mapping, which torch forgets.
    storage._tbx_id = ident if ident is not None else _identity(path)
    if mode == "r":
        storage._tbx_ro = path
    return storage


# Any: the storages it gives carry the attributes set below (_tbx_id, _tbx_gen, _tbx_ro)
_from_file: Callable[..., Any] = torch.UntypedStorage.from_file
# One empty tensor per dtype: ``blank.new()`` is the cheapest way found to a fresh tensor
# (half the cost of torch.empty), and ``set_`` without strides makes a contiguous view.
_BLANKS: dict[torch.dtype, Tensor] = {}


def _blank(dtype: torch.dtype) -> Tensor:
    blank = _BLANKS.get(dtype)
    if blank is None:
        blank = _BLANKS[dtype] = torch.empty(0, dtype=dtype, device="cpu")
    return blank


def map_file(
    path: str,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    mode: str = "r+",
    nbytes: int = -1,
    ident: tuple[int, int] | None = None,
    gen: str | None = None,
) -> MemoryMappedTensor:
    """Map ``path`` (checked by the caller) as a MemoryMappedTensor of ``shape``.

    ``gen`` is the file's generation id in its tree (see the format spec), which
    pickled references carry and check.
    """
    if nbytes < 0:
        nbytes = math.prod(shape) * dtype.itemsize
    # _map_storage inlined: loading calls this once per leaf.
    try:
        storage = _from_file(path, mode == "r+", nbytes)
    except RuntimeError:
        storage = _map_storage(path, mode, nbytes, ident)  # raises the error that explains
    storage._tbx_id = ident if ident is not None else _identity(path)
    storage._tbx_gen = gen
    if mode == "r":
        storage._tbx_ro = path
    blank = _BLANKS[dtype] if dtype in _BLANKS else _blank(dtype)
    # torch's stubs lack set_(storage, offset, size); strides are computed (contiguous)
    t: Tensor = blank.new().set_(storage, 0, shape)  # type: ignore[call-overload]
    # A fresh plain tensor that nothing else references: switching its class is what
    # as_subclass does, without building a second Python object (loading maps one per leaf).
    t.__class__ = MemoryMappedTensor
    return t  # type: ignore[return-value]  # its class was switched just above


def _shared_memory(shape: tuple[int, ...], dtype: torch.dtype) -> MemoryMappedTensor:
    """Zero-filled anonymous shared memory; pages are only allocated when touched."""
    nbytes = math.prod(shape) * dtype.itemsize
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # pragma: no cover - older torch
        return torch.zeros(shape, dtype=dtype).share_memory_().as_subclass(MemoryMappedTensor)  # type: ignore[no-untyped-call, no-any-return]
    t = torch.empty(0, dtype=dtype).set_(new_shared(nbytes), 0, shape, _strides(shape))
    return t.as_subclass(MemoryMappedTensor)


def shared_copy(t: Tensor) -> MemoryMappedTensor:
    """A copy of ``t`` in anonymous shared memory (always a copy, a MemoryMappedTensor too)."""
    out = _shared_memory(tuple(t.shape), t.dtype)
    out.copy_(t.detach())
    return out


def _shape_arg(method: str, args: tuple[Any, ...], shape: Any = None) -> Any:
    """The shape given to ``method``: a tuple of ints, or a nested tensor's 2-d shapes."""
    shapes = _nested.shapes_arg(args, shape)
    return shapes if shapes is not None else shape_from(method, args, shape)


def _nested_of(flat: Tensor, shapes: Tensor) -> MemoryMappedTensor:
    """The nested tensor of ``shapes`` over the flat MemoryMappedTensor ``flat``."""
    return _nested.view(flat, shapes).as_subclass(MemoryMappedTensor)


def _on_storage(storage: Any, dtype: torch.dtype, shape: Any) -> MemoryMappedTensor:
    """A contiguous MemoryMappedTensor of ``shape`` at the start of ``storage``."""
    if isinstance(shape, Tensor):
        return _nested_of(_on_storage(storage, dtype, (_nested.flat_numel(shape),)), shape)
    need = math.prod(shape) * dtype.itemsize
    if storage.nbytes() < need:
        raise FormatError(
            f"the storage holds {storage.nbytes()} bytes, but {dtype} of shape {list(shape)} "
            f"needs {need}"
        )
    t: Tensor = _blank(dtype).new().set_(storage, 0, shape)  # type: ignore[call-overload]
    return t.as_subclass(MemoryMappedTensor)


def _indexed(t: MemoryMappedTensor, index: Any) -> MemoryMappedTensor:
    """``t[index]``, kept a MemoryMappedTensor (tensordict's ``index=`` argument)."""
    if index is None:
        return t
    out: MemoryMappedTensor = t[index].as_subclass(MemoryMappedTensor)
    return out


def _check_size(path: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    need = math.prod(shape) * dtype.itemsize
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist") from None
    if size < need:
        raise FormatError(
            f"{path} is {size} bytes, but {dtype} of shape {list(shape)} needs {need}"
        )


class MemoryMappedTensor(Tensor):
    """A tensor stored in a file (or in anonymous shared memory); see the module doc.

    Build one with :meth:`empty`, :meth:`zeros`, :meth:`ones`, :meth:`full`, their
    ``*_like`` forms, :meth:`from_tensor` (or ``MemoryMappedTensor(data)``) or
    :meth:`from_filename`. Every operation on it returns a plain ``torch.Tensor``,
    except views of its file (indexing, ``unbind``, ``split``, ``chunk``).

    >>> import tempfile, torch; from tensorbox import MemoryMappedTensor
    >>> with tempfile.TemporaryDirectory() as d:
    ...     t = MemoryMappedTensor.from_tensor(torch.arange(4), filename=f"{d}/t.bin")
    ...     t[1] = 7    # writes reach the file
    ...     MemoryMappedTensor.from_filename(f"{d}/t.bin", torch.int64, (4,)).tolist()
    [0, 7, 2, 3]
    """

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @property
    def filename(self) -> str | None:
        """The file behind this tensor, or None for anonymous shared memory."""
        storage = self.untyped_storage()
        return storage.filename or getattr(storage, "_tbx_ro", None)

    @property
    def handler(self) -> Any:
        """The anonymous shared memory (an ``UntypedStorage``) behind this tensor, or None
        for a file: :meth:`from_handler` maps it again with any dtype and shape.

        >>> t = MemoryMappedTensor.zeros(4)
        >>> MemoryMappedTensor.from_handler(t.handler, torch.float32, (2, 2)).shape
        torch.Size([2, 2])
        """
        return None if self.filename is not None else self.untyped_storage()

    # tensordict's spellings, read by code written for it (``mmt._filename``)
    _filename = filename
    _handler = handler

    @property
    def mode(self) -> str | None:  # type: ignore[override]  # not Tensor.mode (a reduction)
        """``"r+"`` (shared file mapping), ``"r"`` (private, copy-on-write) or None (memory)."""
        storage = self.untyped_storage()
        if storage.filename is not None:
            return "r+"
        return "r" if hasattr(storage, "_tbx_ro") else None

    # -------------------------------------------------------- constructors

    def __new__(
        cls,
        data: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """A memory-mapped copy of ``data`` (a tensor, or anything ``torch.as_tensor`` takes).

        ``MemoryMappedTensor(x, ...)`` is :meth:`from_tensor` with an optional ``dtype``
        cast; ``device`` may only be the CPU, where the result lives.

        >>> MemoryMappedTensor([1, 2], dtype=torch.float64).tolist()
        [1.0, 2.0]
        """
        if isinstance(data, (str, bytes, os.PathLike)):
            raise TypeError(
                f"MemoryMappedTensor({data!r}) got a path as data: map an existing file with "
                "MemoryMappedTensor.from_filename(path, dtype, shape), or pass the data "
                "with filename=path to write a new one"
            )
        check_device("__new__", device)
        t = data if isinstance(data, Tensor) else torch.as_tensor(data)
        if dtype is None or dtype == t.dtype:
            return cls.from_tensor(t, filename=filename, existsok=existsok)
        # Cast while copying into the new storage: no second full-size tensor.
        out = cls.zeros(tuple(t.shape), dtype=dtype, filename=filename, existsok=existsok)
        out.copy_(t.detach())
        return out

    @classmethod
    def empty(
        cls,
        *size: Any,
        shape: Any = None,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """A new tensor; files and shared memory start zero-filled, allocated lazily.

        The shape is given as ints, as one sequence, or as ``shape=``; ``dtype``
        defaults to torch's default dtype; ``device`` may only be the CPU.
        Without ``filename`` the tensor lives in anonymous shared memory. An existing
        file is an error unless ``existsok=True``, which replaces it with a new file.

        >>> MemoryMappedTensor.empty(2, 3).shape, MemoryMappedTensor.empty((4,)).filename
        (torch.Size([2, 3]), None)
        >>> MemoryMappedTensor.empty(shape=torch.Size([2]), dtype=torch.int8).dtype
        torch.int8
        """
        shp = _shape_arg("empty", size, shape)
        check_device("empty", device)
        return cls._zeros(shp, dtype, filename, existsok)

    @classmethod
    def zeros(
        cls,
        *size: Any,
        shape: Any = None,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """A zero-filled tensor; nothing is written (a sparse file, or untouched pages).

        Arguments as for :meth:`empty`.

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "z.memmap")
        >>> z = MemoryMappedTensor.zeros((2, 3), dtype=torch.int16, filename=path)
        >>> z.sum().item(), os.path.getsize(path)
        (0, 12)
        """
        shp = _shape_arg("zeros", size, shape)
        check_device("zeros", device)
        return cls._zeros(shp, dtype, filename, existsok)

    @classmethod
    def _zeros(
        cls,
        shape: tuple[int, ...],
        dtype: torch.dtype | None,
        filename: str | os.PathLike[str] | None,
        existsok: bool,
    ) -> MemoryMappedTensor:
        if isinstance(shape, Tensor):  # a nested tensor's shapes: one flat buffer
            flat = cls._zeros((_nested.flat_numel(shape),), dtype, filename, existsok)
            return _nested_of(flat, shape)
        dt = dtype or torch.get_default_dtype()
        if filename is None:
            return _shared_memory(shape, dt)
        path = os.path.abspath(filename)
        ident = write_file(path, None, math.prod(shape) * dt.itemsize, existsok=existsok)
        return map_file(path, dt, shape, ident=ident)

    @classmethod
    def ones(
        cls,
        *size: Any,
        shape: Any = None,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """A tensor of ones. Arguments as for :meth:`empty`.

        >>> MemoryMappedTensor.ones(2, 2).tolist()
        [[1.0, 1.0], [1.0, 1.0]]
        """
        shp = _shape_arg("ones", size, shape)
        check_device("ones", device)
        dt = dtype or torch.get_default_dtype()
        return cls._full(shp, 1, dt, filename, existsok)

    @classmethod
    def full(
        cls,
        *args: Any,
        shape: Any = None,
        fill_value: Any = _NO_FILL,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """A tensor filled with ``fill_value`` (written in bounded pieces).

        ``full(shape, fill_value)`` as ``torch.full``, or with ``fill_value=`` given by
        keyword, the shape as for :meth:`empty` (``full(2, 3, fill_value=0.5)``).
        Without ``dtype``, the dtype follows ``fill_value`` as in ``torch.full``
        (tensordict uses the default float dtype instead).

        >>> MemoryMappedTensor.full((2,), 3.5).tolist()
        [3.5, 3.5]
        >>> MemoryMappedTensor.full(2, 2, fill_value=7, dtype=torch.int32).tolist()
        [[7, 7], [7, 7]]
        """
        if fill_value is _NO_FILL:
            if not args:
                raise TypeError(
                    "MemoryMappedTensor.full() needs a fill_value: full((2, 3), 1.5), "
                    "full(2, 3, fill_value=1.5) or full(shape=(2, 3), fill_value=1.5)"
                )
            *rest, fill_value = args
            args = tuple(rest)
        shp = _shape_arg("full", args, shape)
        check_device("full", device)
        return cls._full(shp, fill_value, dtype, filename, existsok)

    @classmethod
    def _full(
        cls,
        shape: tuple[int, ...],
        fill_value: Any,
        dtype: torch.dtype | None,
        filename: str | os.PathLike[str] | None,
        existsok: bool,
    ) -> MemoryMappedTensor:
        if isinstance(shape, Tensor):  # a nested tensor's shapes: one flat buffer
            flat = cls._full((_nested.flat_numel(shape),), fill_value, dtype, filename, existsok)
            return _nested_of(flat, shape)
        value = torch.full((), fill_value, dtype=dtype)
        return cls.from_tensor(value.expand(shape), filename=filename, existsok=existsok)

    @classmethod
    def empty_like(
        cls,
        input: Tensor,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """A new tensor of ``input``'s shape and dtype (or ``dtype``), zero-filled.

        ``input`` may be on any device; its data is never read. The other
        arguments are those of :meth:`empty`.

        >>> e = MemoryMappedTensor.empty_like(torch.ones(2, 3, dtype=torch.int64))
        >>> e.shape, e.dtype
        (torch.Size([2, 3]), torch.int64)
        """
        t = like_input("empty_like", input)
        check_device("empty_like", device)
        return cls._zeros(tuple(t.shape), dtype or t.dtype, filename, existsok)

    @classmethod
    def zeros_like(
        cls,
        input: Tensor,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Zeros of ``input``'s shape and dtype (or ``dtype``); arguments as :meth:`empty_like`.

        >>> MemoryMappedTensor.zeros_like(torch.ones(3)).tolist()
        [0.0, 0.0, 0.0]
        """
        t = like_input("zeros_like", input)
        check_device("zeros_like", device)
        return cls._zeros(tuple(t.shape), dtype or t.dtype, filename, existsok)

    @classmethod
    def ones_like(
        cls,
        input: Tensor,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """Ones of ``input``'s shape and dtype (or ``dtype``); arguments as :meth:`empty_like`.

        >>> MemoryMappedTensor.ones_like(torch.zeros(2, dtype=torch.bool)).tolist()
        [True, True]
        """
        t = like_input("ones_like", input)
        check_device("ones_like", device)
        return cls._full(tuple(t.shape), 1, dtype or t.dtype, filename, existsok)

    @classmethod
    def full_like(
        cls,
        input: Tensor,
        fill_value: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = None,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
    ) -> MemoryMappedTensor:
        """``fill_value`` in ``input``'s shape and dtype (or ``dtype``), as ``torch.full_like``.

        Arguments as :meth:`empty_like`.

        >>> MemoryMappedTensor.full_like(torch.zeros(2, dtype=torch.int32), 4).tolist()
        [4, 4]
        """
        t = like_input("full_like", input)
        check_device("full_like", device)
        return cls._full(tuple(t.shape), fill_value, dtype or t.dtype, filename, existsok)

    @classmethod
    def from_tensor(
        cls,
        tensor: Tensor,
        *,
        filename: str | os.PathLike[str] | None = None,
        existsok: bool = False,
        copy_data: bool = True,
        copy_existing: bool = False,
    ) -> MemoryMappedTensor:
        """A memory-mapped copy of ``tensor`` (any device, layout or strides).

        ``copy_data=False`` gives zeros of the same shape and dtype without reading ``tensor``.
        A MemoryMappedTensor is already one: it is returned as it is when ``filename`` is
        None or its own file; copying it to another file needs ``copy_existing=True``.

        >>> t = MemoryMappedTensor.zeros(3)
        >>> MemoryMappedTensor.from_tensor(t) is t
        True
        """
        if isinstance(tensor, MemoryMappedTensor) and not copy_existing:
            if filename is None or os.path.abspath(filename) == tensor.filename:
                return tensor
            where = tensor.filename or "in shared memory"
            raise MemmapFileExistsError(
                f"from_tensor: the tensor is already memory-mapped ({where}); pass "
                f"copy_existing=True to copy it to {os.fspath(filename)}"
            )
        if tensor.is_nested:  # its values, one element after the other, in one flat buffer
            flat, shapes = _nested.flat_values(tensor)
            mapped = cls.from_tensor(
                flat, filename=filename, existsok=existsok, copy_data=copy_data
            )
            return _nested_of(mapped, shapes)
        shape, dtype = tuple(tensor.shape), tensor.dtype
        if filename is None:
            if copy_data:
                return shared_copy(tensor)
            return _shared_memory(shape, dtype)
        path = os.path.abspath(filename)
        nbytes = math.prod(shape) * dtype.itemsize
        ident = write_file(path, tensor if copy_data else None, nbytes, existsok=existsok)
        return map_file(path, dtype, shape, ident=ident)

    @classmethod
    def from_filename(
        cls,
        filename: str | os.PathLike[str],
        dtype: torch.dtype,
        shape: Sequence[int] | int,
        mode: str = "r+",
        index: Any = None,
    ) -> MemoryMappedTensor:
        """Map an existing file. It may be longer than the tensor, not shorter (FormatError).

        ``mode="r+"`` reads and writes the file; ``mode="r"`` never writes it. ``index``
        selects part of it (a view of the file, still a MemoryMappedTensor).
        """
        _check_mode(mode)
        path = os.path.abspath(filename)
        shp = _shape_arg("from_filename", (shape,))
        if isinstance(shp, Tensor):  # a nested tensor's shapes over the flat file
            flat = cls.from_filename(path, dtype, _nested.flat_numel(shp), mode)
            return _indexed(_nested_of(flat, shp), index)
        _check_size(path, dtype, shp)
        return _indexed(map_file(path, dtype, shp, mode), index)

    @classmethod
    def from_handler(
        cls, handler: Any, dtype: torch.dtype, shape: Sequence[int] | int, index: Any = None
    ) -> MemoryMappedTensor:
        """Map the anonymous shared memory ``handler`` (see :attr:`handler`) again.

        It may be larger than the tensor, not smaller (FormatError); ``index`` selects part.
        """
        if not isinstance(handler, torch.UntypedStorage):
            raise TypeError(
                f"from_handler: expected the handler of a MemoryMappedTensor in shared memory "
                f"(its .handler, a torch.UntypedStorage), got {type(handler).__name__}"
            )
        shp = _shape_arg("from_handler", (shape,))
        return _indexed(_on_storage(handler, dtype, shp), index)

    @classmethod
    def from_storage(
        cls,
        storage: Any,
        *,
        shape: Sequence[int] | int,
        dtype: torch.dtype,
        filename: str | os.PathLike[str] | None = None,
        index: Any = None,
    ) -> MemoryMappedTensor:
        """A MemoryMappedTensor over ``storage`` (a file's or shared memory's ``UntypedStorage``).

        ``filename``, when given, must be the storage's file.

        >>> t = MemoryMappedTensor.from_tensor(torch.arange(6.0))
        >>> MemoryMappedTensor.from_storage(t.untyped_storage(), shape=(2, 3), dtype=t.dtype)[1].tolist()
        [3.0, 4.0, 5.0]
        """
        if not isinstance(storage, torch.UntypedStorage):
            raise TypeError(
                f"from_storage: expected a torch.UntypedStorage, got {type(storage).__name__}"
            )
        if filename is not None:
            own = storage.filename or getattr(storage, "_tbx_ro", None)
            if own != os.path.abspath(filename):
                raise ValueError(
                    f"from_storage: filename={os.fspath(filename)!r} is not the storage's file "
                    f"({own!r}); map a file with from_filename"
                )
        shp = _shape_arg("from_storage", (shape,))
        return _indexed(_on_storage(storage, dtype, shp), index)

    # -------------------------------------------------------- views of the file

    def __getitem__(self, index: Any) -> Tensor:
        # A view still maps the file: it keeps the class (filename, pickling by
        # reference); an advanced index copies, into a plain tensor.
        out = Tensor.__getitem__(self, index)
        if out._base is not None and not _compiling():
            out.__class__ = MemoryMappedTensor  # a fresh tensor: as as_subclass, without a copy
        return out

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        """``torch.Tensor.unbind``, the slices MemoryMappedTensors of the same file.

        >>> [type(r).__name__ for r in MemoryMappedTensor.zeros(2, 3).unbind(0)]
        ['MemoryMappedTensor', 'MemoryMappedTensor']
        """
        return _views(Tensor.unbind(self, dim))

    def split(self, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
        """``torch.Tensor.split``, the parts MemoryMappedTensors of the same file.

        >>> [p.shape[0] for p in MemoryMappedTensor.zeros(10).split((3, 7))]
        [3, 7]
        """
        return _views(Tensor.split(self, split_size, dim))  # type: ignore[no-untyped-call]

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """``torch.Tensor.chunk``, the chunks MemoryMappedTensors of the same file.

        >>> type(MemoryMappedTensor.zeros(9).chunk(3)[1]).__name__
        'MemoryMappedTensor'
        """
        return _views(Tensor.chunk(self, chunks, dim))

    # -------------------------------------------------------- copying and pickling

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        from tensorbox._core.pickling import in_torch_save

        refs = _ports.file_refs()  # tensorbox._storage.fileref, bound by the package face
        ref = self if in_torch_save() else refs.shareable(self)  # torch.save files hold bytes
        if ref is not self:
            return (refs.restore, (ref,))
        # Shared memory: the pickler at hand decides (torch.multiprocessing shares it).
        return (_rewrap, (self.as_subclass(Tensor),))

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        # A deep copy is data in memory: a copy claiming the same file would be a lie.
        return self.clone()


_compiling = torch.compiler.is_compiling  # dynamo traces plain tensors, not the subclass


def _views(parts: Sequence[Tensor]) -> tuple[Tensor, ...]:
    if _compiling():
        return tuple(parts)
    for p in parts:
        if p._base is not None:
            p.__class__ = MemoryMappedTensor  # fresh tensors: as as_subclass, without a copy
    return tuple(parts)


def _rewrap(t: Tensor) -> MemoryMappedTensor:
    return t.as_subclass(MemoryMappedTensor)


torch.serialization.add_safe_globals([_rewrap])  # weights_only loads: it opens no file
