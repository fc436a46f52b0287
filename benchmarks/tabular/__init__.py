"""`vfl bench tabular`: on tables nobody tuned for, does the federation with its defaults beat each
organisation alone and the centralised baselines (issue 27)?

Per table (benchmarks.tabular.tables) and seed: K = 3 party CSVs (labels at party 0, partial
overlap), read by the project's tabular path; then the rows (benchmarks.tabular.rows): `linear`,
`hgb`, `central_mlp`, `label_alone` and `federation`, and on the gRPC seeds `federation_grpc`.
Each (table, seed, transport) is one cached run under `results/runs/tabular[-quick]/`, so an
interrupted benchmark resumes; the report (benchmarks.tabular.report) is rebuilt from the runs.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.pool import Task, run_tasks

QUICK_EPOCHS = 5  # the quick mode's --epochs (a user's option, the only one it sets)
# the federation's test scores every epoch: a diagnostic of the epoch count, and what the rounds
# and CPU seconds to within 0.2 points of the model are read from (benchmarks.tabular.sweep)
CURVE_EVERY = 1


@dataclass(frozen=True)
class TabularJob:
    tables: tuple[str, ...]
    seeds: tuple[int, ...]
    grpc_seeds: tuple[int, ...]  # the seeds whose federation also runs over gRPC
    results: Path
    data_path: Path | None
    quick: bool = False
    jobs: int = 0
    command: str = ""

    @property
    def name(self) -> str:
        return "tabular_quick" if self.quick else "tabular"

    @property
    def runs(self) -> Path:
        return self.results / "runs" / self.name.replace("_", "-")

    @property
    def epochs(self) -> int | None:
        return QUICK_EPOCHS if self.quick else None

    def tasks(self) -> list[Task]:
        out = []
        for table in self.tables:
            for seed in self.seeds:
                kinds = ("local", "grpc") if seed in self.grpc_seeds else ("local",)
                for kind in kinds:
                    payload = {
                        "table": table,
                        "seed": seed,
                        "kind": kind,
                        "quick": self.quick,
                        "epochs": self.epochs,
                        "data_path": str(self.data_path) if self.data_path else None,
                    }
                    out.append(
                        Task(
                            f"{table} s{seed} {kind}",
                            payload,
                            self.runs / f"{table}-s{seed}-{kind}.json",
                        )
                    )
        return out


def available_tables(data_path: Path | None, quick: bool) -> tuple[str, ...]:
    from benchmarks.tabular.tables import QUICK_TABLES, tables

    names = tuple(tables(data_path, quick))
    return tuple(n for n in names if n in QUICK_TABLES) if quick else names


def run(job: TabularJob, progress: bool = True) -> list[str]:
    """Run the missing runs; returns the labels of those that failed."""
    meta = {"command": job.command}
    return run_tasks(
        worker, job.tasks(), job.jobs, desc="tabular runs", progress=progress, meta=meta
    )


def worker(payload: dict[str, Any]) -> dict[str, Any]:
    """One table and seed: every centralised row and the in-process federation rows ("local"),
    or the gRPC federation ("grpc")."""
    # imported here, not above, so that `python -m benchmarks.tabular.tables` (the census-like
    # table's CSVs) finds its module not yet imported
    from benchmarks.tabular.rows import central_row, grpc_row, hgb_row, linear_row, simulate_row
    from benchmarks.tabular.tables import LABEL_BLOCK, K, prepare, tables
    from vfl_core.config import TrainConfig

    data_path = Path(payload["data_path"]) if payload["data_path"] else None
    table = tables(data_path, payload["quick"])[payload["table"]](payload["seed"], payload["quick"])
    epochs = payload["epochs"]
    with tempfile.TemporaryDirectory(prefix="vfl-bench-tabular-") as tmp:
        prep = prepare(table, payload["seed"], Path(tmp) / "parties")
        info = {
            "task": table.task,
            "rows": table.rows,
            "columns": len(table.columns),
            "categorical": len(table.categorical),
            "held": prep.split.held.sum(axis=1).tolist(),
            "train": len(prep.train_rows),
            "test": len(prep.test_rows),
        }
        if payload["kind"] == "grpc":
            return {**info, "rows_run": [grpc_row(prep, Path(tmp) / "grpc", epochs)]}
        fed_json = Path(tmp) / "fed.json"
        fed = simulate_row("federation", prep, list(range(K)), fed_json, epochs, CURVE_EVERY)
        alone = simulate_row("label_alone", prep, [LABEL_BLOCK], Path(tmp) / "alone.json", epochs)
        if alone["train"] != fed["train"]:  # the label party alone runs with the same defaults
            raise RuntimeError(f"label_alone ran {alone['train']}, the federation {fed['train']}")
        train = TrainConfig.model_validate(fed["train"])
        rows = [linear_row(prep), hgb_row(prep), central_row(prep, train), alone, fed]
        return {**info, "rows_run": rows}
