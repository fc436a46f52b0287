"""`vfl bench label-only`: predictions for samples the label party does not hold (issue 14).

K = 3 column blocks (Credit: the paper's Credit setup otherwise; digits: the README's digits
training defaults, 8x8 images cut into three strips), labels at block 0 only, every party misses
each train and test sample with probability p_miss. Per seed, side by side in one run:

- `ours`: LASER-VFL whose heads serve the feature-only parties, with label-only rows (block 0
  keeps the label of every sample whose block it misses: `--keep-labels`);
- `ours-no-label-only`: the same objective, without label-only rows;
- `paper`: the paper's objective (`--no-serve-feature-only`), without label-only rows;
- `centralised`: for each observed set S without block 0, one model in one process on the joined
  blocks of S (benchmarks.centralised), trained on the training samples S observes and tested on
  the test samples observed by exactly S.

Each run is cached as JSON under `runs/label_only-<dataset>/`; an interrupted benchmark resumes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.paper import simulate_worker
from benchmarks.pool import Task, read_json, run_tasks
from benchmarks.setups import PAPER_MODEL, PAPER_PLAIN, SETUPS, paper_plain

log = logging.getLogger(__name__)

K = 3
LABEL_BLOCK = 0
OTHER_SETS: tuple[tuple[int, ...], ...] = ((1,), (2,), (1, 2))
WITH_LABELS: tuple[tuple[int, ...], ...] = ((0,), (0, 1), (0, 2), (0, 1, 2))
# variant -> (heads serve feature-only parties, label-only rows)
VARIANTS: dict[str, tuple[bool, bool]] = {
    "ours": (True, True),
    "ours-no-label-only": (True, False),
    "paper": (False, False),
}
CENTRAL = "centralised"
# digits: TrainConfig's defaults (the README's digits setup); credit: the paper's setup
TRAIN: dict[str, dict[str, Any]] = {"credit": SETUPS["credit"].train, "digits": {}}


@dataclass(frozen=True)
class LabelOnlyJob:
    seeds: Sequence[int]
    results: Path
    data_path: Path | None
    dataset: str = "credit"
    p_miss: float = 0.1
    epochs: int | None = None
    jobs: int = 1
    command: str = ""

    def config(self, variant: str, seed: int) -> dict[str, Any]:
        """The SimulationConfig (as JSON data) of one federation variant (centralised: the data
        of `ours`, which it is compared with)."""
        serve, keep = VARIANTS.get(variant, VARIANTS["ours"])
        train = {**paper_plain(TRAIN[self.dataset]), "method": "laser", "seed": seed}
        train["serve_feature_only"] = serve
        if self.epochs is not None:
            train["epochs"] = self.epochs
        return {
            "dataset": self.dataset,
            "data_path": str(self.data_path) if self.data_path is not None else None,
            "clients": K,
            "p_miss_train": self.p_miss,
            "p_miss_test": [self.p_miss],
            "label_blocks": [LABEL_BLOCK],
            "keep_labels": keep,
            "train": train,
        }

    def digest(self) -> str:
        probe = self.config("ours", 0)
        plain = {k: v for k, v in probe["train"].items() if k not in PAPER_PLAIN}
        model = {k: v for k, v in plain["model"].items() if k not in PAPER_MODEL}
        plain = {k: v for k, v in plain.items() if k != "model"} | (
            {"model": model} if model else {}
        )
        shared = {**probe, "train": {**plain, "seed": None}}  # as cached before PAPER_PLAIN
        shared.pop("data_path")
        return hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:10]

    def tasks(self) -> list[Task]:
        digest, out = self.digest(), self.results / "runs" / f"label_only-{self.dataset}"
        return [
            Task(
                f"{variant} seed{seed}",
                {"config": self.config(variant, seed), "digest": digest, "variant": variant},
                out / f"{variant}-seed{seed}-{digest}.json",
            )
            for seed in self.seeds
            for variant in (*VARIANTS, CENTRAL)
        ]

    @property
    def report_path(self) -> Path:
        return self.results / f"label_only_{self.dataset}.md"


def worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Pool worker: a federation run, or the centralised models of one seed."""
    if payload["variant"] != CENTRAL:
        return {"variant": payload["variant"], **simulate_worker(payload)}
    return {"variant": CENTRAL, **centralised_worker(payload)}


def centralised_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The centralised model of every observed set without block 0, on the data the `ours`
    run of this seed trains and is tested on."""
    from benchmarks.paper.centralised import evaluate, joined, train_model
    from vfl_core.simulate import SimulationConfig, party_data

    config = SimulationConfig.model_validate(payload["config"])
    with tempfile.TemporaryDirectory(prefix="vfl-central-") as tmp:
        parties = next(iter(party_data(config, Path(tmp)).values()))
    classes = parties[0].meta.num_classes
    sets = {}
    for key, blocks in enumerate(OTHER_SETS):
        model = train_model(joined(parties, "train", blocks, False), config.train, classes, key)
        sets[",".join(map(str, blocks))] = evaluate(
            model, joined(parties, "test", blocks, True), classes
        )
    return {"config": json.loads(config.model_dump_json()), "sets": sets}


def run(job: LabelOnlyJob, progress: bool = True) -> list[str]:
    meta = {"command": job.command}
    return run_tasks(
        worker, job.tasks(), job.jobs, desc="label-only runs", progress=progress, meta=meta
    )


# ------------------------------------------------------------------------------ reading


def collect(job: LabelOnlyJob) -> dict[str, dict[int, dict[str, dict[str, Any]]]]:
    """variant -> seed -> observed set ("1,2") -> {"samples", "accuracy", "f1"} (fractions)."""
    found: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    for task in job.tasks():
        record = read_json(task.out)
        if record is None:
            continue
        seed = int(record["config"]["train"]["seed"])
        if record["variant"] == CENTRAL:
            rows = record["sets"]
        else:
            rows = {r["observed"]: r for r in record["results"][0]["rows"]}
        found.setdefault(record["variant"], {})[seed] = rows
    return found


def pooled(rows: dict[str, dict[str, Any]], sets: Sequence[tuple[int, ...]]) -> float | None:
    """Sample-weighted accuracy over `sets` (the accuracy of their samples taken together)."""
    names = [",".join(map(str, s)) for s in sets]
    present = [rows[n] for n in names if n in rows and rows[n].get("accuracy") is not None]
    total = sum(r["samples"] for r in present)
    return sum(r["accuracy"] * r["samples"] for r in present) / total if total else None


def records(job: LabelOnlyJob) -> list[dict[str, Any]]:
    return [r for r in (read_json(t.out) for t in job.tasks()) if r is not None]


def stat(values: Sequence[float]) -> str:
    if not values:
        return "—"
    arr = 100.0 * np.asarray(values, dtype=np.float64)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
    return f"{arr.mean():.2f} ± {std:.2f} ({len(arr)})"
