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

``--json`` makes every command print one JSON document on stdout, errors included:
``{"ok": false, "path": ..., "damaged": ...}`` for a damaged tree, ``{"ok": false, "error":
...}`` for any other error (a usage error too). ``pack`` and ``unpack`` refuse a target
that exists (a file, or a folder that is not empty) unless ``--force``; ``--force``
replaces the saved tree there in one step and leaves other files alone. ``--progress``
shows a bar and a closing summary for ``pack``, ``unpack`` and ``verify`` (by default
when stderr is a terminal and the tree is large). ``--version`` prints the version.

Errors are one line on stderr, ``error: ...`` (``damaged: ...`` for a damaged tree), that
says what to do, never a traceback: a URL whose package is missing names the extra to
install (``pip install 'tensorbox[s3]'``). ``TENSORBOX_TRACEBACK=1`` shows the traceback of
an unexpected error, for a bug report.

Exit codes: 0 success (``verify``: the tree is sound); 1 the tree is damaged, a file
cannot be read or written, the target exists, or a package is missing; 2 a usage error
(bad arguments); 130 interrupted (Ctrl-C).
A closed pipe (``show X | head -3``) ends the command quietly with status 141, as a
process stopped by ``SIGPIPE`` reports.

>>> import tempfile, torch, tensorbox
>>> path = tempfile.mkdtemp()
>>> _ = tensorbox.TensorDict({"x": torch.zeros(4, 2), "tag": "a"}, batch_size=[4]).memmap(path)
>>> main(["verify", path])
ok: 1 node, 1 tensor, 32 B
0
"""

from __future__ import annotations

import argparse
import json
import os
import reprlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from tensorbox import progress as _progress
from tensorbox._storage import api as _persist
from tensorbox._storage.archive import convert as _archive_convert
from tensorbox._storage.archive import store as _archive
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.atomic import replacing
from tensorbox._storage.store import (
    JaggedEntry,
    Node,
    NodeEntry,
    TensorEntry,
    check_entry,
    count,
    iter_nodes,
    read_child,
)
from tensorbox.errors import FormatError, TensorboxError


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


def show(path: str, out: list[str], doc: dict[str, Any] | None = None) -> int:
    """Print the tree at ``path`` into ``out``; with ``doc``, fill it as JSON instead."""
    with _persist.opened(path) as (store, rel):
        node = store.node(rel)
        form = ", archive" if isinstance(store, _archive.ArchiveStore) else ""
        _header(path, node, out, form, doc, store.foreign)

        def child(parent: Node, e: NodeEntry, depth: int) -> Node:
            return read_child(store, parent, e, depth)

        total = _show_node(node, child, "", out, 0, doc)
    _total(out, total, doc)
    return 0


def _total(out: list[str], total: int, doc: dict[str, Any] | None) -> None:
    if doc is None:
        out.append(f"total: {_size(total)}")
    else:
        doc["nbytes"] = total


def _header(
    path: str,
    node: Node,
    out: list[str],
    form: str,
    doc: dict[str, Any] | None = None,
    foreign: str | None = None,
) -> None:
    origin = foreign or ("tensordict" if node.legacy else "tensorbox")
    if doc is not None:
        doc.update(
            path=path,
            archive=bool(form),
            format={"origin": origin, "version": node.version},
            **_node_doc(node),
        )
        return
    out.append(
        f"{_clean(path)}: {_clean(node.type)} batch_size={list(node.batch_size)} "
        f"device={_clean(node.device)} (format {origin}"
        f"{'' if foreign else f' v{node.version}'}{form})"
    )


def _node_doc(node: Node) -> dict[str, Any]:
    return {
        "type": node.type,
        "batch_size": list(node.batch_size),
        "device": node.device,
        "entries": {},
    }


def _json_value(v: object) -> Any:
    """A saved value as JSON can hold it (stacked values as nested lists; else its repr)."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError):  # NaN, or an int too long to write as decimal
        try:
            return repr(v)
        except ValueError:
            return f"<{type(v).__name__}>"
    return v


def _show_node(
    node: Node,
    child: Any,
    indent: str,
    out: list[str],
    depth: int,
    doc: dict[str, Any] | None = None,
) -> int:
    total = 0
    items = list(node.entries.items())
    entries: dict[str, Any] = doc["entries"] if doc is not None else {}
    for i, (key, e) in enumerate(items):
        last = i == len(items) - 1
        branch, cont = ("└── ", "    ") if last else ("├── ", "│   ")
        if type(e) is TensorEntry:
            n = e.nbytes
            total += n
            dtype = str(e.dtype).removeprefix("torch.")
            entries[key] = {
                "kind": "tensor",
                "dtype": dtype,
                "shape": list(e.shape),
                "nbytes": n,
                "file": _base(e.path),
                "sha256": e.sha256,
            }
            out.append(
                f"{indent}{branch}{_clean(repr(key))}: {dtype} {list(e.shape)} {_size(n)}  "
                f"[{_clean(_base(e.path))}]" + (" sha256" if e.sha256 else "")
            )
        elif type(e) is JaggedEntry:
            n = e.values.nbytes + e.offsets.nbytes
            total += n
            dtype = str(e.values.dtype).removeprefix("torch.")
            rows = ", ".join(map(str, (e.offsets.shape[0] - 1, "*", *e.values.shape[1:])))
            entries[key] = {
                "kind": "jagged",
                "dtype": dtype,
                "rows": e.offsets.shape[0] - 1,
                "row_shape": list(e.values.shape[1:]),
                "nbytes": n,
                "files": [_base(e.values.path), _base(e.offsets.path)],
            }
            out.append(
                f"{indent}{branch}{_clean(repr(key))}: jagged {dtype} [{rows}] {_size(n)}  "
                f"[{_clean(_base(e.values.path))}, {_clean(_base(e.offsets.path))}]"
            )
        elif type(e) is NodeEntry:
            sub = child(node, e, depth + 1)
            sub_doc = None
            if doc is not None:
                sub_doc = entries[key] = {"kind": "node", "dir": _base(e.path), **_node_doc(sub)}
            out.append(
                f"{indent}{branch}{_clean(repr(key))}: {_clean(sub.type)} "
                f"batch_size={list(sub.batch_size)}  [{_clean(_base(e.path))}/]"
            )
            n = _show_node(sub, child, indent + cont, out, depth + 1, sub_doc)
            if sub_doc is not None:
                sub_doc["nbytes"] = n
            total += n
        else:
            kind = "stacked values" if e.stacked else "value"  # type: ignore[union-attr]
            if doc is not None:
                entries[key] = {"kind": kind.replace(" ", "_"), "value": _json_value(e.value)}  # type: ignore[union-attr]
            out.append(f"{indent}{branch}{_clean(repr(key))}: {kind} {_value(e.value)}")  # type: ignore[union-attr]
    return total


def _base(path: str) -> str:
    """The last name of a file path or of an archive entry (``FILE::dir/name``)."""
    return os.path.basename(path.rpartition(_archive.SEP)[2] if _archive.SEP in path else path)


def verify(
    path: str,
    out: list[str],
    read: bool = False,
    doc: dict[str, Any] | None = None,
    progress: bool | None = None,
) -> int:
    """Check the tree at ``path``; the counts into ``out`` (or ``doc``); FormatError if damaged."""
    nodes = tensors = total = unchecked = 0
    # Without --read the check reads only meta.json files: quick, so no bar, no summary.
    shown = progress if read else False
    task = _progress.Progress("verify", _tree_bytes(path, shown), progress=shown, log=read)
    with task, _persist.opened(path) as (store, rel):
        for _, node in iter_nodes(store, rel):
            nodes += 1
            for e in node.entries.values():
                n, b = count(e)
                if not n:
                    continue
                tensors, total = tensors + n, total + b
                # files read without a recorded checksum to compare with
                if not store.checksummed:
                    unchecked += (e.values if type(e) is JaggedEntry else e).sha256 is None  # type: ignore[union-attr]
                if read:  # every byte, its checksums, a jagged leaf's offsets
                    check_entry(store, e)
                task.update(b, files=2 if type(e) is JaggedEntry else 1)
    if doc is not None:
        doc.update(ok=True, path=path, read=read, nodes=nodes, tensors=tensors, nbytes=total)
    else:
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


def _tree_bytes(path: str, progress: bool | None) -> int | None:
    """The bytes of the tensors of the tree at ``path`` (meta.json files only are read),
    for a progress bar; None when no bar can show or the tree cannot be read (the work
    itself then raises the reason)."""
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    counts: dict[str, Any] = {}
    try:
        verify(path, [], read=False, doc=counts)
    except (FormatError, OSError):
        return None
    return int(counts["nbytes"])


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


def _refuse_existing(target: str, what: str) -> None:
    """``pack``/``unpack`` without ``--force``: an existing target is the user's, not ours."""
    if os.path.isdir(target):
        if os.listdir(target):
            raise FileExistsError(
                f"{what} target {target!r} is a folder that is not empty; pass --force to "
                "replace the saved tree there, or choose another path"
            )
    elif os.path.lexists(target):
        raise FileExistsError(
            f"{what} target {target!r} exists; pass --force to replace it, or choose another path"
        )


class _Parser(argparse.ArgumentParser):
    """argparse's parser; with ``--json`` on the command line its usage errors are JSON."""

    def __init__(self, *args: Any, json_errors: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.json_errors = json_errors

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            _print_json({"ok": False, "error": f"usage: {message} (see {self.prog} --help)"})
            sys.exit(2)
        super().error(message)


def _print_json(doc: dict[str, Any]) -> None:
    print(json.dumps(doc, ensure_ascii=False))


def _prog() -> str:
    """``tensorbox`` (the console script) or ``python -m tensorbox``: as it was run."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "tensorbox" if name.startswith("tensorbox") else "python -m tensorbox"


def _parser(json_errors: bool = False) -> argparse.ArgumentParser:
    from tensorbox import __version__

    parser = _Parser(
        json_errors=json_errors,
        prog=_prog(),
        description=__doc__.split("\n")[0],
        epilog="exit status: 0 success, 1 damaged tree or I/O error or existing target "
        "or missing package, 2 usage error, 130 interrupted, 141 closed output pipe",
    )
    parser.add_argument("--version", action="version", version=f"tensorbox {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    progress = {
        "action": argparse.BooleanOptionalAction,
        "default": None,
        "help": "a progress bar and a closing summary on stderr "
        "(default: when stderr is a terminal and the tree is large)",
    }
    as_json = {"action": "store_true", "help": "print one JSON document, errors included"}
    flag = "store_true"

    def command(name: str, help: str, args: str, bar: bool = True, **options: Any) -> None:
        """One subcommand: its positional ``args``, its own ``--options``, then ``--progress``
        (where ``bar``) and ``--json``, which every command takes."""
        p = sub.add_parser(name, json_errors=json_errors, help=help)
        for a in args.split():
            p.add_argument(a)
        for option, kwargs in {**options, **({"progress": progress} if bar else {})}.items():
            p.add_argument(f"--{option}", **kwargs)
        p.add_argument("--json", **as_json)  # type: ignore[arg-type]

    command("show", "print the tree: keys, classes, dtypes, shapes, sizes", "path", bar=False)
    read = {"action": flag, "help": "also read every byte of data"}
    command("verify", "check a tree; exit 1 with the reason if damaged", "path", read=read)
    compression = {
        "type": _compression,
        "metavar": "NAME",
        "help": "compress the leaf entries: deflate, bzip2 or lzma (default: stored, mappable)",
    }
    force = {"action": flag, "help": "replace FILE if it exists"}
    pack = "write the tree at DIR as the one-file archive FILE"
    command("pack", pack, "dir file", compression=compression, force=force)
    force = {"action": flag, "help": "replace the saved tree in DIR if DIR is not empty"}
    command("unpack", "extract the archive FILE into the folder DIR", "file dir", force=force)
    return parser


def _pack(
    directory: str, file: str, compression: str | None, force: bool, progress: bool | None
) -> tuple[int, int]:
    """``pack``; with ``force`` over an existing file, written beside it and renamed over
    it, so that a failed pack leaves the old file whole."""
    if not (force and os.path.isfile(file)):
        return _archive_convert.pack(directory, file, compression=compression, progress=progress)
    with replacing(file, tmp=f"{file}.{os.getpid()}.partial") as stage:
        return _archive_convert.pack(directory, stage, compression=compression, progress=progress)


def _run(args: argparse.Namespace, out: list[str]) -> int:
    if args.command == "show":
        if args.json:
            doc: dict[str, Any] = {}
            code = show(args.path, out, doc)
            out[:] = [json.dumps(doc, ensure_ascii=False)]
            return code
        return show(args.path, out)
    if args.command == "verify":
        if args.json:
            doc = {}
            code = verify(args.path, out, read=args.read, doc=doc, progress=args.progress)
            out.append(json.dumps(doc, ensure_ascii=False))
            return code
        return verify(args.path, out, read=args.read, progress=args.progress)
    if args.command == "pack":
        if not args.force:
            _refuse_existing(args.file, "pack")
        # the bar and the summary line: pack and unpack open them (progress=)
        nodes, tensors = _pack(args.dir, args.file, args.compression, args.force, args.progress)
        if args.json:
            doc = {"ok": True, "path": args.dir, "file": args.file, "nodes": nodes}
            out.append(json.dumps({**doc, "tensors": tensors}, ensure_ascii=False))
            return 0
        out.append(
            f"packed {nodes} node{'s' * (nodes != 1)}, {tensors} tensor"
            f"{'s' * (tensors != 1)} into {_clean(args.file)}"
        )
        return 0
    nodes, files = _archive_convert.unpack(
        args.file, args.dir, force=args.force, progress=args.progress
    )
    if args.json:
        doc = {"ok": True, "path": args.file, "dir": args.dir, "nodes": nodes, "files": files}
        out.append(json.dumps(doc, ensure_ascii=False))
        return 0
    out.append(
        f"unpacked {files} file{'s' * (files != 1)} ({nodes} node"
        f"{'s' * (nodes != 1)}) into {_clean(args.dir)}"
    )
    return 0


def _reason(err: BaseException) -> str:
    """The one line a failed command prints (after ``error: ``): what went wrong and, where
    we know it, what to do."""
    if isinstance(err, ImportError) and "pip install" not in str(err):
        # a package our code imports that the environment lacks: name it
        return f"{err} (install the package, or the tensorbox extra that brings it)"
    if isinstance(err, OSError | ImportError | ValueError | TensorboxError):
        return str(err)  # bad input or a missing file or package: the message says which
    return (
        f"{type(err).__name__}: {err} (unexpected: TENSORBOX_TRACEBACK=1 shows where, "
        "for a bug report)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(json_errors="--json" in argv).parse_args(argv)
    as_json = getattr(args, "json", False)
    path = getattr(args, "path", None) or getattr(args, "dir", None)
    out: list[str] = []
    try:
        try:
            code = _run(args, out)
        except BrokenPipeError:
            raise
        except FormatError as err:
            if as_json:
                _print_json({"ok": False, "path": path, "damaged": str(err)})
                return 1
            if out:  # what was shown before the damage was found
                print("\n".join(out))
            print(_clean(f"damaged: {err}"), file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            if as_json:
                _print_json({"ok": False, "path": path, "error": "interrupted"})
            else:
                print("error: interrupted", file=sys.stderr)
            return 130
        except Exception as err:  # every error is one line, never a traceback
            if os.environ.get("TENSORBOX_TRACEBACK") and not isinstance(err, OSError):
                raise
            if as_json:
                _print_json({"ok": False, "path": path, "error": _reason(err)})
            else:
                if out:
                    print("\n".join(out))
                print(_clean(f"error: {_reason(err)}"), file=sys.stderr)
            return 1
        print("\n".join(out))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    return code


def _quiet_stdout() -> None:
    """The reader went away (``| head``): point stdout at /dev/null so that the
    interpreter's final flush does not print a second BrokenPipeError at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
