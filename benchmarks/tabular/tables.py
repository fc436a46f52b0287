"""The tables of `vfl bench tabular` and how each becomes K party CSV files.

A table is a whole data set (columns of numbers or strings, a label). `write_parties` cuts it the
way the benchmark federates it: K = 3 parties, each holding a fixed share of the columns (assigned
once per table, not per seed), labels at party 0 only, every party missing a random fraction of
the rows (drawn per seed), and one CSV per party with an `id` column, as a user's table would be.
The test split is the project's own: by a hash of the ID (`vfl_core.data.tabular`), the same at
every party.

The census-like table (the end of this module) is also a user's three CSVs:
`python -m benchmarks.tabular.tables --out DIR` writes them.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION, Task
from vfl_core.data.party_dir import PartyData
from vfl_core.data.tabular import federation_sources, load_table_federation
from vfl_core.inference.metrics import f1_from_confusion

K = 3
LABEL_BLOCK = 0
ID_COLUMN = "id"
LABEL_COLUMN = "label"
# Share of the rows each party misses (party 0's missing rows are unlabelled for everyone).
MISSING = (0.1, 0.3, 0.3)
CREDIT_FILE = "UCI_Credit_Card.csv"
CREDIT_LABEL = "default"

Column = np.ndarray  # float64 (NaN: empty) or object (str; None: empty)


@dataclass(frozen=True)
class Table:
    """A whole data set before it is cut into parties."""

    name: str
    task: Task
    columns: dict[str, Column]  # feature columns, in a fixed order
    label: np.ndarray  # (n,) class names (str) or real numbers
    categorical: tuple[str, ...] = ()  # the string-valued columns
    # each party's columns where the table names them (as organisations hold them), else
    # `column_blocks` deals them
    blocks: tuple[tuple[str, ...], ...] | None = None

    @property
    def rows(self) -> int:
        return len(self.label)


@dataclass(frozen=True)
class Split:
    """Where a table's parties are on disk and which rows each holds."""

    paths: tuple[Path, ...]  # party k's CSV, block k
    held: np.ndarray  # (K, n) bool: party k holds row i
    blocks: tuple[tuple[str, ...], ...]  # party k's feature columns


# ----------------------------------------------------------------------------------- the tables


def _sklearn(name: str) -> Callable[[int, bool], Table]:
    def load(_seed: int, _quick: bool) -> Table:
        from sklearn import datasets

        loader = {
            "breast_cancer": datasets.load_breast_cancer,
            "wine": datasets.load_wine,
            "diabetes": datasets.load_diabetes,
        }[name]
        bunch = loader()
        x, y = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target)
        columns = {_safe(f): x[:, j] for j, f in enumerate(bunch.feature_names)}
        if name == "diabetes":
            return Table(name, REGRESSION, columns, y.astype(np.float64))
        return Table(name, CLASSIFICATION, columns, np.array([f"c{int(v)}" for v in y]))

    return load


def _safe(name: str) -> str:
    return name.strip().replace(" ", "_")


def _credit(data_path: Path, rows: int) -> Callable[[int, bool], Table]:
    """UCI Credit: a fixed random subsample of `rows` rows (the same for every seed)."""

    def load(_seed: int, quick: bool) -> Table:
        path = data_path / CREDIT_FILE
        with path.open(newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            body = np.array([[float(c) for c in row] for row in reader], dtype=np.float64)
        keep = np.sort(
            np.random.default_rng(2027).permutation(len(body))[: rows // (4 if quick else 1)]
        )
        body = body[keep]
        label = header.index(CREDIT_LABEL)
        columns = {h: body[:, j] for j, h in enumerate(header) if j != label}
        return Table(
            "credit", CLASSIFICATION, columns, np.array([f"c{int(v)}" for v in body[:, label]])
        )

    return load


def _generated(name: str, positive: float | None) -> Callable[[int, bool], Table]:
    """make_classification (its seed the run's seed), 12 columns of which 8 informative, 4 of
    them cut into string categories whose names do not follow the values' order; `positive`:
    the positive share of a skewed binary label (None: three balanced classes)."""

    def load(seed: int, quick: bool) -> Table:
        from sklearn.datasets import make_classification

        classes = 2 if positive is not None else 3
        weights = [1 - positive, positive] if positive is not None else None
        x, y = make_classification(
            n_samples=600 if quick else 2400,
            n_features=12,
            n_informative=8,
            n_redundant=2,
            n_classes=classes,
            weights=weights,
            flip_y=0.02,
            class_sep=0.8,
            random_state=seed,
        )
        rng = np.random.default_rng(seed)
        columns: dict[str, Column] = {}
        categorical = []
        for j in range(x.shape[1]):
            if j % 3 == 0:  # 0, 3, 6, 9: binned into 6 categories with shuffled names
                edges = np.quantile(x[:, j], np.linspace(0, 1, 7)[1:-1])
                names = np.array([f"grade-{c}" for c in rng.permutation(list("abcdef"))])
                columns[f"cat{j}"] = names[np.digitize(x[:, j], edges)].astype(object)
                categorical.append(f"cat{j}")
            else:
                columns[f"num{j}"] = x[:, j]
        label = np.array([f"c{int(v)}" for v in y])
        return Table(name, CLASSIFICATION, columns, label, tuple(categorical))

    return load


def _skewed_regression(name: str, counts: bool) -> Callable[[int, bool], Table]:
    """A positive, right-skewed regression target, 10 columns of which 6 informative, 4 of them
    (0, 3, 6, 9) cut into string categories: `gen_price` exp(4 + x b + noise) (a price or an
    amount: log-normal, skewness about 5), `gen_visits` a Poisson count of mean exp(0.3 + x b)
    (a count of doctor visits: mostly 0-2, a long tail)."""

    def load(seed: int, quick: bool) -> Table:
        rng = np.random.default_rng([seed, 45])
        n = 600 if quick else 2400
        x = rng.normal(size=(n, 10))
        coef = np.array([0.5, -0.4, 0.35, 0.3, -0.25, 0.2, 0.0, 0.0, 0.0, 0.0])
        if counts:
            label = rng.poisson(np.exp(0.3 + x @ coef)).astype(np.float64)
        else:
            label = np.exp(4.0 + x @ coef + rng.normal(0.0, 0.35, n))
        columns: dict[str, Column] = {}
        categorical = []
        for j in range(x.shape[1]):
            if j % 3 == 0:
                edges = np.quantile(x[:, j], np.linspace(0, 1, 6)[1:-1])
                names = np.array([f"band-{c}" for c in rng.permutation(list("abcde"))])
                columns[f"cat{j}"] = names[np.digitize(x[:, j], edges)].astype(object)
                categorical.append(f"cat{j}")
            else:
                columns[f"num{j}"] = x[:, j]
        return Table(name, REGRESSION, columns, label, tuple(categorical))

    return load


def _interaction(seed: int, quick: bool) -> Table:
    """Nine normal columns; the label is the sign of f0 * f1 + 0.5 f6 plus noise. column_blocks
    deals f0 to party 2, f1 to party 1 and f6 to party 0: the signal is a product of two
    feature-only parties' columns, which no party and no linear model sees alone."""
    n = 750 if quick else 3000
    rng = np.random.default_rng([seed, 31])
    columns: dict[str, Column] = {f"f{j}": rng.normal(size=n) for j in range(9)}
    z = columns["f0"] * columns["f1"] + 0.5 * columns["f6"] + 0.3 * rng.normal(size=n)
    return Table("gen_interaction", CLASSIFICATION, columns, np.where(z > 0, "yes", "no"))


def _high_cardinality(seed: int, quick: bool) -> Table:
    """A churn table: two categorical columns with 60 and 25 values (past --max-onehot, so
    the parties embed them), skewed numbers, 10% empty spend cells; the label a logistic model of
    the categories' effects (fixed across seeds) and the numbers."""
    n = 1000 if quick else 4000
    rng = np.random.default_rng([seed, 37])
    effects = np.random.default_rng(37)
    city_effect, plan_effect = effects.normal(size=60), effects.normal(size=25)
    city, plan = rng.integers(0, 60, n), rng.integers(0, 25, n)
    tenure, spend = rng.exponential(20, n), rng.lognormal(3, 1, n)
    z = city_effect[city] + plan_effect[plan] - 0.04 * tenure + 0.3 * np.log(spend) - 1.6
    z = z + 0.5 * rng.normal(size=n)
    columns: dict[str, Column] = {
        "city": np.array([f"city{c:02d}" for c in city], dtype=object),
        "plan": np.array([f"P{p}" for p in plan], dtype=object),
        "tenure": tenure,
        "spend": np.where(rng.random(n) < 0.1, np.nan, spend),
        "calls": rng.poisson(5, n).astype(np.float64),
        "age": rng.integers(18, 80, n).astype(np.float64),
    }
    label = np.where(z > 0, "yes", "no")  # churned: the positive class (sorts last)
    return Table("gen_highcard", CLASSIFICATION, columns, label, ("city", "plan"))


def _friedman(seed: int, quick: bool) -> Table:
    """scikit-learn's Friedman #1 regression (a sine of a product, a square, linear terms; 5 of
    its 9 columns carry signal), noise 1."""
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(
        n_samples=500 if quick else 2000, n_features=9, noise=1.0, random_state=seed
    )
    return Table("friedman", REGRESSION, {f"x{j}": x[:, j] for j in range(9)}, y)


def _wide(seed: int, quick: bool) -> Table:
    """200 numeric columns on 1000 rows (about 720 labelled training rows, 67 columns a party):
    make_classification with 20 informative and 10 redundant columns, the other 170 noise (a
    table with more columns than rows per column, a shape where the defaults trail HGB)."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=250 if quick else 1000,
        n_features=200,
        n_informative=20,
        n_redundant=10,
        flip_y=0.02,
        class_sep=1.0,
        random_state=seed,
    )
    columns: dict[str, Column] = {f"w{j:03d}": x[:, j] for j in range(x.shape[1])}
    return Table("gen_wide", CLASSIFICATION, columns, np.array([f"c{int(v)}" for v in y]))


def _multiclass(seed: int, quick: bool) -> Table:
    """Three balanced classes from make_classification on 9 numeric columns, 6 informative (no
    categories, unlike gen_categorical; a shape where the defaults trail HGB)."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=750 if quick else 3000,
        n_features=9,
        n_informative=6,
        n_redundant=0,
        n_classes=3,
        flip_y=0.02,
        class_sep=0.8,
        random_state=seed,
    )
    columns: dict[str, Column] = {f"x{j}": x[:, j] for j in range(x.shape[1])}
    return Table("gen_multiclass", CLASSIFICATION, columns, np.array([f"c{int(v)}" for v in y]))


def _census(_seed: int, quick: bool) -> Table:
    """The census-like table (below; the same people for every seed: its own seed 7), cut as
    `write_census` cuts it: a bank (age, workclass, education, the label), a retailer, a
    registry."""
    table, income = census_columns(rows=CENSUS_ROWS // (4 if quick else 1))
    numeric = ("age", "hours-per-week", "capital-gain")
    columns: dict[str, Column] = {
        name: values.astype(np.float64) if name in numeric else values
        for name, values in table.items()
    }
    categorical = tuple(c for c in columns if c not in numeric)
    return Table("census_like", CLASSIFICATION, columns, income, categorical, CENSUS_BLOCKS)


def tables(
    data_path: Path | None, quick: bool, extra: bool = False
) -> dict[str, Callable[[int, bool], Table]]:
    """Every benchmark table by name: a loader of (seed, quick). Credit needs `data_path`.
    `extra`: also the skewed regressions of the settings sweep and the VertiBench grid
    (`EXTRA_TABLES`), which `vfl bench tabular` does not run."""
    out: dict[str, Callable[[int, bool], Table]] = {}
    if data_path is not None and (data_path / CREDIT_FILE).is_file():
        out["credit"] = _credit(data_path, 4000)
    out["breast_cancer"] = _sklearn("breast_cancer")
    out["wine"] = _sklearn("wine")
    out["diabetes"] = _sklearn("diabetes")
    out["gen_categorical"] = _generated("gen_categorical", None)
    out["gen_skewed"] = _generated("gen_skewed", 0.12)
    out["gen_interaction"] = _interaction
    out["gen_highcard"] = _high_cardinality
    out["friedman"] = _friedman
    out["gen_wide"] = _wide
    out["gen_multiclass"] = _multiclass
    out["census_like"] = _census
    if extra:
        out["gen_price"] = _skewed_regression("gen_price", counts=False)
        out["gen_visits"] = _skewed_regression("gen_visits", counts=True)
    return out


EXTRA_TABLES = ("gen_price", "gen_visits")


QUICK_TABLES = ("breast_cancer", "diabetes", "gen_skewed")


# ------------------------------------------------------------------------- cutting into parties


def column_blocks(table: Table) -> tuple[tuple[str, ...], ...]:
    """The columns of each party: a fixed shuffle of the table's columns dealt round-robin (the
    same for every seed, so the seeds vary the rows, not who holds what)."""
    if table.blocks is not None:
        return table.blocks
    names = list(table.columns)
    order = np.random.default_rng(len(names) * 7919 + table.rows).permutation(len(names))
    return tuple(tuple(names[j] for j in sorted(order[k::K])) for k in range(K))


def write_parties(
    table: Table,
    seed: int,
    directory: Path,
    overlap: str = "partial",
    blocks: tuple[tuple[str, ...], ...] | None = None,
) -> Split:
    """Party k's CSV `directory/party{k}.csv`: `id`, its columns (and at party 0 the label) for
    the rows it holds; each party misses a random MISSING[k] of the rows (seeded; a party past
    the third misses the last share, 30 %). With `overlap="full"` (an ablation,
    benchmarks.tabular.sweep) every party holds exactly the rows party 0 holds: the same
    labelled training and test rows, none missing a block. `blocks`: each party's columns
    (benchmarks.tabular.vertibench, K or more parties), else `column_blocks`."""
    blocks = blocks or column_blocks(table)
    parties = len(blocks)
    rng = np.random.default_rng([seed, table.rows])
    missing = [MISSING[min(k, len(MISSING) - 1)] for k in range(parties)]
    held = np.stack([rng.random(table.rows) >= missing[k] for k in range(parties)])
    if overlap == "full":
        held = np.repeat(held[LABEL_BLOCK][None], parties, axis=0)
    elif overlap != "partial":
        raise ValueError(f"overlap must be 'partial' or 'full', got {overlap!r}")
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, columns in enumerate(blocks):
        path = directory / f"party{k}.csv"
        header = [ID_COLUMN, *columns] + ([LABEL_COLUMN] if k == LABEL_BLOCK else [])
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for i in np.flatnonzero(held[k]):
                cells = [_cell(table.columns[c][i]) for c in columns]
                if k == LABEL_BLOCK:
                    cells.append(_cell(table.label[i]))
                writer.writerow([str(i), *cells])
        paths.append(path)
    return Split(tuple(paths), held, blocks)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float | np.floating):
        return "" if np.isnan(value) else repr(float(value))
    return str(value)


# ------------------------------------------------------------------------ the census-like table
# A census-like table cut over three organisations, for trying the defaults on a table the
# tabular benchmark never tuned for (docs/tabular-defaults.md, the subset choice).
#
# 6000 people; a bank (age, workclass, education and the label `income`, " >50K" or " <=50K" with
# the census file's leading spaces), a retailer (hours per week, occupation, capital gain) and a
# registry (sex, marital status, native country, "?" where unknown as in the census file), each
# missing a random 10% / 30% / 30% of the people. The label follows a logistic model of columns
# of all three (about 31% positive). 20% of the IDs are test rows, written to *_test.csv.
#
#     python -m benchmarks.tabular.tables --out out/census
#     vfl simulate --data out/census/bank.csv --data out/census/retail.csv \
#         --data out/census/registry.csv --test-data out/census/bank_test.csv \
#         --test-data out/census/retail_test.csv --test-data out/census/registry_test.csv \
#         --id-column id --label-column income

CENSUS_ROWS = 6000
EDUCATION = [
    "Preschool",
    "1st-4th",
    "5th-6th",
    "7th-8th",
    "9th",
    "10th",
    "11th",
    "12th",
    "HS-grad",
    "Some-college",
    "Assoc-voc",
    "Assoc-acdm",
    "Bachelors",
    "Masters",
    "Prof-school",
    "Doctorate",
]
EDUCATION_SHARE = np.array([1, 1, 1, 1, 2, 2, 2, 2, 30, 20, 4, 4, 17, 6, 2, 4], dtype=float)
WORK = (" Private", " Self-emp-not-inc", " Local-gov", " ?", " State-gov", " Federal-gov")
MARITAL = (" Married-civ-spouse", " Never-married", " Divorced", " Widowed")
COUNTRY = (" United-States", " Mexico", " ?", " Philippines", " Germany", " India")


# The three organisations' columns (the bank's label aside), as `write_census` cuts them.
CENSUS_BLOCKS = (
    ("age", "workclass", "education"),
    ("hours-per-week", "occupation", "capital-gain"),
    ("sex", "marital-status", "native-country"),
)


def census_columns(
    seed: int = 7, rows: int = CENSUS_ROWS
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The whole table: every column by name (numbers int, categories str) and the label."""
    return _draw_census(np.random.default_rng(seed), rows)


def _draw_census(rng: np.random.Generator, n: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    age = rng.integers(17, 90, n)
    edu = rng.choice(len(EDUCATION), n, p=EDUCATION_SHARE / EDUCATION_SHARE.sum())
    work = rng.choice(len(WORK), n, p=[0.70, 0.08, 0.07, 0.06, 0.05, 0.04])
    hours = np.clip(rng.normal(40, 12, n).round(), 1, 99).astype(int)
    occupation = rng.choice(14, n)
    gain = np.where(rng.random(n) < 0.08, rng.lognormal(8, 1.2, n), 0).round().astype(int)
    male = rng.random(n) < 0.67
    marital = rng.choice(len(MARITAL), n, p=[0.46, 0.33, 0.14, 0.07])
    country = rng.choice(len(COUNTRY), n, p=[0.90, 0.03, 0.02, 0.02, 0.015, 0.015])
    weight = rng.normal(0, 0.6, 14)  # per occupation
    z = (
        -8.3
        + 0.045 * np.minimum(age, 60)
        + 0.28 * edu
        + weight[occupation]
        + 0.03 * hours
        + 0.9 * (gain > 5000)
        + 1.6 * (marital == 0)
        + 0.3 * male
        + 0.4 * (work == 1) * (edu > 12)
    )
    rich = rng.random(n) < 1 / (1 + np.exp(-z))
    table = {
        "age": age,
        "workclass": np.array(WORK, dtype=object)[work],
        "education": np.array([" " + e for e in EDUCATION], dtype=object)[edu],
        "hours-per-week": hours,
        "occupation": np.array([f"occ-{o}" for o in range(14)], dtype=object)[occupation],
        "capital-gain": gain,
        "sex": np.where(male, " Male", " Female").astype(object),
        "marital-status": np.array(MARITAL, dtype=object)[marital],
        "native-country": np.array(COUNTRY, dtype=object)[country],
    }
    return table, np.where(rich, " >50K", " <=50K").astype(object)


def write_census(out: Path, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    table, income = _draw_census(rng, CENSUS_ROWS)
    n = len(income)
    ids = rng.permutation(10**6)[:n] + 100000
    test = rng.random(n) < 0.2
    parties = {
        "bank": (*CENSUS_BLOCKS[0], "income"),
        "retail": CENSUS_BLOCKS[1],
        "registry": CENSUS_BLOCKS[2],
    }
    misses = {"bank": 0.1, "retail": 0.3, "registry": 0.3}
    out.mkdir(parents=True, exist_ok=True)
    for name, names in parties.items():
        held = rng.random(n) >= misses[name]
        cells = [income if c == "income" else table[c] for c in names]
        for suffix, part in (("", ~test), ("_test", test)):
            with (out / f"{name}{suffix}.csv").open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["id", *names])
                w.writerows([ids[i], *(c[i] for c in cells)] for i in np.flatnonzero(held & part))


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Write the census-like table's three organisations' CSVs."
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=7, help="the table's seed (not the run's)")
    args = parser.parse_args()
    write_census(args.out, args.seed)


if __name__ == "__main__":
    main()


# --- one table and seed made ready for every row of the benchmark
# One table and seed of `vfl bench tabular` made ready for every row: the party CSV files, the
# parties as the project reads them (`vfl_core.data.tabular`, as `vfl simulate --data` reads
# tables), and the same rows joined back into one table for the centralised baselines.
#
# The split is the federation's own: training rows are party 0's training IDs (it holds the
# labels), test rows its test IDs (by ID hash); a row's observed set is the parties holding it.


@dataclass(frozen=True)
class Prepared:
    table: Table
    seed: int
    split: Split
    parties: list[PartyData]  # block order
    train_rows: np.ndarray  # row numbers of the table (= IDs) with labels, training split
    test_rows: np.ndarray
    classes: tuple[str, ...]  # sorted class names (classification)

    @property
    def task(self) -> str:
        return self.table.task

    def labels(self, rows: np.ndarray) -> np.ndarray:
        """Class indices (classification) or values of the table's rows."""
        if self.task == CLASSIFICATION:
            lookup = {c: i for i, c in enumerate(self.classes)}
            return np.array([lookup[v] for v in self.table.label[rows]], dtype=np.int64)
        return self.table.label[rows].astype(np.float64)

    def observed(self, rows: np.ndarray) -> list[str]:
        """Each row's observed set ("0,2")."""
        return [set_name(np.flatnonzero(self.split.held[:, i]).tolist()) for i in rows]


def prepare(
    table: Table,
    seed: int,
    directory: Path,
    overlap: str = "partial",
    blocks: tuple[tuple[str, ...], ...] | None = None,
) -> Prepared:
    split = write_parties(table, seed, directory, overlap, blocks)
    sources = federation_sources(
        list(split.paths),
        None,
        id_column=ID_COLUMN,
        label_column=LABEL_COLUMN,
        label_blocks=(LABEL_BLOCK,),
        task=table.task,
    )
    parties = load_table_federation(sources)
    label_party = parties[LABEL_BLOCK].splits
    rows = {
        name: np.array([int(i) for i in s.ids], dtype=np.int64) for name, s in label_party.items()
    }
    classes = tuple(sorted({str(v) for v in table.label})) if table.task == CLASSIFICATION else ()
    return Prepared(table, seed, split, parties, rows["train"], rows["test"], classes)


def raw_columns(prep: Prepared, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The joined table's cells of `rows` as a party would have sent them: (numeric float with
    NaN where the holding party misses the row, categorical object with None)."""
    owner = {c: k for k, block in enumerate(prep.split.blocks) for c in block}
    numeric, categorical = [], []
    for name, column in prep.table.columns.items():
        held = prep.split.held[owner[name], rows]
        if name in prep.table.categorical:
            categorical.append(np.where(held, column[rows], None))
        else:
            numeric.append(np.where(held, column[rows], np.nan))
    num = np.stack(numeric, axis=1).astype(np.float64) if numeric else np.zeros((len(rows), 0))
    cat = np.stack(categorical, axis=1) if categorical else np.zeros((len(rows), 0), dtype=object)
    return num, cat


def party_features(prep: Prepared, rows: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """The parties' own preprocessed features of `rows` side by side (zeros, and code 0, where a
    party misses a row), then K - 1 indicators of a missing feature-only block: dense columns
    first, every party's category codes last (the order the tabular model expects); and the
    codes' cardinalities."""
    dense, codes, cards = [], [], []
    for k, party in enumerate(prep.parties):
        block = party_block(prep, k, rows)
        n_codes = len(party.meta.categorical)
        dense.append(block[:, : block.shape[1] - n_codes])
        codes.append(block[:, block.shape[1] - n_codes :])
        cards += list(party.meta.categorical)
        if k != LABEL_BLOCK:
            dense.append((~prep.split.held[k, rows]).astype(np.float32)[:, None])
    return np.concatenate(dense + codes, axis=1), tuple(cards)


def party_block(prep: Prepared, k: int, rows: np.ndarray) -> np.ndarray:
    """Party k's own preprocessed features of `rows` (dense columns, then its category codes, as
    its representation model reads them); zeros where it misses a row."""
    party = prep.parties[k]
    split_rows = {}
    for s in party.splits.values():
        split_rows.update({i: s.features[j] for j, i in enumerate(s.ids[: len(s.features)])})
    block = np.zeros((len(rows), party.meta.feature_shape[0]), dtype=np.float32)
    for j, i in enumerate(str(r) for r in rows):
        if i in split_rows:
            block[j] = split_rows[i]
    return block


# --------------------------------------------------------------------------------------- scores
# Scores of `vfl bench tabular`'s rows, overall and per observed set, with the federation's
# definitions: binary F1 is class 1's (the second of the sorted class names), multi-class F1 the
# unweighted mean over classes; AUC is binary ROC AUC (one-vs-rest, macro, for several classes);
# Brier is the mean over rows of the squared distance between the probabilities and the one-hot
# label; R^2 is 1 - MSE / variance of the scored labels.

Scores = dict[str, float | int | None]
ALL = "all"


def set_name(blocks: Sequence[int]) -> str:
    """An observed set as the federation's tables write it: "0,2"."""
    return ",".join(str(b) for b in sorted(blocks))


def score_sets(
    task: Task, y: np.ndarray, predicted: np.ndarray, sets: Sequence[str]
) -> dict[str, Scores]:
    """Scores of every observed set (rows grouped by `sets`) and of all rows (ALL).
    `predicted`: (n, classes) probabilities, or (n,) values in regression."""
    names = np.array(sets)
    out = {ALL: score(task, y, predicted)}
    for name in sorted(set(sets), key=lambda s: (-len(s), s)):
        rows = names == name
        out[name] = score(task, y[rows], predicted[rows])
    return out


def score(task: Task, y: np.ndarray, predicted: np.ndarray) -> Scores:
    if task == REGRESSION:
        return _regression(y.astype(np.float64), predicted.astype(np.float64))
    return _classification(y.astype(np.int64), predicted.astype(np.float64))


def _regression(y: np.ndarray, predicted: np.ndarray) -> Scores:
    error = predicted - y
    mse = float(np.mean(error**2))
    variance = float(np.var(y))
    return {
        "samples": len(y),
        "rmse": float(np.sqrt(mse)),
        "mae": float(np.mean(np.abs(error))),
        "r2": 1.0 - mse / variance if variance > 0 else None,
    }


def _classification(y: np.ndarray, proba: np.ndarray) -> Scores:
    from sklearn.metrics import roc_auc_score

    classes = proba.shape[1]
    chosen = proba.argmax(axis=1)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(confusion, (y, chosen), 1)
    onehot = np.eye(classes)[y]
    auc = None
    present = np.unique(y)
    if len(present) == classes == 2:
        auc = float(roc_auc_score(y, proba[:, 1]))
    elif len(present) == classes:
        auc = float(roc_auc_score(y, proba, multi_class="ovr", average="macro"))
    return {
        "samples": len(y),
        "accuracy": float(np.mean(chosen == y)),
        "f1": f1_from_confusion(confusion),
        "auc": auc,
        "brier": _brier(proba, onehot),
        "positive_rate": float(np.mean(chosen == 1)) if classes == 2 else None,
        "true_positive_rate": float(np.mean(y == 1)) if classes == 2 else None,
    }


def _brier(proba: np.ndarray, onehot: np.ndarray) -> float:
    """Binary: the mean squared error of the positive-class probability (scikit-learn's
    brier_score_loss, and the federation's own `brier`, so the rows compare); more classes: the
    squared error summed over the classes (Brier's definition, as the federation reports it)."""
    if proba.shape[1] == 2:
        return float(np.mean((proba[:, 1] - onehot[:, 1]) ** 2))
    return float(np.mean(np.sum((proba - onehot) ** 2, axis=1)))
