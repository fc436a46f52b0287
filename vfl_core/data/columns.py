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

from vfl_core.data.local_numbers import floats

Cell = str | None  # None: a missing cell
RowNamer = Callable[[int], str]  # a row's position in the file -> its name in messages


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
        take: np.ndarray | None = None,
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
        # name -> (n,) float64, NaN where missing, or None (not numbers): the columns read as
        # numbers so far (each is parsed once, not for the fit and again for each transform)
        self._numbers = dict(numbers or {})

    def __len__(self) -> int:
        return self.data.num_rows if self._take is None else len(self._take)

    @property
    def names(self) -> list[str]:
        return list(self.data.column_names)

    def column(self, name: str) -> pa.ChunkedArray:
        column = self.data.column(name)
        return column if self._take is None else column.take(self._take)

    def missing(self, name: str) -> np.ndarray:
        """(n,) bool: True where a cell of column `name` is missing (no copy of the cells)."""
        mask = self.data.column(name).is_null().to_numpy(zero_copy_only=False)
        return mask if self._take is None else mask[self._take]

    def cells(self, name: str) -> list[Cell]:
        """A column as text cells (None where missing), as the file writes them."""
        return text_cells(self.column(name))

    @property
    def columns(self) -> dict[str, list[Cell]]:
        """Every column as text cells: for small tables and tests (a large table's columns are
        read through `column`)."""
        return {name: self.cells(name) for name in self.names}

    def floats(self, name: str) -> np.ndarray | None:
        """Column `name` as (n,) float64, NaN where missing; None if a present cell is not a
        number (text, dates)."""
        if name not in self._numbers:
            self._numbers[name] = floats(self.column(name))
        return self._numbers[name]

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
        return Table(
            self.source, self.data, self._namer, guess=self.guess, index=original, take=take
        )

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
        # a part of a column that is not numbers may be: only numbers carry over
        numbers = {k: v[start:stop] for k, v in self._numbers.items() if v is not None}
        if self._take is not None:
            data, take = self.data, self._take[start:stop]
        else:
            data, take = self.data.slice(start, stop - start), None
        return Table(
            self.source,
            data,
            self._namer,
            guess=self.guess,
            index=index,
            numbers=numbers,
            take=take,
        )

    def select(self, names: Sequence[str]) -> Table:
        numbers = {n: v for n, v in self._numbers.items() if n in names}
        return Table(
            self.source,
            self.data.select(list(names)),
            self._namer,
            guess=self.guess,
            index=self._index,
            numbers=numbers,
            take=self._take,
        )

    def with_column(self, name: str, values: pa.Array | pa.ChunkedArray) -> Table:
        """This table with column `name` replaced by `values` (one per row of this table)."""
        data = self.data if self._take is None else self.data.take(self._take)
        data = data.set_column(data.column_names.index(name), name, values)
        numbers = {n: v for n, v in self._numbers.items() if n != name}
        return Table(
            self.source, data, self._namer, guess=self.guess, index=self._index, numbers=numbers
        )


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
