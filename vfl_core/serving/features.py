"""The features a serving party holds now: its CSV/Parquet table keyed by sample ID, transformed
by the bundle's fitted preprocessing and indexed by the keyed hash of each ID (HMAC-SHA256 under
the federation secret, vfl_core.training.alignment.hash_ids), so that a request names IDs
without any raw ID crossing a link.

The file is read again when its modification time or size changes (rows appended after
training are served): `refresh()` checks, a `Watcher` thread calls it every `every_s` seconds,
and a lookup reads whichever version was loaded last (swapped whole, never half-read). A file
that no longer reads (a malformed row, a missing column) keeps the previous version served and
says why in the log and in `problem`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from vfl_core.data.columns import Table
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.sample_ids import id_array, normalised_ids
from vfl_core.data.table_files import read_table
from vfl_core.errors import DataError, VflError
from vfl_core.training.alignment import hash_ids

log = logging.getLogger(__name__)

WATCH_EVERY_S = 0.5
# A CSV whose last line stays without a newline this long is read as it is (vfl_core.serving).
INCOMPLETE_GRACE_S = 5.0


class FeatureSource(Protocol):
    """Where a serving party's rows come from: its table (FeatureTable) or a lookup function
    (vfl_core.serving.lookup.LookupFeatures)."""

    def lookup(self, keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """((n,) bool held, (held, width) float32 features of the held keys, in order)."""
        ...


@dataclass(frozen=True)
class _Version:
    stamp: tuple[int, int]  # (mtime_ns, size) of the file read
    index: dict[bytes, int]  # keyed ID hash -> row
    features: np.ndarray  # (n, width) float32


class FeatureTable:
    """A party's serving rows: `lookup(keys)` answers which it holds and their features."""

    def __init__(
        self,
        path: Path,
        id_column: str,
        preprocessing: TabularPreprocessor,
        secret: bytes,
        *,
        label_party: bool = False,
    ) -> None:
        self.path = path
        # a label party's row with every feature cell empty holds the sample's label only: in
        # training it is no observed block (vfl_core.data.tabular), so it is not served either
        self.label_party = label_party
        self.id_column = id_column
        self.preprocessing = preprocessing
        self._secret = secret
        numeric = {c.name for c in preprocessing.columns if c.kind == "numeric" and not c.dates}
        self._holds = lambda name: name in numeric and name != id_column
        self.problem: str | None = None  # why the newest version of the file is not served
        self._cut: tuple[tuple[int, int], float] | None = None  # a cut last line: when first seen
        self._version = self._read(self._stamp())  # a file that does not read at start: error

    def __len__(self) -> int:
        return len(self._version.features)

    def lookup(self, keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """((n,) bool held, (held, width) float32 features of the held keys, in order)."""
        version = self._version
        rows = [version.index.get(k, -1) for k in keys]
        held = np.array([r >= 0 for r in rows], dtype=bool)
        return held, version.features[[r for r in rows if r >= 0]]

    def refresh(self) -> bool:
        """Read the file again if it changed; True if a new version is served."""
        try:
            stamp = self._stamp()
        except DataError as err:
            self._keep(str(err))
            return False
        if stamp == self._version.stamp or not self._whole_lines(stamp):
            return False
        try:
            self._version = self._read(stamp)
        except VflError as err:
            self._keep(str(err))
            return False
        self.problem = None
        log.info("serving %d rows of %s (the file changed)", len(self), self.path)
        return True

    def _whole_lines(self, stamp: tuple[int, int]) -> bool:
        """Whether the version `stamp` of a CSV file ends with a whole line: a newline at its
        end, or the same cut line for INCOMPLETE_GRACE_S (then served, and said)."""
        if self.path.suffix.lower() not in (".csv", ".tsv") or stamp[1] == 0:
            return True
        try:
            with self.path.open("rb") as f:
                f.seek(-min(2, stamp[1]), os.SEEK_END)
                tail = f.read()  # two bytes: a UTF-16 newline is one of them
        except OSError:
            return True  # _read says what is wrong
        if b"\n" in tail or b"\r" in tail:
            self._cut = None
            return True
        now = time.monotonic()
        if self._cut is None or self._cut[0] != stamp:
            self._cut = (stamp, now)
            log.info("%s: its last line has no newline yet: waiting for the rest", self.path)
            return False
        if now - self._cut[1] < INCOMPLETE_GRACE_S:
            return False
        log.warning(
            "%s: its last line has had no newline for %.0fs (saved without one, or its writer "
            "stopped mid-row): served as it is",
            self.path,
            now - self._cut[1],
        )
        return True

    def _keep(self, why: str) -> None:
        if why != self.problem:
            log.error("%s; still serving the %d rows read before", why, len(self))
        self.problem = why

    def _stamp(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except OSError as err:
            raise DataError(f"{self.path}: unreadable ({err.strerror})") from None
        return st.st_mtime_ns, st.st_size

    def _read(self, stamp: tuple[int, int]) -> _Version:
        table = read_table(self.path, self._holds)
        if self.id_column not in table.names:
            raise DataError(
                f"{self.path}: no ID column {self.id_column!r} (columns: {', '.join(table.names)})"
            )
        table = normalised_ids(table, self.id_column)
        ids = id_array(table.column(self.id_column))
        features = self.preprocessing.transform(table)  # (n, width)
        keys = hash_ids(ids.tolist(), self._secret)
        columns = [c.name for c in self.preprocessing.columns]
        if self.label_party and columns:
            empty = np.logical_and.reduce([table.missing(c) for c in columns])  # (n,)
            keys = [k for k, e in zip(keys, empty.tolist(), strict=True) if not e]
            features = features[~empty]
        index = {h: i for i, h in enumerate(keys)}
        return _Version(stamp, index, features)


def inline_features(
    preprocessing: TabularPreprocessor, cells: Mapping[str, object], source: str = "request"
) -> np.ndarray:
    """(1, width) features of one row given inline as column -> cell (numbers or text, as the
    table would hold them; None or "" an empty cell). An unknown or missing column, a NaN or
    infinite number, or a cell that does not read is a DataError naming the column."""
    known = [c.name for c in preprocessing.columns]
    unknown = sorted(set(cells) - set(known))
    if unknown:
        raise DataError(f"{source}: unknown feature columns {unknown} (known: {sorted(known)})")
    absent = [name for name in known if name not in cells]
    if absent:
        raise DataError(
            f"{source}: columns {absent} are missing (give every column of the party's table; "
            'null or "" for an empty cell)'
        )
    for name, cell in cells.items():  # NaN and infinities as numbers or as text, alike
        if not _finite(cell):
            raise DataError(f"{source}, column {name!r}: {cell!r} is not a finite number")
    text = {
        c.name: ["" if cells.get(c.name) is None else str(cells[c.name])]
        for c in preprocessing.columns
    }
    return preprocessing.transform(Table(source, text, [source]))  # (1, width)


def _finite(cell: object) -> bool:
    """False for a NaN or infinite number, or text that reads as one ("nan", "-Infinity")."""
    if isinstance(cell, float):
        return math.isfinite(cell)
    if isinstance(cell, str):
        try:
            return math.isfinite(float(cell))
        except ValueError:
            return True  # not a number at all: the preprocessing says what it makes of it
    return True


class Watcher:
    """One thread that refreshes a FeatureTable every `every_s` seconds until stopped."""

    def __init__(self, table: FeatureTable, every_s: float = WATCH_EVERY_S) -> None:
        self.table = table
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vfl-features", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.table.refresh()
