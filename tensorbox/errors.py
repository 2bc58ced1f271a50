"""Exception types raised by tensorbox.

Each one also subclasses the built-in exception a user would already catch
(``KeyError``, ``ValueError``, ``TypeError``, ``RuntimeError``), so code written
against plain dicts, tensors or ``tensordict`` keeps working.

>>> import tensorbox
>>> issubclass(tensorbox.BatchSizeError, ValueError)
True
"""

from __future__ import annotations

__all__ = [
    "BatchDimError",
    "BatchSizeError",
    "FormatError",
    "IncompleteTreeError",
    "KeyCollisionError",
    "LockedError",
    "TensorboxError",
    "TensorDictKeyError",
    "WeightsMismatchError",
]


class TensorboxError(Exception):
    """Base class of every exception raised on purpose by tensorbox."""


class BatchSizeError(TensorboxError, ValueError, RuntimeError):
    """A value's leading dims do not match the container's batch size.

    Also a ``RuntimeError``: tensordict raises that type for the same mistake.
    """


class TensorDictKeyError(TensorboxError, KeyError):
    """A key is missing or malformed. The message names the key path."""

    def __str__(self) -> str:
        # KeyError.__str__ repr()-quotes its argument, which mangles a sentence.
        return str(self.args[0]) if self.args else ""


class KeyCollisionError(TensorboxError, ValueError, KeyError):
    """Two keys would map to the same name (``flatten_keys``/``unflatten_keys``).

    Also a ``KeyError``: tensordict raises that type for the same collision.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class BatchDimError(TensorboxError, IndexError, ValueError, RuntimeError):
    """A batch dim is out of range, repeated, or the sizes asked for do not fit it.

    An ``IndexError`` as torch raises for a bad dim, and a ``ValueError`` and
    ``RuntimeError`` as tensordict raises for the same mistakes.
    """


class LockedError(TensorboxError, RuntimeError):
    """The container is locked (for example after ``memmap_()``) and cannot change shape."""


class FormatError(TensorboxError, ValueError):
    """A saved tree is damaged, foreign or of an unknown version. The message names the file."""


class IncompleteTreeError(FormatError):
    """A saved tree has no ``meta.json``: the save that wrote it did not finish."""


class WeightsMismatchError(TensorboxError, ValueError, RuntimeError):
    """Weights and module (or state dict) disagree on keys or shapes.

    Also a ``RuntimeError``, which is what ``nn.Module.load_state_dict`` raises.
    """
