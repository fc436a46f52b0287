"""Reading a party's table: a CSV file (stdlib csv) or a Parquet file (pyarrow, optional).

Every cell becomes text, or None where it is missing (an empty cell, NA, N/A, NaN, null, #N/A,
<NA> or ?, the UCI repository's mark), so the preprocessing decides column kinds the same way
whatever the file format. Rows are named for error messages as the user finds them: "line N" of
a CSV file, "row N" of a Parquet file.

CSV files come as spreadsheets write them: the separator is whichever of `,` `;` tab `|` splits
the header and the first lines into the same number of fields (a `.tsv` file the same way), and
a column whose every value is a number written as the file's locale writes them is read as
those numbers: in a `;`-separated file (a European spreadsheet's export) decimal commas and dots
between digit groups (`3,25`, `1.234,5`), in any other commas between digit groups (`"1,234.5"`);
a lone `1.234` or `1,234`, which could be either, counts as grouped only in a column where some
other number can only be read that way. A file that is not UTF-8
is read as Windows-1252 (what spreadsheets on Windows write; Latin-1 if even that fails), with a
warning; one that starts with a UTF-16 byte-order mark as UTF-16. A column with neither a name
nor a value (a separator ending every line) is left out.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from pathlib import Path

from vfl_core.data.preprocess import Cell, Table
from vfl_core.errors import DataError

log = logging.getLogger(__name__)

TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")
# compared lower-cased, stripped
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "#n/a", "<na>", "?"})
SEPARATORS = (",", ";", "\t", "|")  # tried in this order; the first that fits wins
_SNIFF_LINES = 50
_DECIMAL_COMMA = re.compile(r"[+-]?(\d+,\d*|,\d+)([eE][+-]?\d+)?")


def is_table_file(path: Path) -> bool:
    return Path(path).suffix.lower() in TABLE_SUFFIXES


def read_table(path: Path) -> Table:
    """Every column of a CSV or Parquet file as text cells (None where a cell is missing)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return _read_csv(path)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path)
    raise DataError(f"{path}: unknown table format (expected {', '.join(TABLE_SUFFIXES)})")


def _cell(text: str) -> Cell:
    text = text.strip()
    return None if text.lower() in MISSING_MARKERS else text


def _read_csv(path: Path) -> Table:
    encoding = _encoding(path)
    try:
        header, rows, row_names, separator = _csv_rows(path, encoding)
    except UnicodeDecodeError:
        # not UTF-8: what spreadsheets on Windows write (every byte but five is a character)
        encoding = "cp1252"
        try:
            header, rows, row_names, separator = _csv_rows(path, encoding)
        except UnicodeDecodeError:
            encoding = "latin-1"  # any byte is a character: the file reads, accents may not
            header, rows, row_names, separator = _csv_rows(path, encoding)
        log.warning(
            "%s is not UTF-8: read as %s (save it as UTF-8 to be sure of its accented letters; "
            "every party must write its IDs alike)",
            path,
            {"cp1252": "Windows-1252", "latin-1": "Latin-1"}[encoding],
        )
    if header is None:
        raise DataError(f"{path}: empty file (no header line)")
    keep = _named_columns(path, [name.strip() for name in header], rows)
    if not rows:
        raise DataError(f"{path}: no data rows after the header")
    columns = {name: [_cell(row[i]) for row in rows] for i, name in keep}
    columns = {name: _local_numbers(cells, separator) for name, cells in columns.items()}
    return Table(str(path), columns, row_names)


def _encoding(path: Path) -> str:
    """UTF-16 where the file starts with its byte-order mark (spreadsheets' "Unicode text"),
    else UTF-8 with or without one."""
    try:
        with path.open("rb") as f:
            start = f.read(2)
    except OSError as exc:
        raise DataError(f"{path}: unreadable CSV ({exc})") from exc
    return "utf-16" if start in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"


def _csv_rows(
    path: Path, encoding: str
) -> tuple[list[str] | None, list[list[str]], list[str], str]:
    """Header, rows, row names and separator; UnicodeDecodeError where `encoding` is wrong."""
    try:
        with path.open(newline="", encoding=encoding) as f:
            separator = _separator(f)
            reader = csv.reader(f, delimiter=separator)
            header = next(reader, None)
            rows: list[list[str]] = []
            row_names: list[str] = []
            for row in reader:
                if not row:
                    continue  # blank line
                if len(row) != len(header or ()):
                    raise DataError(
                        f"{path}: line {reader.line_num} has {len(row)} fields, the header has "
                        f"{len(header or ())} (fields separated by {_named(separator)})"
                    )
                rows.append(row)
                row_names.append(f"line {reader.line_num}")
    except (OSError, csv.Error) as exc:
        raise DataError(f"{path}: unreadable CSV ({exc})") from exc
    return header, rows, row_names, separator


def _separator(f: io.TextIOBase) -> str:
    """The separator that splits the first lines into the same number (> 1) of fields; a comma
    if none does (the file's own error then names the line). Leaves `f` at its start."""
    lines = [line for _, line in zip(range(_SNIFF_LINES), f, strict=False)]
    f.seek(0)
    for separator in SEPARATORS:
        try:
            rows = [row for row in csv.reader(lines, delimiter=separator) if row]
        except csv.Error:
            continue
        if len(lines) == _SNIFF_LINES:
            rows = rows[:-1]  # the sample may end inside a quoted field of its last record
        widths = {len(row) for row in rows}
        if len(widths) == 1 and widths.pop() > 1:
            return separator
    return ","


def _named(separator: str) -> str:
    return {"\t": "tabs"}.get(separator, repr(separator))


def _grouped(group: str, decimal: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A number with digit groups (1.234.567,8 or 1,234,567.8), and one that can only be read
    that way: two groups or more, or groups and decimals (1.234 alone may be 1.234)."""
    g, d = re.escape(group), re.escape(decimal)
    return (
        re.compile(rf"[+-]?\d{{1,3}}({g}\d{{3}})+({d}\d*)?"),
        re.compile(rf"[+-]?\d{{1,3}}(({g}\d{{3}}){{2,}}({d}\d*)?|{g}\d{{3}}{d}\d*)"),
    )


_GROUPED = {";": _grouped(".", ","), ",": _grouped(",", ".")}


def _local_numbers(cells: list[Cell], separator: str) -> list[Cell]:
    """A column of numbers written the way the file's locale writes them, as plain numbers: in a
    `;`-separated file decimal commas (3,25) and dots between digit groups (1.234,5); in any
    other, commas between digit groups (1,234.5, quoted in a comma-separated file). Dots or
    commas that could also be decimal ones (1.234 or 1,234 alone) count as groups only in a
    column where some number can only be read with groups. Any other column as it is."""
    present = [cell for cell in cells if cell is not None]
    grouped, certain = _GROUPED[";" if separator == ";" else ","]
    commas = separator == ";" and any(_DECIMAL_COMMA.fullmatch(cell) for cell in present)
    if not commas and not any(certain.fullmatch(cell) for cell in present):
        return cells
    group, decimal = (".", ",") if separator == ";" else (",", ".")

    def plain(cell: str) -> str:
        if grouped.fullmatch(cell):
            cell = cell.replace(group, "")
        return cell.replace(decimal, ".")

    converted = [None if cell is None else plain(cell) for cell in cells]
    try:
        for cell in converted:
            if cell is not None:
                float(cell)
    except ValueError:
        return cells  # text that merely contains a comma or a dot somewhere
    return converted


def _named_columns(path: Path, names: list[str], rows: list[list[str]]) -> list[tuple[int, str]]:
    """(index, name) of the columns to read. A column without a name and without a value is
    left out: a separator at the end of every line (some exports write one) makes it."""
    keep: list[int] = []
    for i, name in enumerate(names):
        if not name and not any(_cell(row[i]) for row in rows):
            continue
        if not name:
            raise DataError(f"{path}: header column {i + 1} has no name")
        keep.append(i)
    return list(zip(keep, _check_header(path, [names[i] for i in keep]), strict=True))


def _check_header(path: Path, names: list[str]) -> list[str]:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name:
            raise DataError(f"{path}: header column {i + 1} has no name")
        if name in seen:
            raise DataError(f"{path}: column {name!r} appears twice in the header")
        seen.add(name)
    return names


def _read_parquet(path: Path) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs pyarrow (pip install 'laser-vfl[parquet]')"
        ) from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from exc
    if table.num_columns == 0:
        raise DataError(f"{path}: empty file (no columns)")
    names = _check_header(path, [str(name) for name in table.column_names])
    if table.num_rows == 0:
        raise DataError(f"{path}: no data rows")
    columns = {
        name: [_parquet_cell(v) for v in table.column(i).to_pylist()]
        for i, name in enumerate(names)
    }
    return Table(str(path), columns, [f"row {i}" for i in range(table.num_rows)])


def _parquet_cell(value: object) -> Cell:
    if value is None or (isinstance(value, float) and value != value):  # null or NaN
        return None
    if isinstance(value, float):
        return repr(value)  # round-trips exactly through float()
    return _cell(str(value))
