"""A census-like table cut over three organisations, for trying the defaults on a table the
tabular benchmark never tuned for (docs/tabular-defaults.md, the subset choice).

6000 people; a bank (age, workclass, education and the label `income`, " >50K" or " <=50K" with
the census file's leading spaces), a retailer (hours per week, occupation, capital gain) and a
registry (sex, marital status, native country, "?" where unknown as in the census file), each
missing a random 10% / 30% / 30% of the people. The label follows a logistic model of columns
of all three (about 31% positive). 20% of the IDs are test rows, written to *_test.csv.

    python -m benchmarks.census_like --out /tmp/census
    vfl simulate --data /tmp/census/bank.csv --data /tmp/census/retail.csv \\
        --data /tmp/census/registry.csv --test-data /tmp/census/bank_test.csv \\
        --test-data /tmp/census/retail_test.csv --test-data /tmp/census/registry_test.csv \\
        --id-column id --label-column income
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

ROWS = 6000
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


# The three organisations' columns (the bank's label aside), as `write` cuts them.
BLOCKS = (
    ("age", "workclass", "education"),
    ("hours-per-week", "occupation", "capital-gain"),
    ("sex", "marital-status", "native-country"),
)


def columns(seed: int = 7, rows: int = ROWS) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The whole table: every column by name (numbers int, categories str) and the label."""
    return _draw(np.random.default_rng(seed), rows)


def _draw(rng: np.random.Generator, n: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
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


def write(out: Path, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    table, income = _draw(rng, ROWS)
    n = len(income)
    ids = rng.permutation(10**6)[:n] + 100000
    test = rng.random(n) < 0.2
    parties = {"bank": (*BLOCKS[0], "income"), "retail": BLOCKS[1], "registry": BLOCKS[2]}
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=7, help="the table's seed (not the run's)")
    args = parser.parse_args()
    write(args.out, args.seed)


if __name__ == "__main__":
    main()
