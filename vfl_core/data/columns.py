"""A party's table in memory: named Arrow columns in row order, and how to name a row in an error.

A CSV file's columns are text (the cells as written, None where missing) that the preprocessing
reads as numbers, dates or categories (`guess`); a Parquet file's columns keep their types. Row
names ("line 7" of a CSV file, "row 6" of a Parquet file) are worked out only when an error or a
message needs one: naming every row of a large table up front would cost more than reading it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.data.local_numbers import floats

Cell = str | None  # None: a missing cell
RowNamer = Callable[[int], str]  # a row's position in the file -> its name in messages
_FIRST_CELLS = 64  # cells of a text column tried as numbers before all of them


class Table:
    """Cells of named columns in row order (an Arrow table), and how to name each row."""

    def __init__(
        self,
        source: str,
        columns: Mapping[str, Sequence[Cell]] | pa.Table,
        row_names: Sequence[str] | RowNamer,
        *,
        guess: bool = True,
        index: np.ndarray | None = None,
        numbers: dict[str, np.ndarray | None] | None = None,
        codes: dict[str, tuple[np.ndarray, pa.Array]] | None = None,
        take: np.ndarray | None = None,
        known: _Known | None = None,
    ) -> None:
        self.source = source  # the file, for messages
        if isinstance(columns, pa.Table):
            self.data = columns
        else:
            self.data = pa.table(
                {n: pa.array(list(c), type=pa.string()) for n, c in columns.items()}
            )
        self._namer: RowNamer = row_names if callable(row_names) else list(row_names).__getitem__
        # True: text columns are cells to read as numbers, dates or categories (a CSV file);
        # False: columns keep their types (a Parquet file's text columns are categories)
        self.guess = guess
        self._index = index  # row i of this table is row _index[i] of the file (None: i)
        # row i of this table is row _take[i] of `data` (None: i). Rows picked from a large
        # table (its training rows) are copied a column at a time when a column is read, never
        # all at once: a whole copy beside the table would double the memory a party needs.
        self._take = take
        # what is known of `data`'s columns, shared by every table picking rows from it: each
        # column is parsed once, not for the fit and again for each transform
        self._known = known if known is not None else _Known(numbers, codes)
        self._picked: tuple[str, pa.ChunkedArray] | None = None  # see `column`

    def __len__(self) -> int:
        return self.data.num_rows if self._take is None else len(self._take)

    @property
    def names(self) -> list[str]:
        return list(self.data.column_names)

    def column(self, name: str) -> pa.ChunkedArray:
        column = self.data.column(name)
        if self._take is None:
            return column
        # the last column picked is kept: the fit reads a column's cells, then its numbers
        if self._picked is None or self._picked[0] != name:
            self._picked = (name, column.take(self._take))
        return self._picked[1]

    def missing(self, name: str) -> np.ndarray:
        """(n,) bool: True where a cell of column `name` is missing (no copy of the cells)."""
        known = self._known.missing
        if name not in known:
            known[name] = self.data.column(name).is_null().to_numpy(zero_copy_only=False)
        return known[name] if self._take is None else known[name][self._take]

    def null_count(self, name: str) -> int:
        """How many cells of column `name` are missing in these rows (no copy of the cells)."""
        whole = self.data.column(name).null_count
        if self._take is None or not whole:  # a column without gaps has none in any rows
            return whole
        return int(np.count_nonzero(self.missing(name)))

    def value_counts(self, name: str) -> tuple[pa.Array, np.ndarray]:
        """Text column `name`'s distinct present cells in these rows and how many times each
        occurs ((k,) int64), counted on its dictionary codes: the rows' cells are not copied,
        and the column is hashed once for the fit and every transform."""
        codes, values = self.codes(name)
        counts = np.bincount(codes[codes >= 0], minlength=len(values))
        present = counts > 0
        return values.filter(pa.array(present)), counts[present]

    def codes(self, name: str) -> tuple[np.ndarray, pa.Array]:
        """Text column `name` dictionary-encoded: (n,) int32 codes, -1 where a cell is
        missing, and the distinct cells they index (one hash of the file's column, not one
        per transformed part)."""
        known = self._known.codes
        if name not in known:
            known[name] = dictionary_codes(self.data.column(name))
        codes, values = known[name]
        return (codes if self._take is None else codes[self._take]), values

    def cells(self, name: str) -> list[Cell]:
        """A column as text cells (None where missing), as the file writes them."""
        return text_cells(self.column(name))

    @property
    def columns(self) -> dict[str, list[Cell]]:
        """Every column as text cells: for small tables and tests (a large table's columns are
        read through `column`)."""
        return {name: self.cells(name) for name in self.names}

    def file_floats(self, name: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Column `name`'s numbers in every row of the Arrow table these rows are picked from
        ((N,) float64, NaN where missing; None if a present cell there is not a number), worked
        out once and shared by every table picking rows from it, and which of them are these
        rows ((n,) int64; None: all, in order)."""
        known = self._known.numbers
        if name not in known:
            known[name] = floats(self.data.column(name))
        return known[name], self._take

    def floats(self, name: str) -> np.ndarray | None:
        """Column `name` as (n,) float64, NaN where missing; None if a present cell is not a
        number (text, dates)."""
        known = self._known.numbers
        if name not in known:
            known[name] = floats(self.data.column(name))
        values = known[name]
        if self._take is None:
            return values
        if values is not None:
            return values[self._take]
        # these rows may be numbers where others are not; their first cells tell most text
        # columns apart without a copy of all their cells (nor of a chunked column's, which
        # Arrow joins into one to take from: from the first chunk where it holds them)
        if floats(_first_cells(self.data.column(name), self._take[:_FIRST_CELLS])) is None:
            return None
        return floats(self.column(name))

    @property
    def held_as_numbers(self) -> list[str]:
        """The columns of a CSV file held as numbers (read_table's `hold_numbers`)."""
        return [n for n in self.names if self.guess and not is_text(self.data.column(n))]

    def row_name(self, row: int) -> str:
        return self._namer(int(row if self._index is None else self._index[row]))

    @property
    def row_names(self) -> _RowNames:
        return _RowNames(self)

    def rows(self, index: Sequence[int] | np.ndarray) -> Table:
        """The same columns for the rows in `index`, in that order (row names kept); a column's
        cells are copied when it is read."""
        index = np.asarray(index, dtype=np.int64)
        original = index if self._index is None else self._index[index]
        take = index if self._take is None else self._take[index]
        return self._picking(self.data, original, take)

    def head(self, n: int) -> Table:
        """The first `n` rows, without copying them."""
        return self.slice(0, n)

    def slice(self, start: int, length: int) -> Table:
        """Rows start .. start + length - 1 (fewer at the end), without copying them."""
        stop = min(start + length, len(self))
        if self._index is not None:
            index = self._index[start:stop]
        else:
            index = None if start == 0 else np.arange(start, stop, dtype=np.int64)
        if self._take is not None:
            return self._picking(self.data, index, self._take[start:stop])
        return Table(
            self.source,
            self.data.slice(start, stop - start),
            self._namer,
            guess=self.guess,
            index=index,
            known=self._known.rows(start, stop),
        )

    def select(self, names: Sequence[str]) -> Table:
        return self._picking(self.data.select(list(names)), self._index, self._take)

    def _picking(self, data: pa.Table, index: np.ndarray | None, take: np.ndarray | None) -> Table:
        """A table of `data` (these rows, maybe fewer columns) sharing what is known of them."""
        return Table(
            self.source,
            data,
            self._namer,
            guess=self.guess,
            index=index,
            take=take,
            known=self._known,
        )

    def forget(self, name: str) -> None:
        """Drop column `name` and what is known of it (its memory is freed once no other
        table holds it)."""
        self.data = self.data.drop_columns([name])
        self._known.forget(name)
        if self._picked is not None and self._picked[0] == name:
            self._picked = None

    def with_column(self, name: str, values: pa.Array | pa.ChunkedArray) -> Table:
        """This table with column `name` replaced by `values` (one per row of this table)."""
        data = self.data if self._take is None else self.data.take(self._take)
        data = data.set_column(data.column_names.index(name), name, values)
        # what is known is of other rows where rows were picked
        known = self._known.without(name) if self._take is None else None
        return Table(
            self.source, data, self._namer, guess=self.guess, index=self._index, known=known
        )


class _Known:
    """What has been worked out about the rows of one Arrow table, by column name: its values
    ((n,) float64, NaN where missing, or None: not numbers there, though some rows may be),
    its missing cells ((n,) bool) and its dictionary codes (Table.codes)."""

    def __init__(
        self,
        numbers: dict[str, np.ndarray | None] | None = None,
        codes: dict[str, tuple[np.ndarray, pa.Array]] | None = None,
    ) -> None:
        self.numbers: dict[str, np.ndarray | None] = dict(numbers or {})
        self.missing: dict[str, np.ndarray] = {}
        self.codes: dict[str, tuple[np.ndarray, pa.Array]] = dict(codes or {})

    def rows(self, start: int, stop: int) -> _Known:
        """What is known of rows start .. stop - 1 (views, no copies)."""
        # a part of a column that is not numbers may be: only numbers carry over
        out = _Known({k: v[start:stop] for k, v in self.numbers.items() if v is not None})
        out.missing = {k: v[start:stop] for k, v in self.missing.items()}
        out.codes = {k: (c[start:stop], d) for k, (c, d) in self.codes.items()}
        return out

    def forget(self, name: str) -> None:
        self.numbers.pop(name, None)
        self.missing.pop(name, None)
        self.codes.pop(name, None)

    def without(self, name: str) -> _Known:
        out = _Known({k: v for k, v in self.numbers.items() if k != name})
        out.missing = {k: v for k, v in self.missing.items() if k != name}
        out.codes = {k: v for k, v in self.codes.items() if k != name}
        return out


class _RowNames(Sequence[str]):
    """A table's row names, each worked out when asked for."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, row):  # type: ignore[override]  # int only: names are asked one by one
        return self._table.row_name(row)

    def __iter__(self) -> Iterator[str]:
        return (self._table.row_name(i) for i in range(len(self._table)))


def text_cells(column: pa.ChunkedArray | pa.Array) -> list[Cell]:
    """Cells as text: strings as they are, numbers as Python writes them (a float's repr reads
    back exactly), NaN and nulls as None."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.to_pylist()
    return [_text(value) for value in column.to_pylist()]


def _text(value: object) -> Cell:
    if value is None or (isinstance(value, float) and value != value):  # null or NaN
        return None
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _first_cells(column: pa.ChunkedArray, rows: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """The cells of `column` in `rows` (a few)."""
    if column.num_chunks and len(rows) and int(rows.max()) < len(column.chunk(0)):
        return column.chunk(0).take(rows)
    return column.take(rows)


def numbers_array(values: np.ndarray | None) -> pa.Array | None:
    """A column's values ((n,) float64, NaN where missing) as a float64 Arrow array, null where
    missing, sharing their memory; None where there are none, or some are infinite (to the fit,
    text, where it names them)."""
    if values is None or np.isinf(values).any():
        return None
    missing = np.isnan(values)
    if missing.all():
        return None
    return pa.array(values, mask=missing if missing.any() else None)


def dictionary_codes(
    column: pa.ChunkedArray, encoded: pa.ChunkedArray | None = None
) -> tuple[np.ndarray, pa.Array]:
    """(n,) int32 codes (-1 where missing) into one dictionary of a text column's cells, in
    the order of their first appearance. `encoded`: the column's cells dictionary-encoded
    already, a chunk or more at a time (vfl_core.data.piece_codes), one dictionary each: only
    joined here. (Joined by Arrow's concatenation, which unifies the dictionaries once:
    `unify_dictionaries` gives every chunk the whole dictionary, 2.2 s instead of 0.05 s for a
    column of 126,000 distinct cells in 70 chunks, benchmarks/results/table_read.md.)"""
    if column.num_chunks == 0:
        return np.zeros(0, dtype=np.int32), pa.array([], column.type)
    joined = (pc.dictionary_encode(column) if encoded is None else encoded).combine_chunks()
    codes = pc.fill_null(joined.indices, -1).to_numpy(zero_copy_only=False)
    return codes.astype(np.int32, copy=False), joined.dictionary


def is_text(column: pa.ChunkedArray | pa.Array) -> bool:
    return pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
