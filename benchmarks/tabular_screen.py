"""A cheap screen of party-model candidates for the tabular defaults (issue 27): the central MLP
row of `vfl bench tabular` (the federation's architecture and training on the joined table,
benchmarks.tabular_baselines.central_row) under each candidate, on every table and seed, before
any candidate is run in the federation sweep (benchmarks.tabular_sweep). Seconds per run where a
federation takes a minute; what it cannot show: anything of the federation itself (the subset
choice, the validation threshold), except the `towers-*` settings' per-party models met by a
mean or a concatenation of their embeddings (benchmarks.tabular_towers).

    python -m benchmarks.tabular_screen --data-path ../shared/data --jobs 2 \
        --settings defaults dropout0.1 cosine --out benchmarks/results/runs/tabular-screen
    python -m benchmarks.tabular_screen --summarise benchmarks/results/runs/tabular-screen

Each (setting, table, seed) is one cached JSON under `--out` (delete it to rerun).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.tabular_baselines import Fit, central_row
from benchmarks.tabular_data import prepare
from benchmarks.tabular_sweep import run_cli
from benchmarks.tabular_tables import tables
from vfl_core.config import AUTO_MIN_VALIDATION, TrainConfig

# setting -> (TrainConfig fields over the defaults, the model's fields, how the central MLP fits)
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "defaults": ({}, {}, {}),
    "dropout0.1": ({}, {"dropout": 0.1}, {}),
    "dropout0.2": ({}, {"dropout": 0.2}, {}),
    "cosine": ({"scheduler": "cosine"}, {}, {}),
    "layernorm": ({}, {"norm": "layer"}, {}),
    "batchnorm": ({}, {"norm": "batch"}, {}),
    "catdim2": ({}, {"categorical_dim": 2}, {}),
    "catdim16": ({}, {"categorical_dim": 16}, {}),
    # patience 10 only where early stopping is on by default (validation share >= 100 samples)
    "patience10-where-on": ({}, {}, {"patience": "10-where-on"}),
    "watch-accuracy": ({}, {}, {"watch": "accuracy"}),
    "watch-logloss": ({}, {}, {"watch": "logloss"}),
    "smooth0.1": ({}, {}, {"smoothing": 0.1}),
    "batchnorm-dropout0.2": ({}, {"norm": "batch", "dropout": 0.2}, {}),
    "batchnorm-cosine": ({"scheduler": "cosine"}, {"norm": "batch"}, {}),
    "dropout0.2-cosine": ({"scheduler": "cosine"}, {"dropout": 0.2}, {}),
    # issue 27's ablation: the central MLP in the federation's shape (benchmarks.tabular_towers)
    "towers-mean": ({}, {}, {"towers": "mean"}),
    "towers-concat": ({}, {}, {"towers": "concat"}),
    "towers-mean-drop0.5": ({}, {}, {"towers": "mean", "drop": 0.5}),
    "towers-concat-drop0.5": ({}, {}, {"towers": "concat", "drop": 0.5}),
    "towers-mean-head2": ({}, {}, {"towers": "mean", "head_layers": 2}),
    "towers-mean-head256x2": ({}, {"head_hidden": 256}, {"towers": "mean", "head_layers": 2}),
    "towers-mean-head256": ({}, {"head_hidden": 256}, {"towers": "mean"}),
}


def config(setting: str, seed: int) -> TrainConfig:
    train, model, _ = SETTINGS[setting]
    return TrainConfig.model_validate({"seed": seed, **train, "model": model})


def worker(payload: dict[str, Any]) -> dict[str, Any]:
    data_path = Path(payload["data_path"]) if payload["data_path"] else None
    table = tables(data_path, False)[payload["table"]](payload["seed"], False)
    train = config(payload["setting"], payload["seed"])
    fit = dict(SETTINGS[payload["setting"]][2])
    with tempfile.TemporaryDirectory(prefix="vfl-tabular-screen-") as tmp:
        prep = prepare(table, payload["seed"], Path(tmp) / "parties")
        if fit.get("patience") == "10-where-on":
            held = round(train.validation_fraction * len(prep.train_rows))
            fit["patience"] = 10 if held >= AUTO_MIN_VALIDATION else 0
        row = central_row(prep, train, Fit(**fit))
    row["row"] = "federation"  # the summary's name for the candidate's own row
    return {"task": table.task, "rows_run": [row], "train": train.model_dump(mode="json")}


def main() -> None:
    out = Path("benchmarks/results/runs/tabular-screen")
    run_cli(SETTINGS, worker, lambda setting: {"setting": setting}, out, "screen", __doc__)


if __name__ == "__main__":
    main()
