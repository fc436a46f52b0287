"""The effect of the tabular defaults (issue 27, items 2-4), in process, on three small tables.

Each table is split over three parties by columns (labels at party 0, parties 1 and 2
feature-only), each party holding a random share of the rows (partial overlap), written as one
CSV per party with an ID column and read as a user's own tables are (`vfl simulate --table`).
The test split is by ID hash (the tables' default). Settings compared, same seed and data:

- `plain`: the paper's run (every epoch, threshold 0.5, the full set predicts, heads serving
  feature-only sets): what `vfl simulate` did before the defaults;
- `defaults`: TrainConfig's defaults (early stopping on tables, threshold and subsets chosen
  on the validation split);
- `defaults-own-sets`: the defaults with serve_feature_only off (item 4: what serving the
  feature-only sets costs the label party's own sets);
- `early-stop-only` (threshold 0.5, the full set predicts) and `defaults-threshold-0.5` (early
  stopping and the subset choice): each default's share of the difference.

    python -m benchmarks.defaults_effect --seeds 0 1 --out benchmarks/results/defaults_effect.json

Prints one line per (table, setting, seed) and a summary table of the means.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vfl_core.config import AUTO_PATIENCE, TrainConfig
from vfl_core.data.tabular import TableSource, load_table_federation
from vfl_core.inference.metrics import EvalReport
from vfl_core.simulate import SimulationConfig, run_simulation
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

log = logging.getLogger(__name__)

CREDIT_CSV = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "UCI_Credit_Card.csv"
SHARE = (1.0, 0.7, 0.6)  # rows each party holds: the label party all, the others part
EPOCHS = 60  # TrainConfig's default: the ceiling for early stopping

SETTINGS: dict[str, dict[str, Any]] = {
    "plain": {"early_stop_patience": 0, "threshold": 0.5, "subset_choice": "plain"},
    "defaults": {},
    "defaults-own-sets": {"serve_feature_only": False},
    # each default on its own
    "early-stop-only": {"threshold": 0.5, "subset_choice": "plain"},
    "defaults-threshold-0.5": {"threshold": 0.5},
}


def credit(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """A random subsample of UCI Credit (23 columns, 22% defaults)."""
    data = np.genfromtxt(CREDIT_CSV.resolve(), delimiter=",", skip_header=1)
    pick = np.random.default_rng(seed).permutation(len(data))[:rows]
    return data[pick, :-1], data[pick, -1].astype(int), "classification"


def breast_cancer(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return x, y.astype(int), "classification"


def diabetes(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    return x, y, "regression"


TABLES: dict[str, Callable[[int, int], tuple[np.ndarray, np.ndarray, str]]] = {
    "credit": credit,
    "breast-cancer": breast_cancer,
    "diabetes": diabetes,
}


def write_parties(x: np.ndarray, y: np.ndarray, out: Path, seed: int) -> list[Path]:
    """One CSV per party: its share of the rows, its block of the columns, labels at party 0."""
    rng = np.random.default_rng(seed)
    blocks = np.array_split(np.arange(x.shape[1]), len(SHARE))
    paths = []
    for k, (cols, share) in enumerate(zip(blocks, SHARE, strict=True)):
        held = np.flatnonzero(rng.random(len(x)) < share)
        path = out / f"party{k}.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", *(f"x{c}" for c in cols), *(["label"] if k == 0 else [])])
            for i in held:
                w.writerow(
                    [f"r{i}", *(repr(float(v)) for v in x[i, cols]), *([y[i]] if k == 0 else [])]
                )
        paths.append(path)
    return paths


def sources(paths: list[Path], task: str) -> tuple[TableSource, ...]:
    return tuple(
        TableSource(
            path=p,
            id_column="id",
            label_column="label" if k == 0 else None,
            block=k,
            num_blocks=len(paths),
            task=task,
        )
        for k, p in enumerate(paths)
    )


def validation_samples(paths: list[Path], task: str, seed: int) -> int:
    """The samples early stopping would hold out of this federation (before any threshold)."""
    train = TrainConfig(seed=seed, early_stop_patience=AUTO_PATIENCE)
    data = load_table_federation(sources(paths, task))
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"-") for d in data}
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    return 0 if fed.early_stop is None else fed.early_stop.validation_samples


def run_one(paths: list[Path], task: str, seed: int, setting: dict[str, Any]) -> dict[str, Any]:
    tables = sources(paths, task)
    train = TrainConfig(seed=seed, epochs=EPOCHS, **setting)
    start = time.perf_counter()
    result = run_simulation(SimulationConfig(tables=tables, train=train), subsets=True)
    seconds = time.perf_counter() - start
    report = next(iter(result.reports.values()))
    overall = report.overall()
    label_alone = next(s for s in next(iter(result.subsets.values())) if s.blocks == (0,))
    # the label party's own sets (its customers) and the feature-only parties' sets
    own = EvalReport({p: st for p, st in report.by_pattern.items() if 0 in p})
    others = EvalReport({p: st for p, st in report.by_pattern.items() if 0 not in p})
    return {
        "epochs": len(result.epochs),
        "seconds": round(seconds, 1),
        "test": overall.to_json(),
        "own_sets": own.overall().to_json(),
        "feature_only_sets": others.overall().to_json() if others.by_pattern else None,
        "label_party_alone": label_alone.to_json(),
        "rows": [r.to_json() for r in report.rows()],
        "choice": result.choice,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--tables", nargs="+", default=list(TABLES))
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS))
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--validation-counts",
        action="store_true",
        help="only print each table's validation samples (early stopping's hold-out)",
    )
    parser.add_argument(
        "--summarise", type=Path, default=None, help="only print the table of a folder's JSONs"
    )
    args = parser.parse_args()
    if args.summarise is not None:
        print(summary(collected(args.summarise)))
        return
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)  # small models: one thread each, several runs side by side
    runs = []
    for table in args.tables:
        for seed in args.seeds:
            x, y, task = TABLES[table](args.rows, seed)
            with tempfile.TemporaryDirectory() as tmp:
                paths = write_parties(x, y, Path(tmp), seed)
                if args.validation_counts:
                    count = validation_samples(paths, task, seed)
                    print(f"{table} rows {len(x)} seed {seed}: {count} validation samples")
                    continue
                for name in args.settings:
                    run = run_one(paths, task, seed, SETTINGS[name])
                    run.update(table=table, setting=name, seed=seed)
                    runs.append(run)
                    print(
                        json.dumps(
                            {
                                k: run[k]
                                for k in ("table", "setting", "seed", "epochs", "seconds", "test")
                            }
                        ),
                        flush=True,
                    )
    if args.validation_counts:
        return
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(runs, indent=1))
    print(summary(runs))


def collected(directory: Path) -> list[dict[str, Any]]:
    """The runs of every --out JSON in `directory`; credit's named by the file's rows
    (credit6k*.json: 6000 rows, other credit*.json: 2000, as docs/tabular-defaults.md ran them)."""
    runs = []
    for path in sorted(directory.glob("*.json")):
        for run in json.loads(path.read_text()):
            if path.stem.startswith("credit"):
                rows = 6000 if path.stem.startswith("credit6k") else 2000
                run["table"] = f"credit {rows} rows"
            runs.append(run)
    return runs


def summary(runs: list[dict[str, Any]]) -> str:
    """Means over seeds. Classification in %: accuracy, F1, ROC AUC, Brier (x100); regression:
    RMSE, MAE, R^2. Then the headline (accuracy or RMSE) on the label party's own sets, on the
    feature-only parties' sets, and of the label party alone (its subset predictor)."""
    lines = [
        "| table | setting | epochs | s | acc / RMSE | F1 / MAE | AUC / R^2 | Brier x100 "
        "| own sets | feature-only sets | label party alone |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    order = list(SETTINGS)
    keys = sorted(
        {(r["table"], r["setting"]) for r in runs}, key=lambda k: (k[0], order.index(k[1]))
    )
    for table, setting in keys:
        group = [r for r in runs if (r["table"], r["setting"]) == (table, setting)]
        regression = "rmse" in group[0]["test"]
        names = ("rmse", "mae", "r2", "brier") if regression else ("accuracy", "f1", "auc", "brier")
        scale = 1.0 if regression else 100.0
        cells = [_mean(group, "test", n, scale) for n in names]
        head = names[0]
        cells += [_mean(group, part, head, scale) for part in ("own_sets", "feature_only_sets")]
        cells.append(_mean(group, "label_party_alone", head, scale))
        epochs = "/".join(str(r["epochs"]) for r in group)
        secs = f"{np.mean([r['seconds'] for r in group]):.1f}"
        lines.append(f"| {table} | {setting} | {epochs} | {secs} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _mean(group: list[dict[str, Any]], part: str, name: str, scale: float) -> str:
    values = [(r[part] or {}).get(name) for r in group]
    values = [v for v in values if v is not None]
    return f"{scale * np.mean(values):.2f}" if values else "-"


if __name__ == "__main__":
    main()
