"""The ``.safetensors`` format's facts, and its header read and checked.

A file is an 8-byte little-endian header length, a JSON header mapping each key to
``{"dtype", "shape", "data_offsets"}`` (plus an optional ``__metadata__`` object of
strings), then the data. The header is checked like ``meta.json``: its size, JSON,
every entry's dtype, shape and byte range (inside the data, matching shape x dtype, no
two overlapping); each problem is a ``FormatError`` naming the file and the key.

>>> import os, tempfile, struct
>>> with tempfile.TemporaryDirectory() as d:
...     f = os.path.join(d, "bad.safetensors")
...     with open(f, "wb") as out:
...         _ = out.write(struct.pack("<Q", 999) + b"{}")
...     read_header(f)
Traceback (most recent call last):
tensorbox.errors.FormatError: ...: header size 999 does not fit the file (10 bytes); damaged or not a safetensors file
"""

from __future__ import annotations

import itertools
import json
import os
import struct
from collections.abc import Callable
from typing import Any

import orjson
import torch

from tensorbox.errors import FormatError, KeyCollisionError

__all__ = ["CODES", "DTYPES", "MAX_HEADER", "nest", "read_header"]

DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "U16": torch.uint16,
    "I32": torch.int32,
    "U32": torch.uint32,
    "I64": torch.int64,
    "U64": torch.uint64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "C64": torch.complex64,
}
CODES = {v: k for k, v in DTYPES.items()}
#: A header larger than this is refused before it is read (safetensors' own bound).
MAX_HEADER = 100_000_000


def read_header(
    path: Any, wanted: Callable[[str], bool] | None = None
) -> tuple[dict[str, Any], dict[str, str], int]:
    """``(entries, metadata, data_start)`` of a ``.safetensors`` file, checked.

    ``entries`` maps each key to ``(dtype, shape, begin, end)`` (byte offsets into the
    file). With ``wanted``, only the keys it accepts are returned and fully checked; the
    byte ranges of all are checked (an overlap involves the others too).
    """
    name = os.fspath(path)
    size = os.path.getsize(name)
    with open(name, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise FormatError(f"{name}: {size} bytes, too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or 8 + n > size:
            raise FormatError(
                f"{name}: header size {n} does not fit the file ({size} bytes); damaged or "
                "not a safetensors file"
            )
        raw = f.read(n)
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise FormatError(f"{name}: the header is not JSON ({err})") from None
    if not isinstance(header, dict):
        raise FormatError(f"{name}: the header is {type(header).__name__}, expected an object")
    if _may_repeat(raw, header):
        _refuse_repeats(raw, name)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise FormatError(f"{name}: __metadata__ should be an object of strings")
    start = 8 + n
    data_len = size - start
    entries: dict[str, Any] = {}
    spans = []
    for key, info in header.items():
        if not isinstance(info, dict):
            raise FormatError(f"{name}: entry {key!r} is not an object")
        offsets = info.get("data_offsets")
        if (
            type(offsets) is not list
            or len(offsets) != 2
            or type(offsets[0]) is not int
            or type(offsets[1]) is not int
            or not 0 <= offsets[0] <= offsets[1] <= data_len
        ):
            raise FormatError(
                f"{name}: entry {key!r} has data_offsets {offsets!r}; expected [begin, end] "
                f"within the {data_len} data bytes"
            )
        if offsets[1] > offsets[0]:
            spans.append((offsets[0], offsets[1], key))
        if wanted is not None and not wanted(key):
            continue
        code = info.get("dtype")
        if code not in DTYPES:
            raise FormatError(
                f"{name}: entry {key!r} has dtype {code!r}; expected one of {sorted(DTYPES)}"
            )
        shape = info.get("shape")
        if type(shape) is not list or not all(type(s) is int and s >= 0 for s in shape):
            raise FormatError(
                f"{name}: entry {key!r} has shape {shape!r}; expected a list of sizes"
            )
        dtype = DTYPES[code]
        numel, running = 1, 1
        for s in shape:
            numel *= s
            running *= max(s, 1)
        if running >= 2**63:  # torch multiplies every dim, a later 0 too, in int64
            raise FormatError(
                f"{name}: entry {key!r} has shape {shape}, whose sizes multiply past int64 "
                "(torch cannot hold it, even with a size-0 dim)"
            )
        nbytes = numel * dtype.itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise FormatError(
                f"{name}: entry {key!r} spans {offsets[1] - offsets[0]} bytes, and shape "
                f"{shape} of {code} needs {nbytes}"
            )
        entries[key] = (dtype, tuple(shape), start + offsets[0], start + offsets[1])
    spans.sort()
    for (_, end, a), (begin, _, b) in itertools.pairwise(spans):
        if begin < end:
            raise FormatError(f"{name}: entries {a!r} and {b!r} overlap")
    return entries, metadata, start


#: The fields every entry has once: a header where one is spelled more often than there
#: are entries may name something twice (JSON parsers keep the last of two).
_FIELDS = (b'"dtype"', b'"shape"', b'"data_offsets"')


def _may_repeat(raw: bytes, header: dict[str, Any]) -> bool:
    """Whether the header may name a key twice (cheap: counts, no second parse). Exact
    for the usual header; a key that spells a field name only costs the careful parse."""
    n = len(header) - ("__metadata__" in header)
    return raw.count(b'"__metadata__"') > 1 or any(raw.count(f) != n for f in _FIELDS)


def _refuse_repeats(raw: bytes, name: str) -> None:
    """FormatError naming the first key that an object of the header holds twice."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise FormatError(
                    f"{name}: the header names {key!r} twice; which entry is meant is "
                    "ambiguous (damaged or crafted file)"
                )
            out[key] = value
        return out

    json.loads(raw, object_pairs_hook=pairs)


def nest(keys: list[str], where: str) -> None:
    """Refuse keys whose nesting collides: ``"a"`` a tensor and ``"a.b"`` another."""
    leaves = set(keys)
    for key in keys:
        parts = key.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in leaves:
                raise KeyCollisionError(
                    f"{where}: key {key!r} nests under {prefix!r}, which is a tensor itself"
                )
