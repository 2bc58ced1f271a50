"""One global on/off mode of tensordict's, as a switch class (``set_lazy_legacy``,
``set_list_to_stack``): a context manager and a decorator that restores the previous
mode on exit, or ``.set()`` to switch for good.

A subclass names, as ``_state``, the one-element list its module reads on the hot path
(``STATE[0]``: a list, so readers index it instead of looking up a global).

>>> class set_demo(ModeSwitch):
...     _state = [False]
>>> with set_demo(True):
...     set_demo._state[0]
True
>>> set_demo._state[0], set_demo(True)
(False, set_demo(True))
"""

from __future__ import annotations

import contextlib
import os
from typing import ClassVar, Self

__all__ = ["ModeSwitch", "env_flag"]


def env_flag(name: str) -> bool:
    """The starting mode from the environment variable ``name`` (unset or empty: off); a
    value that is no truth value raises ``ValueError`` naming the variable.

    >>> os.environ["TB_DEMO_FLAG"] = "On"
    >>> env_flag("TB_DEMO_FLAG"), env_flag("TB_UNSET_FLAG")
    (True, False)
    >>> del os.environ["TB_DEMO_FLAG"]
    """
    value = os.environ.get(name)
    text = "" if value is None else value.strip().lower()
    if text in ("y", "yes", "t", "true", "on", "1"):
        return True
    if text in ("n", "no", "f", "false", "off", "0", ""):
        return False
    raise ValueError(
        f"environment variable {name}={value!r}: expected a truth value "
        "(1/0, true/false, yes/no, on/off)"
    )


class ModeSwitch(contextlib.ContextDecorator):
    """Base of the mode switches (see the module doc)."""

    _state: ClassVar[list[bool]]

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self._saved: list[bool] = []  # one per entry: a decorator may re-enter

    def clone(self) -> Self:
        """A fresh switch with the same mode."""
        return type(self)(self.mode)

    def set(self) -> None:
        """Switch now, without restoring later."""
        self._state[0] = self.mode

    def __enter__(self) -> Self:
        self._saved.append(self._state[0])
        self._state[0] = self.mode
        return self

    def __exit__(self, *exc: object) -> None:
        self._state[0] = self._saved.pop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.mode})"
