"""``.safetensors`` files: read by mapping the file once (every tensor a zero-copy view),
written by tensorbox itself (``safetensors`` is only the tests' oracle).

The header is checked like ``meta.json``: its size, JSON, every entry's dtype, shape and
byte range (inside the data, matching shape x dtype, no two overlapping); each problem
is a ``FormatError`` naming the file and the key. Keys are split on ``.`` into nested
keys, so a Hugging Face checkpoint reads as the module tree it came from.

The mapping is private (copy-on-write): writing into a loaded tensor changes this
process's copy only, never the file.

>>> import os, tempfile, torch; from tensorbox import TensorDict
>>> with tempfile.TemporaryDirectory() as d:
...     f = os.path.join(d, "w.safetensors")
...     to_safetensors(TensorDict({"layer": {"weight": torch.ones(2, 2)}}), f)
...     td = from_safetensors(f)
...     td["layer", "weight"].sum().item(), list(td.keys(True, True))
(4.0, [('layer', 'weight')])
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import struct
from collections.abc import Callable
from typing import Any

import orjson
import torch
from torch import Tensor

from tensorbox.errors import FormatError, KeyCollisionError

__all__ = ["from_safetensors", "read_header", "to_safetensors"]

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
        numel = 1
        for s in shape:
            numel *= s
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


def _nest(keys: list[str], where: str) -> None:
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


def from_safetensors(
    path: Any,
    *,
    keys: Any = None,
    prefix: str | None = None,
    batch_size: Any = None,
    device: Any = None,
    nested: bool = True,
    cls: Any = None,
) -> Any:
    """The tensors of a ``.safetensors`` file as a container, ``.`` keys nested.

    The file is mapped once and each tensor is a view of the mapping: nothing is read
    until a tensor is used, so loading one layer of a large checkpoint reads that layer.

    Args:
        path: the file.
        keys: load only these (dotted) keys.
        prefix: load only the keys under this dotted prefix (``"encoder.layer.0"``),
            with the prefix removed.
        batch_size: default ``[]``.
        device: copy the tensors there.
        nested: ``False`` keeps the dotted names as flat keys.
        cls: the container class (TensorDict or a tensorclass).
    """
    from tensorbox._core.tensordict import TensorDict
    from tensorbox._tensorclass import is_tensorclass

    name = os.fspath(path)
    p = prefix.rstrip(".") + "." if prefix else ""
    chosen = None if keys is None else set(keys)

    def accept(key: str) -> bool:
        return (chosen is None or key in chosen) and key.startswith(p)

    entries, _meta, _start = read_header(name, accept if (chosen or p) else None)
    wanted = list(entries)
    if chosen is not None:
        missing = [k for k in keys if k not in entries]
        if missing:
            raise KeyError(f"{name}: no tensor {missing[0]!r} in the file")
        wanted = list(keys)
    if prefix and not wanted:
        raise KeyError(f"{name}: no tensor under the prefix {prefix!r}")
    size = os.path.getsize(name)
    raw: Tensor
    if size:
        with open(name, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        raw = torch.frombuffer(mm, dtype=torch.uint8)
    else:
        raw = torch.empty(0, dtype=torch.uint8)
    out: dict[str, Tensor] = {}
    for key in wanted:
        dtype, shape, begin, end = entries[key]
        chunk = raw[begin:end]
        if begin % dtype.itemsize:  # an unaligned entry: torch needs aligned views
            chunk = chunk.clone()
        t = chunk.view(dtype).view(shape)
        if device is not None:
            t = t.to(device)
        short = key[len(prefix.rstrip(".")) + 1 :] if prefix else key
        out[short] = t
    source: dict[str, Any] = out
    if nested:
        _nest(list(out), name)
        source = {}
        for key, t in out.items():
            *parents, leaf = key.split(".")
            node = source
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = t
    td = TensorDict(source, batch_size=batch_size or [])
    if cls is not None and is_tensorclass(cls):
        return cls.from_tensordict(td)
    return td


def to_safetensors(td: Any, path: Any, *, metadata: dict[str, str] | None = None) -> None:
    """Write the tensor leaves of ``td`` as a ``.safetensors`` file, nested keys joined by
    ``.``. Non-tensor entries are refused (the format holds tensors only). Written under
    a temporary name and renamed into place."""
    from tensorbox.interop.arrow import _raw_leaves
    from tensorbox.interop.files import _atomic

    name = os.fspath(path)
    tensors: list[tuple[str, Tensor]] = []
    seen: set[str] = set()
    for key_path, value in _raw_leaves(td):
        key = ".".join(key_path)
        if not isinstance(value, Tensor):
            raise TypeError(
                f"to_safetensors({name!r}): entry {key!r} is a {type(value).__name__}; the "
                "format holds tensors only (drop it: td.exclude(...))"
            )
        if value.dtype not in CODES:
            raise TypeError(f"to_safetensors({name!r}): entry {key!r} has dtype {value.dtype}")
        if value.is_nested or value.layout is not torch.strided:
            raise TypeError(f"to_safetensors({name!r}): entry {key!r} is not a dense tensor")
        if key in seen:
            raise KeyCollisionError(
                f"to_safetensors({name!r}): two entries are both named {key!r} once their "
                "keys are joined with '.'; rename one"
            )
        seen.add(key)
        tensors.append((key, value.detach().cpu().contiguous()))
    _nest([k for k, _ in tensors], f"to_safetensors({name!r})")
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for key, t in tensors:
        nbytes = t.numel() * t.element_size()
        header[key] = {
            "dtype": CODES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with _atomic(name, ".safetensors") as target, open(target, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, t in tensors:
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy().data)  # no copy
