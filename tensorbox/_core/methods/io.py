"""The container's methods that reach storage, model weights and ``torch.distributed``:
the one door from the core to the layers above it.

``memmap``/``load_memmap``/``extend_`` (persistence), ``from_module``/``to_module``/
``state_dict`` (weights), ``send``/``recv``/``all_reduce_``... (transport), and the
write-through gates every write of the container passes. A method whose job needs
``tensorbox._storage``, ``tensorbox.weights`` or ``tensorbox.distributed`` belongs here,
and imports them lazily, inside the method: ``import tensorbox`` loads none of them,
and no other core module imports them at all (``tests/test_layout.py``).

The write gates ask :mod:`tensorbox._core.backing` whether the container is a node of
a saved tree; such a write goes to the backing hook, which this module installs on
first use: the storage layer's write-through (:mod:`tensorbox._storage.writethrough`).

>>> from tensorbox import TensorDict
>>> callable(TensorDict.memmap) and callable(TensorDict.all_gather)
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self, overload

import torch
from torch import Tensor

from tensorbox._core import lockgraph
from tensorbox._core import ports as _ports
from tensorbox._core.backing import TREES, sync_open
from tensorbox._core.keys import NestedKey, unravel_key
from tensorbox._core.methods.base import MixinBase, is_container
from tensorbox._core.tree import set_locked

__all__ = ["IOMethods"]


class IOMethods(MixinBase):
    """Mixin of ``TensorCollection``: persistence, model weights, transport; the door to
    the layers above the core (every import of them is lazy, inside a method)."""

    __slots__ = ()

    # ------ the write-through gates (a node of a saved tree commits each write)

    def _set_lock(self, flag: bool) -> None:
        if not flag and getattr(self, "_packed", None) is not None:
            # unlocked entries may be replaced: the one storage no longer holds them all
            from tensorbox._core.consolidate import drop

            drop(self)
        if not flag:
            lockgraph.forget(self)  # refuses while a locked parent still holds the subtree
        set_locked(self, flag)
        if flag:
            lockgraph.record(self)
        if TREES:
            sync_open(self)

    def _through(self, fn: Any, *args: Any) -> Any:
        """Run the write ``fn(*args)`` on this node of a saved tree and commit the tree
        (through the backing hook, see :mod:`tensorbox._core.backing`)."""
        return _ports.backing().through(self, fn, *args)

    def _write_rows(self, index: Any, value: Any) -> None:
        """``self[index] = value`` on a node of a saved tree (through the backing hook)."""
        _ports.backing().write_rows(self, index, value)

    def _write(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, committed at once when this is a node of a saved tree."""
        if TREES and id(self) in TREES:
            return self._through(fn, *args)
        return fn(*args)

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
        _persist.refuse_existing(prefix, existsok)
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

        Every leaf is written to a new file, so ``copy_existing`` (tensordict's switch for
        leaves already mapped elsewhere) changes nothing here. ``existsok=False`` refuses a
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
        _persist.refuse_existing(prefix, existsok)
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
        _persist.refuse_existing(prefix, existsok)
        out: Self = _persist.memmap_like(
            self, prefix, num_threads=num_threads, fsync=fsync, sparse=sparse, progress=progress
        )
        return out

    def to_store(self, **kwargs: Any) -> Any:
        """A new ``TensorDictStore`` on a Redis server holding a copy of this container
        (keyword arguments as ``TensorDictStore``: ``host``, ``port``, ``db``, ``url``...).
        """
        return _ports.live().from_tensordict(self, **kwargs)

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

    def consolidate(
        self,
        filename: Any = None,
        *,
        num_threads: int = 0,
        device: Any = None,
        non_blocking: bool = False,
        inplace: bool = False,
        return_early: bool = False,
        use_buffer: bool = False,
        share_memory: bool = False,
        pin_memory: bool = False,
        metadata: bool = False,
    ) -> Any:
        """Every tensor leaf copied into one contiguous storage (a file with ``filename``);
        the result is locked and its leaves are views of that storage.

        ``to(device)`` of the result moves the storage in one copy, and pickling it sends
        one buffer. Unlocking ends the consolidation. ``return_early=True`` returns a
        ``TensorDictFuture`` of the result; ``num_threads`` copies leaves in
        parallel; ``device``, ``share_memory`` and ``pin_memory`` place the storage.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"a": torch.zeros(4), "b": {"c": torch.ones(4, 2)}}, batch_size=[4])
        >>> c = td.consolidate()
        >>> c.is_consolidated(), (c == td).all()
        (True, True)
        """
        from tensorbox._core import consolidate as _consolidate

        return _consolidate.consolidate(
            self,
            filename,
            num_threads=num_threads,
            device=device,
            non_blocking=non_blocking,
            inplace=inplace,
            return_early=return_early,
            use_buffer=use_buffer,
            share_memory=share_memory,
            pin_memory=pin_memory,
            metadata=metadata,
        )

    def is_consolidated(self) -> bool:
        """True for the result of ``consolidate()`` (until it is unlocked).

        >>> import torch; from tensorbox import TensorDict
        >>> TensorDict(a=torch.zeros(2)).is_consolidated()
        False
        """
        from tensorbox._core import consolidate as _consolidate

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

    # ------------------------------------------------------------ model weights

    @classmethod
    def from_module(
        cls,
        module: torch.nn.Module,
        as_module: bool = False,
        *,
        non_persistent: bool = False,
        filter_empty: bool = True,
        use_state_dict: bool = False,
    ) -> Any:
        """Parameters and buffers of ``module``, nested by submodule, sharing storage.

        Submodules without tensors get no entry unless ``filter_empty=False``.
        ``use_state_dict=True`` takes the tensors ``module.state_dict()`` gives instead
        (what a module's state-dict hooks return, detached as ``state_dict()`` gives
        them: the values at the time of the call, even when a hook changes the module
        again afterwards).
        """
        weights = _ports.weights()

        if use_state_dict:
            out = cls._new_unsafe({}, torch.Size([]), None)
            for key, value in module.state_dict().items():
                out.set(tuple(key.split(".")), value)
            return out
        return weights.from_module(
            module, as_module=as_module, non_persistent=non_persistent, filter_empty=filter_empty
        )

    @classmethod
    def from_modules(
        cls,
        *modules: torch.nn.Module,
        as_module: bool = False,
        lazy_stack: bool = False,
        expand_identical: bool = False,
    ) -> Any:
        """The weights of several modules of one architecture, stacked on a new first dim,
        as tensordict does for model ensembles (``torch.vmap`` over ``to_module``).

        Each stacked parameter is a new ``nn.Parameter`` (a copy: an optimizer trains the
        stack, the modules keep their own weights); buffers are stacked as plain tensors.
        ``expand_identical=True`` gives a weight that every module shares (the same
        tensor object) as an expanded view of it instead of a copy, so that gradients
        reach the shared weight.

        >>> import torch; from tensorbox import TensorDict
        >>> w = TensorDict.from_modules(torch.nn.Linear(2, 3), torch.nn.Linear(2, 3))["weight"]
        >>> w.shape, type(w).__name__
        (torch.Size([2, 3, 2]), 'Parameter')
        """
        if lazy_stack:
            raise NotImplementedError(
                "from_modules(lazy_stack=True): tensorbox stacks are always dense; call it "
                "without lazy_stack (the modules must share one architecture)"
            )
        if not modules:
            raise ValueError("from_modules: pass at least one module")
        if as_module:
            raise NotImplementedError(
                "from_modules(as_module=True): stacked weights are copies, not parameters of "
                "a module; wrap the result yourself (tensorbox.weights.ParamTree)"
            )
        trees = [cls.from_module(m) for m in modules]
        out: Any = torch.stack([t.detach() for t in trees])
        n = len(trees)
        for key in trees[0].keys(True, True):
            first = trees[0].get(key)
            if not isinstance(first, Tensor):
                continue
            if expand_identical and all(t.get(key) is first for t in trees[1:]):
                out.set(key, first.expand(n, *first.shape))
            elif isinstance(first, torch.nn.Parameter):
                out.set(key, torch.nn.Parameter(out.get(key), first.requires_grad))
        return out

    def to_module(
        self,
        module: torch.nn.Module,
        *,
        inplace: bool = False,
        return_swap: bool = True,
        strict: bool = True,
        chunk_bytes: int | None = None,
        use_state_dict: bool = False,
        preserve_module_state: bool = True,
    ) -> Any:
        """Put these weights into ``module``; returns what was there before.

        ``use_state_dict=True`` goes through ``module.load_state_dict`` (its hooks run).
        ``preserve_module_state`` (default) keeps a parameter a parameter (a plain tensor
        goes in as an ``nn.Parameter`` over the same storage); ``False`` puts each tensor
        in as it is.
        """
        weights = _ports.weights()

        if use_state_dict:
            module.load_state_dict(self.state_dict(), strict=strict)
            return None

        return weights.to_module(
            self,  # type: ignore[arg-type]  # a TensorCollection
            module,
            inplace=inplace,
            return_swap=return_swap,
            strict=strict,
            chunk_bytes=chunk_bytes,
            preserve_module_state=preserve_module_state,
        )

    @overload
    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        flatten: Literal[True] = True,
    ) -> dict[str, Tensor]: ...

    @overload
    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        *,
        flatten: bool,
    ) -> dict[str, Any]: ...

    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        flatten: bool = True,
    ) -> dict[str, Any]:
        """A flat ``{"dotted.key": tensor}`` dict, as ``nn.Module.state_dict()``
        (tensordict's form: an ``OrderedDict`` with ``_metadata``; ``flatten=False``
        nests it, see ``tensorbox.weights.state_dict``).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"layer": {"weight": torch.zeros(2)}}, batch_size=[])
        >>> list(td.state_dict())
        ['layer.weight']
        """
        weights = _ports.weights()

        return weights.state_dict(
            self,  # type: ignore[arg-type]
            keep_vars=keep_vars,
            flatten=flatten,
            destination=destination,
            prefix=prefix,
        )

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
        *,
        chunk_bytes: int | None = None,
    ) -> Self:
        """Copy a dotted-key state dict into the matching leaves (in chunks); with
        ``assign=True`` the state dict's tensors replace the leaves instead.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"layer": {"weight": torch.zeros(2)}}, batch_size=[])
        >>> w = td["layer", "weight"]
        >>> _ = td.load_state_dict({"layer.weight": torch.ones(2)})
        >>> w.tolist()   # copied into the existing tensor
        [1.0, 1.0]
        """
        weights = _ports.weights()

        if assign:
            for key, value in state_dict.items():
                self.set(tuple(key.split(".")), value)
            return self
        weights.load_state_dict(self, state_dict, strict=strict, chunk_bytes=chunk_bytes)  # type: ignore[arg-type]
        return self

    # ------------------------------------------------------------ interop
    # Thin wrappers: the bridges live in tensorbox.interop (pyarrow, h5py, zarr,
    # safetensors, streaming load there on first call) and tensorbox.interop.structs.

    @classmethod
    def from_schema(
        cls,
        schema: Any,
        *,
        batch_size: Any = None,
        storage: str | None = None,
        device: Any = None,
        **kwargs: Any,
    ) -> Any:
        """A zero-filled container from ``{key: (element shape, dtype)}``, allocated in
        ``storage`` (memory, ``"memmap"``, ``"h5"``, ``"zarr"``, ``"redis"``; see
        ``tensorbox.interop.schema``)."""
        _schema = _ports.formats("schema")

        return _schema.from_schema(
            schema, batch_size=batch_size, storage=storage, device=device, **kwargs
        )

    @classmethod
    def from_arrow(cls, table: Any, **kwargs: Any) -> Self:
        """A container of an Arrow table's columns (see ``tensorbox.interop.arrow``)."""
        arrow = _ports.formats("arrow")

        return arrow.from_arrow(table, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_arrow(self, *, separator: str | None = None) -> Any:
        """This container as a ``pyarrow.Table`` (see ``tensorbox.interop.arrow``)."""
        arrow = _ports.formats("arrow")

        return arrow.to_arrow(self, separator=separator)

    @classmethod
    def from_pandas(cls, dataframe: Any, **kwargs: Any) -> Self:
        """A container of a pandas DataFrame's columns (see ``tensorbox.interop.arrow``)."""
        arrow = _ports.formats("pandas")

        return arrow.from_pandas(dataframe, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_pandas(self, *, separator: str | None = None) -> Any:
        """A pandas DataFrame with one column per leaf (see ``tensorbox.interop.arrow``)."""
        arrow = _ports.formats("pandas")

        return arrow.to_pandas(self, separator=separator)

    @classmethod
    def from_parquet(cls, path: Any, **kwargs: Any) -> Self:
        """A container of a Parquet file's rows (see ``tensorbox.interop.arrow``)."""
        files = _ports.formats("parquet")

        return files.from_parquet(path, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_parquet(self, path: Any, *, separator: str | None = None, **kwargs: Any) -> None:
        """Write this container as a Parquet file (see ``tensorbox.interop.arrow``)."""
        files = _ports.formats("parquet")

        files.to_parquet(self, path, separator=separator, **kwargs)

    @classmethod
    def from_csv(cls, path: Any, **kwargs: Any) -> Self:
        """A container of a CSV file's columns (see ``tensorbox.interop.arrow``)."""
        files = _ports.formats("csv")

        return files.from_csv(path, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_csv(self, path: Any, *, separator: str | None = None, **kwargs: Any) -> None:
        """Write one CSV column per leaf (see ``tensorbox.interop.arrow``)."""
        files = _ports.formats("csv")

        files.to_csv(self, path, separator=separator, **kwargs)

    @classmethod
    def from_json(cls, path: Any, *, lines: bool = False, **kwargs: Any) -> Self:
        """A container of a JSON file's records (see ``tensorbox.interop.arrow``)."""
        files = _ports.formats("json")

        return files.from_json(path, lines=lines, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_json(
        self, path: Any, *, separator: str | None = None, lines: bool = False, **kwargs: Any
    ) -> None:
        """Write the rows as JSON records (see ``tensorbox.interop.arrow``)."""
        files = _ports.formats("json")

        files.to_json(self, path, separator=separator, lines=lines, **kwargs)

    @classmethod
    def from_h5(cls, filename: Any, **kwargs: Any) -> Any:
        """Open an HDF5 file as a lazy ``PersistentTensorDict`` (see ``tensorbox.interop``)."""
        persistent = _ports.formats("h5")

        return persistent.from_h5(filename, **kwargs)

    def to_h5(self, filename: Any, **kwargs: Any) -> Any:
        """Write this container to an HDF5 file; returns it opened as a
        ``PersistentTensorDict`` (``kwargs`` go to ``h5py``'s ``create_dataset``)."""
        persistent = _ports.formats("h5")

        return persistent.PersistentTensorDict.from_dict(self, filename, backend="h5", **kwargs)

    @classmethod
    def from_zarr(cls, filename: Any, **kwargs: Any) -> Any:
        """Open a zarr v3 store as a lazy ``PersistentTensorDict`` (see ``tensorbox.interop``)."""
        persistent = _ports.formats("zarr")

        return persistent.from_zarr(filename, **kwargs)

    def to_zarr(self, filename: Any, **kwargs: Any) -> Any:
        """Write this container to a zarr v3 store; returns it opened as a
        ``PersistentTensorDict`` (a tensorclass gets its own class back)."""
        persistent = _ports.formats("zarr")

        out = persistent.PersistentTensorDict.from_dict(self, filename, backend="zarr", **kwargs)
        return persistent.as_class(type(self), out)

    @classmethod
    def from_safetensors(cls, path: Any, **kwargs: Any) -> Self:
        """The tensors of a ``.safetensors`` file, ``.`` keys nested (no copy)."""
        safetensors = _ports.formats("safetensors")

        return safetensors.from_safetensors(path, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_safetensors(self, path: Any, **kwargs: Any) -> None:
        """Write the tensor leaves as a ``.safetensors`` file, nested keys joined by ``.``."""
        safetensors = _ports.formats("safetensors")

        safetensors.to_safetensors(self, path, **kwargs)

    def to_mds(self, *, out: Any, **kwargs: Any) -> None:
        """Write the rows as a mosaicml-streaming (MDS) dataset (see ``tensorbox.interop.mds``)."""
        mds = _ports.formats("mds")

        mds.to_mds(self, out=out, **kwargs)

    @classmethod
    def from_struct_array(cls, struct_array: Any, **kwargs: Any) -> Self:
        """A container over a numpy structured array's fields (shared memory)."""
        structs = _ports.formats("struct_array")

        return structs.from_struct_array(struct_array, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_struct_array(self) -> Any:
        """A numpy structured array of this container (a copy)."""
        structs = _ports.formats("struct_array")

        return structs.to_struct_array(self)

    @classmethod
    def from_namedtuple(cls, named_tuple: Any, **kwargs: Any) -> Self:
        """A container of a (nested) namedtuple's fields."""
        structs = _ports.formats("namedtuple")

        return structs.from_namedtuple(named_tuple, cls=cls, **kwargs)  # type: ignore[no-any-return]

    def to_namedtuple(self, dest_cls: type | None = None) -> Any:
        """A (nested) namedtuple of this container's entries."""
        structs = _ports.formats("namedtuple")

        return structs.to_namedtuple(self, dest_cls)

    @classmethod
    def from_pytree(cls, pytree: Any, *, batch_size: Any = None, **kwargs: Any) -> Self:
        """A container of a torch pytree's leaves (nested tuples, lists, dicts,
        namedtuples), keyed by their paths; ``to_pytree()`` rebuilds the tree (see
        :mod:`tensorbox.interop.pytrees`)."""
        pytrees = _ports.formats("pytree")

        return pytrees.from_pytree(pytree, cls=cls, batch_size=batch_size, **kwargs)  # type: ignore[no-any-return]

    def to_pytree(self) -> Any:
        """The pytree this container was built from by ``from_pytree`` (nested dicts for
        any other container)."""
        pytrees = _ports.formats("pytree")

        return pytrees.to_pytree(self)

    @classmethod
    def from_dataclass(cls, dataclass: Any, **kwargs: Any) -> Any:
        """A container of a dataclass instance's fields."""
        structs = _ports.formats("dataclass")

        return structs.from_dataclass(dataclass, cls=cls, **kwargs)

    def from_dict_instance(
        self,
        input_dict: Mapping[str, Any],
        batch_size: Sequence[int] | None = None,
        device: Any = None,
        batch_dims: int | None = None,
        *,
        auto_batch_size: bool = False,
    ) -> Self:
        """A container of this one's class built from ``input_dict`` (``from_dict``),
        taking the structure from this instance: a nested dict at a key that holds a
        container here becomes that container's class (a tensorclass comes back as
        itself, not as a TensorDict), and a value at a key holding a non-tensor value
        here stays a Python value. The reverse of ``to_dict``.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), n={"name": "x"})
        >>> back = td.from_dict_instance({"a": [1.0, 2.0], "n": {"name": 3}})
        >>> back["a"].tolist(), back["n", "name"]
        ([1.0, 2.0], 3)
        """
        from tensorbox._core.dict_instance import entries_like

        cls: Any = type(self)
        out: Self = cls.from_dict(
            entries_like(self, input_dict, auto_batch_size, batch_dims, device),
            batch_size,
            device=device,
            auto_batch_size=auto_batch_size,
            batch_dims=batch_dims,
        )
        return out

    @classmethod
    def from_any(cls, obj: Any, **kwargs: Any) -> Any:
        """A container of a mapping, namedtuple, dataclass, structured array, DataFrame,
        Arrow table or HDF5 object."""
        structs = _ports.formats("any")

        return structs.from_any(obj, cls=cls, **kwargs)

    # -------------------------------------------------------- torch.distributed

    def send(self, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> None:
        """Send to rank ``dst``; the peer calls ``recv`` or ``from_remote_init``."""
        distributed = _ports.transport()

        distributed.send(self, dst, group=group, tag=tag, packed=packed)

    def isend(self, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> Any:
        """Start a send; ``wait()`` on the returned Request."""
        distributed = _ports.transport()

        return distributed.isend(self, dst, group=group, tag=tag, packed=packed)

    def recv(self, src: int, *, group: Any = None, tag: int = 0) -> Self:
        """Receive from rank ``src`` into these tensors, in place (same keys, dtypes, shapes)."""
        distributed = _ports.transport()

        out: Self = distributed.recv(self, src, group=group, tag=tag)
        return out

    def irecv(self, src: int, *, group: Any = None, tag: int = 0) -> Any:
        """Start an in-place receive; ``wait()`` on the returned Request."""
        distributed = _ports.transport()

        return distributed.irecv(self, src, group=group, tag=tag)

    @classmethod
    def from_remote_init(cls, src: int, *, group: Any = None, device: Any = None) -> Any:
        """A new container received from rank ``src``, whatever its structure."""
        distributed = _ports.transport()

        return distributed.recv_structure(src, group=group, device=device)

    def broadcast_(self, src: int, *, group: Any = None) -> Self:
        """Copy rank ``src``'s container into this one on every rank, in place."""
        distributed = _ports.transport()

        out: Self = distributed.broadcast_(self, src, group=group)
        return out

    def broadcast(self, src: int, *, group: Any = None) -> Self:
        """Rank ``src``'s container on every rank (built new where it is not ``self``)."""
        distributed = _ports.transport()

        out: Self = distributed.broadcast(self, src, group=group)
        return out

    def all_reduce_(self, op: Any = None, *, group: Any = None, async_op: bool = False) -> Any:
        """Reduce every leaf over the group, in place (``op`` default SUM; AVG works on gloo)."""
        distributed = _ports.transport()

        return distributed.all_reduce_(self, op, group=group, async_op=async_op)

    def all_gather(self, *, group: Any = None) -> Self:
        """Every rank's container stacked along a new first dim."""
        distributed = _ports.transport()

        out: Self = distributed.all_gather(self, group=group)
        return out

    # ----------------------------------------------------------------------------
    # tensordict's compatibility names: other spellings of methods of this job, and
    # stand-ins kept so that code written for tensordict runs unchanged. New code and
    # the docs use the names above.

    save = memmap  # tensordict's other name

    dumps = memmap

    load = load_memmap  # tensordict's other name

    init_remote = send  # tensordict's name for a send to a rank that knows no structure

    # tensordict's spelling: it reduces in place too (tensordict returns None, this returns self).
    all_reduce = all_reduce_


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
