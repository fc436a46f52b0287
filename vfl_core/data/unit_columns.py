"""Text columns that are numbers written with a unit: amounts with a currency sign (`$1,200`,
`€3.40`, `12.50 EUR`) or percentages (`45%`), as a spreadsheet exports a formatted cell. The
reader takes only plain numbers as numbers, so such a column is categorical: a category per
distinct amount (601 for a rate written `45.3%`), its order and scale lost. The QA pass of stop
40 measured it on a generated bank table: accuracy 72.56% with two amounts written `$1,200` and
`€3.40`, 76.98% with two rates written `45%`, against 83.98% for the same cells written plainly,
and nothing said it (benchmarks/results/table_qa.md).

Said when a party fits its preprocessing, never changed: whether `45%` is 45 or 0.45 does not
matter to a standardised column, but the reader's typing is not this module's to change, and a
column of a few such values may be meant as categories (discount tiers). A categorical column
(not named by --categorical) is named when at least UNIT_MIN_VALUES of its training categories
are, every one of them, a number with such a sign before or after it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vfl_core.data.preprocess import TabularPreprocessor

UNIT_MIN_VALUES = 5
_SIGNS = "$€£¥₹"
_CODES = "USD|EUR|GBP|CHF|JPY|CAD|AUD"
_NUMBER = r"[-+(]?\d[\d,. '\u00a0]*\)?"  # digit groups by , . space or ', a sign or parentheses
_UNIT = re.compile(
    rf"[-+]?\s*(?P<pre>[{_SIGNS}]|(?:{_CODES})\s)?\s*-?\s*{_NUMBER}\s*(?P<post>%|[{_SIGNS}]|\s(?:{_CODES}))?",
    re.IGNORECASE,
)


def unit(cell: str) -> str | None:
    """The currency sign or `%` of a number written with one (`$1,200` -> `$`), else None."""
    match = _UNIT.fullmatch(cell.strip())
    if match is None or not (match["pre"] or match["post"]):
        return None
    return (match["pre"] or match["post"]).strip()


def unit_columns(
    fitted: TabularPreprocessor, categorical: tuple[str, ...]
) -> list[tuple[str, int, str]]:
    """The fitted categorical columns, not named by --categorical, whose training categories are
    numbers with a unit: (column, its categories, an example), in the fit's order."""
    found = []
    for spec in fitted.columns:
        values = spec.categories
        if spec.kind == "numeric" or spec.name in categorical or len(values) < UNIT_MIN_VALUES:
            continue
        if all(unit(value) is not None for value in values):
            found.append((spec.name, len(values), values[len(values) // 2]))
    return found


def unit_columns_warning(source: str, found: list[tuple[str, int, str]], block: int) -> str:
    """What a party is told of its columns of numbers written with a unit (without "warning: ")."""
    shown = ", ".join(f"{name!r} ({count} categories, e.g. {ex!r})" for name, count, ex in found)
    what = "column {} holds" if len(found) == 1 else "columns {} hold"
    option = ",".join(name for name, _, _ in found)
    return (
        f"{source}: {what.format(shown)} numbers written with a currency sign or '%': read as "
        "text, each distinct amount is a category of its own, their order and scale lost; write "
        "the cells as plain numbers in the file (1200.50, 45.3), or, if they are categories, "
        f"give --categorical {option} (vfl simulate: --categorical {block}:{option})"
    )
