"""VertiBench's feature splits of a table's columns among the K parties (Wu et al., "VertiBench:
Advancing Feature Distribution Diversity in Vertical Federated Learning Benchmarks", ICLR 2024,
s. 3), through the `vertibench` package (its `Splitter` module, version 0.1.2):

- `importance-A`: ImportanceSplitter with Dirichlet weights alpha = A for every party: a party
  share p ~ Dir(alpha) is drawn and every column goes to party k with probability p_k (one column
  a party first, so that none is empty). Small alpha: one party holds most columns (and most of
  the importance, the features taken as equally important: the package computes no importance
  for the split); large alpha: even shares.
- `correlation-B`: CorrelationSplitter with beta = B: the columns are dealt in equal numbers and
  ordered (BRKGA, pymoo) so that the package's inter-party correlation score (Spearman
  correlations, the mean over parties of the singular-value score of the between-party blocks
  minus that of its own block) is beta of the way from its minimum to its maximum over splits:
  0 keeps correlated columns at one party, 1 spreads them across parties.

The label stays at party 0, which holds whichever columns the split gives it. Differences from
the paper's setting, named: a categorical column enters the splitter as its category codes, an
empty cell as its column's mean; the minimum and maximum score of CorrelationSplitter.fit are
searched with the population of its split step (20 elites, 70 offspring, 10 mutants, 100
generations) rather than its fit's default (200, 700, 100), ten times less CPU on these tables;
each split is drawn once per (table, seed) from the seed and is the same for every row of the
grid.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import numpy as np

from benchmarks.tabular.tables import K, Table

SPLITS: dict[str, tuple[str, float]] = {
    "importance-0.1": ("importance", 0.1),
    "importance-1": ("importance", 1.0),
    "importance-10": ("importance", 10.0),
    "importance-100": ("importance", 100.0),
    "correlation-0": ("correlation", 0.0),
    "correlation-0.5": ("correlation", 0.5),
    "correlation-1": ("correlation", 1.0),
}
# CorrelationSplitter.fit's search, as its split step's defaults (see the module's docstring)
FIT_SEARCH = {"n_elites": 20, "n_offsprings": 70, "n_mutants": 10, "n_gen": 100}


def matrix(table: Table) -> np.ndarray:
    """(n, columns) float64: numbers as they are, a category as its code (sorted names), an empty
    cell as its column's mean."""
    out = np.empty((table.rows, len(table.columns)))
    for j, (name, column) in enumerate(table.columns.items()):
        if name in table.categorical:
            cells = np.array(["" if v is None else str(v) for v in column], dtype=object)
            _, codes = np.unique(cells, return_inverse=True)
            values = codes.astype(np.float64)
        else:
            values = column.astype(np.float64)
        mean = np.nanmean(values) if np.isfinite(values).any() else 0.0
        out[:, j] = np.where(np.isnan(values), mean, values)
    return out


def split_blocks(table: Table, split: str, seed: int) -> tuple[tuple[str, ...], ...]:
    """Each party's columns under `split` (a SPLITS name), drawn from `seed`."""
    from vertibench.Splitter import CorrelationSplitter, ImportanceSplitter

    kind, value = SPLITS[split]
    x = matrix(table)
    names = list(table.columns)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.getLogger("vertibench").setLevel(logging.ERROR)
        if kind == "importance":
            parts = ImportanceSplitter(K, value, seed=seed).split_indices(x)
        else:
            splitter = CorrelationSplitter(K, seed=seed, n_jobs=1)
            splitter.fit(x, seed=seed, **FIT_SEARCH)
            parts = splitter.split_indices(x, beta=value)
    return tuple(tuple(names[j] for j in sorted(int(i) for i in part)) for part in parts)
