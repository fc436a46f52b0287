"""The third outsider pass (issue 27): tables written by a recipe unlike the tabular benchmark's,
each run as a user would (`vfl simulate --data ... --id-column id --label-column label`, defaults)
against the label party alone, logistic/ridge regression and HistGradientBoosting on the joined
columns of the same ID split (benchmarks.tabular_data.prepare; the rows of
benchmarks.tabular_baselines and benchmarks.tabular_federation). Results:
benchmarks/results/outsider_tables.md.

    python -m benchmarks.outsider_tables --out DIR [--seeds 0,1] [TABLE ...]
    python -m benchmarks.outsider_tables --out DIR --summarise

One JSON file per (table, seed) under DIR (an existing one is kept: delete it to rerun).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.tabular_baselines import hgb_row, linear_row
from benchmarks.tabular_data import prepare
from benchmarks.tabular_federation import simulate_row
from benchmarks.tabular_tables import LABEL_BLOCK, K, Table
from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION

Blocks = tuple[tuple[str, ...], ...]
Maker = Callable[[int], tuple[Table, Blocks]]


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{j:02d}" for j in range(n)]


def hastie_single(seed: int) -> tuple[Table, Blocks]:
    """make_hastie_10_2 (labels -1/1 written as integers), 2500 rows; the label party holds one
    column, party 1 three, party 2 six: nearly all the signal away from the labels."""
    from sklearn.datasets import make_hastie_10_2

    x, y = make_hastie_10_2(n_samples=2500, random_state=seed)
    cols = dict(zip(_names("h", 10), x.T, strict=True))
    label = np.array([str(int(v)) for v in y])
    names = list(cols)
    return Table("hastie_single", CLASSIFICATION, cols, label), (
        tuple(names[:1]),
        tuple(names[1:4]),
        tuple(names[4:]),
    )


def rare_dupes(seed: int) -> tuple[Table, Blocks]:
    """3% positives (labels 0/1), 5000 rows, 6 informative of 10 columns, most of them at party
    1; plus a constant column, an exact duplicate and a near duplicate (1e-9 noise) at party 2."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=5000,
        n_features=10,
        n_informative=6,
        n_redundant=0,
        shuffle=False,
        weights=[0.97, 0.03],
        flip_y=0.0,
        class_sep=1.2,
        random_state=seed,
    )
    rng = np.random.default_rng(seed)
    cols = dict(zip(_names("r", 10), x.T, strict=True))
    cols["const"] = np.full(len(y), 7.0)
    cols["dup_r01"] = cols["r01"].copy()
    cols["near_r02"] = cols["r02"] + 1e-9 * rng.normal(size=len(y))
    label = np.array([str(int(v)) for v in y])
    blocks = (
        ("r00", "r06", "r07"),
        ("r01", "r02", "r03", "r04", "r08"),
        ("r05", "r09", "const", "dup_r01", "near_r02"),
    )
    return Table("rare_dupes", CLASSIFICATION, cols, label), blocks


def many_classes(seed: int) -> tuple[Table, Blocks]:
    """15 classes written as integers 0..14 (so "10" sorts before "2" as text), 3000 rows,
    14 columns of which 10 informative."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=3000,
        n_features=14,
        n_informative=10,
        n_redundant=2,
        n_classes=15,
        n_clusters_per_class=1,
        class_sep=1.5,
        random_state=seed,
    )
    cols = dict(zip(_names("m", 14), x.T, strict=True))
    n = list(cols)
    blocks = (tuple(n[0:4]), tuple(n[4:9]), tuple(n[9:]))
    return Table("many_classes", CLASSIFICATION, cols, np.array([str(v) for v in y])), blocks


def lognormal_reg(seed: int) -> tuple[Table, Blocks]:
    """A log-normal regression target exp(linear / sd) on make_regression's columns, 2000 rows
    (a spend, a price: mean ~1.6, max in the hundreds)."""
    from sklearn.datasets import make_regression

    x, y = make_regression(
        n_samples=2000, n_features=9, n_informative=6, noise=10.0, random_state=seed
    )
    target = np.exp(y / np.std(y))
    cols = dict(zip(_names("l", 9), x.T, strict=True))
    n = list(cols)
    return Table("lognormal_reg", REGRESSION, cols, target), (
        tuple(n[0:2]),
        tuple(n[2:6]),
        tuple(n[6:]),
    )


def counts_reg(seed: int) -> tuple[Table, Blocks]:
    """A count target (Poisson, log-rate linear in 4 columns), 1500 rows, one categorical
    column of 5 shops at each party."""
    rng = np.random.default_rng([seed, 41])
    n = 1500
    x = rng.normal(size=(n, 6))
    shop = rng.integers(0, 5, size=(n, 3))
    effect = np.array([0.0, 0.4, -0.3, 0.8, -0.6])
    rate = np.exp(0.5 + 0.6 * x[:, 0] + 0.4 * x[:, 2] - 0.5 * x[:, 4] + effect[shop[:, 1]])
    target = rng.poisson(rate).astype(np.float64)
    cols: dict[str, Any] = dict(zip(_names("c", 6), x.T, strict=True))
    for k in range(3):
        cols[f"shop{k}"] = np.array([f"shop-{s}" for s in shop[:, k]], dtype=object)
    blocks = (("c00", "c01", "shop0"), ("c02", "c03", "shop1"), ("c04", "c05", "shop2"))
    table = Table("counts_reg", REGRESSION, cols, target, ("shop0", "shop1", "shop2"))
    return table, blocks


def tiny_float_labels(seed: int) -> tuple[Table, Blocks]:
    """200 rows, binary labels written "1.0" / "0.0", 8 columns (make_classification)."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=200, n_features=8, n_informative=5, class_sep=1.0, random_state=seed
    )
    cols = dict(zip(_names("t", 8), x.T, strict=True))
    n = list(cols)
    label = np.array([f"{float(v):.1f}" for v in y])
    return Table("tiny_float_labels", CLASSIFICATION, cols, label), (
        tuple(n[0:3]),
        tuple(n[3:6]),
        tuple(n[6:]),
    )


def tiny_friedman2(seed: int) -> tuple[Table, Blocks]:
    """make_friedman2 (target 0-1700, sd ~ 350), 350 rows, 4 columns: one party a single column."""
    from sklearn.datasets import make_friedman2

    x, y = make_friedman2(n_samples=350, noise=20.0, random_state=seed)
    cols = dict(zip(_names("f", 4), x.T, strict=True))
    return Table("tiny_friedman2", REGRESSION, cols, y), (("f00", "f03"), ("f01",), ("f02",))


def all_categorical(seed: int) -> tuple[Table, Blocks]:
    """Parties 1 and 2 hold categorical columns only (3-40 values), party 0 two numbers; the
    label ("yes"/"no", 30% yes) a logistic model of all of them; 3000 rows."""
    rng = np.random.default_rng([seed, 42])
    fixed = np.random.default_rng(42)
    n = 3000
    sizes = (4, 12, 40, 3, 8, 25)
    codes = [rng.integers(0, s, n) for s in sizes]
    effects = [fixed.normal(0, 0.8, s) for s in sizes]
    a, b = rng.normal(size=n), rng.lognormal(0, 1, n)
    z = sum(e[c] for e, c in zip(effects, codes, strict=True)) + 0.7 * a + 0.3 * np.log(b) - 1.0
    label = np.where(z + 0.5 * rng.normal(size=n) > 0, "yes", "no")
    cols: dict[str, Any] = {"a": a, "b": b}
    names = []
    for j, c in enumerate(codes):
        cols[f"k{j}"] = np.array([f"v{j}-{v:02d}" for v in c], dtype=object)
        names.append(f"k{j}")
    blocks = (("a", "b"), tuple(names[:3]), tuple(names[3:]))
    return Table("all_categorical", CLASSIFICATION, cols, label, tuple(names)), blocks


def outlier_reg(seed: int) -> tuple[Table, Blocks]:
    """make_regression, 1500 rows, with 0.5% of the targets multiplied by 1000 (typing errors):
    RMSE is dominated by them, MAE is not."""
    from sklearn.datasets import make_regression

    x, y = make_regression(
        n_samples=1500, n_features=8, n_informative=5, noise=5.0, random_state=seed
    )
    rng = np.random.default_rng(seed)
    bad = rng.random(len(y)) < 0.005
    y = np.where(bad, y * 1000, y)
    cols = dict(zip(_names("o", 8), x.T, strict=True))
    n = list(cols)
    return Table("outlier_reg", REGRESSION, cols, y), (tuple(n[0:3]), tuple(n[3:6]), tuple(n[6:]))


def large(seed: int) -> tuple[Table, Blocks]:
    """60,000 rows, binary (text labels "bad"/"good", 20% bad), 16 columns, 8 informative."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=60_000,
        n_features=16,
        n_informative=8,
        n_redundant=2,
        weights=[0.8, 0.2],
        flip_y=0.02,
        class_sep=0.7,
        random_state=seed,
    )
    cols = dict(zip(_names("g", 16), x.T, strict=True))
    n = list(cols)
    label = np.where(y == 1, "bad", "good")
    return Table("large", CLASSIFICATION, cols, label), (
        tuple(n[0:5]),
        tuple(n[5:11]),
        tuple(n[11:]),
    )


TABLES: dict[str, Maker] = {
    "hastie_single": hastie_single,
    "rare_dupes": rare_dupes,
    "many_classes": many_classes,
    "lognormal_reg": lognormal_reg,
    "counts_reg": counts_reg,
    "tiny_float_labels": tiny_float_labels,
    "tiny_friedman2": tiny_friedman2,
    "all_categorical": all_categorical,
    "outlier_reg": outlier_reg,
    "large": large,
}


def run_one(name: str, seed: int) -> dict[str, Any]:
    table, blocks = TABLES[name](seed)
    with tempfile.TemporaryDirectory(prefix="vfl-outsider-") as tmp:
        prep = prepare(table, seed, Path(tmp) / "parties", blocks=blocks)
        rows = [linear_row(prep), hgb_row(prep)]
        for row_name, parties in (("label_alone", [LABEL_BLOCK]), ("federation", list(range(K)))):
            try:
                out = Path(tmp) / f"{row_name}.json"
                rows.append(simulate_row(row_name, prep, parties, out, None))
            except Exception as e:  # a crash is a finding, recorded
                rows.append({"row": row_name, "error": f"{type(e).__name__}: {e}"})
        return {
            "table": name,
            "seed": seed,
            "task": table.task,
            "rows": table.rows,
            "blocks": [list(b) for b in blocks],
            "train": len(prep.train_rows),
            "test": len(prep.test_rows),
            "rows_run": rows,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--summarise", action="store_true")
    parser.add_argument("tables", nargs="*")
    args = parser.parse_args()
    if args.summarise:
        print(summarise(args.out))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.tables or list(TABLES):
        for seed in (int(s) for s in args.seeds.split(",")):
            path = args.out / f"{name}-s{seed}.json"
            if path.exists():
                continue
            start = time.perf_counter()
            result = run_one(name, seed)
            result["wall"] = time.perf_counter() - start
            path.write_text(json.dumps(result, indent=1, default=str))
            print(name, seed, f"{result['wall']:.0f} s", flush=True)


ROWS = ("linear", "hgb", "label_alone", "federation")
HEADLINE = {CLASSIFICATION: ("accuracy", 100.0), REGRESSION: ("rmse", 1.0)}
SECOND = {CLASSIFICATION: ("f1", 100.0), REGRESSION: ("mae", 1.0)}


def summarise(out: Path) -> str:
    """One markdown row per table: each row's headline metric (accuracy % or RMSE) and its
    second (F1 or MAE), mean +- sd over the seeds, the federation's epochs and seconds."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob("*-s[0-9]*.json")):
        if path.name.startswith("grpc-"):
            continue
        r = json.loads(path.read_text())
        runs.setdefault(r["table"], []).append(r)
    head = (
        "| table | seeds | metric | " + " | ".join(ROWS) + " | federation epochs | s (hgb / fed.) |"
    )
    lines = [head, "|" + " --- |" * (len(ROWS) + 5)]
    for name in TABLES:
        if name not in runs:
            continue
        seeds = runs[name]
        task = seeds[0]["task"]
        for metric, scale in (HEADLINE[task], SECOND[task]):
            cells = [_cell([_metric(r, row, metric, scale) for r in seeds]) for row in ROWS]
            fed = [_row(r, "federation") for r in seeds]
            epochs = "/".join(str(f.get("epochs", "-")) for f in fed)
            hgb = [_row(r, "hgb").get("seconds", float("nan")) for r in seeds]
            secs = f"{np.mean(hgb):.1f} / {np.mean([f.get('seconds', np.nan) for f in fed]):.1f}"
            lines.append(
                f"| {name} | {len(seeds)} | {metric} | "
                + " | ".join(cells)
                + f" | {epochs} | {secs} |"
            )
    return "\n".join(lines)


def _row(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in run["rows_run"] if r["row"] == name)


def _metric(run: dict[str, Any], row: str, metric: str, scale: float) -> float:
    found = _row(run, row)
    if "error" in found:
        return float("nan")
    value = found["scores"]["all"].get(metric)
    return float("nan") if value is None else scale * value


def _cell(values: list[float]) -> str:
    if any(np.isnan(values)):
        return "error"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


if __name__ == "__main__":
    main()
