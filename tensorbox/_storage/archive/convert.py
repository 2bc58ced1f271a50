"""Converting between the two forms of a saved tree: a folder and a one-file archive.

:func:`pack` writes a folder's files into an archive byte for byte (each node's
``meta.json`` and every leaf file, at the same relative paths; of a leaf file, the
bytes its ``meta.json`` commits, without the tail ``extend_`` keeps), and :func:`unpack`
extracts an archive into a folder, atomically like a save (the folder appears whole or
not at all). ``python -m tensorbox pack DIR FILE`` and ``unpack FILE DIR`` call them.

>>> import os, tempfile, torch
>>> from tensorbox import TensorDict
>>> root = tempfile.mkdtemp()
>>> _ = TensorDict({"x": torch.arange(3), "sub": {"y": torch.ones(3)}}, [3]).memmap(f"{root}/tree")
>>> pack(f"{root}/tree", f"{root}/tree.tbx")
(2, 2)
>>> unpack(f"{root}/tree.tbx", f"{root}/again")
(2, 4)
>>> from pathlib import Path
>>> Path(root, "tree/sub/meta.json").read_bytes() == Path(root, "again/sub/meta.json").read_bytes()
True
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from tensorbox._core.chunks import as_bytes
from tensorbox._storage import api as _persist
from tensorbox._storage import commit as _commit
from tensorbox._storage import remote as _remote
from tensorbox._storage.archive import store as _archive
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.folder import FolderStore, old_node_dirs
from tensorbox._storage.format.metafile import fsync_dir
from tensorbox._storage.format.names import is_plain_name
from tensorbox._storage.format.parse import parse_json
from tensorbox._storage.format.spec import MAX_DEPTH, META
from tensorbox._storage.memmap_tensor import map_file
from tensorbox._storage.store import JaggedEntry, TensorEntry, iter_nodes
from tensorbox.errors import FormatError
from tensorbox.progress import Progress, advance

__all__ = ["pack", "unpack"]


def pack(
    directory: str,
    file: str,
    *,
    num_threads: int = 0,
    fsync: bool = False,
    compression: Any = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool | None = None,
) -> tuple[int, int]:
    """Write the tree saved at ``directory`` as the archive ``file``; (nodes, tensors).
    An archive already at ``file`` is replaced in one rename (a failed or killed pack
    leaves it whole); any other file there is refused.

    Each entry holds its file's committed bytes: the tensor's (``shape`` in
    ``meta.json``; a jagged leaf's ``length`` values and ``rows + 1`` offsets), not the
    unused tail that ``extend_`` leaves for growth. ``compression`` (``"deflate"``,
    ``"bzip2"``, ``"lzma"``) compresses the leaf entries, as an archive save's does.
    A tree written by tensordict is converted (loaded, then saved as a tensorbox tree).

    >>> import tempfile, torch
    >>> from tensorbox import TensorDict, pack
    >>> d = tempfile.mkdtemp()
    >>> _ = TensorDict(w=torch.ones(2, 3), batch_size=[2]).memmap(f"{d}/tree")
    >>> pack(f"{d}/tree", f"{d}/tree.tdz")  # (nodes, tensors)
    (1, 1)
    >>> TensorDict.load_memmap(f"{d}/tree.tdz")["w"].sum().item()
    6.0

    ``file`` may be a URL (``s3://bucket/ds.tdz``): the archive is written locally, then
    put as one object (``storage_options`` as fsspec takes them).

    ``progress``: a bar on stderr and a closing summary line (bytes, files, time, rate),
    as ``memmap`` takes it: ``True`` always, ``False`` never, ``None`` (default) when
    stderr is a terminal and the tree is large; the summary also goes to the
    ``tensorbox`` logger (see :mod:`tensorbox.progress`).
    """
    method = _zip.compression_method(compression)  # checked before anything is read
    url = _remote.split_url(file)
    if url is not None:
        tmp = _remote.save_target(url[1], url[2])
        try:
            got = pack(
                directory, tmp, num_threads=num_threads, compression=compression, progress=progress
            )
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _remote.upload(tmp, url[1], storage_options)
        return got
    if _remote.is_url(directory):
        raise ValueError(
            f"pack({directory!r}, ...): a tree behind a URL is packed where it lives: "
            "load it (TensorDict.load_memmap(url)) and save it with memmap(file, archive=True)"
        )
    src = os.path.realpath(directory)
    root = os.path.realpath(file)
    lock = _commit.read_lock(src)
    store = FolderStore(src)
    try:
        top = store.node()
        if top.legacy:
            td = _persist.load_from(store, top=top)  # copy-on-write mappings, read lock held
            _persist.memmap(
                td,
                root,
                archive=True,
                num_threads=num_threads,
                fsync=fsync,
                compression=compression,
                progress=progress,
            )
            n = t = 0
            for _, node in iter_nodes(store):
                n += 1
                t += sum(type(e) is TensorEntry for e in node.entries.values())
            return n, t
        items: list[tuple[str, Any, bool]] = []  # (name, payload, align)
        metas: list[tuple[str, Any, bool]] = []  # parents first
        leaves = total = 0
        for _, node in iter_nodes(store, "", top):
            rel = f"{node.rel}/" if node.rel else ""
            raw = store.read_meta(node.rel)
            metas.append((rel + META, raw, False))
            # Names as meta.json gives them (a leaf may be a symlink to another file name)
            doc = parse_json(raw, store.where(rel + META))["entries"]
            for key, e in node.entries.items():
                if type(e) is TensorEntry:
                    items.append(_leaf_item(rel + doc[key]["file"], e, method))
                    leaves, total = leaves + 1, total + e.nbytes
                elif type(e) is JaggedEntry:
                    for part, sub in zip(e, ("values", "offsets"), strict=True):
                        items.append(_leaf_item(rel + doc[key][sub]["file"], part, method))
                        total += part.nbytes
                    leaves += 1
        items.extend(reversed(metas))  # after the leaves, the root's last, as a save lays them
        nodes = len(metas)
    finally:
        _commit.read_unlock(lock)
    # An archive already at ``file`` is replaced at once, as an archive save replaces it.
    with _commit.writing(root, file=True), Progress("pack", total, progress=progress):
        _archive._check_target(root)
        _archive.write_file(root, items, [None] * len(items), num_threads, fsync)
        advance(total, files=sum(align for *_, align in items))  # the leaves, written whole
    return nodes, leaves


def _leaf_item(name: str, e: TensorEntry, method: int) -> tuple[str, Any, bool]:
    """The zip item ``name`` of a leaf file: its first ``e.nbytes`` bytes (the committed
    ones; a grown file is longer), mapped, compressed when ``method`` says so."""
    data = (
        as_bytes(map_file(e.path, torch.uint8, (e.nbytes,), "r", e.nbytes, e.ident))
        if e.nbytes
        else b""
    )
    packed = _zip.compress_loadable(lambda: [data], method) if method != _zip.STORED else data
    return name, packed, True


#: The deepest and longest entry name :func:`unpack` writes: a tree's files lie at most
#: ``MAX_DEPTH`` folders down, and a path longer than Linux's PATH_MAX cannot be opened.
MAX_NAME_PARTS = MAX_DEPTH + 1
MAX_NAME_BYTES = 4095


def unpack(
    file: str,
    directory: str,
    *,
    fsync: bool = False,
    force: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool | None = None,
) -> tuple[int, int]:
    """Extract the archive ``file`` (``FILE::DIR`` for a sub-tree) into the folder
    ``directory``, in one step like a save; (nodes, files written).

    Every node is checked first, every entry name (at most :data:`MAX_NAME_PARTS`
    parts and :data:`MAX_NAME_BYTES` bytes), and every entry's CRC-32 while it is
    written. A folder already at ``directory`` (not empty) is refused unless
    ``force=True``, which replaces the tree there as a save does (the files of the tree
    go, any other file stays). A failed unpack leaves nothing behind. ``progress`` as
    for :func:`pack`.

    >>> import tempfile, torch
    >>> from tensorbox import TensorDict, unpack
    >>> d = tempfile.mkdtemp()
    >>> _ = TensorDict(w=torch.ones(2), batch_size=[2]).memmap(f"{d}/w.tdz")  # an archive
    >>> unpack(f"{d}/w.tdz", f"{d}/folder")  # (nodes, files written)
    (1, 2)
    >>> TensorDict.load_memmap(f"{d}/folder")["w"].tolist()
    [1.0, 1.0]

    ``file`` may be the URL of an archive (``URL::DIR`` too): the object is fetched
    whole into the local cache first (``storage_options`` as fsspec takes them).
    """
    url = _remote.split_url(file)
    if url is not None:
        if _remote.is_url(directory):
            raise ValueError(
                f"unpack(..., {directory!r}): a folder tree cannot be written to object "
                "storage (no rename: readers could see a mix of two saves); unpack into a "
                "local folder"
            )
        sub = (url[2] or "").strip("/")
        if sub and not all(is_plain_name(part) for part in sub.split("/")):
            raise FormatError(f"{file!r}: {sub!r} is not a sub-directory path inside the archive")
        sub = f"::{sub}" if sub else ""
        for fresh in (False, True):
            local, kept = _remote.local_archive(url[1], storage_options, fresh=fresh)
            try:
                return _unpack(local + sub, directory, fsync, force, progress)
            except FormatError as err:
                if not kept:  # fetched just now: the object itself is damaged
                    raise FormatError(f"{file}: the archive is damaged ({err})") from err
            finally:  # read: a copy larger than the cache's bound goes now
                _remote.default_cache().release()
            # The cache's copy is damaged (a flipped byte, cut short): dropped and fetched
            # again, never reported as a damaged remote archive.
    return _unpack(file, directory, fsync, force, progress)


def _unpack(
    file: str, directory: str, fsync: bool, force: bool, progress: bool | None
) -> tuple[int, int]:
    """:func:`unpack` of a local archive ``file``."""
    found = _archive.split(file)
    if found is None:
        raise FileNotFoundError(f"no archive at {file!r}")
    path, inner = found
    store = _archive.ArchiveStore(path)
    ar = store.ar
    nodes = sum(1 for _ in iter_nodes(store, inner))  # the whole tree, checked
    pre = f"{inner}/" if inner else ""
    names = [n for n in ar.entries if n.startswith(pre)]
    files = {name[len(pre) :] for name in names}
    for name in names:
        rel = name[len(pre) :]
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:  # a file, and a folder on the way to another
                raise FormatError(
                    f"{ar.where(pre + '/'.join(parts[:i]))}: a file, but also a folder of the "
                    f"entry {rel!r}; a folder cannot be both (no save writes such an archive)"
                )
        if rel.count("/") >= MAX_NAME_PARTS or len(rel.encode("utf-8", "surrogatepass")) > (
            MAX_NAME_BYTES
        ):
            raise FormatError(
                f"{ar.where(name[:60])}...: an entry name of {rel.count('/') + 1} parts and "
                f"{len(rel)} characters; unpack writes names of at most {MAX_NAME_PARTS} parts "
                f"and {MAX_NAME_BYTES} bytes (a saved tree nests at most {MAX_DEPTH} deep)"
            )
    root = os.path.realpath(directory)
    if os.path.isfile(root):
        raise FileExistsError(f"cannot unpack into {root!r}: it is a file")
    with _commit.writing(root):
        if not force and os.path.isdir(root) and os.listdir(root):
            raise FileExistsError(
                f"cannot unpack into {root!r}: a folder is there and not empty. Pass "
                "force=True (--force) to replace the tree there, or choose another folder"
            )
        stage = _commit.new_stage(root)
        total = sum(ar.entries[name].usize for name in names)
        try:
            made = {stage}
            with Progress("unpack", total, progress=progress):
                for name in names:
                    target = os.path.join(stage, *name[len(pre) :].split("/"))
                    parent = os.path.dirname(target)
                    if parent not in made:
                        os.makedirs(parent, exist_ok=True)
                        made.add(parent)
                    _extract(ar, ar.entries[name], target, fsync)
                    advance(ar.entries[name].usize)  # the bar
            if fsync:
                for d in made:
                    fsync_dir(d)
            old = _commit.commit(stage, root, lambda: old_node_dirs(root))
        except BaseException:
            _commit.remove_stage(stage)  # all of it this unpack's: removed at once
            raise
        if old is not None:
            _commit.dispose(old, root)
    return nodes, len(names)


def _extract(ar: _archive.Archive, e: _zip.ZipEntry, target: str, fsync: bool) -> None:
    data = ar.checked(e, ar.where(e.name))
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        _zip._pwrite_all(fd, [data], 0)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
