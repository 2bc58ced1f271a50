"""The container's conversions to and from other formats: the ``format.<name>`` ports.

``from_arrow``/``to_arrow``, ``from_parquet``/``to_parquet``, ``from_h5``/``to_h5``,
``from_safetensors``/``to_safetensors``... each reaches the converter module the package
face binds to the format's name (:func:`tensorbox._core.ports.formats`); pyarrow, h5py,
zarr and safetensors load on first call. ``to_store`` makes a live copy on a key-value
server (the ``live`` port).

>>> import torch; from tensorbox import TensorDict
>>> TensorDict(a=torch.zeros(2), batch_size=[2]).to_namedtuple().a.tolist()
[0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

from tensorbox._core import ports as _ports
from tensorbox._core.methods.base import MixinBase

__all__ = ["ConvertMethods"]


class ConvertMethods(MixinBase):
    """Mixin of ``TensorCollection``: other formats (the format ports)."""

    __slots__ = ()

    def to_store(self, **kwargs: Any) -> Any:
        """A new ``TensorDictStore`` on a Redis server holding a copy of this container
        (keyword arguments as ``TensorDictStore``: ``host``, ``port``, ``db``, ``url``...).
        """
        return _ports.live().from_tensordict(self, **kwargs)

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
