"""Command line: look at and check saved trees.

``python -m tensorbox show PATH`` prints the tree: keys, classes, dtypes, shapes, sizes.
``python -m tensorbox verify PATH`` checks every ``meta.json`` and that every file exists,
stays inside the tree and is big enough; ``--read`` also reads every byte and checks the
checksums recorded at save time (``checksum=True``). It exits with status 1 and the reason
when the tree is damaged, 0 when it is sound. Names and values read from the tree are
printed with control characters escaped. Both read one generation of the tree, even while
a save at the same path runs.

Both take a one-file archive too (``FILE``, or ``FILE::DIR`` for a sub-tree); ``verify
--read`` then checks every entry's CRC-32 as well. ``python -m tensorbox pack DIR FILE``
writes a folder as an archive, byte for byte (``--compression deflate``, ``bzip2`` or
``lzma`` compresses its leaf entries); ``unpack FILE DIR`` extracts one into a folder,
replacing the tree there in one step.

>>> import tempfile, torch, tensorbox
>>> path = tempfile.mkdtemp()
>>> _ = tensorbox.TensorDict({"x": torch.zeros(4, 2), "tag": "a"}, batch_size=[4]).memmap(path)
>>> main(["verify", path])
ok: 1 node, 1 tensor, 32 B
0
"""

from __future__ import annotations

import argparse
import os
import reprlib
import sys
from collections.abc import Sequence
from typing import Any, cast

from tensorbox._storage import checksum as _checksum
from tensorbox._storage import commit as _commit
from tensorbox._storage import jagged_io as _jagged_io
from tensorbox._storage.archive import convert as _archive_convert
from tensorbox._storage.archive import store as _archive
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.format import spec as fmt
from tensorbox.errors import FormatError


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError  # pragma: no cover


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 4, 40, 40, 40


def _value(v: object, limit: int = 40) -> str:
    """A short repr of a saved value, safe on deep nesting and huge ints."""
    if hasattr(v, "tolist"):  # a stacked value: an object array
        v = list(v.flat) if v.ndim else v.item()  # type: ignore[attr-defined]
    try:
        r = _REPR.repr(v)
    except Exception:  # an int too long to write as decimal...
        r = f"<{type(v).__name__}>"
    return _clean(r if len(r) <= limit else r[: limit - 3] + "...")


def _clean(text: object) -> str:
    """``text`` with control characters escaped: names in a file must not drive the terminal."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def show(path: str, out: list[str]) -> int:
    found = _archive.split(path)
    if found is not None:
        ar = _archive.Archive(found[0])
        node = _archive.read_node(ar, found[1])
        _header(path, node, out, ", archive")

        def child(parent: fmt.Node, e: fmt.NodeEntry, depth: int) -> fmt.Node:
            return _archive.read_child(ar, parent, e, depth)

        total = _show_node(node, child, "", out, 0)
        out.append(f"total: {_size(total)}")
        return 0
    lock = _commit.read_lock(os.path.realpath(path))
    try:
        node = fmt.read_node(path)
        _header(path, node, out, "")
        root = os.path.realpath(path)

        def child(parent: fmt.Node, e: fmt.NodeEntry, depth: int) -> fmt.Node:
            return fmt.read_child(parent, e, root, depth)

        total = _show_node(node, child, "", out, 0)
    finally:
        _commit.read_unlock(lock)
    out.append(f"total: {_size(total)}")
    return 0


def _header(path: str, node: fmt.Node, out: list[str], form: str) -> None:
    origin = "tensordict" if node.legacy else "tensorbox"
    out.append(
        f"{_clean(path)}: {_clean(node.type)} batch_size={list(node.batch_size)} "
        f"device={_clean(node.device)} (format {origin} v{node.version}{form})"
    )


def _show_node(node: fmt.Node, child: Any, indent: str, out: list[str], depth: int) -> int:
    total = 0
    items = list(cast("dict[str, _archive.Entry]", node.entries).items())
    for i, (key, e) in enumerate(items):
        last = i == len(items) - 1
        branch, cont = ("└── ", "    ") if last else ("├── ", "│   ")
        if type(e) is fmt.TensorEntry or type(e) is _archive.ArchiveTensor:
            n = e.nbytes
            total += n
            dtype = str(e.dtype).removeprefix("torch.")
            out.append(
                f"{indent}{branch}{_clean(repr(key))}: {dtype} {list(e.shape)} {_size(n)}  "
                f"[{_clean(_base(e.path))}]" + (" sha256" if e.sha256 else "")
            )
        elif type(e) is _jagged_io.JaggedEntry or type(e) is _archive.ArchiveJagged:
            n = e.values.nbytes + e.offsets.nbytes
            total += n
            dtype = str(e.values.dtype).removeprefix("torch.")
            rows = ", ".join(map(str, (e.offsets.shape[0] - 1, "*", *e.values.shape[1:])))
            out.append(
                f"{indent}{branch}{_clean(repr(key))}: jagged {dtype} [{rows}] {_size(n)}  "
                f"[{_clean(_base(e.values.path))}, {_clean(_base(e.offsets.path))}]"
            )
        elif type(e) is fmt.NodeEntry:
            sub = child(node, e, depth + 1)
            out.append(
                f"{indent}{branch}{_clean(repr(key))}: {_clean(sub.type)} "
                f"batch_size={list(sub.batch_size)}  [{_clean(_base(e.path))}/]"
            )
            total += _show_node(sub, child, indent + cont, out, depth + 1)
        else:
            kind = "stacked values" if e.stacked else "value"  # type: ignore[union-attr]
            out.append(f"{indent}{branch}{_clean(repr(key))}: {kind} {_value(e.value)}")  # type: ignore[union-attr]
    return total


def _base(path: str) -> str:
    """The last name of a file path or of an archive entry (``FILE::dir/name``)."""
    return os.path.basename(path.rpartition(_archive.SEP)[2] if _archive.SEP in path else path)


def verify(path: str, out: list[str], read: bool = False) -> int:
    nodes = tensors = total = 0
    found = _archive.split(path)
    if found is not None:
        ar = _archive.Archive(found[0])
        for _, node in _archive.iter_nodes(ar, found[1]):
            nodes += 1
            for e in cast("dict[str, _archive.Entry]", node.entries).values():
                tensors, total = _archive.count(ar, e, tensors, total, read)
        _ok(out, nodes, tensors, total)
        return 0
    unchecked = 0  # files read without a recorded checksum to compare with
    lock = _commit.read_lock(os.path.realpath(path))
    try:
        for _, node in fmt.iter_tree(path):
            nodes += 1
            for e in node.entries.values():
                if type(e) is fmt.TensorEntry:
                    tensors += 1
                    total += e.nbytes
                    unchecked += e.sha256 is None
                    if read:  # every byte, and the checksum when the save recorded one
                        _checksum.check_file(e.path, e.nbytes, e.sha256)
                elif type(e) is _jagged_io.JaggedEntry:
                    tensors += 1
                    total += e.values.nbytes + e.offsets.nbytes
                    unchecked += e.values.sha256 is None
                    if read:  # both files, and the offsets' contents
                        _jagged_io.verify(e)
    finally:
        _commit.read_unlock(lock)
    _ok(out, nodes, tensors, total)
    if read and unchecked:
        out.append(
            f"note: {unchecked} of {tensors} tensors have no checksums recorded: bytes not "
            "verified (read to the end only; save with checksum=True to record them)"
        )
    return 0


def _ok(out: list[str], nodes: int, tensors: int, total: int) -> None:
    out.append(
        f"ok: {nodes} node{'s' * (nodes != 1)}, {tensors} tensor{'s' * (tensors != 1)}, "
        f"{_size(total)}"
    )


def _compression(name: str) -> str:
    """``--compression NAME``, checked before anything is read (a usage error, status 2)."""
    try:
        _zip.compression_method(name)
    except ValueError:
        names = ", ".join(sorted(k for k in _zip.COMPRESSIONS if k is not None))
        raise argparse.ArgumentTypeError(
            f"{name!r} is not a compression tensorbox writes; choose one of {names}"
        ) from None
    return name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tensorbox", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_show = sub.add_parser("show", help="print the tree: keys, classes, dtypes, shapes, sizes")
    p_show.add_argument("path")
    p_verify = sub.add_parser("verify", help="check a tree; exit 1 with the reason if damaged")
    p_verify.add_argument("path")
    p_verify.add_argument("--read", action="store_true", help="also read every byte of data")
    p_pack = sub.add_parser("pack", help="write the tree at DIR as the one-file archive FILE")
    p_pack.add_argument("dir")
    p_pack.add_argument("file")
    p_pack.add_argument(
        "--compression",
        type=_compression,
        metavar="NAME",
        help="compress the leaf entries: deflate, bzip2 or lzma (default: stored, mappable)",
    )
    p_unpack = sub.add_parser("unpack", help="extract the archive FILE into the folder DIR")
    p_unpack.add_argument("file")
    p_unpack.add_argument("dir")
    p_unpack.add_argument(
        "--force", action="store_true", help="replace the tree at DIR (other files there stay)"
    )
    args = parser.parse_args(argv)
    out: list[str] = []
    try:
        if args.command == "show":
            code = show(args.path, out)
        elif args.command == "verify":
            code = verify(args.path, out, read=args.read)
        elif args.command == "pack":
            nodes, tensors = _archive_convert.pack(
                args.dir, args.file, compression=args.compression
            )
            out.append(
                f"packed {nodes} node{'s' * (nodes != 1)}, {tensors} tensor"
                f"{'s' * (tensors != 1)} into {_clean(args.file)}"
            )
            code = 0
        else:
            nodes, files = _archive_convert.unpack(args.file, args.dir, force=args.force)
            out.append(
                f"unpacked {files} file{'s' * (files != 1)} ({nodes} node"
                f"{'s' * (nodes != 1)}) into {_clean(args.dir)}"
            )
            code = 0
    except (FormatError, OSError, ValueError) as err:
        if out:  # what was shown before the damage was found
            print("\n".join(out))
        reason = f"damaged: {err}" if isinstance(err, FormatError) else f"error: {err}"
        print(_clean(reason), file=sys.stderr)
        return 1
    print("\n".join(out))
    return code
