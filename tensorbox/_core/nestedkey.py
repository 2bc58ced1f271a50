"""Keys: the ``NestedKey`` type, its validation and its display in messages.

A key is a non-empty ``str``; a nested key is a tuple of them, ``("obs", "pixels")``.

>>> from tensorbox._core.nestedkey import unravel_key
>>> unravel_key("a"), unravel_key(("a", ("b", "c")))
(('a',), ('a', 'b', 'c'))
"""

from __future__ import annotations

from typing import Any, TypeAlias

from tensorbox.errors import TensorDictKeyError

NestedKey: TypeAlias = str | tuple["NestedKey", ...]
"""A key: a string for this level, or a tuple of strings for a path into nested containers.

``td["a", "b"]`` and ``td[("a", "b")]`` name the entry ``b`` of the nested container
``a``; nested tuples are flattened (``("a", ("b",))`` is ``("a", "b")``), as in tensordict.
"""

__all__ = ["NestedKey", "check_str_key", "format_key", "unravel_key"]


def unravel_key(key: object) -> tuple[str, ...]:
    """``key`` (a str, or a tuple of str and such tuples) as a flat tuple of str, as
    tensordict's ``unravel_key``; anything else raises ``TensorDictKeyError``.

    >>> unravel_key("images"), unravel_key(("obs", ("pixels",)))
    (('images',), ('obs', 'pixels'))
    """
    if type(key) is str:
        return (key,)
    if type(key) is tuple and key:  # the common case: already flat, all str
        for part in key:
            if type(part) is not str:
                break
        else:
            return key
    if isinstance(key, tuple):
        out: list[str] = []
        for part in key:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, tuple):
                out.extend(unravel_key(part))
            else:
                raise TensorDictKeyError(
                    f"key {key!r} is not a key: expected a str or a non-empty tuple of str; "
                    f"it contains {part!r} of type {type(part).__name__} (to index the batch "
                    "dims of an entry, look it up first: td[key][index])"
                )
        if not out:
            raise TensorDictKeyError(
                "key () is not a key: expected a str or a non-empty tuple of str"
            )
        return tuple(out)
    if isinstance(key, str):  # str subclass
        return (str(key),)
    raise TensorDictKeyError(
        f"key {key!r} is not a key: expected a str or a non-empty tuple of str, "
        f"got a {type(key).__name__}"
    )


def format_key(path: NestedKey) -> str:
    """Show a key path the way a user would type it: ``'a'`` or ``('a', 'b')``."""
    return repr(path[0]) if len(path) == 1 else repr(path)


def check_str_key(key: Any, parent: tuple[str, ...] = ()) -> str:
    """``key`` if it is a str (a str subclass becomes a str), else a ``TensorDictKeyError``."""
    if type(key) is not str:
        if isinstance(key, str):
            return str(key)
        where = f" under {format_key(parent)}" if parent else ""
        raise TensorDictKeyError(
            f"key {key!r}{where} is a {type(key).__name__}; TensorDict keys are str"
        )
    return key
