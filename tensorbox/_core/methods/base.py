"""What the container's mixins share: the typing contract, one "absent" marker, and
the batch-dim checks.

``TensorCollection`` is assembled from mixins, one per job (``keys``, ``leaves``,
``shape``, ``math``, ``io``); a method of one calls methods of another and the private
contract of ``_core.tree``. At runtime ``MixinBase`` is ``object`` (the MRO and
``__slots__`` are unchanged); for a type checker it declares that contract and the
methods the mixins share, so each mixin checks on its own without importing the
container class (which would be an inheritance cycle). The real definitions live on
the mixins and on ``TensorCollection``; ``*args: Any, **kwargs: Any`` here means "any
signature" to mypy. The operation modules type the containers they take as
``MixinBase`` (or ``C``, when they return one of the caller's type), so a mixin passes
``self`` and gets ``Self`` back.

>>> MISSING is MISSING, is_container(object())
(True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["MISSING", "C", "MixinBase", "batch_dim", "batch_dims", "is_container"]

#: A container of any type, in the functions that return one of the caller's type.
C = TypeVar("C", bound="MixinBase")

#: "Absent": what ``get(key, MISSING)`` gives for a missing key (not "argument not given").
MISSING: Any = object()


def is_container(v: Any) -> bool:
    """True for a container, or anything that holds entries the way one does."""
    return getattr(type(v), "_is_tensor_collection", False) or hasattr(v, "_tensordict")


def batch_dim(dim: int, ndim: int, what: str) -> int:
    """``dim`` as a batch dim in ``[0, ndim)``, or an ``IndexError`` naming ``what``."""
    d = dim + ndim if dim < 0 else dim
    if not 0 <= d < ndim:
        raise IndexError(f"{what}: dim {dim} is out of range for {ndim} batch dimension(s)")
    return d


def batch_dims(dims: int | Sequence[int], ndim: int, what: str) -> tuple[int, ...]:
    """Each of ``dims`` (an int or a sequence) as a batch dim (see ``batch_dim``)."""
    seq = (dims,) if isinstance(dims, int) else tuple(dims)
    return tuple(batch_dim(d, ndim, what) for d in seq)


if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, Self

    import torch

    from tensorbox._core.nestedkey import NestedKey

    class MixinBase:
        # the contract (see _tree)
        _tensordict: dict[str, Any]
        _batch_size: torch.Size
        _device: torch.device | None
        _locked: bool
        _writeback: tuple[Any, str, tuple[Any, ...]]

        @classmethod
        def _new_unsafe(
            cls, source: dict[str, Any], batch_size: torch.Size, device: torch.device | None
        ) -> Self: ...

        # shared methods (defined on TensorCollection or another mixin)
        @property
        def batch_size(self) -> torch.Size: ...
        @batch_size.setter
        def batch_size(self, value: Sequence[int] | int) -> None: ...
        @property
        def batch_dims(self) -> int: ...
        def get(self, key: NestedKey, default: Any = None) -> Any: ...
        def set(
            self, key: NestedKey, value: Any, inplace: bool = False, *, non_blocking: bool = False
        ) -> Self: ...
        def keys(
            self,
            include_nested: bool = False,
            leaves_only: bool = False,
            *,
            is_leaf: Callable[[type], bool] | None = None,
            sort: bool = False,
        ) -> Sequence[NestedKey] | Any: ...
        def items(
            self, include_nested: bool = False, leaves_only: bool = False
        ) -> Iterator[tuple[NestedKey, Any]]: ...
        def exclude(self, *keys: NestedKey, inplace: bool = False) -> Self: ...
        def apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Self: ...
        @classmethod
        def from_dict(cls, *args: Any, **kwargs: Any) -> Self: ...
        def update(self, *args: Any, **kwargs: Any) -> Self: ...
        def _write(self, fn: Any, *args: Any) -> Any: ...
        def _write_many(self, value: Any, index: Any, fn: Any, *args: Any) -> Any: ...
        def __contains__(self, key: object) -> bool: ...
        def pop(self, key: NestedKey, default: Any = ...) -> Any: ...
        def del_(self, key: NestedKey) -> Self: ...
        def _through(self, fn: Any, *args: Any) -> Any: ...
        def _set_str(self, key: str, value: Any, path: tuple[str, ...]) -> None: ...

else:
    MixinBase = object
