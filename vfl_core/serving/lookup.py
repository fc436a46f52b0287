"""A serving party's features from a function the user plugs in, in place of a table file:
`vfl-client --serve-bundle DIR --lookup module:function`.

The function is given the keyed IDs of a request (a list of 32-byte HMAC-SHA256 digests of each
ID under the federation secret, as vfl_core.training.alignment.hash_ids computes them: no raw ID
crosses a link, so a party's store indexes its rows by these keys) and returns one entry per
key: None where the party does not hold it, else the row as {column: cell}, cells as the
training table held them (numbers or text). Rows are transformed by the bundle's fitted
preprocessing, as a table's are. It may be called from several threads at once.

It is imported and called once with no keys when the party starts, so that a module that does
not import, a name that is not a callable or one that does not return a list is an error at
start, naming it. A later answer of the wrong shape (not one entry per key), an entry that is
not a row, an unknown column, a cell that does not read or a row that transforms to NaN is a
ConfigError naming the function and the entry: the request that met it gets no features from
this party (a refusal the gateway names), and nothing else is affected.
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from vfl_core.data.columns import Table
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.errors import ConfigError, VflError

log = logging.getLogger(__name__)

LookupFunction = Callable[[list[bytes]], Sequence[Mapping[str, Any] | None]]


def import_lookup(spec: str) -> LookupFunction:
    """`module:function` (or `module:object.attribute`) imported; ConfigError naming what fails."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"--lookup {spec!r}: give module:function (e.g. my_store:rows)")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as err:  # the user's module: any error while importing it
        raise ConfigError(
            f"--lookup {spec}: cannot import {module_name!r} ({type(err).__name__}: {err}); "
            "it is imported from PYTHONPATH or the installed packages"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"--lookup {spec}: {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"--lookup {spec}: {attribute!r} is not callable")
    return target


class LookupFeatures:
    """A party's serving rows from a lookup function: `lookup(keys)` as FeatureTable's."""

    def __init__(
        self, function: LookupFunction, preprocessing: TabularPreprocessor, name: str
    ) -> None:
        self.function = function
        self.preprocessing = preprocessing
        self.name = name  # the --lookup spec, for messages
        self.columns = [c.name for c in preprocessing.columns]
        self.lookup([])  # called once at start: a function that cannot answer fails here

    def lookup(self, keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """((n,) bool held, (held, width) float32 features of the held keys, in order)."""
        rows = self._call(list(keys))
        held = np.array([r is not None for r in rows], dtype=bool)
        present = [(i, r) for i, r in enumerate(rows) if r is not None]
        if not present:
            return held, np.zeros((0, self.preprocessing.width), dtype=np.float32)
        return held, self._transform(present)

    def _call(self, keys: list[bytes]) -> list[Mapping[str, Any] | None]:
        try:
            rows = self.function(keys)
        except Exception as err:  # the user's function: whatever it raised, named
            raise ConfigError(f"--lookup {self.name} raised {type(err).__name__}: {err}") from None
        if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
            raise ConfigError(
                f"--lookup {self.name} returned {type(rows).__name__}; give a list with one "
                "entry per key (a row {column: cell} or None)"
            )
        if len(rows) != len(keys):
            raise ConfigError(
                f"--lookup {self.name} returned {len(rows)} entries for {len(keys)} keys; give "
                "one per key (None where the party does not hold it)"
            )
        for i, row in enumerate(rows):
            if row is not None and not isinstance(row, Mapping):
                raise ConfigError(
                    f"--lookup {self.name}: entry {i} is {type(row).__name__}; give a row "
                    "{column: cell} or None"
                )
        return list(rows)

    def _transform(self, present: list[tuple[int, Mapping[str, Any]]]) -> np.ndarray:
        """The rows' (m, width) features through the bundle's preprocessing, checked."""
        cells: dict[str, list[str | None]] = {c: [] for c in self.columns}
        for i, row in present:
            unknown = sorted(set(row) - set(cells))
            if unknown:
                raise ConfigError(
                    f"--lookup {self.name}: entry {i} has unknown columns {unknown[:5]} "
                    f"(the bundle's: {self.columns})"
                )
            for column, values in cells.items():
                values.append(_cell(self.name, i, column, row.get(column)))
        source = f"--lookup {self.name}"
        try:
            x = self.preprocessing.transform(
                Table(source, cells, [f"entry {i}" for i, _ in present])
            )
        except VflError as err:
            raise ConfigError(str(err)) from None
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
        if len(bad):
            raise ConfigError(
                f"--lookup {self.name}: entry {present[int(bad[0])][0]} gives a feature that is "
                "not a finite number (NaN or infinite)"
            )
        return x


def _cell(name: str, entry: int, column: str, value: object) -> str | None:
    """A cell as the table's text; None or "" is the table's missing cell."""
    if value is None or value == "":
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            f"--lookup {name}: entry {entry}, column {column!r} is {value}; give a finite "
            "number, or None for a missing cell"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float, str, np.number)):
        raise ConfigError(
            f"--lookup {name}: entry {entry}, column {column!r} is {type(value).__name__}; "
            "give a number or text"
        )
    return str(value)
