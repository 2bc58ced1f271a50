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
    "FieldNameError",
    "FormatError",
    "IncompleteTreeError",
    "TreeExistsError",
    "KeyCollisionError",
    "KeyTypeError",
    "LockedError",
    "TensorboxError",
    "TensorDictKeyError",
    "UnknownFieldError",
    "WeightsMismatchError",
]


class TensorboxError(Exception):
    """Base class of every exception raised on purpose by tensorbox.

    >>> import torch; from tensorbox import TensorDict, TensorboxError
    >>> try:
    ...     TensorDict(x=torch.zeros(3), batch_size=[4])
    ... except TensorboxError as err:       # every error tensorbox raises on purpose
    ...     type(err).__name__
    'BatchSizeError'
    """


class BatchSizeError(TensorboxError, ValueError, RuntimeError):
    """A value's leading dims do not match the container's batch size.

    Also a ``RuntimeError``: tensordict raises that type for the same mistake.

    >>> import torch; from tensorbox import TensorDict, BatchSizeError
    >>> td = TensorDict(batch_size=[4])
    >>> try:
    ...     td["x"] = torch.zeros(5)
    ... except RuntimeError as err:         # what tensordict raises
    ...     isinstance(err, BatchSizeError), isinstance(err, ValueError)
    (True, True)
    """


class FieldNameError(TensorboxError, TypeError, AttributeError):
    """A tensorclass field is named like a container member (``reshape``, ``apply``...).

    Raised when the class is created. Also an ``AttributeError``: tensordict raises that
    type for the same mistake.

    >>> import torch; from tensorbox import TensorClass
    >>> from tensorbox.errors import FieldNameError
    >>> try:
    ...     class Bad(TensorClass):
    ...         reshape: torch.Tensor
    ... except AttributeError as err:       # what tensordict raises
    ...     isinstance(err, FieldNameError), isinstance(err, TypeError)
    (True, True)
    """


class TensorDictKeyError(TensorboxError, KeyError):
    """A key is missing or malformed. The message names the key path.

    >>> from tensorbox import TensorDict, TensorDictKeyError
    >>> try:
    ...     TensorDict()["missing"]
    ... except KeyError as err:
    ...     isinstance(err, TensorDictKeyError)
    True
    """

    def __str__(self) -> str:
        # KeyError.__str__ repr()-quotes its argument, which mangles a sentence.
        return str(self.args[0]) if self.args else ""


class UnknownFieldError(TensorDictKeyError, AttributeError, ValueError):
    """A tensorclass has no field of that name (``tc.set("other", x)``, or a row write
    ``tc[rows] = other`` from a class with fields this one lacks).

    Also an ``AttributeError`` and a ``ValueError``: tensordict raises those types for
    the same two mistakes.

    >>> import torch; from tensorbox import TensorClass
    >>> from tensorbox.errors import UnknownFieldError
    >>> class P(TensorClass):
    ...     x: torch.Tensor
    >>> try:
    ...     P(x=torch.zeros(1)).set("y", torch.zeros(1))
    ... except AttributeError as err:       # what tensordict raises
    ...     isinstance(err, UnknownFieldError), isinstance(err, KeyError)
    (True, True)
    """


class KeyCollisionError(TensorboxError, ValueError, KeyError):
    """Two keys would map to the same name (``flatten_keys``/``unflatten_keys``).

    Also a ``KeyError``: tensordict raises that type for the same collision.

    >>> import torch
    >>> from tensorbox import TensorDict
    >>> td = TensorDict({"a.b": torch.zeros(1), "a": {"b": torch.ones(1)}})
    >>> try:
    ...     td.flatten_keys(".")
    ... except KeyError as err:
    ...     print(type(err).__name__)
    KeyCollisionError
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class BatchDimError(TensorboxError, IndexError, ValueError, RuntimeError):
    """A batch dim is out of range, repeated, or the sizes asked for do not fit it.

    An ``IndexError`` as torch raises for a bad dim, and a ``ValueError`` and
    ``RuntimeError`` as tensordict raises for the same mistakes.

    >>> import torch
    >>> from tensorbox import TensorDict
    >>> try:
    ...     TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3]).transpose(0, 5)
    ... except IndexError as err:
    ...     print(type(err).__name__, isinstance(err, ValueError))
    BatchDimError True
    """


class LockedError(TensorboxError, RuntimeError):
    """The container is locked (for example after ``memmap_()``) and cannot change shape.

    >>> import torch; from tensorbox import TensorDict, LockedError
    >>> td = TensorDict(x=torch.zeros(2)).lock_()
    >>> try:
    ...     td["y"] = torch.zeros(2)
    ... except LockedError:
    ...     "refused"
    'refused'
    """


class TreeExistsError(TensorboxError, FileExistsError, RuntimeError):
    """A save with ``existsok=False`` found a saved tree at its path (a ``FileExistsError``,
    and the ``RuntimeError`` tensordict raises).

    >>> import tempfile, torch; from tensorbox import TensorDict
    >>> from tensorbox.errors import TreeExistsError
    >>> d = tempfile.mkdtemp()
    >>> td = TensorDict(x=torch.zeros(2), batch_size=[2]).memmap(d)
    >>> try:
    ...     td.memmap(d, existsok=False)
    ... except RuntimeError as err:
    ...     isinstance(err, (TreeExistsError, FileExistsError))
    True
    """


class FormatError(TensorboxError, ValueError):
    """A saved tree is damaged, foreign or of an unknown version. The message names the file.

    >>> import os, tempfile; from tensorbox import TensorDict, FormatError
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with open(os.path.join(d, "meta.json"), "w") as f:
    ...         _ = f.write("not json")
    ...     try:
    ...         TensorDict.load_memmap(d)
    ...     except FormatError:
    ...         "damaged tree"
    'damaged tree'
    """


class IncompleteTreeError(FormatError):
    """A saved tree has no ``meta.json``: the save that wrote it did not finish. (An empty
    folder is no tree at all: ``FileNotFoundError``, as tensordict.)

    >>> import os, tempfile; from tensorbox import TensorDict, IncompleteTreeError
    >>> with tempfile.TemporaryDirectory() as d:     # files, but no meta.json
    ...     open(os.path.join(d, "x.memmap"), "wb").close()
    ...     try:
    ...         TensorDict.load_memmap(d)
    ...     except IncompleteTreeError:
    ...         "the save did not finish"
    'the save did not finish'
    """


class WeightsMismatchError(TensorboxError, ValueError, RuntimeError, KeyError):
    """Weights and module (or state dict) disagree on keys or shapes.

    Also a ``RuntimeError``, which is what ``nn.Module.load_state_dict`` raises, and a
    ``KeyError``, which is what tensordict's ``load_state_dict`` raises for a key it
    does not expect.

    >>> import torch; from tensorbox import TensorDict; from tensorbox.errors import WeightsMismatchError
    >>> try:
    ...     TensorDict({"weight": torch.zeros(3)}).to_module(torch.nn.Linear(2, 1))
    ... except RuntimeError as err:          # what nn.Module.load_state_dict raises
    ...     isinstance(err, WeightsMismatchError)
    True
    """

    def __str__(self) -> str:
        # KeyError.__str__ repr()-quotes its argument, which mangles the listing.
        return str(self.args[0]) if self.args else ""


class KeyTypeError(TensorboxError, TypeError, RuntimeError):
    """A key lookup got something that is not a key (a str or a tuple of str).

    Also a ``RuntimeError``: tensordict raises that type for ``0 in td``.

    >>> from tensorbox import TensorDict; from tensorbox.errors import KeyTypeError
    >>> try:
    ...     0 in TensorDict(a=1)
    ... except TypeError as err:
    ...     isinstance(err, KeyTypeError)
    True
    """
