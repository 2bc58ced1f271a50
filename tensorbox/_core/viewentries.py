"""What the views of another container share: entries that write through, and the
source's lock.

A view (the lazy stack, the rows of a ``_get_sub_tensordict``, a lazy-legacy shape view)
computes its entries from what it stands for; a write into that dict must reach the
view's own write path rather than land in a throwaway dict, and a delete goes where
the view says (``_del_entry``: the members, the source, or an error).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SourceLock", "ViewEntries"]


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
