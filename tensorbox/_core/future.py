"""``TensorDictFuture``: the result of a save or ``consolidate`` asked for with
``return_early=True``.

It is a ``concurrent.futures.Future`` (``result()``, ``done()``, ``add_done_callback``)
under the name tensordict users test against with ``isinstance``.

>>> import torch
>>> from tensorbox import TensorDict, TensorDictFuture
>>> fut = TensorDict(a=torch.zeros(3)).consolidate(return_early=True)
>>> isinstance(fut, TensorDictFuture), fut.result().is_consolidated()
(True, True)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

__all__ = ["TensorDictFuture", "done", "run_in_thread"]

_T = TypeVar("_T")


class TensorDictFuture(Future[_T]):
    """A container still being written by a background thread: ``result()`` waits for
    it and returns it (or raises the error the writes met).

    >>> import torch
    >>> from tensorbox import TensorDict
    >>> fut = TensorDict(a=torch.arange(3)).consolidate(num_threads=2, return_early=True)
    >>> fut.result()["a"].tolist()
    [0, 1, 2]
    """


def done(value: _T) -> TensorDictFuture[_T]:
    """A future already holding ``value`` (a write that finished before returning)."""
    fut: TensorDictFuture[_T] = TensorDictFuture()
    fut.set_result(value)
    return fut


def run_in_thread(fn: Callable[[], _T]) -> TensorDictFuture[_T]:
    """``fn()`` on a daemon thread; its result or error lands in the returned future."""
    fut: TensorDictFuture[_T] = TensorDictFuture()
    fut.set_running_or_notify_cancel()

    def work() -> None:
        try:
            fut.set_result(fn())
        except BaseException as e:  # every error reaches result(): nothing lost
            fut.set_exception(e)

    threading.Thread(target=work, daemon=True, name="tensorbox-future").start()
    return fut
