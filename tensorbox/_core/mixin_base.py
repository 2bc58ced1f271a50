"""What the container's mixins may use of each other, for the type checker only.

``TensorCollection`` is assembled from mixins (``_container_leaves``, ``_container_ops``,
``_td_tensor_methods``...); a method of one calls methods of another and the private
contract of ``_tree``. At runtime ``MixinBase`` is ``object`` (the MRO and ``__slots__``
are unchanged); for a type checker it declares that contract and the methods the
mixins share, so each mixin checks on its own without importing the container class
(which would be an inheritance cycle). The real definitions live on the mixins and on
``TensorCollection``; ``*args: Any, **kwargs: Any`` here means "any signature" to mypy.
The operation modules type the containers they take as ``MixinBase`` (or ``C``, when they
return one of the caller's type), so a mixin passes ``self`` and gets ``Self`` back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

__all__ = ["C", "MixinBase"]

#: A container of any type, in the functions that return one of the caller's type.
C = TypeVar("C", bound="MixinBase")

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, Self

    import torch

    from tensorbox._core.keys import NestedKey

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

else:
    MixinBase = object
