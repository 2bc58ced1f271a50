"""What the disk format (``meta.json``) and the wire format (``tensorbox.distributed``)
share: the dtype names, and the rules for non-tensor values, which travel as JSON.

Neutral ground: both formats import it, neither imports the other. A value is checked
before anything is written or sent; the limits make what saves also load: nesting at most :data:`MAX_JSON_DEPTH` deep
(``meta.json`` adds 3 levels, within what orjson reads and writes, 255), integers of at
most ``sys.get_int_max_str_digits()`` digits (what Python writes and reads as JSON).

>>> check_json_value({"lr": 0.5, "layers": [1, 2]}, "key 'cfg'"), check_json_value(2**70, "k")
(False, True)
>>> import torch
>>> dtype_name(torch.bfloat16), DTYPES["float8_e4m3fn"] is torch.float8_e4m3fn
('bfloat16', True)
>>> json_bytes({"lr": 0.5}), stacked_array([["a", "b"]], (1, 2), "key 'tag'").shape
(b'{"lr":0.5}', (1, 2))
"""

from __future__ import annotations

import json
import math
import reprlib
import sys
from typing import Any

import numpy as np
import orjson
import torch

from tensorbox.errors import FormatError

__all__ = [
    "DTYPES",
    "MAX_JSON_DEPTH",
    "check_json_value",
    "dtype_name",
    "json_bytes",
    "stacked_array",
]

#: dtype name (as written in ``meta.json`` and on the wire) -> torch dtype. Names are
#: torch's, without "torch."; the dtypes this torch lacks are left out.
_DTYPE_NAMES_TEXT = (
    "bool uint8 int8 int16 int32 int64 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
    "complex32 complex64 complex128 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz "
    "float8_e8m0fnu"
)
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in _DTYPE_NAMES_TEXT.split()
    if isinstance(getattr(torch, name, None), torch.dtype)
}
_DTYPE_NAMES = {dt: name for name, dt in DTYPES.items()}


def dtype_name(dtype: torch.dtype, where: str = "") -> str:
    """The name ``meta.json`` (and the wire) uses for ``dtype``; TypeError for dtypes the
    format lacks."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise TypeError(
            f"{where or 'tensor'} has dtype {dtype}, which the tensorbox format cannot store; "
            f"supported: {sorted(DTYPES)}"
        ) from None


#: Nesting of a JSON value (a list in a list... counts one per level), for writers.
MAX_JSON_DEPTH = 200
_INT64_LIMIT = 1 << 63


def check_json_value(value: Any, where: str) -> bool:
    """Raise TypeError (ValueError for sizes) unless ``value`` round-trips through JSON
    exactly and loads again: nested at most :data:`MAX_JSON_DEPTH` deep, integers short
    enough for Python to write and read (``sys.get_int_max_str_digits()``).

    Returns True when the value needs Python's ``json`` writer (NaN, infinities,
    or integers beyond 64 bits, which ``orjson`` does not write).
    """
    needs_std = False
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        t = type(v)
        if v is None or t is bool or t is str:
            continue
        if t is int:
            if not -_INT64_LIMIT <= v < _INT64_LIMIT:
                needs_std = True
                _check_big_int(v, where)
        elif t is float:
            needs_std |= not math.isfinite(v)
        elif t is list or t is dict:
            if depth >= MAX_JSON_DEPTH:
                raise ValueError(
                    f"{where}: the value nests lists and dicts more than {MAX_JSON_DEPTH} deep; "
                    "a saved tree keeps JSON values at most that deep (so that they load "
                    "again): flatten it, or store it as a tensor"
                )
            if t is list:
                stack.extend((item, depth + 1) for item in v)
                continue
            for k, item in v.items():
                if type(k) is not str:
                    raise TypeError(
                        f"{where}: dict key {_short_repr(k)} of type {type(k).__name__} cannot be "
                        "saved; JSON keeps str keys only"
                    )
                stack.append((item, depth + 1))
        else:
            raise TypeError(
                f"{where}: value {_short_repr(v)} of type {t.__name__} cannot be saved; a saved "
                "tree keeps non-tensor values as JSON (None, bool, int, float, str, list, dict "
                "with str keys) and never pickles. Convert it (a tuple to a list, a numpy value "
                "with .tolist()), or store it as a tensor"
            )
    return needs_std


def _check_big_int(v: int, where: str) -> None:
    try:
        str(v)
    except ValueError:
        raise ValueError(
            f"{where}: an int of {v.bit_length()} bits has more than "
            f"{sys.get_int_max_str_digits()} digits, more than Python writes or reads as JSON "
            "(sys.get_int_max_str_digits()); store it as a string or as a tensor"
        ) from None


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 40


def _short_repr(v: Any) -> str:
    """A repr of at most 80 characters, safe on deep or huge values."""
    try:
        r = _REPR.repr(v)
    except Exception:  # a broken __repr__
        r = f"<{type(v).__name__} object>"
    return r if len(r) <= 80 else r[:77] + "..."


def json_bytes(v: Any) -> bytes:
    """``v`` (checked by :func:`check_json_value`) as JSON bytes: orjson's, or Python's
    ``json`` for what orjson does not write (nesting deeper than 255)."""
    try:
        return orjson.dumps(v)
    except TypeError:  # nesting deeper than orjson writes (255)
        return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")


def stacked_array(value: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    """Nested lists of exactly ``shape`` -> an object array, checked before allocating."""
    flat: list[Any] = []

    def walk(v: Any, depth: int) -> None:
        if depth == len(shape):
            flat.append(v)
            return
        if type(v) is not list or len(v) != shape[depth]:
            raise FormatError(
                f"{where}: stacked value does not have the shape of batch_size {list(shape)} "
                f"(at depth {depth}: {_short_repr(v)})"
            )
        for item in v:
            walk(item, depth + 1)

    walk(value, 0)
    arr = np.empty(len(flat), dtype=object)
    for i, v in enumerate(flat):  # one by one: numpy would turn list values into dims
        arr[i] = v
    return arr.reshape(shape)
