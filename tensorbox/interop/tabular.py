"""Parquet, CSV and JSON files to and from containers, through ``tensorbox.interop.arrow``.

Every write goes to a temporary name beside the target and is renamed into place once
complete: a failed write leaves the previous file as it was. ``ParquetRowGroups`` reads a
file larger than memory one row group at a time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from tensorbox._storage.atomic import replacing
from tensorbox.interop._columns import parse_meta, reading
from tensorbox.interop._extras import require
from tensorbox.interop._pandas import frame_of
from tensorbox.interop.arrow import META_KEY, _pa, from_arrow, from_pandas, to_arrow
from tensorbox.interop.arrow import to_pandas as to_pandas  # read here by interop.files

__all__ = [
    "ParquetRowGroups",
    "from_csv",
    "from_json",
    "from_parquet",
    "to_csv",
    "to_json",
    "to_parquet",
]


@contextlib.contextmanager
def _atomic(path: Any, suffix: str) -> Iterator[Any]:
    """A temporary path beside ``path`` renamed onto it once the write succeeded: a
    failed write leaves the previous file as it was."""
    if not isinstance(path, str | os.PathLike):
        yield path  # a file object or a filesystem-specific target: written directly
        return
    with replacing(os.fspath(path), suffix=suffix) as tmp:
        yield tmp


def from_parquet(path: Any, *, columns: list[str] | None = None, **kwargs: Any) -> Any:
    """A container of a Parquet file's rows (read whole; see ``ParquetRowGroups`` for a
    file larger than memory). ``columns`` reads only those; the other keywords are
    ``from_arrow``'s, and ``read_options`` a dict for ``pyarrow.parquet.read_table``.
    Errors name the file.
    """
    pq = require("pyarrow.parquet", "arrow")
    read_options = kwargs.pop("read_options", {})
    table = pq.read_table(path, columns=columns, **read_options)
    where = f"from_parquet({_name(path)!r})"
    with reading(where):
        return from_arrow(_dictionaries(table, where), **kwargs)


def _dictionaries(table: Any, where: str) -> Any:
    """``table`` with its recorded categoricals dictionary columns again: Parquet reads a
    dictionary of numbers (a categorical of ints, floats, dates) back as plain values, so
    ``from_arrow`` would refuse the file ``to_parquet`` wrote (the codes come from the
    recorded categories, so they are those that were written)."""
    recorded = parse_meta((table.schema.metadata or {}).get(META_KEY), where).get("columns", {})
    if not any(info.get("kind") == "category" for info in recorded.values()):
        return table
    for i, field in enumerate(table.schema):
        table = table.set_column(i, field.name, _encoded(table.column(i), field.name, recorded))
    return table


def _encoded(col: Any, label: str, recorded: dict[str, Any]) -> Any:
    """``col`` (a chunked array) with the recorded categoricals at or under it (the
    children of a struct: ``"g.c"``) dictionary columns again."""
    pa = _pa()
    t = col.type
    if pa.types.is_struct(t) and not col.null_count:  # null structs: from_arrow refuses
        names = [t.field(i).name for i in range(t.num_fields)]
        kids = [
            _encoded(pa.chunked_array([c.field(i) for c in col.chunks], type=t.field(i).type),
                     f"{label}.{n}", recorded)
            for i, n in enumerate(names)
        ]  # fmt: skip
        arrays = [k.combine_chunks() for k in kids]
        return pa.chunked_array([pa.StructArray.from_arrays(arrays, names=names)])
    info = recorded.get(label, {})
    if info.get("kind") == "category" and not pa.types.is_dictionary(t):
        encoded = col.dictionary_encode()  # unordered: the record says whether it was
        ordered = pa.dictionary(encoded.type.index_type, t, ordered=info.get("ordered", False))
        return pa.chunked_array([c.cast(ordered) for c in encoded.chunks], type=ordered)
    return col


def _name(path: Any) -> Any:
    return os.fspath(path) if isinstance(path, str | os.PathLike) else path


def to_parquet(td: Any, path: Any, *, separator: str | None = None, **kwargs: Any) -> None:
    """Write ``to_arrow(td)`` as a Parquet file (``kwargs`` go to
    ``pyarrow.parquet.write_table``); written to a temporary name and renamed into place."""
    pq = require("pyarrow.parquet", "arrow")
    table = to_arrow(td, separator=separator)
    with _atomic(path, ".parquet") as target:
        pq.write_table(table, target, **kwargs)


#: The keywords of ``from_csv``/``from_json`` that are the container's, not the reader's.
_OWN = ("auto_batch_size", "batch_dims", "batch_size", "cls", "device", "dtype", "separator")
_ARROW_CSV = ("read_options", "parse_options", "convert_options")


def from_csv(path: Any, **kwargs: Any) -> Any:
    """A container of a CSV file's columns, parsed by ``pandas.read_csv``: the values are
    pandas' own (an integer column with an empty cell reads as floats with NaN, dates stay
    strings unless ``parse_dates`` says otherwise), then converted as ``from_pandas``
    converts a frame. The keywords are ``from_pandas``'s (``separator``, ``dtype``,
    ``index``...) and ``pandas.read_csv``'s (``usecols``, ``dtype`` is ours: pass
    pandas' as ``read_csv_dtype``...). Given ``read_options``/``parse_options``/
    ``convert_options``, ``pyarrow.csv.read_csv`` parses it instead, with those, and the
    values are pyarrow's.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     f = os.path.join(d, "t.csv")
    ...     with open(f, "w") as out:
    ...         _ = out.write("a,b,when\\n1,x,2024-01-01\\n,y,2024-01-02\\n")
    ...     td = from_csv(f)
    ...     td["a"].tolist(), td[1]["b"], td[0]["when"]
    ([1.0, nan], 'y', '2024-01-01')
    """
    where = f"from_csv({_name(path)!r})"
    if any(k in kwargs for k in _ARROW_CSV):
        csv = require("pyarrow.csv", "arrow")
        opts = {k: kwargs.pop(k) for k in _ARROW_CSV if k in kwargs}
        with reading(where):
            return from_arrow(csv.read_csv(os.fspath(path), **opts), **kwargs)
    pd = require("pandas", "arrow")
    own = {k: kwargs.pop(k) for k in (*_OWN, "index") if k in kwargs}
    if "read_csv_dtype" in kwargs:
        kwargs["dtype"] = kwargs.pop("read_csv_dtype")
    try:
        frame = pd.read_csv(path, **kwargs)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as err:  # they name no file
        raise ValueError(f"{where}: {err}") from err
    with reading(where):
        return from_pandas(frame, **own)


def to_csv(td: Any, path: Any, *, separator: str | None = None, **kwargs: Any) -> None:
    """Write one CSV column per leaf (see ``to_pandas`` for what fits in a column);
    ``kwargs`` go to ``pandas.DataFrame.to_csv`` (pandas writes floats with their
    decimal point, so a float column reads back as floats)."""
    frame, has_index = frame_of(td, separator)
    kwargs.setdefault("index", has_index)  # entries that were the index are written too
    with _atomic(path, ".csv") as target:
        frame.to_csv(target, **kwargs)


def from_json(path: Any, *, lines: bool = False, **kwargs: Any) -> Any:
    """A container of a JSON file: an array of records, or one record per line with
    ``lines=True``. Nested objects become nested keys; the keywords are ``from_arrow``'s.
    """
    import orjson

    pa = _pa()
    with open(path, "rb") as f:
        raw = f.read()
    try:
        if lines:
            records = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
        else:
            records = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise ValueError(f"from_json: {os.fspath(path)!r} is not valid JSON ({err})") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(
            f"from_json: {os.fspath(path)!r} should hold an array of objects (records); "
            "pass lines=True for one object per line"
        )
    # every record's keys (pyarrow's from_pylist would take the first record's alone)
    names = list(dict.fromkeys(k for r in records for k in r))
    where = f"from_json({_name(path)!r})"
    columns = {}
    for name in names:
        values = [r.get(name) for r in records]
        try:
            try:
                columns[name] = pa.array(values)
            except OverflowError:  # past int64: uint64, as pandas' read_json
                columns[name] = pa.array(values, pa.uint64())
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as err:
            raise TypeError(
                f"{where}: key {name!r} holds values no one column type holds (mixed types, "
                f"or integers past int64 and uint64) ({err})"
            ) from None
    table = pa.table(columns)
    if not columns and not kwargs.get("auto_batch_size"):
        kwargs.setdefault("batch_size", [len(records)])  # records without keys: rows all the same
    with reading(where):
        return from_arrow(table, **kwargs)


def to_json(
    td: Any, path: Any, *, separator: str | None = None, lines: bool = False, **kwargs: Any
) -> None:
    """Write the rows as JSON records (``lines=True``: one per line). Nested containers
    become nested objects unless ``separator`` joins their keys into names."""
    import orjson

    if kwargs:
        raise TypeError(f"to_json: unexpected keyword(s) {sorted(kwargs)}")
    records = to_arrow(td, separator=separator).to_pylist()
    with _atomic(path, ".json") as target, open(target, "wb") as f:
        if lines:
            for r in records:
                f.write(orjson.dumps(r) + b"\n")
        else:
            f.write(orjson.dumps(records))


def _dictionary_paths(t: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The paths of the dictionary columns at or under a column of type ``t``."""
    pa = _pa()
    if pa.types.is_dictionary(t):
        return [path]
    if pa.types.is_struct(t):
        return [
            p
            for i in range(t.num_fields)
            for p in _dictionary_paths(t.field(i).type, (*path, t.field(i).name))
        ]
    return []


def _child(arr: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        arr = arr.field(name)
    return arr


def _child_type(t: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        t = t.field(name).type
    return t.value_type


class ParquetRowGroups:
    """A Parquet file read lazily, one row group at a time: ``len()`` row groups,
    ``[i]`` reads row group ``i`` as a container, iteration reads them in order and
    ``iter_batches(n)`` gives containers of ``n`` rows. Only the row group being read is
    in memory, so a file larger than memory streams. Picklable (each process reopens
    the file), so it can be a ``DataLoader`` dataset with ``batch_size=None``.

    Args:
        path: the Parquet file.
        columns: read only these columns.
        **kwargs: ``from_arrow``'s keywords (``separator``, ``dtype``, ``device``, ``cls``).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     f = os.path.join(d, "t.parquet")
    ...     pq.write_table(pa.table({"x": list(range(10))}), f, row_group_size=4)
    ...     groups = ParquetRowGroups(f)
    ...     len(groups), groups.num_rows, groups[2]["x"].tolist()
    (3, 10, [8, 9])
    """

    def __init__(self, path: Any, *, columns: list[str] | None = None, **kwargs: Any) -> None:
        self.path = os.fspath(path)
        self.columns = columns
        self.kwargs = kwargs
        self._file: Any = None
        self._categories: dict[str, list[Any]] | None = None

    def _pf(self) -> Any:
        if self._file is None:
            pq = require("pyarrow.parquet", "arrow")
            self._file = pq.ParquetFile(self.path)
        return self._file

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_file": None}

    @property
    def num_rows(self) -> int:
        return int(self._pf().metadata.num_rows)

    def __len__(self) -> int:
        return int(self._pf().num_row_groups)

    def categories(self) -> dict[str, list[Any]]:
        """``{column: categories}`` of the file's dictionary (categorical) columns, one
        list for the whole file: those ``to_parquet`` recorded, else the union of the
        row groups' dictionaries in the order they first appear (read once, on first
        use, column by column). Every row group and batch codes them against it."""
        if self._categories is None:
            pa = _pa()
            pf = self._pf()
            schema = pf.schema_arrow
            meta = parse_meta((schema.metadata or {}).get(META_KEY), self._where())
            recorded = meta.get("columns", {})
            out: dict[str, list[Any]] = {}
            for field in schema:
                if self.columns is not None and field.name not in self.columns:
                    continue
                # dictionary columns at any depth (a struct's children: "g.c")
                paths = [p for p in _dictionary_paths(field.type, (field.name,))
                         if "categories" not in recorded.get(".".join(p), {})]  # fmt: skip
                if not paths:
                    continue  # none, or from_arrow reads them from the metadata
                groups = [
                    pf.read_row_group(i, columns=[field.name]).column(0)
                    for i in range(pf.num_row_groups)
                ]
                for path in paths:
                    dicts = [
                        _child(chunk, path[1:]).dictionary for g in groups for chunk in g.chunks
                    ]
                    merged = pa.chunked_array(dicts, type=_child_type(field.type, path[1:]))
                    out[".".join(path)] = merged.unique().to_pylist()
            self._categories = out
        return self._categories

    def _where(self) -> str:
        return f"ParquetRowGroups({self.path!r})"

    def _container(self, table: Any) -> Any:
        with reading(self._where(), self.categories()):
            return from_arrow(_dictionaries(table, self._where()), **self.kwargs)

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self.path!r}: row group {i} of {n}")
        return self._container(self._pf().read_row_group(i % n, columns=self.columns))

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def iter_batches(self, batch_size: int) -> Iterator[Any]:
        """Containers of ``batch_size`` rows (the last may be shorter), read as needed."""
        pa = _pa()
        for batch in self._pf().iter_batches(batch_size=batch_size, columns=self.columns):
            yield self._container(pa.Table.from_batches([batch]))

    def __repr__(self) -> str:
        return f"ParquetRowGroups({self.path!r}, row_groups={len(self)}, rows={self.num_rows})"
