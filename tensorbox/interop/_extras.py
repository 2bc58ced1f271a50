"""Importing an optional library, with an error that names the extra to install.

>>> require("json", "arrow").__name__
'json'
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """``import module``; when missing, an ``ImportError`` naming ``tensorbox[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{module} is needed for this bridge and is not installed: "
            f"pip install 'tensorbox[{extra}]'"
        ) from err
