"""A CSV file's pieces, as they are parsed, handed to the ID watch's thread: the IDs to hash, and
the feature text columns to dictionary-encode.

A text column's dictionary codes (vfl_core.data.columns.dictionary_codes), which the fit and
the transform read, are mostly Arrow's hashing of every cell: about 3 ms a column of 200,000
cells on the party's thread after the parse. The thread that hashes the IDs while the file is
parsed (vfl_core.data.id_hashing) is idle for about a third of the parse: there each piece's
feature text columns are encoded too (Arrow's `dictionary_encode`, one call per column and
piece), and after the read only the pieces' dictionaries are unified. The codes are those of
the whole column encoded at once (the cells' first appearances give the same order).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.data.csv_pieces import ColumnWatch


class PieceCodes:
    """A csv_pieces.PieceWatch: each piece's cells of column `index` to `watch`, and its
    columns `encode` dictionary-encoded on `watch`'s thread (`encoded` gives them)."""

    def __init__(self, index: int, watch: ColumnWatch, encode: Sequence[int]) -> None:
        self._index = index
        self._watch = watch
        self._encode = list(encode)
        # column index -> the pieces' encoded cells, in the file's order (on the watch's thread)
        self._parts: dict[int, list[pa.ChunkedArray]] = {}
        self._failed = False
        self._done: threading.Event | None = None  # set once the thread is done with them

    def restart(self) -> None:
        self._watch.restart()
        self._watch.then(self._clear)  # after the jobs queued before: theirs are not kept

    def __call__(self, piece: pa.Table) -> None:
        self._watch(piece.column(self._index))
        if self._encode:
            self._watch.then(partial(self._encode_piece, piece))

    def take(self, index: int, rows: int) -> pa.ChunkedArray | None:
        """Column `index`'s cells dictionary-encoded a piece at a time (each piece its own
        dictionary), given once: None where it was not encoded, the encoding failed or the
        pieces do not hold `rows` rows (the file read another way). The first call waits
        for the watch's thread to be done with every piece given."""
        if self._done is None:
            self._done = threading.Event()
            self._watch.then(self._done.set)
            self._done.wait()
        parts = self._parts.pop(index, None)
        if self._failed or parts is None:
            return None
        cells = pa.chunked_array([chunk for part in parts for chunk in part.chunks])
        return cells if len(cells) == rows else None

    def _clear(self) -> None:
        self._parts.clear()
        self._failed = False

    def _encode_piece(self, piece: pa.Table) -> None:
        if self._failed:
            return
        try:
            for i in self._encode:
                self._parts.setdefault(i, []).append(pc.dictionary_encode(piece.column(i)))
        except Exception:  # whatever it is, the codes are worked out after the read instead
            self._failed = True
