"""tensordict's names for the archive functions: ``pack_memmap``, ``unpack_memmap`` and
``is_memmap_archive``, over tensorbox's :func:`pack`/:func:`unpack`.

They take and return paths as tensordict's do; what they write is tensorbox's archive
(see docs/format.md), and ``unpack_memmap`` checks every entry as ``unpack`` does.

>>> import tempfile, torch
>>> from tensorbox import TensorDict, is_memmap_archive, pack_memmap, unpack_memmap
>>> root = tempfile.mkdtemp()
>>> _ = TensorDict(x=torch.arange(3), batch_size=[3]).memmap(f"{root}/tree")
>>> archive = pack_memmap(f"{root}/tree", f"{root}/tree.tdz")
>>> is_memmap_archive(archive), is_memmap_archive(f"{root}/tree")
(True, False)
>>> TensorDict.load_memmap(unpack_memmap(archive, f"{root}/again"))["x"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

from tensorbox._storage.format.spec import META

__all__ = ["is_memmap_archive", "pack_memmap", "unpack_memmap"]


def is_memmap_archive(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a zip file holding a saved tree (a top-level ``meta.json``);
    False for a folder, a missing path or any other file.

    >>> import tempfile, torch; from tensorbox import TensorDict, is_memmap_archive
    >>> d = tempfile.mkdtemp()
    >>> _ = TensorDict(x=torch.zeros(2), batch_size=[2]).save(f"{d}/w.bin", archive=True)
    >>> is_memmap_archive(f"{d}/w.bin"), is_memmap_archive(d)
    (True, False)
    """
    p = Path(path)
    if not p.is_file() or not zipfile.is_zipfile(p):
        return False
    with zipfile.ZipFile(p) as zf:
        return META in zf.namelist()


def pack_memmap(
    prefix: str | os.PathLike[str],
    archive_path: str | os.PathLike[str],
    *,
    compression: Any = None,
    compresslevel: int | None = None,
) -> Path:
    """Write the tree saved in the folder ``prefix`` as the archive ``archive_path``
    (``pack``); returns ``archive_path``. ``compresslevel`` is refused: the
    compressions use their libraries' default levels.

    >>> import tempfile, torch; from tensorbox import TensorDict, pack_memmap
    >>> d = tempfile.mkdtemp()
    >>> _ = TensorDict(x=torch.arange(2), batch_size=[2]).memmap(f"{d}/tree")
    >>> TensorDict.load_memmap(pack_memmap(f"{d}/tree", f"{d}/t.tdz"))["x"].tolist()
    [0, 1]
    """
    from tensorbox._storage.archive.convert import pack

    if compresslevel is not None:
        raise ValueError(
            f"pack_memmap: compresslevel={compresslevel!r} is not supported; pass "
            "compression= alone (its library's default level is used)"
        )
    pack(os.fspath(prefix), os.fspath(archive_path), compression=compression)
    return Path(archive_path)


def unpack_memmap(archive_path: str | os.PathLike[str], prefix: str | os.PathLike[str]) -> Path:
    """Extract the archive ``archive_path`` into the folder ``prefix`` (``unpack``);
    returns ``prefix``. ``ValueError`` when ``archive_path`` holds no saved tree.

    >>> import tempfile, torch; from tensorbox import TensorDict, unpack_memmap
    >>> d = tempfile.mkdtemp()
    >>> _ = TensorDict(x=torch.arange(2), batch_size=[2]).save(f"{d}/t.tdz")
    >>> TensorDict.load_memmap(unpack_memmap(f"{d}/t.tdz", f"{d}/tree"))["x"].tolist()
    [0, 1]
    """
    from tensorbox._storage.archive.convert import unpack

    if not is_memmap_archive(archive_path):
        raise ValueError(
            f"unpack_memmap: {os.fspath(archive_path)!r} is not an archive of a saved tree "
            f"(a zip file with a top-level {META})"
        )
    unpack(os.fspath(archive_path), os.fspath(prefix))
    return Path(prefix)
