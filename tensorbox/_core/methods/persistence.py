"""The container's methods that save and open trees: the ``persistence`` port.

``memmap``/``memmap_``/``memmap_like``/``load_memmap``/``extend_``/``make_memmap``...
reach the storage layer through :func:`tensorbox._core.ports.persistence` (bound by the
package face), never by import; ``consolidate`` (one storage for every leaf) is the
core's own. A method whose job is "this container, on disk" belongs here.

>>> import tempfile, torch; from tensorbox import TensorDict
>>> with tempfile.TemporaryDirectory() as d:
...     _ = TensorDict(x=torch.arange(3), batch_size=[3]).memmap(d)
...     TensorDict.load_memmap(d)["x"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

from typing import Any, Self

import torch
from torch import Tensor

from tensorbox._core import consolidate as _consolidate
from tensorbox._core import ports as _ports
from tensorbox._core.backing import TREES
from tensorbox._core.methods.base import MixinBase, is_container
from tensorbox._core.nestedkey import NestedKey, unravel_key

__all__ = ["PersistenceMethods"]


class PersistenceMethods(MixinBase):
    """Mixin of ``TensorCollection``: saving and opening trees (the persistence port)."""

    __slots__ = ()

    # -------------------------------------------------------------- persistence

    def memmap_(
        self,
        prefix: Any = None,
        *,
        num_threads: int = 0,
        copy_existing: bool = False,
        fsync: bool = False,
        existsok: bool = True,
        checksum: bool = False,
        progress: bool | None = None,
        robust_key: bool | None = None,
    ) -> Self:
        """Write every tensor under ``prefix`` (one file each), map them back, and lock.

        ``checksum=True`` records each tensor's SHA-256 for ``load_memmap(verify=True)``.
        ``robust_key`` (a bool or None) is tensordict's switch for encoding keys into file
        names; tensorbox always encodes them (any key is a safe file name), so it changes
        nothing.

        >>> import torch; from tensorbox import TensorDict
        >>> import tempfile
        >>> td = TensorDict(x=torch.zeros(2), batch_size=[2])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = td.memmap_(d)
        ...     td.is_memmap(), td.is_locked
        (True, True)
        """
        _persist = _ports.persistence()

        _check_robust_key("memmap_", robust_key)
        _persist.refuse_existing(prefix, existsok, None, False)
        out: Self = _persist.memmap_(
            self,
            prefix,
            num_threads=num_threads,
            copy_existing=copy_existing,
            fsync=fsync,
            checksum=checksum,
            progress=progress,
        )
        return out

    def memmap(
        self,
        prefix: Any = None,
        *,
        num_threads: int = 0,
        fsync: bool = False,
        copy_existing: bool = False,
        existsok: bool = True,
        checksum: bool = False,
        progress: bool | None = None,
        return_early: bool = False,
        archive: bool | None = None,
        compression: str | int | None = None,
        storage_options: dict[str, Any] | None = None,
        format: str = "tensorbox",
        robust_key: bool | None = None,
    ) -> Self:
        """A memory-mapped copy written under ``prefix`` (this one is unchanged).

        A leaf already mapped at its place under ``prefix`` (with no ``prefix``: in shared
        memory) is kept, the same object, as in tensordict; every other leaf is written to
        a new file, so ``copy_existing`` (tensordict's switch for leaves mapped elsewhere,
        which it refuses to copy without it) changes nothing here. ``existsok=False`` refuses a
        ``prefix`` that already holds a tree. ``archive=True`` writes one zip file instead
        of a folder, opened back read-only; ``archive=None`` (the default) does so when
        ``prefix`` ends with ``.tdz``, as tensordict does. ``compression`` (archives only:
        ``"deflate"``, ``"bzip2"``, ``"lzma"``, or ``"stored"``, the default) compresses the
        tensor entries: a smaller file whose leaves load by copying. ``return_early=True``
        returns a finished ``TensorDictFuture`` (tensordict's spelling; the save
        is synchronous).

        ``prefix`` may be a URL (``s3://``, ``gs://``, ``memory://``...; see docs/remote.md)
        with ``archive=True``: one object, uploaded whole, credentials from the usual
        configuration or ``storage_options``. A folder save to a URL is refused.

        ``format="tensordict"`` writes tensordict's own folder layout, which tensordict
        0.14/0.15 reads with ``TensorDict.load_memmap``: tensorclass nodes become
        TensorDict nodes, and jagged leaves or keys that layout cannot hold are refused
        (docs/migrating.md says what else the layout lacks). ``robust_key``: as ``memmap_``.
        """
        _persist = _ports.persistence()

        del copy_existing
        _check_robust_key("memmap", robust_key)
        archive = _persist.wants_archive(prefix, archive, compression)
        _persist.refuse_existing(prefix, existsok, storage_options, archive)
        out: Self = _persist.memmap(
            self,
            prefix,
            num_threads=num_threads,
            fsync=fsync,
            checksum=checksum,
            progress=progress,
            archive=archive,
            compression=compression,
            storage_options=storage_options,
            layout=format,
            existsok=existsok,
        )
        if return_early:  # tensordict's future: here the save is done when this returns
            from tensorbox._core.future import done

            return done(out)  # type: ignore[return-value]
        return out

    def memmap_like(
        self,
        prefix: Any = None,
        *,
        num_threads: int = 0,
        fsync: bool = False,
        copy_existing: bool = False,
        existsok: bool = True,
        sparse: bool = True,
        progress: bool | None = None,
        archive: bool | None = None,
    ) -> Self:
        """Files of the same structure, allocated but not filled (no data copied).

        The files are sparse (as tensordict): they take disk as rows are written, and a
        row write through the result (``out[rows] = ...``) reserves its blocks first, so
        a full disk is an ``OSError`` naming the key and rows. ``sparse=False`` reserves
        every block now instead. A write through a raw tensor (``out["k"][rows] = v``)
        reserves nothing: on a full disk it can still crash the process (SIGBUS).

        Archives are read-only, so there is no ``memmap_like`` archive: ``archive=True``,
        or a ``prefix`` ending with ``.tdz`` (tensordict's archive suffix), raises.

        ``existsok=False`` refuses a ``prefix`` that already holds a tree; ``copy_existing``
        is accepted for tensordict's signature (nothing is copied by ``memmap_like``).

        >>> import torch; from tensorbox import TensorDict
        >>> import tempfile
        >>> td = TensorDict(x=torch.zeros(1, 3), batch_size=[1])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     out = td.expand(100).memmap_like(d)     # 100 rows on disk, filled later
        ...     out[7] = TensorDict(x=torch.ones(3), batch_size=[])
        ...     TensorDict.load_memmap(d)["x"][7].tolist()
        [1.0, 1.0, 1.0]
        """
        _persist = _ports.persistence()

        del copy_existing
        if _persist.wants_archive(prefix, archive, None):
            raise ValueError(
                f"memmap_like({str(prefix)!r}) would write an archive (archive=True or a .tdz "
                "path), and archives are read-only: nothing could fill it. Pass archive=False "
                "to allocate a folder at that path, or fill a container and save it with "
                "memmap(..., archive=True)"
            )
        _persist.refuse_existing(prefix, existsok, None, False)
        out: Self = _persist.memmap_like(
            self, prefix, num_threads=num_threads, fsync=fsync, sparse=sparse, progress=progress
        )
        return out

    def extend_(self, rows: Any, *, fsync: bool = False) -> Self:
        """Append ``rows`` along batch dim 0, in place; returns ``self``.

        ``rows`` is a container of the same kind with the same keys (nested too), dtypes
        and shapes after batch dim 0; anything else raises, naming the key, before
        anything is written. In memory the result is ``torch.cat([self, rows], 0)``.
        On a saved tree (``memmap``, ``memmap_``, ``load_memmap(mode="r+")``) the rows
        are written after the committed ones and the new batch size is committed
        atomically: a crash leaves the old size or the new one, whole, and readers
        that load after the commit see every new row (see ``docs/growing.md``).
        ``fsync=True`` makes the rows durable before the commit. Allowed on a locked
        container (locking fixes keys, not rows); refused on a tree opened read-only.

        >>> import tempfile, torch; from tensorbox import TensorDict
        >>> path = tempfile.mkdtemp() + "/data"
        >>> data = TensorDict({"x": torch.zeros(2, 3), "label": torch.tensor([0, 1])}, [2])
        >>> data = data.memmap(path)
        >>> _ = data.extend_(TensorDict({"x": torch.ones(1, 3), "label": torch.tensor([5])}, [1]))
        >>> TensorDict.load_memmap(path)["label"].tolist()
        [0, 1, 5]
        """
        out: Self = _ports.persistence().extend_(self, rows, fsync=fsync)
        return out

    @classmethod
    def load_memmap(
        cls,
        prefix: Any,
        *,
        device: Any = None,
        non_blocking: bool = False,
        mode: str | None = None,
        verify: bool = False,
        strict: bool = True,
        storage_options: dict[str, Any] | None = None,
        allow_pickle: bool | None = None,
        cache: bool = True,
        prefetch: bool = False,
        robust_key: bool | None = None,
        subpath: NestedKey | None = None,
        num_threads: int = 0,
    ) -> Self:
        """Open a saved tree lazily: nothing is read until a leaf is used.

        ``mode="r"`` maps copy-on-write: writes stay in this process, never reach the files
        (the default is ``"r+"`` for folders; an archive, ``FILE`` or ``FILE::DIR``, is
        always read-only).
        ``verify=True`` checks the checksums recorded by a save with ``checksum=True``.
        A tensorclass that gained a field with a default loads older trees with the
        default filled in; one that lost a field refuses a tree that holds it, unless
        ``strict=False``, which leaves it out.
        ``prefix`` may be a URL (``s3://``, ``http(s)://``, ``memory://``...; ``storage_options``
        as fsspec takes them) of an archive or a folder tree, opened read-only: each leaf
        is fetched on first use, only the rows read, into a local disk cache
        (``cache=False``: into memory); ``prefetch=True`` fetches the whole tree now
        (``docs/remote.md``).
        ``allow_pickle`` (a bool or None) is tensordict's switch for unpickling values;
        a tensorbox tree holds no pickles, so either value reads the same tree.
        ``robust_key`` (a bool or None), tensordict's key-encoding switch, likewise: the
        file names a tree records are read as recorded.
        ``subpath`` (a nested key, or a str with ``/`` between levels) opens only the
        container at that key (``ValueError`` when there is none); ``num_threads`` is
        accepted for tensordict's sake (nothing is read up front, so there is nothing to
        spread over threads).

        >>> import torch; from tensorbox import TensorDict
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = TensorDict({"n": {"x": torch.arange(3)}}, batch_size=[3]).memmap(d)
        ...     TensorDict.load_memmap(d)["n", "x"].tolist()
        [0, 1, 2]
        """
        if allow_pickle is not None and type(allow_pickle) is not bool:
            raise TypeError(
                f"load_memmap: allow_pickle must be a bool or None, got {allow_pickle!r} "
                f"({type(allow_pickle).__name__})"
            )
        _check_robust_key("load_memmap", robust_key)
        _persist = _ports.persistence()

        out: Self = _persist.load_memmap(
            cls,
            prefix,
            device=device,
            non_blocking=non_blocking,
            mode=mode,
            verify=verify,
            strict=strict,
            storage_options=storage_options,
            cache=cache,
            prefetch=prefetch,
        )
        if subpath is not None:
            out = _sub_tree(out, prefix, subpath)
        problem = cls._load_mismatch(out)
        if problem is not None:
            raise TypeError(
                f"{cls.__name__}.load_memmap({str(prefix)!r}): the saved tree holds "
                f"{_persist.saved_type(out) or type(out).__name__} {problem}"
            )
        return out

    @property
    def saved_path(self) -> str | None:
        """The folder of the saved tree this container (or node) is backed by, else None.

        >>> import tempfile, torch; from tensorbox import TensorDict
        >>> with tempfile.TemporaryDirectory() as d:
        ...     TensorDict(a=torch.zeros(1)).memmap(d).saved_path == d
        True
        """
        rec = TREES.get(id(self)) if TREES else None
        if rec is None or rec.node() is not self:
            return None
        path: str = rec.dir
        return path

    def load_memmap_(
        self,
        prefix: Any,
        robust_key: bool | None = None,
        *,
        allow_pickle: bool | None = None,
        mode: str | None = None,
    ) -> Self:
        """Load the tree saved at ``prefix`` into this container, and return it.

        Each leaf is replaced by the loaded one (so its storage is not reused; on a
        sub-view, ``td[rows]``, the rows are written), nested containers are kept and
        filled the same way, and keys the saved tree lacks are removed. To copy into
        the existing storage instead: ``td.update_(TensorDict.load_memmap(prefix))``.

        >>> import tempfile, torch; from tensorbox import TensorDict
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = TensorDict(a=torch.ones(2), batch_size=[2]).memmap(d)
        ...     dest = TensorDict(a=torch.zeros(2), old=torch.zeros(2), batch_size=[2])
        ...     dest.load_memmap_(d)["a"].tolist(), list(dest.keys())
        ([1.0, 1.0], ['a'])
        """
        _check_robust_key("load_memmap_", robust_key)
        if TREES and id(self) in TREES:
            raise RuntimeError(
                f"load_memmap_({str(prefix)!r}): this {type(self).__name__} is backed by a "
                "saved tree, which loading another tree into it would rewrite; open that "
                "tree with load_memmap(prefix) instead"
            )
        loaded = type(self).load_memmap(
            prefix, device=getattr(self, "device", None), mode=mode, allow_pickle=allow_pickle
        )
        _fill_from(self, loaded)
        return self

    def make_memmap(
        self,
        key: NestedKey,
        shape: Any,
        *,
        dtype: torch.dtype | None = None,
        robust_key: bool | None = None,
    ) -> Tensor:
        """Add a new zero-filled memory-mapped tensor of ``shape`` at ``key`` to this
        memory-mapped container, even while it is locked, and return it: on a saved tree
        the entry is committed at once and the tensor maps its new file.

        >>> import tempfile, torch; from tensorbox import TensorDict
        >>> with tempfile.TemporaryDirectory() as d:
        ...     td = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap(d)
        ...     x = td.make_memmap("b", (3, 2), dtype=torch.int64)
        ...     _ = x.fill_(1)
        ...     td["b"] is x, int(TensorDict.load_memmap(d)["b"].sum())
        (True, 6)
        """
        _check_robust_key("make_memmap", robust_key)
        return _ports.persistence().make_new(self, key, shape, dtype)

    def make_memmap_from_tensor(
        self,
        key: NestedKey,
        tensor: Tensor,
        *,
        copy_data: bool = True,
        robust_key: bool | None = None,
    ) -> Tensor:
        """Add a memory-mapped copy of ``tensor`` at ``key`` to this memory-mapped
        container (see :meth:`make_memmap`), and return it; ``copy_data=False`` takes only
        its shape and dtype (zero-filled). The result never shares ``tensor``'s storage.

        >>> import tempfile, torch; from tensorbox import TensorDict
        >>> with tempfile.TemporaryDirectory() as d:
        ...     td = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap(d)
        ...     td.make_memmap_from_tensor("b", torch.ones(3, 2)).sum().item()
        6.0
        """
        _check_robust_key("make_memmap_from_tensor", robust_key)
        return _ports.persistence().make_from_tensor(self, key, tensor, copy_data)

    def make_memmap_from_storage(
        self,
        key: NestedKey,
        storage: Any,
        shape: Any,
        *,
        dtype: torch.dtype | None = None,
        robust_key: bool | None = None,
    ) -> Tensor:
        """Add a memory-mapped tensor of ``shape`` reading ``storage`` at ``key`` to this
        memory-mapped container (see :meth:`make_memmap`), and return it. On a saved tree
        the storage must map the new entry's own file (``RuntimeError`` otherwise: use
        :meth:`make_memmap_from_tensor` to copy the data in).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap()  # shared memory
        >>> data = torch.arange(6.0).share_memory_()
        >>> td.make_memmap_from_storage("b", data.untyped_storage(), (3, 2))[2].tolist()
        [4.0, 5.0]
        """
        _check_robust_key("make_memmap_from_storage", robust_key)
        return _ports.persistence().make_from_storage(self, key, storage, shape, dtype)

    # One signature: the method is the implementation (its docstring is the method's).
    consolidate = _consolidate.consolidate

    def is_consolidated(self) -> bool:
        """True for the result of ``consolidate()`` (until it is unlocked).

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2)).is_consolidated()
        False
        """
        return _consolidate.is_consolidated(self)

    @property
    def _consolidated(self) -> dict[str, Any]:
        """tensordict's marker of a consolidated container: ``{"storage": the uint8 buffer
        every leaf views, "metadata": its layout}``. A container that is not consolidated
        has no such attribute (``hasattr`` is False), as in tensordict."""
        packed = getattr(self, "_packed", None)
        if packed is None:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '_consolidated' (it is "
                "not consolidated: call consolidate())"
            )
        return {"storage": packed[0], "metadata": packed[1]}

    @classmethod
    def from_consolidated(cls, filename: Any) -> Self:
        """Map a file written by ``consolidate(filename=...)`` back (no copy): a locked,
        consolidated container of this class (nested nodes as TensorDicts).

        >>> import tempfile, os, torch; from tensorbox import TensorDict
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = TensorDict(a=torch.arange(3)).consolidate(os.path.join(d, "td.bin"))
        ...     TensorDict.from_consolidated(os.path.join(d, "td.bin"))["a"].tolist()
        [0, 1, 2]
        """
        from tensorbox._core import consolidate as _consolidate

        out: Self = _consolidate.from_consolidated(cls, filename)
        return out

    @classmethod
    def _load_mismatch(cls, out: Any) -> str | None:
        """Why a loaded tree does not fit this class (a tensorclass checks its fields)."""
        return None

    def is_memmap(self) -> bool:
        """True when every tensor leaf is backed by a file of a saved tree.

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(x=torch.zeros(2), batch_size=[2]).is_memmap()
        False
        """
        _persist = _ports.persistence()

        return bool(_persist.is_memmap(self))

    # ----------------------------------------------------------------------------
    # tensordict's compatibility names: other spellings of methods of this job, and
    # stand-ins kept so that code written for tensordict runs unchanged. New code and
    # the docs use the names above.

    save = memmap  # tensordict's other name

    dumps = memmap

    load = load_memmap  # tensordict's other name


def _sub_tree(tree: Any, prefix: Any, subpath: Any) -> Any:
    """``load_memmap(subpath=)``: the container at ``subpath`` of the loaded tree."""
    path = tuple(subpath.split("/")) if type(subpath) is str else unravel_key(subpath)
    node = tree.get(path, None) if path else None
    if node is None or not is_container(node):
        raise ValueError(
            f"load_memmap({str(prefix)!r}, subpath={subpath!r}): no container is saved "
            f"under {path!r} (the tree's keys: {sorted(map(str, tree.keys()))})"
        )
    return node


def _fill_from(dst: Any, src: Any) -> None:
    """``load_memmap_``: ``dst`` takes ``src``'s keys and leaves, its nested containers
    kept and filled alike."""
    gone = [k for k in dst.keys() if k not in set(src.keys())]  # noqa: SIM118
    for k in gone:
        del dst[k]
    for k, v in src.items():
        cur = dst.get(k, None)
        if is_container(v) and is_container(cur) and type(cur) is type(v):
            _fill_from(cur, v)
        else:
            dst[k] = v


def _check_robust_key(method: str, robust_key: Any) -> None:
    """tensordict's ``robust_key=`` switch: a bool or None (tensorbox always encodes keys)."""
    if robust_key is not None and type(robust_key) is not bool:
        raise TypeError(
            f"{method}: robust_key must be a bool or None, got {robust_key!r} "
            f"({type(robust_key).__name__})"
        )
