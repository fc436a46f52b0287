"""How often the warning for numbers that look like codes (vfl_core.data.code_columns) fires,
on every table of the tabular benchmark, scikit-learn's bundled tables and the census-like
table (false alarms: none is a code), and on a table with zip codes and product IDs written as
numbers (the QA `intcat` construction: the warning should name the zip codes).

Each table is cut into its benchmark parties and every party read as `vfl simulate --data`
reads it (its warnings are those of its training rows); each numeric column is also judged on
all its rows, and the first test of the rule it fails is counted.

    python -m benchmarks.code_columns --data-path ../shared/data --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import census_like
from benchmarks.tabular_tables import Table, tables, write_parties
from vfl_core.data.code_columns import why_not_codes
from vfl_core.data.learning_task import CLASSIFICATION
from vfl_core.data.table_files import read_table
from vfl_core.data.tabular import TableSource, load_table_party


def _bundled(name: str) -> Callable[[int, bool], Table]:
    """scikit-learn's bundled tables the benchmark does not use (iris, digits)."""

    def load(_seed: int, _quick: bool) -> Table:
        from sklearn import datasets

        bunch = {"iris": datasets.load_iris, "digits": datasets.load_digits}[name]()
        x = np.asarray(bunch.data, dtype=np.float64)
        columns = {f"x{j}": x[:, j] for j in range(x.shape[1])}
        return Table(name, CLASSIFICATION, columns, np.array([f"c{v}" for v in bunch.target]))

    return load


def zip_codes(seed: int, _quick: bool) -> Table:
    """The QA `intcat` table: 3000 customers, a zip code (40 five-digit values, written
    `59282.0`) and a product ID (12 values of 3 or 4 digits) whose effects do not follow their
    order, and four normal columns."""
    rng, effects = np.random.default_rng([seed, 11]), np.random.default_rng(11)
    zips = np.sort(effects.choice(np.arange(10000, 99999), 40, replace=False))
    zip_effect = effects.normal(size=40)
    products = np.sort(effects.choice(np.arange(100, 9999), 12, replace=False))
    product_effect = effects.normal(size=12)
    n = 3000
    zi, pi = rng.integers(0, 40, n), rng.integers(0, 12, n)
    a, b, c, d = (rng.normal(size=n) for _ in range(4))
    z = 1.2 * zip_effect[zi] + 1.2 * product_effect[pi] + 0.5 * a - 0.4 * b
    z = z + 0.3 * rng.normal(size=n)
    columns = {"zip": zips[zi].astype(float), "product": products[pi].astype(float)}
    columns |= {"a": a, "b": b, "c": c, "d": d}
    return Table("zip_codes", CLASSIFICATION, columns, np.where(z > 0, "buy", "skip"))


def quantities(rows: int) -> Callable[[int, bool], Table]:
    """Whole-number quantities of one width, the likeliest false alarms (no such column is in
    the tables above): a year, an income rounded to 100, steps a day, a price in whole euros and
    a birth weight in grams, with a label of a few of them."""

    def load(seed: int, _quick: bool) -> Table:
        rng = np.random.default_rng([seed, 41])
        columns = {
            "year": rng.integers(1990, 2024, rows).astype(float),
            "income": np.clip(np.round(rng.lognormal(10.6, 0.4, rows), -2), 10000, 99900),
            "steps": np.clip(np.round(rng.normal(6000, 1500, rows)), 1000, 9999),
            "price": np.clip(np.round(rng.lognormal(8.0, 0.5, rows)), 1000, 9999),
            "weight": np.clip(np.round(rng.normal(3400, 500, rows)), 1000, 9999),
        }
        z = (columns["steps"] - 6000) / 1500 - (columns["weight"] - 3400) / 500
        label = np.where(z + rng.normal(size=rows) > 0, "yes", "no")
        return Table(f"quantities_{rows}", CLASSIFICATION, columns, label)

    return load


def party_warnings(table: Table, seed: int, directory: Path) -> list[str]:
    """The warnings of each party of `table` cut as the benchmark cuts it."""
    split = write_parties(table, seed, directory)
    out = []
    for k, path in enumerate(split.paths):
        source = TableSource(
            path=path,
            id_column="id",
            label_column="label" if k == 0 else None,
            block=k,
            num_blocks=len(split.paths),
            task=table.task,
        )
        out += load_table_party(source)[0].warnings
    return out


def census_warnings(seed: int, directory: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """The census-like table's parties' warnings, and its numeric columns (all rows)."""
    census_like.write(directory, seed)
    warnings, columns = [], {}
    for k, name in enumerate(("bank", "retail", "registry")):
        source = TableSource(
            path=directory / f"{name}.csv",
            test_path=directory / f"{name}_test.csv",
            id_column="id",
            label_column="income" if k == 0 else None,
            block=k,
            num_blocks=3,
        )
        data, fitted = load_table_party(source)
        warnings += data.warnings
        read = read_table(source.path, lambda _: True)
        for spec in fitted.columns:
            if spec.kind == "numeric":
                columns[spec.name] = read.floats(spec.name)
    return warnings, columns


def screen(data_path: Path | None, seeds: list[int]) -> list[str]:
    loaders = dict(tables(data_path, quick=False))
    loaders |= {"iris": _bundled("iris"), "digits": _bundled("digits")}
    loaders |= {"quantities_3000": quantities(3000), "quantities_30000": quantities(30000)}
    loaders["zip_codes"] = zip_codes
    head = "| table | seeds | numeric columns | flagged (party warnings) | why the others are not"
    lines = [head + " (columns x seeds) |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for name in [*loaders, "census_like"]:
        flagged: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        numeric = 0
        for seed in seeds:
            with tempfile.TemporaryDirectory() as tmp:
                if name == "census_like":
                    warnings, columns = census_warnings(seed, Path(tmp))
                else:
                    table = loaders[name](seed, False)
                    warnings = party_warnings(table, seed, Path(tmp))
                    columns = {c: v for c, v in table.columns.items() if v.dtype != object}
            for warning in warnings:  # "...: column 'zip' looks like codes ..."
                flagged.update(re.findall(r"'([^']*)'", warning.partition(" like codes")[0]))
            numeric = len(columns)
            for values in columns.values():
                why = why_not_codes(values)
                if why is not None:
                    reasons[why] += 1
        said = ", ".join(f"{c} ({n}/{len(seeds)})" for c, n in flagged.items()) or "none"
        why_not = "; ".join(f"{r}: {n}" for r, n in reasons.most_common())
        lines.append(f"| {name} | {len(seeds)} | {numeric} | {said} | {why_not} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-path", type=Path, default=None, help="holds UCI_Credit_Card.csv")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    print("\n".join(screen(args.data_path, args.seeds)))


if __name__ == "__main__":
    main()
