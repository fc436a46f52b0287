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

from collections.abc import Sequence
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from vfl_core.data.csv_pieces import ColumnWatch


class PieceCodes:
    """A csv_pieces.PieceWatch: each piece's cells of column `index` to `watch`, and its
    columns `encode` dictionary-encoded on `watch`'s thread (`take` gives them)."""

    def __init__(self, index: int, watch: ColumnWatch, encode: Sequence[int]) -> None:
        self._index = index
        self._watch = watch
        self._encode = list(encode)
        # on the watch's thread: column index -> the pieces' encoded cells in the file's
        # order, how many pieces are encoded, and the read they are of (restarts so far)
        self._parts: dict[int, list[pa.ChunkedArray]] = {}
        self._failed = False
        self._encoded = 0
        self._read = 0
        # on the caller's thread: the read (restarts so far) and how many pieces it gave
        self._reads = 0
        self._given = 0

    def restart(self) -> None:
        self._watch.restart()
        self._reads += 1
        self._given = 0
        # after the jobs queued before: theirs are not kept
        self._watch.then(partial(self._clear, self._reads))

    def __call__(self, piece: pa.Table, whole: bool = False) -> None:
        self._watch(piece.column(self._index))
        # a file read whole has no parse left for the encoding to go beside: the caller's
        # thread would encode its columns before the watch's thread is done (twice the work)
        if self._encode and not whole:
            self._given += 1
            # only the columns to encode: a queued job holding the whole piece would keep
            # its number columns' cells from being freed after the read, while that thread
            # is behind (a loaded machine)
            cells = {i: piece.column(i) for i in self._encode}
            self._watch.then(partial(self._encode_piece, cells))

    def take(self, index: int, rows: int) -> pa.ChunkedArray | None:
        """Column `index`'s cells dictionary-encoded a piece at a time (each piece its own
        dictionary), given once: None where it was not encoded, the encoding failed or the
        pieces do not hold `rows` rows (the file read another way), or the watch's thread is
        not yet done with every piece given: the caller then encodes the column itself rather
        than wait for a thread that a loaded machine may be keeping from a core (on two free
        cores it is done before the parse is)."""
        if self._read != self._reads or self._encoded != self._given or self._failed:
            return None
        parts = self._parts.pop(index, None)
        if parts is None:
            return None
        cells = pa.chunked_array([chunk for part in parts for chunk in part.chunks])
        return cells if len(cells) == rows else None

    def _clear(self, read: int) -> None:
        self._parts.clear()
        self._failed = False
        self._encoded = 0
        self._read = read

    def _encode_piece(self, cells: dict[int, pa.ChunkedArray]) -> None:
        try:
            if not self._failed:
                for i, column in cells.items():
                    self._parts.setdefault(i, []).append(pc.dictionary_encode(column))
        except Exception:  # whatever it is, the codes are worked out after the read instead
            self._failed = True
        finally:
            self._encoded += 1
