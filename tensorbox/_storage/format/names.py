"""Key <-> file-name encoding of the tensorbox format (specified in :mod:`tensorbox._storage.format.spec`).

>>> encode_key("Obs"), decode_key("^obs")
('^obs', 'Obs')
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import TypeGuard

__all__ = ["decode_key", "encode_key", "is_plain_name", "legacy_name"]

_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_WINDOWS_DEVICES = frozenset(
    ["con", "prn", "aux", "nul"] + [f"{p}{i}" for p in ("com", "lpt") for i in range(10)]
)
_MAX_NAME = 200
# Keys that encode to themselves: kept characters only, no dot first (nor anywhere in a
# directory name, hence two patterns), short enough not to be cut.
_PLAIN_KEY_LEAF = re.compile(r"[a-z0-9_-][a-z0-9_.-]{0,199}").fullmatch
_PLAIN_KEY_NODE = re.compile(r"[a-z0-9_-]{1,200}").fullmatch


def encode_key(key: str, *, node: bool = False) -> str:
    """The file-system name of ``key`` (without the ``.memmap`` suffix). See the module doc."""
    if not key:
        return "%"
    if (_PLAIN_KEY_NODE if node else _PLAIN_KEY_LEAF)(key) is not None and key.split(".", 1)[
        0
    ] not in _WINDOWS_DEVICES:
        return key  # the usual key ("weight", "layers.0"): every character is kept
    out = []
    for i, ch in enumerate(key):
        if ch in _LOWER or (ch == "." and i and not node):
            out.append(ch)
        elif "A" <= ch <= "Z":
            out.append("^" + ch.lower())
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    name = "".join(out)
    if name.split(".", 1)[0] in _WINDOWS_DEVICES:
        name = f"%{ord(name[0]):02X}{name[1:]}"
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        name = f"{name[:180]}~{digest}"
    return name


def decode_key(name: str) -> str:
    """Invert :func:`encode_key` (names cut with ``~`` cannot be inverted: read meta.json)."""
    if name == "%":
        return ""
    out = bytearray()
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "%" and i + 2 < len(name) + 0 and _is_hex2(name[i + 1 : i + 3]):
            out.append(int(name[i + 1 : i + 3], 16))
            i += 3
        elif ch == "^" and i + 1 < len(name) and "a" <= name[i + 1] <= "z":
            out += name[i + 1].upper().encode()
            i += 2
        elif ch in _LOWER or ch == ".":
            out += ch.encode()
            i += 1
        else:
            raise ValueError(f"{name!r} is not a name made by encode_key (at {name[i:]!r})")
    return out.decode("utf-8", "surrogatepass")


def _is_hex2(s: str) -> bool:
    return len(s) == 2 and all(c in "0123456789ABCDEF" for c in s)


def legacy_name(key: str) -> str:
    """tensordict's ``_encode_key_for_filesystem`` (its robust default), for reading its trees."""
    if not key:
        return "%"
    if key in (".", ".."):
        return "%2E" * len(key)
    return "".join(
        f"%{ord(c):02X}" if (c in '/<>:"|?*\\ \0%' or ord(c) < 32 or ord(c) == 127) else c
        for c in key
    )


def is_plain_name(name: object) -> TypeGuard[str]:
    """A single path component that cannot leave its directory (and that the OS can encode)."""
    if type(name) is not str or name in ("", ".", "..") or "/" in name or "\\" in name:
        return False
    if name.isascii():  # every name tensorbox writes: skip the encoding
        return "\0" not in name and len(name) <= 255
    try:
        return "\0" not in name and len(os.fsencode(name)) <= 255
    except UnicodeError:  # a lone surrogate, which Python's json lets through
        return False
