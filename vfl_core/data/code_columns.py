"""Numeric columns that look like codes (zip codes, product IDs written as digits), said when a
party fits its preprocessing: fitted as numbers, 75001 is a little more than 69002, and a model
learns an order the codes do not have (the QA `intcat` table: 67.31% against 80.91% with
`--categorical`). Said, never changed: only the party knows whether the order means something.

The rule is conservative (docs/tables.md#numbers-that-look-like-codes gives the reasons and the
false alarms measured, none, on every benchmark table and scikit-learn's): a column is flagged
only when all of these hold in its training rows:

- at least CODE_MIN_ROWS present cells, every one a whole number >= 0;
- all of one digit count, CODE_MIN_DIGITS or more (a code has a fixed width; ages, counts and
  amounts spread over several widths);
- at least CODE_MIN_VALUES distinct values, each seen twice on average (codes repeat; a value
  of its own in most rows is an identifier, to leave out rather than make categories of);
- the values cover at most CODE_MAX_COVER of the whole numbers between the smallest and the
  largest (codes are drawn from a large space; a quantity such as a year fills its range);
- at most CODE_MAX_ROUND of the distinct values are multiples of 10 (rounded amounts are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vfl_core.data.columns import Table
    from vfl_core.data.preprocess import TabularPreprocessor

CODE_MIN_ROWS = 50
CODE_MIN_DIGITS = 4
CODE_MIN_VALUES = 10
CODE_MAX_VALUE_SHARE = 0.5  # distinct values per present cell
CODE_MAX_COVER = 0.1  # distinct values per whole number between the smallest and largest
CODE_MAX_ROUND = 0.5  # share of the distinct values that are multiples of 10


def code_like_columns(table: Table, fitted: TabularPreprocessor) -> list[str]:
    """The numeric columns of `fitted` (not dates) whose training cells in `table` look like
    codes, in the fit's order."""
    numeric = [spec.name for spec in fitted.columns if spec.kind == "numeric" and not spec.dates]
    return [
        name
        for name in numeric
        if _may_be_codes(table, name) and why_not_codes(table.floats(name)) is None
    ]


def _may_be_codes(table: Table, name: str) -> bool:
    """False where no cell of the whole file reaches CODE_MIN_DIGITS digits (most columns): a
    look at the numbers the fit worked out, without copying the training rows' out of them."""
    whole, _ = table.file_floats(name)
    return whole is not None and bool(np.fmax.reduce(whole) >= 10 ** (CODE_MIN_DIGITS - 1))


def why_not_codes(values: np.ndarray | None) -> str | None:
    """None where a column's values ((n,) float64, NaN where missing) look like codes (the
    rule in the module docstring), else the first test they fail; the cheap tests first, so
    most columns cost a min and a max."""
    if values is None:
        return "not numbers"
    if not len(values):
        return f"fewer than {CODE_MIN_ROWS} cells"
    # fmin and fmax pass over NaN (missing): no copy of the present cells yet
    low, high = float(np.fmin.reduce(values)), float(np.fmax.reduce(values))
    if not low >= 10 ** (CODE_MIN_DIGITS - 1) or high >= 1e15:  # beyond exact whole float64s
        return f"values below {10 ** (CODE_MIN_DIGITS - 1)}"  # or none at all (NaN)
    present = values[~np.isnan(values)]
    if len(present) < CODE_MIN_ROWS:
        return f"fewer than {CODE_MIN_ROWS} cells"
    if low < 10 ** (len(str(int(high))) - 1):
        return "several widths"
    if not np.array_equal(present, np.floor(present)):
        return "not whole numbers"
    distinct = np.unique(present)
    if len(distinct) < CODE_MIN_VALUES:
        return f"fewer than {CODE_MIN_VALUES} values"
    if len(distinct) > CODE_MAX_VALUE_SHARE * len(present):
        return "values seldom repeated"
    if len(distinct) > CODE_MAX_COVER * (high - low + 1):
        return "values fill their range"
    if np.count_nonzero(distinct % 10 == 0) > CODE_MAX_ROUND * len(distinct):
        return "round values"
    return None


def code_columns_warning(source: str, names: list[str], block: int) -> str:
    """What a party is told of its columns that look like codes (without "warning: ")."""
    listed = ", ".join(map(repr, names))
    option = ",".join(names)
    one = len(names) == 1
    what = f"column {listed} looks" if one else f"columns {listed} look"
    fitted = "it is fitted as a number" if one else "they are fitted as numbers"
    return (
        f"{source}: {what} like codes written as numbers (whole numbers of one width, few "
        f"values, each repeated, scattered over their range): {fitted}, as if the order "
        f"meant something; if it does not, give --categorical {option} (vfl simulate: "
        f"--categorical {block}:{option})"
    )
