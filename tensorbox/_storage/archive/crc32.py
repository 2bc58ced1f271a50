"""CRC-32 for zip entries: the fastest at hand, and combining the CRC-32s of pieces.

``crc32`` is libdeflate's when the system has it (PCLMUL: about 4x zlib's here), else
``zlib.crc32``; both release the GIL. ``crc32_combine`` is zlib's C function (through
the C library Python's zlib uses), else a Python version.

>>> import zlib
>>> crc32(b"hello") == zlib.crc32(b"hello")
True
"""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["crc32", "crc32_combine"]

#: Below this many bytes a CRC-32 is zlib's (a call through ctypes costs more).
_SMALL = 1 << 16

_POLY = 0xEDB88320


def _mult(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC-32 polynomial (bit-reflected, as zlib stores CRCs)."""
    m, p = 1 << 31, 0
    while m:
        if a & m:
            p ^= b
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _x_pow_2n() -> list[int]:
    table, p = [], 1 << 30  # x^1
    for _ in range(64):
        table.append(p)
        p = _mult(p, p)
    return table


_X2N = _x_pow_2n()  # x^(2^k) modulo the polynomial


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    p, k, n = 1 << 31, 3, len2  # x^(8 * len2): bytes are 8 bits, 2^3
    while n:
        if n & 1:
            p = _mult(_X2N[k & 63], p)
        n >>= 1
        k += 1
    return _mult(p, crc1) ^ crc2


def _load_combine() -> Any:
    """zlib's ``crc32_combine64`` (the C library Python's zlib uses: about 1 us a call,
    30x the Python version), else the Python version above."""
    import ctypes
    import ctypes.util

    for name in ("libz.so.1", ctypes.util.find_library("z"), "zlib1.dll"):
        try:
            fn = ctypes.CDLL(name).crc32_combine64
            break
        except (OSError, AttributeError, TypeError):
            continue
    else:
        return _crc32_combine
    fn.argtypes = [ctypes.c_ulong, ctypes.c_ulong, ctypes.c_int64]
    fn.restype = ctypes.c_ulong
    return fn


_COMBINE: list[Any] = []


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)``.

    >>> crc32_combine(zlib.crc32(b"ab"), zlib.crc32(b"cde"), 3) == zlib.crc32(b"abcde")
    True
    """
    if not _COMBINE:
        _COMBINE.append(_load_combine())
    return int(_COMBINE[0](crc1, crc2, len2))


def _load_crc32() -> Any:
    """libdeflate's CRC-32 when the system has it (PCLMUL: about 4x zlib's here),
    else ``zlib.crc32``; both release the GIL. Loaded on first use."""
    import ctypes

    for name in ("libdeflate.so.0", "libdeflate.so", "libdeflate.dylib"):
        try:
            fn = ctypes.CDLL(name).libdeflate_crc32
            break
        except (OSError, AttributeError):
            continue
    else:
        return zlib.crc32
    fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_uint32
    from_buffer = ctypes.c_char.from_buffer
    addressof = ctypes.addressof

    def crc32(data: Any, crc: int = 0) -> int:
        view = memoryview(data)
        if view.nbytes < _SMALL or view.readonly or not view.c_contiguous:
            return zlib.crc32(view, crc)
        return int(fn(crc, addressof(from_buffer(view.cast("B"))), view.nbytes))

    return crc32


_CRC32: list[Any] = []


def crc32(data: Any, crc: int = 0) -> int:
    """CRC-32 of ``data`` (bytes-like), continuing ``crc``, as ``zlib.crc32`` computes it.

    >>> crc32(b"hello") == zlib.crc32(b"hello")
    True
    """
    if not _CRC32:
        _CRC32.append(_load_crc32())
    return int(_CRC32[0](data, crc))
