"""Text columns that are numbers as a spreadsheet formats them: amounts with a currency sign
(`$1,200`, `€3.40`, `12.50 EUR`), percentages (`45%`), negatives in parentheses (`(0.53)`, an
accountant's), whole numbers with digit groups alone (`34,441`, which the reader cannot tell
from 34.441 written with a decimal comma) or decimal commas outside a `;`-separated file. The
reader takes only plain numbers (and the file's locale's, vfl_core.data.local_numbers) as
numbers, so such a column is categorical: a category per distinct number (584 for a rate written
`36.0%`), its order and scale lost. It was measured on a generated bank table
(benchmarks/results/table_qa.md): accuracy 72.56% with two amounts written `$34,440` and
`€3038.95`, 76.98% with two rates written `36.0%`, 76.24% with a score written `(0.53)`, 70.72%
with two whole amounts written `34,441`, against 83.98% with the same cells written plainly; only
an identifier warning (which names the wrong cause) said anything, and only for some.

Said when a party fits its preprocessing, never changed: converting is the reader's typing, not
this module's, and a column of a few such values may be meant as categories (discount tiers). A
categorical column (not named by --categorical) is named when it has at least MIN_VALUES
training categories, every one of them (of at most MAX_LOOKED, evenly spread over the sorted
categories) a number written plainly or one of these ways, and at least one written one of
these ways.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vfl_core.data.preprocess import TabularPreprocessor

MIN_VALUES = 5
MAX_LOOKED = 2000  # categories looked at, evenly spread: 7 ms, where all 200,000 took 0.4 s
UNIT = "a currency sign or '%'"
PARENTHESES = "parentheses for negatives"
GROUPS = "digit groups alone"
DECIMAL_COMMA = "a decimal comma"
_CODES = "USD|EUR|GBP|CHF|JPY|CAD|AUD"
_PRE = rf"[$€£¥₹]|(?:{_CODES})\s"
_POST = rf"%|[$€£¥₹]|\s(?:{_CODES})"
_CELL = re.compile(
    rf"[-+]?\s*(?P<pre>{_PRE})?\s*[-+]?\s*(?P<open>\()?\s*(?P<number>[\d.,' \u00a0]+?)\s*"
    rf"(?P<close>\))?\s*(?P<post>{_POST})?",
    re.IGNORECASE,
)
_PLAIN = re.compile(r"\d+(\.\d+)?|\.\d+")
_GROUPED = re.compile(r"\d{1,3}([,' \u00a0]\d{3})+(\.\d+)?|\d{1,3}(\.\d{3})+(,\d+)?")
_COMMA = re.compile(r"\d*,\d+")


def number_format(cell: str) -> tuple[str, ...] | None:
    """How a cell writes a number: () plainly, the ways it is formatted (UNIT, PARENTHESES,
    GROUPS, DECIMAL_COMMA), or None where it is not a number."""
    match = _CELL.fullmatch(cell.strip())
    if match is None or bool(match["open"]) != bool(match["close"]):
        return None
    number = match["number"]
    ways = [UNIT] if match["pre"] or match["post"] else []
    ways += [PARENTHESES] if match["open"] else []
    if _GROUPED.fullmatch(number):
        ways.append(GROUPS)
    elif _COMMA.fullmatch(number):
        ways.append(DECIMAL_COMMA)
    elif not _PLAIN.fullmatch(number):
        return None
    return tuple(ways)


def formatted_columns(
    fitted: TabularPreprocessor, categorical: tuple[str, ...]
) -> list[tuple[str, int, str, tuple[str, ...]]]:
    """The fitted categorical columns, not named by --categorical, whose training categories
    are numbers, some formatted: (column, its categories, a formatted example, the ways), in
    the fit's order."""
    found = []
    for spec in fitted.columns:
        values = spec.categories
        if spec.kind == "numeric" or spec.name in categorical or len(values) < MIN_VALUES:
            continue
        step = max(1, len(values) // MAX_LOOKED)  # sorted: a spread of them
        formatted = _formatted(values[::step])
        if formatted:
            seen = sorted({way for _, w in formatted for way in w}, key=_ORDER.index)
            example = formatted[len(formatted) // 2][0]
            found.append((spec.name, len(values), example, tuple(seen)))
    return found


_ORDER = [UNIT, PARENTHESES, GROUPS, DECIMAL_COMMA]


def _formatted(values: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """The formatted numbers among `values` and their ways, or [] where one is not a number
    (stopping there: a text column's first category mostly tells)."""
    found = []
    for value in values:
        ways = number_format(value)
        if ways is None:
            return []
        if ways:
            found.append((value, ways))
    return found


def formatted_columns_warning(
    source: str, found: list[tuple[str, int, str, tuple[str, ...]]], block: int
) -> str:
    """What a party is told of its columns of formatted numbers (without "warning: ")."""
    shown = "; ".join(
        f"column {name!r} ({count} categories, e.g. {example!r}) holds numbers written with "
        + " and ".join(ways)
        for name, count, example, ways in found
    )
    option = ",".join(name for name, _, _, _ in found)
    return (
        f"{source}: {shown}: read as text, each distinct number is a category of its own, "
        "their order and scale lost; write the cells as plain numbers in the file (1234.5, "
        "-0.53, 45.3), or, if they are categories, give --categorical "
        f"{option} (vfl simulate: --categorical {block}:{option})"
    )
