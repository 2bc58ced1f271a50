"""The former name of :mod:`tensorbox._storage.api` (the entry points: ``memmap``,
``memmap_``, ``memmap_like``, ``load_memmap``, ``opened``...), kept so that imports of
it keep working; new code imports ``api``.

>>> from tensorbox._storage import api, persist
>>> persist.load_memmap is api.load_memmap
True
"""

from __future__ import annotations

from typing import Any

from tensorbox._storage import api as _api
from tensorbox._storage.api import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(_api, name)
