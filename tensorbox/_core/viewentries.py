"""What the views of another container share: entries that write through, and the
source's lock.

A view (the lazy stack, the rows of a ``_get_sub_tensordict``, a lazy-legacy shape view)
computes its entries from what it stands for; a write into that dict must reach the
view's own write path rather than land in a throwaway dict, and a delete goes where
the view says (``_del_entry``: the members, the source, or an error).
"""

from __future__ import annotations

from typing import Any

import torch

from tensorbox._core.tensordict import TensorDict

__all__ = ["DenseResults", "FixedBatch", "SourceLock", "ViewEntries"]


class ViewEntries(dict[str, Any]):
    """A view's entries: ``d[key] = v`` is ``view._set_str``, ``del d[key]`` is
    ``view._del_entry``."""

    __slots__ = ("view",)
    view: Any

    def __setitem__(self, key: str, value: Any) -> None:
        self.view._set_str(key, value, (key,))

    def __delitem__(self, key: str) -> None:
        self.view._del_entry(key)


class SourceLock:
    """Mixin of a view with a ``_source``: its lock is the source's (locking either locks
    both)."""

    __slots__ = ()
    _source: Any

    @property
    def _locked(self) -> bool:
        return bool(self._source._locked)

    @_locked.setter
    def _locked(self, value: bool) -> None:
        self._source._locked = value


class DenseResults:
    """Mixin of a view: what an operation builds from its entries is a plain
    ``TensorDict``, not another view."""

    __slots__ = ()

    @classmethod
    def _new_unsafe(
        cls, source: dict[str, Any], batch_size: torch.Size, device: torch.device | None
    ) -> Any:
        return TensorDict._new_unsafe(source, batch_size, device)


class FixedBatch:
    """Mixin of a container whose batch size is fixed when it is made (a view's follows
    from its source; a lazy stack's from its members; a store's is the server's): it
    reads, and setting it raises ``RuntimeError`` with the class's
    ``_fixed_batch_message()``, which says what to do instead."""

    __slots__ = ()
    _batch_size: torch.Size

    def _fixed_batch_message(self) -> str:
        raise NotImplementedError

    @property
    def batch_size(self) -> torch.Size:
        """The batch size (read-only: fixed when this was made)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        raise RuntimeError(self._fixed_batch_message())
