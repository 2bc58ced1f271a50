"""tensordict's "lazy legacy" switch: shape ops that give views writing into their source.

Off by default, and then nothing changes: ``permute``, ``transpose``, ``unsqueeze``,
``squeeze`` and ``view`` give new containers whose tensors are views. Switched on
(``set_lazy_legacy(True)`` as a decorator, a context manager, or ``.set()``; the
environment variable ``LAZY_LEGACY_OP`` gives the starting mode, as in tensordict),
those ops on a ``TensorDict`` give a view of it (``_core/lazyshape.py``) that reads
the source's entries on each access, whose writes (``set``, ``set_``,
``td[key] = ...``, new keys included) reach the source, and on which the inverse op
gives the source itself: ``td.permute(1, 0).permute(1, 0) is td``.

The mode is one switch for the whole process, as tensordict's.

>>> import torch
>>> from tensorbox import TensorDict, lazy_legacy, set_lazy_legacy
>>> td = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
>>> with set_lazy_legacy(True):
...     t = td.transpose(0, 1)
...     t["b"] = torch.ones(3, 2)          # written into td, transposed back
...     same = t.transpose(1, 0) is td
>>> td["b"].shape, same, lazy_legacy()
(torch.Size([2, 3]), True, False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tensorbox._core.modeswitch import ModeSwitch, env_flag

__all__ = ["STATE", "lazy_legacy", "set_lazy_legacy", "suspended"]


#: ``[mode]``: read by the shape methods on each call (one list lookup when off).
STATE: list[bool] = [env_flag("LAZY_LEGACY_OP")]

# The lazy views themselves: ``_core/lazyshape.py``'s ``legacy_op(td, op, args)`` (None
# for a container that has none: tensorclasses, rows views, lazy stacks keep the plain
# op), reached through the ``legacy_view`` port (it sits above the container classes).


def lazy_legacy() -> bool:
    """True while shape ops give lazy views (see ``set_lazy_legacy``).

    >>> from tensorbox import lazy_legacy
    >>> lazy_legacy()
    False
    """
    return STATE[0]


class set_lazy_legacy(ModeSwitch):
    """Switch tensordict's lazy-legacy shape views on or off.

    A context manager and a decorator (the previous mode comes back on exit), or
    ``set_lazy_legacy(mode).set()`` to switch for good.

    >>> import torch
    >>> from tensorbox import TensorDict, set_lazy_legacy
    >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
    >>> @set_lazy_legacy(True)
    ... def roundtrip(td):
    ...     return td.unsqueeze(0).squeeze(0) is td
    >>> roundtrip(td), td.unsqueeze(0).squeeze(0) is td
    (True, False)
    """

    _state = STATE


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """The plain ops for the duration (a lazy view computes its entries with them)."""
    if not STATE[0]:
        yield
        return
    STATE[0] = False
    try:
        yield
    finally:
        STATE[0] = True
