"""A party's own preprocessing of its table columns, fitted on its training rows only.

Nothing here crosses the wire: column names, categories and statistics stay with the party (in
its directory as `preprocess.json` and in its checkpoints). Only the transformed width
(`feature_shape`) is part of what a party says about itself.

Per column, decided on the training rows:

- numeric (every non-missing cell parses as a finite float, or a Parquet number column):
  standardised with the training mean and standard deviation (a constant column keeps scale 1);
  a text column of numbers but for a few cells (under 10 %: 'forty thousand' among incomes) is
  refused, naming those cells (vfl_core.data.column_values.refuse_stray_text);
- dates (every non-missing cell an ISO date or time, 2024-03-01 or 2024-03-01T09:30:00+01:00,
  as spreadsheets write them, or a Parquet date or timestamp column): numeric, in days since
  1970-01-01 (UTC where a time names no zone);
- categorical (any other text column; a Parquet text column always; a column the party names
  categorical, its cells as written, a Parquet number's as its text) with at most `max_onehot`
  distinct values: one-hot, plus an "unknown" column for categories first seen at inference;
- categorical with more: one integer code (0 = unknown, 1.. = the sorted training categories),
  which the representation model embeds (`vfl_core.model.models.TabularRepresentation`).

A column with missing cells in the training rows also gets a 0/1 indicator column; its missing
cells are imputed (the mean, i.e. 0 after standardisation, or all-zero one-hot, or the unknown
code). Output layout per row: the dense part (numeric, indicators, one-hots in column order),
then the code columns, so the model can cut the vector in two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vfl_core.data import column_values as cv
from vfl_core.data.columns import Cell, Table
from vfl_core.data.labels import Labels, parse_labels
from vfl_core.data.learning_task import CLASSIFICATION, Task
from vfl_core.errors import DataError

log = logging.getLogger(__name__)

__all__ = ["Cell", "ColumnSpec", "Labels", "Table", "TabularPreprocessor", "parse_labels"]

DEFAULT_MAX_ONEHOT = 16
# Piecewise-linear encoding of numeric columns (Gorishniy et al. 2022, "On embeddings for
# numerical features", PLE with quantile bins): besides its standardised value, a numeric column
# with more distinct training values than this many bins gets one value per bin (0 below it, 1
# above it, linear inside). 0: the standardised value alone.
DEFAULT_NUMERIC_BINS = 0
# a categorical column with this share of distinct values (over at least so many rows) is
# worth a warning: an identifier or a timestamp, not a category
IDENTIFIER_SHARE = 0.9
IDENTIFIER_MIN_ROWS = 50
TRANSFORM_ROWS = 1 << 14  # rows transformed at a time, at least ...
# ... or as many as fill this many bytes: numpy asks the kernel for huge pages for an array of
# 4 MB or more, each taken with one page fault where small pages take 512 (about 2 us each
# here: a third of a large table's transform was its page faults)
TRANSFORM_BLOCK_BYTES = 8 << 20
PREPROCESS_VERSION = 1

ColumnKind = Literal["numeric", "onehot", "embedding"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ColumnSpec(_Frozen):
    name: str
    kind: ColumnKind
    indicator: bool = False  # training rows had missing cells: add a 0/1 "was missing" column
    mean: float = 0.0  # numeric only
    std: float = 1.0  # numeric only
    categories: tuple[str, ...] = ()  # onehot/embedding only, sorted
    dates: bool = False  # numeric only: the cells are ISO dates or times, read as days
    # numeric only: quantile bin edges of the training values, standardised (piecewise-linear
    # encoding: one value per bin after the standardised value); () none
    edges: tuple[float, ...] = ()

    @property
    def dense_width(self) -> int:
        width = int(self.indicator)
        if self.kind == "numeric":
            return width + 1 + max(len(self.edges) - 1, 0)
        if self.kind == "onehot":
            return width + len(self.categories) + 1  # + the unknown bucket
        return width

    @property
    def cardinality(self) -> int:
        """Codes an embedding column can take: unknown (0) and each training category."""
        return len(self.categories) + 1


class TabularPreprocessor(_Frozen):
    """A fitted preprocessing (serialisable to JSON, reused as is at inference)."""

    version: int = PREPROCESS_VERSION
    columns: tuple[ColumnSpec, ...] = Field(min_length=1)
    label_column: str | None = None  # a label party's label column
    classes: tuple[str, ...] = ()  # class index -> label as written in the training file
    # The federation's task: a fit for one task is never reused for the other (files written
    # before tasks existed have none and were classification).
    task: Task = CLASSIFICATION

    @property
    def width(self) -> int:
        """Values per transformed row (dense part plus code columns)."""
        return self.dense_width + len(self.cardinalities)

    @property
    def dense_width(self) -> int:
        return sum(c.dense_width for c in self.columns)

    @property
    def cardinalities(self) -> tuple[int, ...]:
        """One per code column at the end of each row, in order."""
        return tuple(c.cardinality for c in self.columns if c.kind == "embedding")

    @classmethod
    def fit(
        cls,
        table: Table,
        max_onehot: int = DEFAULT_MAX_ONEHOT,
        numeric_bins: int | None = None,
        categorical: Collection[str] = (),
    ) -> TabularPreprocessor:
        """`numeric_bins` None: DEFAULT_NUMERIC_BINS. `categorical`: columns fitted as
        categories whatever their cells (numbers that are codes: zip codes, product IDs)."""
        if not table.names:
            raise DataError(f"{table.source}: no feature columns to train on")
        bins = DEFAULT_NUMERIC_BINS if numeric_bins is None else numeric_bins
        return cls(
            columns=tuple(
                _fit_column(table, name, max_onehot, bins, name in categorical)
                for name in table.names
            )
        )

    def transform(self, table: Table) -> np.ndarray:
        """(n, width) float32 rows; a column missing from `table`, or a numeric training column
        holding a non-number, is a DataError naming the file, column and row."""
        return self.transform_all([table])[0]

    def transform_all(
        self, tables: Sequence[Table], done: Callable[[str], None] | None = None
    ) -> list[np.ndarray]:
        """`transform` of each table, a column at a time for all of them: `done(name)` is
        called once column `name` is written for every table, so that the caller may free it
        before the next is read (a party then never holds its whole table and its whole
        transform at once)."""
        for table in tables:
            for spec in self.columns:
                if spec.name not in table.names:
                    raise DataError(f"{table.source}: column {spec.name!r} is missing")
        # Per table, its rows a few thousand at a time, transposed ((width, rows): a column's
        # values are written by rows, fast; pages taken as written, while the table's columns
        # are freed); each block copied into the (n, width) rows and freed in turn, so that
        # the rows and their whole transpose are never held together
        step = max(TRANSFORM_ROWS, TRANSFORM_BLOCK_BYTES // (4 * max(1, self.width)))
        blocks = [
            [np.zeros((self.width, min(step, len(t) - i)), np.float32) for i in _at(t, step)]
            for t in tables
        ]
        at, code_at = 0, self.dense_width
        for spec in self.columns:
            shared: dict[int, tuple[bool, bool]] = {}  # see _write_numbers
            for table, parts in zip(tables, blocks, strict=True):
                if parts:  # a table without rows has nothing to write (or to refuse)
                    _write_column(table, spec, parts, (at, code_at), shared)
            at += spec.dense_width
            code_at += spec.kind == "embedding"
            if done is not None:
                done(spec.name)
        return [_rows(parts, self.width) for parts in blocks]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> TabularPreprocessor:
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise DataError(f"{source}: invalid preprocessing ({where}: {first['msg']})") from None


def _at(table: Table, step: int) -> range:
    """The first row of each block of `step` rows."""
    return range(0, len(table), step)


def _rows(parts: list[np.ndarray], width: int) -> np.ndarray:
    """(n, width) rows from their transposed blocks (width, rows), each freed once copied."""
    out = np.empty((sum(p.shape[1] for p in parts), width), dtype=np.float32)
    at = 0
    while parts:
        part = parts.pop(0)
        out[at : at + part.shape[1]] = part.T
        at += part.shape[1]
    return out


def _write_column(
    table: Table,
    spec: ColumnSpec,
    parts: list[np.ndarray],
    rows: tuple[int, int],
    shared: dict[int, tuple[bool, bool]],
) -> None:
    """Column `spec` of `table` into its rows' transposed blocks `parts` ((width, rows) each,
    zeros until written, in row order), every row of them set: its dense values from row
    `rows[0]` on, its code (an embedding column) in row `rows[1]`. A categorical column's
    categories are looked up once per distinct cell, then written block by block from its codes;
    a numeric column's values block by block (_write_numbers). `shared`: what _write_numbers
    keeps for the other tables of the same file."""
    at, code_at = rows
    if spec.indicator:
        _spread(table.missing(spec.name), parts, at)
        at += 1
    if spec.kind == "numeric":
        _write_numbers(table, spec, parts, at, shared)
        for part in parts if spec.edges else ():
            part[at + 1 : at + len(spec.edges)] = piecewise_linear(part[at], spec.edges)
        return
    # per code: the category's index, -1 missing, len(categories) unknown
    codes, index = cv.category_lookup(table, spec.name, spec.categories)
    if spec.kind == "embedding":  # per code the code written: 0 unknown or missing, 1.. known
        written = (np.where(index == len(spec.categories), -1, index) + 1).astype(np.float32)
        for part, some in zip(parts, _cut(codes, parts), strict=True):
            np.take(written, some, out=part[code_at], mode="wrap")  # -1 wraps to the last
        return
    values = np.arange(len(spec.categories) + 1)[:, None]  # a row each: no scattered writes
    for part, some in zip(parts, _cut(codes, parts), strict=True):
        np.equal(values, index[some], out=part[at : at + len(values)])  # missing (-1): none


def _write_numbers(
    table: Table,
    spec: ColumnSpec,
    parts: list[np.ndarray],
    at: int,
    shared: dict[int, tuple[bool, bool]],
) -> None:
    """Numeric column `spec` of `table` standardised into row `at` of its blocks, a block at a
    time (its values picked, standardised and written as float32 while they are in the cache:
    one pass over the column, not one per step). Where the table's rows are picked from a
    file's column of finite numbers (a split's, most), each block takes its rows of the file's
    values (whether they are finite, and have gaps, kept in `shared` by the identity of the
    values for every table picking from them); else the table's own values, checked, are
    standardised."""
    whole, rows = (None, None) if spec.dates else table.file_floats(spec.name)
    if whole is not None and rows is not None:
        if id(whole) not in shared:  # (no inf, no NaN); NaN is missing, not infinite
            numbers = bool(np.isfinite(whole).all())
            shared[id(whole)] = (True, False) if numbers else (not np.isinf(whole).any(), True)
        finite, gaps = shared[id(whole)]
        if finite:
            scratch = np.empty(max(part.shape[1] for part in parts))
            for part, some in zip(parts, _cut(rows, parts), strict=True):
                # "clip": the rows are in range, and the output not buffered as for "raise"
                picked = np.take(whole, some, out=scratch[: len(some)], mode="clip")
                _standardise_into(picked, spec, part[at], gaps)
            return
    values = _checked_numbers(table, spec)
    for part, some in zip(parts, _cut(values, parts), strict=True):
        _standardise_into(some.copy(), spec, part[at], gaps=True)


def _spread(values: np.ndarray, parts: list[np.ndarray], row: int) -> None:
    """(n,) values into row `row` of the blocks `parts` that hold their n rows."""
    for part, some in zip(parts, _cut(values, parts), strict=True):
        part[row] = some


def _cut(values: np.ndarray, parts: list[np.ndarray]) -> Iterator[np.ndarray]:
    """(n,) values cut as the blocks `parts` ((width, rows) each) cut the n rows (views)."""
    start = 0
    for part in parts:
        yield values[start : start + part.shape[1]]
        start += part.shape[1]


def _fit_column(
    table: Table, name: str, max_onehot: int, bins: int, categorical: bool = False
) -> ColumnSpec:
    kind = table.data.column(name)  # for its type: this table's rows are not copied
    missing = table.null_count(name)
    if missing == len(table):
        raise DataError(
            f"{table.source}: column {name!r} has no values in the training rows: nothing to "
            f"learn from it; leave it out (vfl-client --ignore-columns {name}, or --features "
            f"naming the columns to train on; vfl simulate --ignore-columns BLOCK:{name}, or "
            "vfl simulate --features BLOCK:COLUMNS)"
        )
    indicator = missing > 0
    if categorical:  # its cells as written (a Parquet number's text), never numbers or dates
        if not cv.is_text(kind):
            table = table.select([name]).with_column(name, cv.as_text(table.column(name)))
        return _text_column(table, name, indicator, max_onehot, bins, as_written=True)
    if cv.is_number(kind) or (table.guess and cv.is_text(kind)):
        numbers = table.floats(name)
        if numbers is not None:
            gaps = np.isnan(numbers)
            numbers = numbers[~gaps] if gaps.any() else numbers
            if np.isfinite(numbers).all():
                spread = _refuse_overflow(table.source, name, numbers)
                return _numeric(name, indicator, numbers, bins, spread)
    if cv.is_text(kind):
        return _text_column(table, name, indicator, max_onehot, bins)
    column = table.column(name)
    days = cv.days(column) if table.guess or cv.is_when(column) else None
    if days is not None:
        return _numeric(name, indicator, days[~np.isnan(days)], bins, dates=True)
    # a Parquet number column holding inf
    row = cv.first_bad_row(column, cv.finite_number)
    raise DataError(
        f"{table.source}: {table.row_name(row or 0)}, column {name!r}: "
        f"{column[row or 0].as_py()!r} is not a finite number"
    )


def _text_column(
    table: Table, name: str, indicator: bool, max_onehot: int, bins: int, as_written: bool = False
) -> ColumnSpec:
    """A text column that is not numbers: ISO dates (a CSV file's), else categories (always,
    `as_written`). Decided on its distinct cells (Table.value_counts), not a copy of its
    training rows."""
    values, counts = table.value_counts(name)
    if table.guess and not as_written:
        days = cv.days(table.column(name)) if cv.may_be_days(values) else None
        if days is not None:
            return _numeric(name, indicator, days[~np.isnan(days)], bins, dates=True)
        cv.refuse_local_dates(table, name, values)
        cv.refuse_stray_text(table, name, values, counts)
    categories = tuple(sorted(values.to_pylist()))
    _warn_if_identifier(table.source, name, len(categories), int(counts.sum()))
    kind: ColumnKind = "onehot" if len(categories) <= max_onehot else "embedding"
    return ColumnSpec(name=name, kind=kind, indicator=indicator, categories=categories)


def _refuse_overflow(source: str, name: str, values: np.ndarray) -> float:
    """The values' standard deviation; numbers too large for it in float64 (beyond about
    1e154) are refused: they would all be standardised to 0, the column's values silently
    lost."""
    with np.errstate(over="ignore", invalid="ignore"):
        spread = float(values.std()) if len(values) else 0.0
    if not np.isfinite(spread):
        raise DataError(
            f"{source}: column {name!r} holds numbers too large to standardise (up to "
            f"{np.abs(values).max():.3g}): write it in larger units, or leave it out (--features)"
        )
    return spread


def _numeric(
    name: str,
    indicator: bool,
    values: np.ndarray,
    bins: int,
    spread: float | None = None,
    dates: bool = False,
) -> ColumnSpec:
    """`spread`: the values' standard deviation where it is known."""
    std = float(values.std()) if spread is None or not len(values) else spread
    mean = float(values.mean())
    std = std if std > 0 else 1.0  # a constant column would divide by zero
    return ColumnSpec(
        name=name,
        kind="numeric",
        indicator=indicator,
        mean=mean,
        std=std,
        dates=dates,
        edges=quantile_edges((values - mean) / std, bins),
    )


def quantile_edges(values: np.ndarray, bins: int) -> tuple[float, ...]:
    """The edges of up to `bins` quantile bins of (standardised) training values, distinct and
    ascending; () where bins is 0 or the column has no more distinct values than bins (a flag,
    a small count: its standardised value already says all)."""
    if bins < 1 or len(np.unique(values)) <= bins:
        return ()
    edges = np.unique(np.quantile(values, np.linspace(0, 1, bins + 1)))
    return tuple(float(e) for e in edges) if len(edges) > 2 else ()


def piecewise_linear(x: np.ndarray, edges: tuple[float, ...]) -> np.ndarray:
    """(len(edges) - 1, n): bin t of x (n,) is 0 below edges[t], 1 from edges[t + 1] on and
    linear between (the first bin open below, the last open above, as in the paper)."""
    lo = np.asarray(edges[:-1], dtype=np.float32)[:, None]  # (T, 1)
    hi = np.asarray(edges[1:], dtype=np.float32)[:, None]
    out = (x[None, :] - lo) / (hi - lo)  # (T, n)
    out[1:] = np.maximum(out[1:], 0.0)
    out[:-1] = np.minimum(out[:-1], 1.0)
    return out


def _warn_if_identifier(source: str, name: str, distinct: int, present: int) -> None:
    """A categorical column with a value of its own for almost every row (an account number, a
    timestamp) gives each training row a category no new sample has: it teaches nothing that
    carries over, and lets the model learn the training rows by heart. Said, not dropped."""
    if present >= IDENTIFIER_MIN_ROWS and distinct >= IDENTIFIER_SHARE * present:
        log.warning(
            "%s: column %r has %d distinct values in %d training rows, like an identifier or a "
            "timestamp: as categories they teach nothing new samples share; leave it out "
            "(--features), or write it as a number (a date as days since some day, say)",
            source,
            name,
            distinct,
            present,
        )


def _checked_numbers(table: Table, spec: ColumnSpec) -> np.ndarray:
    """(n,) the column's values as float64, NaN where missing; a cell that is not a number (not
    an ISO date) or is infinite raised."""
    values = cv.days(table.column(spec.name)) if spec.dates else table.floats(spec.name)
    if values is None or np.isinf(values).any():  # NaN is missing, not infinite
        _raise_not_numeric(table, spec, table.column(spec.name))
    assert values is not None
    return values


def _standardise_into(values: np.ndarray, spec: ColumnSpec, out: np.ndarray, gaps: bool) -> None:
    """float64 `values` (overwritten) standardised with the column's training statistics into
    `out` (float32: each value rounded once, as a float64 result cast); NaN (missing) as 0, the
    mean, looked for only where there may be `gaps`."""
    np.subtract(values, spec.mean, out=values)
    np.divide(values, spec.std, out=out)
    if gaps:
        np.copyto(out, 0.0, where=np.isnan(out))


def _raise_not_numeric(table: Table, spec: ColumnSpec, column: pa.ChunkedArray) -> None:
    """The first cell of a numeric (or dates) training column that is not one, named."""
    what = "an ISO date" if spec.dates else "a number"
    if not cv.is_text(column):
        fits = (lambda _: cv.is_when(column)) if spec.dates else cv.finite_number
        cells = pa.chunked_array([pa.array(cv.text_cells(column), pa.string())])
    else:
        fits = (lambda cell: cv.day(cell) is not None) if spec.dates else cv.finite_number
        cells = column
    row = cv.first_bad_row(cells, fits) or 0
    raise DataError(
        f"{table.source}: {table.row_name(row)}, column {spec.name!r}: {cells[row].as_py()!r} "
        f"is not {what}, but the column was {'dates' if spec.dates else 'numeric'} in the "
        "training rows"
    )
