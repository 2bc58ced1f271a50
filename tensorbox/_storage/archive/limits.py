"""Limits on compressed archive entries, checked before a byte is decompressed.

A small file must not claim gigabytes: an entry expands to at most :data:`MAX_INFLATE`
bytes, and one over 1 MiB to at most :data:`MAX_RATIO` times its compressed size
(deflate cannot pass 1032:1; bzip2 and lzma can, on data such as zeros). The
environment variables ``TENSORBOX_ZIP_MAX_BYTES`` and ``TENSORBOX_ZIP_MAX_RATIO``
override them, for archives one trusts.

>>> from types import SimpleNamespace
>>> check_inflate(SimpleNamespace(name="x", usize=1 << 20, csize=10), "f")  # 1 MiB: fine
>>> try:
...     check_inflate(SimpleNamespace(name="x", usize=1 << 30, csize=10), "f")
... except Exception as err:
...     print(str(err)[:45])
f, entry 'x': declares 1073741824 bytes uncom
"""

from __future__ import annotations

import os
from typing import Any

from tensorbox.errors import FormatError

__all__ = ["MAX_INFLATE", "MAX_RATIO", "check_inflate"]

MAX_INFLATE = 1 << 34
MAX_RATIO = 1100
_RATIO_FLOOR = 1 << 20


def _limit(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 1:
        raise ValueError(f"{name}={raw!r}: expected a positive integer")
    return value


def check_inflate(e: Any, path: str) -> None:
    """Refuse a compressed entry that declares more bytes than the limits allow."""
    most = _limit("TENSORBOX_ZIP_MAX_BYTES", MAX_INFLATE)
    ratio = _limit("TENSORBOX_ZIP_MAX_RATIO", MAX_RATIO)
    if e.usize > most:
        raise FormatError(
            f"{path}, entry {e.name!r}: declares {e.usize} bytes uncompressed, over the limit "
            f"of {most}; if the archive is trusted, raise TENSORBOX_ZIP_MAX_BYTES"
        )
    if e.usize > _RATIO_FLOOR and e.usize > ratio * max(e.csize, 1):
        raise FormatError(
            f"{path}, entry {e.name!r}: declares {e.usize} bytes uncompressed from "
            f"{e.csize}, a ratio over the limit of {ratio}:1 (a decompression bomb?); if the "
            "archive is trusted, raise TENSORBOX_ZIP_MAX_RATIO"
        )
