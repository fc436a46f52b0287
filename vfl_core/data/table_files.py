"""Reading a party's table through Arrow: a CSV file (pyarrow.csv) or a Parquet file.

A CSV file's cells are read as text, None where missing (an empty cell, NA, N/A, NaN, null,
#N/A, <NA> or ?, the UCI repository's mark, whatever the spaces around them), and the
preprocessing decides each column's kind (vfl_core.data.preprocess). A Parquet file's columns
keep their types: numbers stay numbers (NaN is missing), dates and times stay dates, text stays
text (categories), booleans become the categories "False" and "True". Rows are named for error
messages as the user finds them: "line N" of a CSV file, "row N" of a Parquet file.

CSV files come as spreadsheets write them: the separator is whichever of `,` `;` tab `|` splits
the header and the first lines into the same number of fields (a `.tsv` file the same way), and
a column whose every value is a number written as the file's locale writes them is read as
those numbers: in a `;`-separated file (a European spreadsheet's export) decimal commas and dots
between digit groups (`3,25`, `1.234,5`), in any other commas between digit groups (`"1,234.5"`);
a lone `1.234` or `1,234`, which could be either, counts as grouped only in a column where some
other number can only be read that way. A file that is not UTF-8 is read as Windows-1252 (what
spreadsheets on Windows write; Latin-1 if even that fails), with a warning; one that starts with
a UTF-16 byte-order mark as UTF-16. A column with neither a name nor a value (a separator ending
every line) is left out.
"""

from __future__ import annotations

import codecs
import csv
import functools
import itertools
import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.data.columns import Table, dictionary_codes, numbers_array
from vfl_core.data.csv_pieces import ColumnWatch, CsvLayout, WrongEncoding, read_rows
from vfl_core.data.local_numbers import floats, local_numbers
from vfl_core.data.piece_codes import PieceCodes
from vfl_core.errors import DataError

log = logging.getLogger(__name__)

TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")
# compared case-insensitively, once the spaces around a cell are stripped
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "#n/a", "<na>", "?"})
# every spelling of the marks in upper and lower case: a set lookup is faster than a regex
_MISSING_SPELLINGS = sorted(
    {"".join(s) for m in MISSING_MARKERS for s in itertools.product(*({c, c.upper()} for c in m))}
)


@functools.cache
def _missing() -> pa.Array:
    """The spellings as an Arrow array, made on first use: `pa.array` asks pyarrow's pandas
    shim whether its argument is a pandas object, which imports pandas where it is installed
    (half a second of every coordinator's and client's start, tests/test_process_imports.py)."""
    return pa.array(_MISSING_SPELLINGS, pa.string())


# a number as a CSV file's first lines may write it, that Arrow reads as one (others are read
# as text and parsed by vfl_core.data.local_numbers)
_PLAIN_NUMBER = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
SEPARATORS = (",", ";", "\t", "|")  # tried in this order; the first that fits wins
_SNIFF_LINES = 50
_SNIFF_BYTES = 1 << 16
_FALLBACKS = {"cp1252": "Windows-1252", "latin-1": "Latin-1"}


def is_table_file(path: Path) -> bool:
    return Path(path).suffix.lower() in TABLE_SUFFIXES


def read_table(
    path: Path,
    hold_numbers: Callable[[str], bool] | None = None,
    watch: ColumnWatch | None = None,
) -> Table:
    """Every column of a CSV file (text) or a Parquet file (typed), None where a cell is missing.
    A CSV column for which `hold_numbers(name)` is true and whose every present cell is a finite
    number is held as those numbers instead (Table.hold_numbers), its text freed as soon as it
    is parsed. `watch`: given the cells of its column of a CSV file as the file is read
    (vfl_core.data.csv_pieces), before they are cleaned; a Parquet file gives it none."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return _read_csv(path, hold_numbers or _never, watch)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path)
    hint = (
        " (a text export with separators reads as .csv or .tsv: rename it)"
        if suffix == ".txt"
        else ""
    )
    raise DataError(f"{path}: unknown table format (expected {', '.join(TABLE_SUFFIXES)}){hint}")


def column_names(path: Path) -> list[str]:
    """A table file's column names, from its header (or Parquet schema) alone: what a caller
    that only looks for a column needs, without reading the rows."""
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq") and path.is_file():
        import pyarrow.parquet as pq

        try:
            return [str(name) for name in pq.read_schema(path).names]
        except (OSError, pa.ArrowException):
            pass  # read_table says what is wrong with the file
    elif path.suffix.lower() in (".csv", ".tsv") and path.is_file():
        first = _encoding(path)
        for encoding in [first] if first == "utf-16" else [first, *_FALLBACKS]:
            try:
                lines = _first_lines(path, encoding)
            except WrongEncoding:
                continue
            header = next(csv.reader(lines, delimiter=_separator(lines)), None) if lines else None
            return [n.strip() for n in header or []]
    return read_table(path).names  # its errors name what is wrong


# ---------------------------------------------------------------- CSV


def _never(name: str) -> bool:
    return False


def _read_csv(path: Path, hold_numbers: Callable[[str], bool], watch: ColumnWatch | None) -> Table:
    first = _encoding(path)
    for encoding in [first] if first == "utf-16" else [first, *_FALLBACKS]:
        try:
            table = _read_csv_as(path, encoding, hold_numbers, watch)
        except WrongEncoding:
            continue
        if encoding in _FALLBACKS:
            log.warning(
                "%s is not UTF-8: read as %s (save it as UTF-8 to be sure of its accented "
                "letters; every party must write its IDs alike)",
                path,
                _FALLBACKS[encoding],
            )
        return table
    raise AssertionError("Latin-1 reads any byte")  # pragma: no cover


def _refuse_separator_hint(path: Path, lines: list[str]) -> None:
    """A spreadsheet's "sep=;" first line is not a header: said, where its cells would
    otherwise be named a row of the wrong width."""
    if lines and re.fullmatch(r"sep=.", lines[0].strip(), flags=re.IGNORECASE):
        raise DataError(
            f"{path}: line 1 is a spreadsheet's separator hint ({lines[0].strip()!r}), not a "
            "header: delete that line (the separator is found without it)"
        )


def _encoding(path: Path) -> str:
    """UTF-16 where the file starts with its byte-order mark (spreadsheets' "Unicode text"),
    else UTF-8 with or without one."""
    try:
        with path.open("rb") as f:
            start = f.read(2)
    except OSError as exc:
        raise DataError(f"{path}: unreadable CSV ({exc})") from exc
    return "utf-16" if start in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"


def _read_csv_as(
    path: Path,
    encoding: str,
    hold_numbers: Callable[[str], bool],
    watch: ColumnWatch | None,
    typed_ok: bool = True,
) -> Table:
    """`typed_ok` False: every column read as text (one read as numbers held "inf")."""
    lines = _first_lines(path, encoding)
    _refuse_separator_hint(path, lines)
    separator = _separator(lines)
    header = next(csv.reader(lines, delimiter=separator), None)
    if header is None:
        raise DataError(f"{path}: empty file (no header line)")
    names = [n.strip() for n in header]
    typed = _number_columns(lines, separator, names, hold_numbers) if typed_ok else set()
    layout = CsvLayout(path, encoding, separator, len(header))
    pieces = _piece_codes(names, typed, hold_numbers, watch)
    data = _rows(layout, typed, pieces)
    if data.num_rows == 0:
        raise DataError(f"{path}: no data rows after the header")
    named = _named_columns(path, names, data)
    raw = data.columns
    del data  # a column's text is freed once it is held as numbers
    columns: dict[str, pa.ChunkedArray | pa.Array] = {}
    # name -> its values ((n,) float64, NaN where missing) or None (not numbers): each column
    # is parsed once here, not again for the fit and each transform
    numbers: dict[str, np.ndarray | None] = {}
    codes: dict[str, tuple[np.ndarray, pa.Array]] = {}  # feature text columns' (Table.codes)
    for i, name in named:
        column, raw[i] = raw[i], None
        numbers[name] = floats(column)
        if i in typed and _infinite(column, numbers[name]):
            # "inf" is text to the fit, which names it as a stray cell: the file read again
            # with every column as text (looked for here, in the values at hand, not in a
            # pass of Arrow's over each number column before)
            del raw, columns, numbers, codes, column, pieces  # freed before the read
            return _read_csv_as(path, encoding, hold_numbers, watch, typed_ok=False)
        if numbers[name] is None:  # most number columns need no cleaning
            feature = hold_numbers(name)
            encoded = pieces.take(i, len(column)) if pieces is not None and feature else None
            column, numbers[name], found = _text_column(column, separator, feature, encoded)
            if found is not None:
                codes[name] = found
        held = numbers_array(numbers[name]) if hold_numbers(name) else None
        columns[name] = column if held is None else held
        # Arrow's pool keeps freed blocks for later reads: the reader's, and a number
        # column's chunks once its values are one array; nothing else of a party's would
        # reuse them, so they go back to the system as they are freed
        del column
        pa.default_memory_pool().release_unused()
    lines = _CsvLines(path, encoding, separator, len(header))
    return Table(str(path), pa.table(columns), lines, numbers=numbers, codes=codes)


def _text_column(
    column: pa.ChunkedArray,
    separator: str,
    feature: bool,
    encoded: pa.ChunkedArray | None = None,
) -> tuple[pa.ChunkedArray, np.ndarray | None, tuple[np.ndarray, pa.Array] | None]:
    """A text column as the preprocessing reads it (local_numbers of its cells without the
    spaces around them, spaced missing marks as nulls), its values where those are numbers, and
    a feature column's dictionary codes (Table.codes) where it stays as read: a feature column's
    cells to clean are looked for among its distinct cells (the codes the fit needs anyway),
    not among all of them. `encoded`: its cells dictionary-encoded as the file was read."""
    if feature:
        codes = dictionary_codes(column, encoded)
        if not _may_be_spaced(codes[1]):
            plain, values = local_numbers(column, separator)
            return plain, values, codes if plain is column else None
    plain, values = local_numbers(_spaced_missing_as_null(column), separator)
    return plain, values, None


def _piece_codes(
    names: list[str],
    typed: set[int],
    hold_numbers: Callable[[str], bool],
    watch: ColumnWatch | None,
) -> PieceCodes | None:
    """What is given the file's pieces as they are read: their IDs to `watch`, and the
    feature columns read as text dictionary-encoded on its thread (their codes are made for
    every such column: Table.codes)."""
    if watch is None or watch.column not in names:
        return None
    text = [i for i, n in enumerate(names) if n and i not in typed and hold_numbers(n)]
    return PieceCodes(names.index(watch.column), watch, text)


def _first_lines(path: Path, encoding: str) -> list[str]:
    """Up to _SNIFF_LINES lines from the file's start; WrongEncoding if they do not decode.
    A UTF-8 byte-order mark is left out in a fallback encoding too (a file saved as UTF-8
    whose body is not): its bytes would be the first column's name's first letters ("ï»¿id")."""
    try:
        with path.open("rb") as f:
            block = f.read(_SNIFF_BYTES)
            final = not f.read(1)
        if encoding in _FALLBACKS and block.startswith(codecs.BOM_UTF8):
            block = block[len(codecs.BOM_UTF8) :]
        text = codecs.getincrementaldecoder(encoding)().decode(block, final=final)
    except UnicodeDecodeError:
        raise WrongEncoding from None
    except OSError as exc:
        raise DataError(f"{path}: unreadable CSV ({exc})") from exc
    lines = text.splitlines(keepends=True)
    if not final and len(lines) > 1:
        lines = lines[:-1]  # the block may end inside the last line
    return lines[:_SNIFF_LINES]


def _number_columns(
    lines: list[str], separator: str, names: list[str], hold_numbers: Callable[[str], bool]
) -> set[int]:
    """The columns to hold as numbers whose first cells are plain numbers or missing (one a
    number at least): Arrow's reader parses them as it reads (on every core), and their text is
    never made. A later cell that is not a number has them read again as text."""
    rows = list(csv.reader(lines[1:], delimiter=separator))
    if len(lines) == _SNIFF_LINES:
        rows = rows[:-1]  # the sample may end inside a quoted field of its last record
    rows = [row for row in rows if len(row) == len(names)]
    out: set[int] = set()
    for i, name in enumerate(names):
        if not rows or not name or not hold_numbers(name):
            continue
        cells = [row[i] for row in rows]
        missing = [c.lower() in MISSING_MARKERS for c in cells]
        if not all(missing) and all(
            m or _PLAIN_NUMBER.fullmatch(c) for c, m in zip(cells, missing, strict=True)
        ):
            out.add(i)
    return out


def _infinite(column: pa.ChunkedArray, values: np.ndarray | None) -> bool:
    """Whether a column read as numbers (not text: the reader falls back to text where a cell
    is not a number) holds an infinite one."""
    return pa.types.is_floating(column.type) and values is not None and bool(np.isinf(values).any())


def _rows(layout: CsvLayout, numbers: set[int], watch: PieceCodes | None) -> pa.Table:
    """read_rows of the file (the missing marks without spaces around them as nulls); a row of
    another width than the header's is an error naming its line."""
    data, invalid = read_rows(layout, numbers, _MISSING_SPELLINGS, watch)
    if invalid:
        _raise_width_error(layout.path, layout.encoding, layout.separator, layout.width)
    return data


def _raise_width_error(path: Path, encoding: str, separator: str, width: int) -> None:
    """The first row whose field count is not the header's, named by its line (Arrow's reader
    does not know line numbers: the file is read again with the csv module to find it)."""
    with path.open(newline="", encoding=encoding) as f:
        reader = csv.reader(f, delimiter=separator)
        next(reader, None)
        for row in reader:
            if _is_row(row, width) and len(row) != width:
                raise DataError(
                    f"{path}: line {reader.line_num} has {len(row)} fields, the header has "
                    f"{width} (fields separated by {_named(separator)})"
                )
    raise DataError(f"{path}: a row has another number of fields than the header's {width}")


class _CsvLines:
    """Names CSV data rows by their line in the file (blank lines and quoted line breaks
    counted), read once when a message first needs one."""

    def __init__(self, path: Path, encoding: str, separator: str, width: int) -> None:
        self._args = (path, encoding, separator)
        self._width = width
        self._lines: list[int] | None = None

    def __call__(self, row: int) -> str:
        if self._lines is None:
            path, encoding, separator = self._args
            with path.open(newline="", encoding=encoding) as f:
                reader = csv.reader(f, delimiter=separator)
                next(reader, None)
                self._lines = [reader.line_num for row in reader if _is_row(row, self._width)]
        return f"line {self._lines[row]}"


def _is_row(fields: list[str], width: int) -> bool:
    """Whether a line the csv module read is a data row: not blank, nor (in a file of more than
    one column) only spaces, which Arrow's reader skips as blank."""
    return bool(fields) and (width == 1 or len(fields) > 1 or bool(fields[0].strip()))


def _missing_as_null(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Cells without the spaces around them; a missing mark (any case) as null."""
    stripped = pc.utf8_trim_whitespace(column)
    missing = pc.is_in(stripped, value_set=_missing())
    return pc.if_else(missing, pa.scalar(None, pa.string()), stripped)


def _spaced_missing_as_null(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """`_missing_as_null` of a column Arrow read, where the marks without spaces around them
    are nulls already: the column as it is unless a cell starts or ends with a space (or a
    byte that may begin or end one: a control or non-ASCII byte), most columns."""
    return _missing_as_null(column) if any(map(_may_be_spaced, column.chunks)) else column


def _may_be_spaced(chunk: pa.Array) -> bool:
    """Whether a cell of a text chunk starts or ends with a byte <= 0x20 or >= 0x7f, read from
    its buffers by numpy (no pass of Arrow's over the cells)."""
    if chunk.type != pa.string():
        return True  # not the CSV reader's text: the full pass
    bounds = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset :][: len(chunk) + 1]
    starts, ends = bounds[:-1], bounds[1:]
    filled = ends > starts  # empty cells (and nulls) have no bytes to look at
    if not filled.any():
        return False
    data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)
    edges = np.concatenate([data[starts[filled]], data[ends[filled] - 1]])
    return bool(((edges <= 0x20) | (edges >= 0x7F)).any())


def _separator(lines: list[str]) -> str:
    """The separator that splits the first lines into the same number (> 1) of fields; a comma
    if none does (the file's own error then names the line)."""
    for separator in SEPARATORS:
        try:
            rows = [row for row in csv.reader(lines, delimiter=separator) if _is_row(row, 2)]
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


def _named_columns(path: Path, names: list[str], data: pa.Table) -> list[tuple[int, str]]:
    """(index, name) of the columns to read. A column without a name and without a value is
    left out: a separator at the end of every line (some exports write one) makes it."""
    keep: list[int] = []
    for i, name in enumerate(names):
        if not name and not _has_value(data.column(i)):
            continue
        if not name:
            raise DataError(f"{path}: header column {i + 1} has no name")
        keep.append(i)
    return list(zip(keep, _check_header(path, [names[i] for i in keep]), strict=True))


def _has_value(column: pa.ChunkedArray) -> bool:
    return _missing_as_null(column).null_count < len(column)


def _check_header(path: Path, names: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for i, name in enumerate(names):
        if not name:
            raise DataError(f"{path}: header column {i + 1} has no name")
        if name in seen:
            raise DataError(f"{path}: column {name!r} appears twice in the header")
        seen.append(name)
    return seen


# ---------------------------------------------------------------- Parquet


def _read_parquet(path: Path) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs pyarrow (pip install 'laser-vfl[parquet]')"
        ) from None
    try:
        parquet = pq.ParquetFile(path)
        names = [str(name) for name in parquet.schema_arrow.names]
        if not names:
            raise DataError(f"{path}: empty file (no columns)")
        names = _check_header(path, names)  # read by name: each name once
        if parquet.metadata.num_rows == 0:
            raise DataError(f"{path}: no data rows")
        columns: dict[str, pa.ChunkedArray] = {}
        for name in names:
            # a column at a time, each typed and its read's blocks handed back before the next
            # is read: a whole-file read holds every column's pages and decoded values at once
            # (three times the table)
            read = parquet.read(columns=[name], use_threads=False).column(0)
            columns[name] = _typed(path, name, read)
            del read
            pa.default_memory_pool().release_unused()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from exc
    return Table(str(path), pa.table(columns), _parquet_row, guess=False)


def _parquet_row(row: int) -> str:
    return f"row {row}"


def _typed(path: Path, name: str, column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A Parquet column as the preprocessing takes it: integers as they are, other numbers as
    float64 (NaN missing), dates and times as they are, text (a dictionary's too) with missing
    marks as nulls, booleans as the text "False" / "True"."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_boolean(kind):
        return pc.if_else(column, "True", "False")
    if pa.types.is_integer(kind):
        return column  # as written ("12345" as an ID, not "12345.0")
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        values = column.cast(pa.float64())
        return pc.if_else(pc.is_nan(values), pa.scalar(None, pa.float64()), values)
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        return column
    if pa.types.is_null(kind):  # every cell missing (the fit says so, naming the column)
        return column.cast(pa.string())
    if pa.types.is_large_string(kind) or pa.types.is_string(kind):
        return _missing_as_null(column.cast(pa.string()))
    raise DataError(f"{path}: column {name!r} has Parquet type {kind}, not numbers, dates or text")
