"""What ``get(key)`` gives for a missing key when no default is passed.

tensordict's process-wide switch, kept for drop-in use: ``None`` (the default), or a
``KeyError`` after ``set_get_defaults_to_none(False)`` (or with the environment variable
``TD_GET_DEFAULTS_TO_NONE=0`` at import). A default passed to ``get`` always wins, ``None``
included. Indexing (``td[key]``) and the methods that name keys to act on (``del_``,
``select``, ``rename_key_``...) raise ``KeyError`` for a missing key whatever the switch.

>>> import torch
>>> from tensorbox import TensorDict, get_defaults_to_none, set_get_defaults_to_none
>>> td = TensorDict(a=torch.zeros(2), batch_size=[2])
>>> get_defaults_to_none(), td.get("b")
(True, None)
>>> set_get_defaults_to_none(False)
>>> try:
...     td.get("b")
... except KeyError:
...     print("KeyError")
... finally:
...     set_get_defaults_to_none(True)
KeyError
>>> td.get("b", None) is None
True
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["UNSET", "get_defaults_to_none", "missing_default", "set_get_defaults_to_none"]

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


class _Unset:
    """The ``default`` of ``get`` when the caller passes none (the switch decides)."""

    __slots__ = ()

    def __repr__(self) -> str:  # signatures read ``default=None``: what it means unless switched
        return "None"


UNSET: Any = _Unset()


def _from_env() -> bool:
    raw = os.environ.get("TD_GET_DEFAULTS_TO_NONE")
    if raw is None:
        return True
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(
        f"TD_GET_DEFAULTS_TO_NONE={raw!r}: expected a boolean (1/0, true/false, yes/no, on/off)"
    )


_state = [_from_env()]


def get_defaults_to_none() -> bool:
    """True when ``get(key)`` of a missing key gives ``None``; False when it raises ``KeyError``.

    >>> from tensorbox import get_defaults_to_none
    >>> get_defaults_to_none()
    True
    """
    return _state[0]


def set_get_defaults_to_none(set_to_none: bool | None = True) -> None:
    """Choose what ``get(key)`` gives for a missing key without a default, process-wide:
    ``None`` (``True``, the default) or ``KeyError`` (``False``; ``None`` means ``False``,
    as in tensordict).

    >>> import torch
    >>> from tensorbox import TensorDict, set_get_defaults_to_none
    >>> set_get_defaults_to_none(False)
    >>> try:
    ...     TensorDict(a=torch.zeros(1)).get("b")
    ... except KeyError:
    ...     print("missing")
    missing
    >>> set_get_defaults_to_none(True)
    """
    _state[0] = bool(set_to_none)


def missing_default(default: Any, keep: Any) -> Any:
    """``default``, or what the switch says when none was passed (``keep``: "raise")."""
    if default is UNSET:
        return None if _state[0] else keep
    return default
