"""Keys: the ``NestedKey`` type, its validation and its display in messages.

A key is a non-empty ``str``; a nested key is a tuple of them, ``("obs", "pixels")``.

>>> from tensorbox._keys import unravel_key
>>> unravel_key("a"), unravel_key(("a", ("b", "c")))
(('a',), ('a', 'b', 'c'))
"""

from __future__ import annotations

from typing import TypeAlias

from .errors import TensorDictKeyError

NestedKey: TypeAlias = str | tuple["NestedKey", ...]

__all__ = ["NestedKey", "format_key", "unravel_key"]


def unravel_key(key: object) -> tuple[str, ...]:
    """Return ``key`` as a flat tuple of strings, or raise ``TensorDictKeyError``."""
    if type(key) is str:
        return (key,)
    if isinstance(key, tuple):
        out: list[str] = []
        for part in key:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, tuple):
                out.extend(unravel_key(part))
            else:
                raise TensorDictKeyError(
                    f"key {key!r} contains {part!r} of type {type(part).__name__}; "
                    "keys are str or tuples of str"
                )
        if not out:
            raise TensorDictKeyError("the empty tuple () is not a key; use a str or a tuple of str")
        return tuple(out)
    if isinstance(key, str):  # str subclass
        return (str(key),)
    raise TensorDictKeyError(
        f"key {key!r} of type {type(key).__name__} is not a key; keys are str or tuples of str"
    )


def format_key(path: tuple[str, ...]) -> str:
    """Show a key path the way a user would type it: ``'a'`` or ``('a', 'b')``."""
    return repr(path[0]) if len(path) == 1 else repr(path)
