"""A party's own preprocessing of its table columns, fitted on its training rows only.

Nothing here crosses the wire: column names, categories and statistics stay with the party (in
its directory as `preprocess.json` and in its checkpoints). Only the transformed width
(`feature_shape`) is part of what a party says about itself.

Per column, decided on the training rows:

- numeric (every non-missing cell parses as a finite float): standardised with the training mean
  and standard deviation (a constant column keeps scale 1);
- dates (every non-missing cell an ISO date or time, 2024-03-01 or 2024-03-01T09:30:00+01:00,
  as spreadsheets and Parquet write them): numeric, in days since 1970-01-01 (UTC where a time
  names no zone);
- categorical with at most `max_onehot` distinct values: one-hot, plus an "unknown" column for
  categories first seen at inference;
- categorical with more: one integer code (0 = unknown, 1.. = the sorted training categories),
  which the representation model embeds (`vfl_core.model.models.TabularRepresentation`).

A column with missing cells in the training rows also gets a 0/1 indicator column; its missing
cells are imputed (the mean, i.e. 0 after standardisation, or all-zero one-hot, or the unknown
code). Output layout per row: the dense part (numeric, indicators, one-hots in column order),
then the code columns, so the model can cut the vector in two.
"""

from __future__ import annotations

import datetime
import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION, Task
from vfl_core.errors import DataError

log = logging.getLogger(__name__)

DEFAULT_MAX_ONEHOT = 16
MOSTLY_NUMBERS = 0.9  # a categorical column with this share of numbers is worth a warning
# a categorical column with this share of distinct values (over at least so many rows) is
# worth a warning: an identifier or a timestamp, not a category
IDENTIFIER_SHARE = 0.9
IDENTIFIER_MIN_ROWS = 50
PREPROCESS_VERSION = 1

_FLOAT32_MAX = float(np.finfo(np.float32).max)

Cell = str | None  # None: a missing cell
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

    @property
    def dense_width(self) -> int:
        width = int(self.indicator)
        if self.kind == "numeric":
            return width + 1
        if self.kind == "onehot":
            return width + len(self.categories) + 1  # + the unknown bucket
        return width

    @property
    def cardinality(self) -> int:
        """Codes an embedding column can take: unknown (0) and each training category."""
        return len(self.categories) + 1


@dataclass(frozen=True)
class Table:
    """Cells of named columns in row order, and how to name each row in an error."""

    source: str  # the file, for messages
    columns: dict[str, list[Cell]]
    row_names: list[str]  # e.g. "line 7" for a CSV, "row 6" for Parquet

    def __len__(self) -> int:
        return len(self.row_names)

    def rows(self, index: Sequence[int]) -> Table:
        """The same columns for the rows in `index`, in that order (row names kept)."""
        return Table(
            self.source,
            {name: [cells[i] for i in index] for name, cells in self.columns.items()},
            [self.row_names[i] for i in index],
        )

    def select(self, names: Sequence[str]) -> Table:
        return Table(self.source, {n: self.columns[n] for n in names}, self.row_names)


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
    def fit(cls, table: Table, max_onehot: int = DEFAULT_MAX_ONEHOT) -> TabularPreprocessor:
        if not table.columns:
            raise DataError(f"{table.source}: no feature columns to train on")
        specs = tuple(
            _fit_column(table.source, name, cells, max_onehot)
            for name, cells in table.columns.items()
        )
        return cls(columns=specs)

    def transform(self, table: Table) -> np.ndarray:
        """(n, width) float32 rows; a column missing from `table`, or a numeric training column
        holding a non-number, is a DataError naming the file, column and row."""
        n = len(table.row_names)
        dense = np.zeros((n, self.dense_width), dtype=np.float32)
        codes = np.zeros((n, len(self.cardinalities)), dtype=np.float32)
        at, code_at = 0, 0
        for spec in self.columns:
            cells = table.columns.get(spec.name)
            if cells is None:
                raise DataError(f"{table.source}: column {spec.name!r} is missing")
            missing = np.array([cell is None for cell in cells], dtype=bool)
            if spec.indicator:
                dense[:, at] = missing
                at += 1
            if spec.kind == "numeric":
                dense[:, at] = _standardised(table, spec, cells)
                at += 1
            elif spec.kind == "onehot":
                index = _category_index(spec, cells)  # -1 missing, len(categories) unknown
                rows = np.flatnonzero(index >= 0)
                dense[rows, at + index[rows]] = 1.0
                at += len(spec.categories) + 1
            else:
                index = _category_index(spec, cells)
                codes[:, code_at] = np.where(index == len(spec.categories), -1, index) + 1
                code_at += 1
        return np.concatenate([dense, codes], axis=1)

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


def _fit_column(source: str, name: str, cells: Sequence[Cell], max_onehot: int) -> ColumnSpec:
    present = [cell for cell in cells if cell is not None]
    if not present:
        raise DataError(f"{source}: column {name!r} has no values in the training rows")
    indicator = len(present) < len(cells)
    numbers = _as_floats(present)
    if numbers is not None:
        return _numeric(name, indicator, numbers)
    days = _as_days(present)
    if days is not None:
        return _numeric(name, indicator, days, dates=True)
    _warn_if_mostly_numbers(source, name, present)
    categories = tuple(sorted(set(present)))
    _warn_if_identifier(source, name, len(categories), len(present))
    kind: ColumnKind = "onehot" if len(categories) <= max_onehot else "embedding"
    return ColumnSpec(name=name, kind=kind, indicator=indicator, categories=categories)


def _numeric(name: str, indicator: bool, values: np.ndarray, dates: bool = False) -> ColumnSpec:
    std = float(values.std())
    return ColumnSpec(
        name=name,
        kind="numeric",
        indicator=indicator,
        mean=float(values.mean()),
        std=std if std > 0 else 1.0,  # a constant column would divide by zero
        dates=dates,
    )


def _warn_if_mostly_numbers(source: str, name: str, present: Sequence[str]) -> None:
    """A few stray marks ('-', 'unknown', 'inf') in a numeric column make it categorical, with a
    category per distinct number: say so, naming them, so the user can blank them out."""
    others = {v: n for v, n in Counter(present).items() if not _finite_number(v)}  # distinct
    if sum(others.values()) <= (1 - MOSTLY_NUMBERS) * len(present):
        examples = ", ".join(repr(cell) for cell in sorted(others)[:3])
        log.warning(
            "%s: column %r is categorical because %d of its %d training values are not finite "
            "numbers (%s); if they mean missing, leave those cells empty",
            source,
            name,
            sum(others.values()),
            len(present),
            examples,
        )


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


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _finite_number(cell: str) -> bool:
    value = _number(cell)
    return value is not None and math.isfinite(value)


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}.*)?")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _day(cell: str) -> float | None:
    """An ISO date or time as days since 1970-01-01 (UTC where it names no zone), or None."""
    if not _ISO_DATE.fullmatch(cell):
        return None
    try:
        when = datetime.datetime.fromisoformat(cell)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return (when - _EPOCH).total_seconds() / 86400.0


def _as_days(cells: Sequence[str]) -> np.ndarray | None:
    """The cells as days (float64), or None unless every one is an ISO date or time."""
    days = []
    for cell in cells:
        day = _day(cell)
        if day is None:
            return None
        days.append(day)
    return np.array(days, dtype=np.float64)


def _as_floats(cells: Sequence[str]) -> np.ndarray | None:
    """The cells as float64, or None if any is not a finite number."""
    try:
        values = np.array([float(cell) for cell in cells], dtype=np.float64)
    except ValueError:
        return None
    return values if np.isfinite(values).all() else None


def _standardised(table: Table, spec: ColumnSpec, cells: Sequence[Cell]) -> np.ndarray:
    out = np.zeros(len(cells), dtype=np.float64)  # missing: the mean, 0 once standardised
    for row, cell in enumerate(cells):
        if cell is None:
            continue
        value = _day(cell) if spec.dates else _number(cell)
        if value is None or not math.isfinite(value):
            what = "an ISO date" if spec.dates else "a number"
            raise DataError(
                f"{table.source}: {table.row_names[row]}, column {spec.name!r}: {cell!r} is not "
                f"{what}, but the column was {'dates' if spec.dates else 'numeric'} in the "
                "training rows"
            )
        out[row] = (value - spec.mean) / spec.std
    return out


def _category_index(spec: ColumnSpec, cells: Sequence[Cell]) -> np.ndarray:
    """Per cell: the category's index, len(categories) if unknown, -1 if missing."""
    lookup = {category: i for i, category in enumerate(spec.categories)}
    unknown = len(spec.categories)
    return np.array(
        [-1 if cell is None else lookup.get(cell, unknown) for cell in cells], dtype=np.int64
    )


# ---------------------------------------------------------------- labels


@dataclass(frozen=True)
class Labels:
    values: np.ndarray  # (n,) int64 class indices, or float32 targets for regression
    classes: tuple[str, ...]  # class index -> the label as written in the file (regression: ())


def parse_labels(
    table: Table,
    column: str,
    classes: tuple[str, ...] | None = None,
    task: Task = CLASSIFICATION,
) -> Labels:
    """The one place labels are read: class indices, or regression targets, for a label column.

    Classification without `classes` (training rows): the classes are the distinct labels, sorted
    numerically when all are numbers (so "0"/"1" keep their meaning) and as text otherwise
    ("no" < "yes"). With `classes` (inference rows) a label outside them is an error.
    Regression: every label is a finite number (float32 targets, `classes` unused).
    """
    present = _present_labels(table, column)
    if task == REGRESSION:
        return Labels(_regression_targets(table, column, present), ())
    if classes is None:
        classes = _sorted_classes(set(present))
        if len(classes) < 2:
            raise DataError(
                f"{table.source}: label column {column!r} has a single class {classes[0]!r} "
                f"(need at least two)"
            )
    lookup = {label: i for i, label in enumerate(classes)}
    values = np.empty(len(present), dtype=np.int64)
    for row, cell in enumerate(present):
        if cell not in lookup:
            raise DataError(
                f"{table.source}: {table.row_names[row]}, column {column!r}: label {cell!r} is "
                f"not one of the training classes {list(classes)}"
            )
        values[row] = lookup[cell]
    return Labels(values, classes)


def _present_labels(table: Table, column: str) -> list[str]:
    """The label cells, refusing an empty cell or a table without rows."""
    if not len(table):
        raise DataError(f"{table.source}: no rows, so no labels in column {column!r}")
    cells = table.columns[column]
    missing = [row for row, cell in enumerate(cells) if cell is None]
    if missing:
        raise DataError(
            f"{table.source}: {table.row_names[missing[0]]}, column {column!r}: no label "
            f"({len(missing)} of {len(cells)} rows have none). A label party's table needs a "
            "label in every row: leave the samples whose label is unknown out of it"
        )
    return [cell for cell in cells if cell is not None]


def _regression_targets(table: Table, column: str, cells: list[str]) -> np.ndarray:
    values = np.empty(len(cells), dtype=np.float32)
    for row, cell in enumerate(cells):
        try:
            value = float(cell)
        except ValueError:
            value = math.nan
        # float32 is what the model trains on: a target beyond its range would become inf
        if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
            raise DataError(
                f"{table.source}: {table.row_names[row]}, column {column!r}: {cell!r} is not a "
                f"finite number (a regression label must be one)"
            )
        values[row] = value
    return values


def _sorted_classes(labels: set[str]) -> tuple[str, ...]:
    if _as_floats(list(labels)) is not None:
        return tuple(sorted(labels, key=lambda label: (float(label), label)))
    return tuple(sorted(labels))
