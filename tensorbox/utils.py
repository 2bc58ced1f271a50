"""Helpers that tensordict users import from ``tensordict.utils``, under the same names.

``from tensordict.utils import strtobool`` becomes ``from tensorbox.utils import strtobool``.

>>> from tensorbox.utils import strtobool, unravel_key
>>> strtobool("Yes"), unravel_key(("a", ("b", "c")))
(1, ('a', 'b', 'c'))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from tensorbox._core.future import TensorDictFuture
from tensorbox._core.nestedkey import NestedKey, unravel_key
from tensorbox._core.tensordict import is_tensor_collection
from tensorbox._tensorclass import is_tensorclass

__all__ = [
    "NestedKey",
    "TensorDictFuture",
    "convert_ellipsis_to_idx",
    "expand_as_right",
    "expand_right",
    "is_tensor_collection",
    "is_tensorclass",
    "print_directory_tree",
    "strtobool",
    "unravel_key",
    "unravel_key_list",
]

_T = TypeVar("_T")

_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


def strtobool(val: str) -> int:
    """1 for a true-looking string (``y yes t true on 1``), 0 for a false-looking one
    (``n no f false off 0``), any case; ``ValueError`` otherwise (``distutils``' rule).

    >>> strtobool("off"), strtobool("TRUE")
    (0, 1)
    """
    low = val.lower()
    if low in _TRUE:
        return 1
    if low in _FALSE:
        return 0
    raise ValueError(f"strtobool: {val!r} is not a truth value; expected one of {_TRUE + _FALSE}")


def convert_ellipsis_to_idx(idx: Any, batch_size: Sequence[int]) -> Any:
    """``idx`` with its ``...`` written out as the ``slice(None)`` it stands for, for a
    container (or tensor) of ``batch_size``: the same rows, no ellipsis. An index
    without one is returned as given; two raise ``RuntimeError``, as in torch.

    >>> convert_ellipsis_to_idx((0, ..., 1), [3, 4, 5])
    (0, slice(None, None, None), 1)
    >>> convert_ellipsis_to_idx(..., [2, 2])
    (slice(None, None, None), slice(None, None, None))
    """
    if idx is Ellipsis:
        return (slice(None),) * len(batch_size)
    if not isinstance(idx, tuple):
        return idx
    found = [i for i, item in enumerate(idx) if item is Ellipsis]
    if not found:
        return idx
    if len(found) > 1:
        raise RuntimeError(f"index {idx!r} has {len(found)} ellipses; an index takes one at most")
    used = sum(_dims_used(item) for item in idx)
    fill = len(batch_size) - used
    if fill < 0:
        raise IndexError(
            f"index {idx!r} uses {used} dims, but the batch size {list(batch_size)} has "
            f"{len(batch_size)}"
        )
    at = found[0]
    return (*idx[:at], *(slice(None),) * fill, *idx[at + 1 :])


def _dims_used(item: Any) -> int:
    """How many dims an index item consumes (``None`` adds one and uses none)."""
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0  # None and a Python bool add a dim, as torch indexes them
    if isinstance(item, Tensor) and item.dtype == torch.bool:
        return item.ndim  # a mask spans its own dims
    return 1


def unravel_key_list(keys: Sequence[NestedKey]) -> list[NestedKey]:
    """``unravel_key`` of each key (a flat tuple each, as tensorbox's ``unravel_key``).

    >>> unravel_key_list(["a", ("b", ("c",))])
    [('a',), ('b', 'c')]
    """
    return [unravel_key(k) for k in keys]


def expand_right(tensor: Tensor, shape: Sequence[int]) -> Tensor:
    """``tensor`` with trailing dims added, then expanded to ``shape`` (a view).

    >>> expand_right(torch.zeros(3, 4), (3, 4, 5)).shape
    torch.Size([3, 4, 5])
    """
    out = tensor
    while out.ndim < len(shape):
        out = out.unsqueeze(-1)
    return out.expand(*shape)


def expand_as_right(tensor: _T, dest: Any) -> _T:
    """``tensor`` expanded on the right to ``dest``'s shape (a tensor, or a container's
    batch size when ``dest`` is one); ``tensor``'s dims must lead ``dest``'s.

    >>> expand_as_right(torch.zeros(3, 4), torch.zeros(3, 4, 5)).shape
    torch.Size([3, 4, 5])
    """
    shape = tuple(dest.shape)
    have = tuple(tensor.shape)  # type: ignore[attr-defined]
    if len(shape) < len(have) or any(h != d and h != 1 for h, d in zip(have, shape, strict=False)):
        raise RuntimeError(
            f"expand_as_right: a shape {have} cannot be expanded on the right to {shape}: "
            "its dims must lead the destination's (or be 1)"
        )
    if is_tensor_collection(tensor):
        return tensor.expand(*shape)  # type: ignore[attr-defined, no-any-return]
    return expand_right(tensor, shape)  # type: ignore[arg-type, return-value]


def print_directory_tree(
    path: str | os.PathLike[str], indent: str = "", display_metadata: bool = True
) -> str:
    """Print the folder tree under ``path`` (folders end in ``/``, four spaces a level;
    entries sorted), headed by the total size when ``display_metadata``; returns the text.

    >>> import tempfile, torch
    >>> from tensorbox import TensorDict
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = TensorDict(a=torch.zeros(2)).memmap(d + "/td")
    ...     text = print_directory_tree(d + "/td", display_metadata=False)  # doctest: +ELLIPSIS
    td/
    ...
    """
    lines: list[str] = []
    if display_metadata:
        lines.append(f"Directory size: {_format_size(_tree_size(path))}")
    _tree_lines(os.fspath(path), indent, lines)
    text = "\n".join(lines)
    print(text)
    return text


def _tree_lines(path: str, indent: str, lines: list[str]) -> None:
    if os.path.isdir(path):
        lines.append(f"{indent}{os.path.basename(os.path.normpath(path))}/")
        for name in sorted(os.listdir(path)):
            _tree_lines(os.path.join(path, name), indent + "    ", lines)
    else:
        lines.append(indent + os.path.basename(path))


def _tree_size(path: str | os.PathLike[str]) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _format_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024:
            return f"{size:.2f} {unit}"
        size /= 1024
    return f"{size:.2f} TB"
