"""The on-disk format of a saved tree: specification, key encoding, ``meta.json`` I/O.

This docstring is the specification (also rendered in ``docs/format.md``).

Format ``tensorbox`` version 4
==============================

Version 4 adds one optional field to ``json`` entries, ``meta`` (below); a writer
writes version 4 in the ``meta.json`` of a node that holds such an entry, version 3
in one that holds a jagged entry and version 2 elsewhere, so a reader of older
versions still opens every node that uses nothing new, and refuses a newer node by
its version rather than by an unknown field. Version 3 added one entry kind,
``jagged`` (below). Version 2 added one field to tensor entries, ``id``, and an
optional ``sha256``; readers accept versions 1 (the same without them), 2, 3 and 4.

A saved tree is a directory. Every *node* (the root, and each nested
``TensorDict`` or tensorclass instance) is a directory that holds:

- ``meta.json``: the node's description, a UTF-8 JSON object (below);
- one ``<name>.memmap`` file per tensor leaf: the tensor's elements in C
  (row-major) order, little-endian, no header, no padding. A file may be longer
  than its tensor (readers ignore the tail) but never shorter;
- one sub-directory per nested node, itself a node.

Each node's ``meta.json`` is self-contained: any sub-directory of a tree can be
opened as a tree of its own.

``meta.json`` keeps the node's own fields apart from its entries, so no key name
can collide with a field::

    {
      "format": "tensorbox",           required, exactly this string
      "version": 2,                    required int; unknown versions are refused
      "type": "TensorDict",            "TensorDict", or "module:QualName" of a tensorclass
      "batch_size": [3],               list of ints >= 0
      "device": "cpu",                 a torch device string, or null
      "entries": {                     one per key, in the container's order
        "pixels": {"kind": "tensor", "dtype": "uint8", "shape": [3, 84, 84],
                   "file": "pixels.memmap", "id": "9f0c...32 hex digits"},
        "info":   {"kind": "node", "dir": "info"},
        "name":   {"kind": "json", "value": "a string"},
        "tags":   {"kind": "json", "value": ["a", "b", "c"], "stacked": true},
        "run":    {"kind": "json", "value": "run-1", "meta": true}
      }
    }

- ``tensor``: ``dtype`` is one of :data:`tensorbox._core.encoding.DTYPES` (torch names
  without ``torch.``);
  ``shape`` starts with the node's ``batch_size``; ``file`` is a file name in
  the node's directory. ``id`` (version 2) is the file's generation id: 32
  lower-case hex digits (128 random bits) drawn when the file is written, kept
  while the file is kept (an in-place save that links it into the new tree), never
  derived from a name or an inode. Pickled references to the file carry it and
  are refused when the ``meta.json`` beside the file names another. ``sha256``
  (optional, ``checksum=True`` at save) is the SHA-256 of the tensor's bytes at
  save time, checked by ``verify --read`` and ``load_memmap(verify=True)``.
- ``node``: ``dir`` is a sub-directory name; its ``meta.json`` describes it, and
  its ``batch_size`` starts with this node's.
- ``jagged`` (version 3): a jagged nested tensor, ``B`` rows of ``L_i`` elements
  of shape ``feature`` each, as two files in the node's directory::

      "tokens": {"kind": "jagged", "dtype": "int64", "shape": [3, null, 2],
                 "length": 17,
                 "values": {"file": "tokens.values.memmap", "id": "..."},
                 "offsets": {"file": "tokens.offsets.memmap", "dtype": "int64",
                             "id": "..."}}

  ``shape`` is ``[B, null, *feature]`` (``null`` marks the ragged dim); the node's
  ``batch_size`` is exactly ``[B]``. ``length`` is ``sum L_i``. The values file
  holds ``[length, *feature]`` elements of ``dtype`` (as a tensor file: C order,
  little-endian, may be longer); the offsets file holds ``B + 1`` integers of the
  offsets ``dtype`` (``int64`` or ``int32``): row ``i`` is values
  ``offsets[i]:offsets[i + 1]``. Offsets start at 0, never decrease and end at
  ``length``; a reader checks this (and both files' sizes) when it maps them and
  refuses anything else, naming the file. ``values`` and ``offsets`` each carry
  their file's ``id`` and may carry its ``sha256``, as tensor entries do.
- ``json``: a value shared by the whole batch, or with ``"stacked": true`` one
  value per batch element as nested lists of shape ``batch_size``. Values are
  JSON (``NaN`` and ``Infinity`` are written as Python's ``json`` writes them),
  nested at most :data:`MAX_JSON_DEPTH` deep, integers of at most
  ``sys.get_int_max_str_digits()`` digits: a writer refuses more before it
  writes anything, so what saves loads. ``"meta": true`` (version 4; never with
  ``stacked``) marks a ``MetaData``: metadata of the whole batch, loaded back as a
  ``MetaData`` (without the field, a ``NonTensorData``).

Nodes nest at most :data:`MAX_DEPTH` deep below the root, for writers and
readers alike.

No other field is allowed. Nothing in a file is ever unpickled or imported: a
``type`` only selects a class the reader already has.

Commits
-------
A save is atomic for the whole tree (:mod:`tensorbox._storage.commit` implements it):

1. Writers of one path take turns: an exclusive ``flock`` on
   ``<parent>/.<name>.tbx-lock``, removed when the save ends.
2. The new tree is built complete in ``<parent>/.<name>.tbx-new-<hex>``, marked
   as being built by an empty ``.tbx-building-<hex>`` file in it: every
   ``.memmap`` file (a file kept by an in-place save is hard-linked, so it keeps
   its ``id``), then every ``meta.json``, children first, each created in place
   (step 3 publishes the whole tree: no file of it needs a temporary name); then
   the mark goes. A stage still marked is deleted whole by the next writer; any
   other directory under a staging name is taken apart as in step 4.
3. It replaces the tree at ``<parent>/<name>`` in one step: a ``rename`` when
   there was none, else ``renameat2(RENAME_EXCHANGE)`` of the two directories
   (Linux: ext4, xfs, btrfs, tmpfs), under an exclusive ``flock`` of each node
   directory of the old tree.
4. The old tree, now under the staging name, is taken apart: the names its
   ``meta.json`` files list (and those files, and tensorbox's ``.tbx-*.tmp`` files)
   go, any other entry (a user's file, a folder no node lists) moves into the new
   tree. A save that could not keep such an entry (the new tree needs its path), or
   whose path holds a non-empty folder that is not a tree, is refused before step 2.
   Nothing is followed through a symlink.

Readers open a directory once, take a shared ``flock`` on it and check it is
still the one at its path, then read that one generation: at any moment a reader
sees the old tree or the new one, whole, and waits at most for step 3. This
holds for a sub-directory opened alone too: it is one of the old tree's node
directories (locked at the swap) or one of the new tree's.

A save that fails or is killed before step 3 leaves the old tree as it was (and a
hidden staging directory that the next save at the path removes); after step 3,
the new tree. Where directories cannot be exchanged (``EINVAL``, ``ENOSYS``,
``EOPNOTSUPP``: NFS, some FUSE file systems, other kernels), step 3 is two
renames, the old tree to ``<parent>/.<name>.tbx-old-<hex>`` then the new one to
the path: a reader finding no tree in between waits for the writer, and a save
killed in between leaves the old tree there, which the next load or save puts
back. A save needs write permission on the tree's parent directory.

In place, without a new tree (a row written through a mapping, the tail of a
growing file), a file is changed where it is: readers mapping it see the bytes as
they are written.

A tree whose root has no ``meta.json`` (version 1 writers removed it first when
overwriting) is refused with :class:`~tensorbox.errors.IncompleteTreeError`.

Growth
------
Rows are appended along batch dim 0 (``extend_``) with no change to the format.
The committed size of a tree is written in its ``meta.json`` files: each node's
``batch_size`` and each tensor entry's ``shape``, which change only through a
whole-tree commit as above. A leaf file grows first, in place: it is lengthened
by a factor (amortised, so a file is often longer than its tensor) and the new rows
are written after the committed bytes, which are never touched; then a commit
links the same files (the same ``id``) under new ``meta.json`` files with the new
size. A reader maps only the rows its generation's ``meta.json`` commits, and so
does a sub-folder opened alone: rows written but not yet committed, or left by a
writer killed before its commit, are part of a file's ignored tail, and the next
append writes over them.

File names
----------
A key becomes a name by a reversible encoding that is safe on case-insensitive
and Unicode-normalising file systems: every byte of the key's UTF-8 is kept
when it is one of ``a-z 0-9 _ -``, and ``.`` too except in first place or in
a directory name; an ASCII capital ``X`` becomes ``^x``; every other byte
becomes ``%XX`` (upper-case hex). The empty key is ``%``. A name equal to a
Windows device name (``con``, ``nul``, ``com1``...) before its first dot gets its
first letter escaped. A name longer than 200 characters is cut to 180 and ends
with ``~`` and 16 hex digits of the key's SHA-256 (``meta.json`` keeps the key).
Leaf files add ``.memmap``; directories have no dot, so they never collide with a
leaf file or with ``meta.json``, and no name starts with ``.``, the prefix of
temporary files.

>>> from tensorbox._storage.format.names import decode_key, encode_key
>>> encode_key("obs"), encode_key("Weird key/..", node=True), encode_key("")
('obs', '^weird%20key%2F%2E%2E', '%')
>>> decode_key("^weird%20key%2F%2E%2E")
'Weird key/..'

Reading a tree written by tensordict (0.14, 0.15: its format versions 0 and 1)
is supported as a migration path: :mod:`tensorbox._storage.format.legacy`
describes their nodes as tensorbox nodes.

The same tree can be one file, a standard zip whose stored entries mirror the
folder byte for byte (``memmap(path, archive=True)``): see ``docs/format.md``
("One-file archives") and the docstrings of ``_zip`` and ``_archive``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FORMAT",
    "MAX_DEPTH",
    "MAX_DIMS",
    "MAX_META_BYTES",
    "META",
    "SUFFIX",
    "VERSION",
    "VERSIONS",
    "node_meta",
]

FORMAT = "tensorbox"
VERSION = 4
#: Versions this reader accepts (1: tensor entries without an ``id``; 3: jagged entries;
#: 4: the ``meta`` field of a json entry).
VERSIONS = (1, 2, 3, 4)
META = "meta.json"
SUFFIX = ".memmap"
#: Bounds that keep a hostile file from asking for absurd work before the size check.
MAX_DIMS = 64
MAX_DEPTH = 200  # nested nodes, for writers and readers; loading recurses once per level
MAX_META_BYTES = 1 << 28


def node_meta(
    type_name: str, batch_size: Any, device: Any, entries: dict[str, Any], version: int = 1
) -> dict[Any, Any]:
    """The ``meta.json`` object of a node (entries built by the caller).

    ``version`` 2 when every tensor entry has its ``id``; writers that do not make
    ids (a tree built file by file) write version 1, which readers still accept.
    """
    return {
        "format": FORMAT,
        "version": version,
        "type": type_name,
        "batch_size": [int(d) for d in batch_size],
        "device": None if device is None else str(device),
        "entries": entries,
    }
