"""Arrow's CSV reader over a party's file: in pieces of whole lines, two parsed at once.

Arrow's pool (mimalloc) keeps the blocks a thread took in that thread's heap: only a
`release_unused` called from that thread gives them back. Arrow's own reading threads never
call it, and the peak memory of a 27 MB file's load with them is 15-25 MB more
(benchmarks/results/table_read.md). Read with a `PieceWatch`, the file is read in pieces of
whole lines instead, parsed on two threads of our own: the party's and a second one that lives
as long as the read, each giving its heap's unused blocks back after each piece. Each piece is
handed on, in the file's order, as soon as it is parsed (vfl_core.data.piece_codes: the sample
IDs hashed and the feature text columns dictionary-encoded on a third thread while the next
pieces are parsed: Arrow's parse holds no Python lock). A file whose quoted values may hold
line breaks, or that is UTF-16, is read whole on the party's thread: only there may a line
break fall inside a value or a character.
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import pyarrow as pa
import pyarrow.csv as pa_csv

from vfl_core.errors import DataError

PIECES = 8  # a watched file is read in up to this many pieces ...
MIN_PIECE_BYTES = 1 << 20  # ... of at least this many bytes each
_ARROW_ENCODING = {"utf-8-sig": "utf8"}  # the byte-order mark is in the header line it skips


class WrongEncoding(Exception):
    """The file does not decode in the encoding tried."""


class ColumnWatch(Protocol):
    """Given one column's cells piece by piece, as a file is read."""

    column: str  # the column's name in the header

    def restart(self) -> None:
        """The file is read again from its start: the pieces given so far are not its."""

    def __call__(self, cells: pa.ChunkedArray) -> None:
        """The column's cells in the file's next piece (called on the reading thread)."""

    def then(self, job: Callable[[], None]) -> None:
        """Run `job` on the watch's thread once the cells given so far are worked out."""


class PieceWatch(Protocol):
    """Given each piece of a file's rows, as the file is read."""

    def restart(self) -> None:
        """The file is read again from its start: the pieces given so far are not its."""

    def __call__(self, piece: pa.Table, whole: bool = False) -> None:
        """The file's next piece, columns c0, c1 ... (called on the reading thread); `whole`:
        the file read whole, no piece parsed after it."""


@dataclass(frozen=True)
class CsvLayout:
    """How a CSV file is written: its encoding, separator and fields per row."""

    path: Path
    encoding: str
    separator: str
    width: int


def read_rows(
    layout: CsvLayout,
    numbers: Sequence[int] | set[int] = frozenset(),
    null_values: Sequence[str] = (),
    watch: PieceWatch | None = None,
) -> tuple[pa.Table, bool]:
    """The data rows as text columns c0, c1 ... (`null_values` as nulls), the columns
    `numbers` as float64 (if a cell of one is not a number, the file is read again, all as
    text); and whether a row of another width than the header's was skipped. `watch`: given
    the rows piece by piece (the whole file at once where it may hold quoted line breaks)."""
    invalid: list[int] = []

    def on_invalid(row: pa_csv.InvalidRow) -> str:
        if row.text.strip():  # a line of spaces (an editor's last line) is a blank line
            invalid.append(row.actual_columns)
        return "skip"

    names = [f"c{i}" for i in range(layout.width)]
    quotes = _has_quotes(layout.path, layout.encoding)
    options = {
        # a file without a quote is parsed without looking for one (about 5 % faster)
        "parse_options": pa_csv.ParseOptions(
            delimiter=layout.separator,
            quote_char='"' if quotes else False,
            newlines_in_values=quotes,
            invalid_row_handler=on_invalid,
        ),
        "convert_options": pa_csv.ConvertOptions(
            column_types={
                n: pa.float64() if i in numbers else pa.string() for i, n in enumerate(names)
            },
            null_values=list(null_values),
            strings_can_be_null=True,
        ),
    }

    def read(source: Path | pa.NativeFile, skip_rows: int) -> pa.Table:
        encoding = _ARROW_ENCODING.get(layout.encoding, layout.encoding)
        # use_threads=False: on this thread (see the module's doc)
        read_options = pa_csv.ReadOptions(
            column_names=names, skip_rows=skip_rows, encoding=encoding, use_threads=False
        )
        table = pa_csv.read_csv(source, read_options=read_options, **options)
        pa.default_memory_pool().release_unused()  # this thread's heap (see the module's doc)
        return table

    try:
        if watch is None:
            data = read(layout.path, 1)
        elif quotes:
            watch.restart()
            data = read(layout.path, 1)
            watch(data, whole=True)
        else:
            data = _read_in_pieces(layout.path, read, watch)
    except UnicodeDecodeError:
        raise WrongEncoding from None
    except (OSError, pa.ArrowInvalid) as exc:
        if "UTF8" in str(exc):
            raise WrongEncoding from None
        if numbers and "conversion error" in str(exc):  # a later cell is not a number
            return read_rows(layout, null_values=null_values, watch=watch)
        if watch is not None and not quotes:  # Arrow's message counts rows from the file's start
            return read_rows(layout, numbers, null_values)
        raise DataError(f"{layout.path}: unreadable CSV ({str(exc).splitlines()[0]})") from exc
    return data, bool(invalid)


def _read_in_pieces(
    path: Path,
    read: Callable[[pa.NativeFile, int], pa.Table],
    watch: PieceWatch,
) -> pa.Table:
    """The file read a piece of whole lines at a time (`read(piece, rows to skip)`), two pieces
    at once (this thread the first of each pair, a second thread the other), each piece handed
    to the watch, in the file's order, once it is read."""
    watch.restart()
    with path.open("rb") as f:
        bounds = _bounds(f, path.stat().st_size)

    def parse(k: int) -> pa.Table:
        with pa.OSFile(str(path)) as f:  # a handle per piece: each thread reads its own
            text = _piece(f, *bounds[k])
        return read(pa.BufferReader(text), 1 if k == 0 else 0)

    pieces: list[pa.Table] = []
    # the second thread ends with the read: what its heap still holds is then the party
    # thread's to give back (mimalloc hands an ended thread's heap on)
    with ThreadPoolExecutor(1, thread_name_prefix="vfl-csv-piece") as second:
        for k in range(0, len(bounds), 2):
            other = second.submit(parse, k + 1) if k + 1 < len(bounds) else None
            pieces.append(parse(k))
            watch(pieces[-1])
            if other is not None:
                pieces.append(other.result())
                watch(pieces[-1])
    return pa.concat_tables(pieces)


def _piece(f: pa.NativeFile, start: int, stop: int) -> pa.Buffer:
    """Bytes start .. stop - 1 of the file, in Arrow's pool: not a Python bytes object, whose
    few MB freed through malloc would raise malloc's threshold for mapping memory of its own
    (numpy's zeroed blocks of the transform would then be taken, and written, whole at once)."""
    f.seek(start)
    return f.read_buffer(stop - start)


def _bounds(f: BinaryIO, size: int) -> list[tuple[int, int]]:
    """(start, stop) byte offsets of the file's pieces, each a run of whole lines."""
    count = max(1, min(PIECES, size // MIN_PIECE_BYTES))
    cuts = [0]
    for k in range(1, count):
        f.seek(size * k // count)
        f.readline()  # on to the end of the line the cut falls in
        cuts.append(f.tell())
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def _has_quotes(path: Path, encoding: str) -> bool:
    """Whether the file may hold a quoted value (and so a line break inside one): Arrow parses
    faster knowing it holds none."""
    if encoding == "utf-16":
        return True
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(b'"') >= 0
    except (OSError, ValueError):  # an empty file cannot be mapped
        return True
