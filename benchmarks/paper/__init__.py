"""The paper suite (`vfl bench paper`): LASER-VFL beside the paper's baselines on the paper's
setups. This module holds the accuracy grid of the paper's Table 1 (`vfl bench paper accuracy`):
methods x train p_miss x test p_miss x seeds, run by the other experiments of the suite too
(paper.label_only, paper.faults) and by the option sweeps (benchmarks.wire_dtype).

One training run per (method, train p_miss, seed); every test p_miss is evaluated after that same
run (`run_simulation` prepares one test variant per test p_miss with the same train split). Each
run is cached as JSON under `<runs>/<dataset>/<method>-ptrain<p>-seed<s>-<setup digest>.json`
with its full configuration, so an interrupted grid resumes and later sessions can fill it in.
The setup digest covers the fields the setup fixes (not method, train p_miss, seed or the data
path), so a changed setup (say, other epochs) never mixes with old runs; the report selects runs
by the digest of their stored config, whatever the file is called.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.paper.report import AccuracyContext, CellKey, Stat, accuracy_markdown, accuracy_plot
from benchmarks.pool import Task, machine, read_json, run_tasks
from benchmarks.setups import P_MISS, SETUPS, Setup, paper_plain

log = logging.getLogger(__name__)

FORMAT = 1


@dataclass(frozen=True)
class Run:
    """One training run of the grid."""

    method: str
    p_train: float
    seed: int

    @property
    def label(self) -> str:
        return f"{self.method} ptrain{self.p_train:g} seed{self.seed}"


def simulation_config(
    setup: Setup,
    run: Run,
    *,
    data_path: Path | None = None,
    p_test: Sequence[float] = P_MISS,
    epochs: int | None = None,
) -> Any:
    """The SimulationConfig of one run (imported lazily: the parent of a pool needs no torch)."""
    from vfl_core.simulate import SimulationConfig

    train = {**paper_plain(setup.train), "method": run.method, "seed": run.seed}
    if epochs is not None:
        train["epochs"] = epochs
    return SimulationConfig.model_validate(
        {
            "dataset": setup.dataset,
            "data_path": data_path,
            "clients": setup.clients,
            "p_miss_train": run.p_train,
            "p_miss_test": tuple(p_test),
            "test_fraction": setup.test_fraction,
            "layout": setup.layout,
            "train": train,
        }
    )


def setup_digest(setup: Setup, config: dict[str, Any]) -> str:
    """Digest of a run's configuration (as JSON) without its run coordinates.

    Only the fields a Setup fixes take part (data set, K, test p_miss, split, layout and the
    TrainConfig fields the setup sets, plus epochs), so a new config field with a default value
    elsewhere in the code base does not orphan the runs already cached.
    """
    train = config["train"]
    picked = {
        "dataset": config["dataset"],
        "clients": config["clients"],
        "p_miss_test": [float(p) for p in config["p_miss_test"]],
        "test_fraction": config["test_fraction"],
        "layout": config["layout"],
        # a run from before a field existed lacks it: None, so it matches no setup that sets it
        "train": {k: train.get(k) for k in sorted({*setup.train, "epochs"} - {"model"})},
        "model": {k: train["model"][k] for k in sorted(setup.train.get("model", {}))},
    }
    blob = json.dumps(picked, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def run_file(runs_dir: Path, dataset: str, run: Run, digest: str) -> Path:
    name = f"{run.method}-ptrain{run.p_train:g}-seed{run.seed}-{digest}.json"
    return runs_dir / dataset / name


def grid_runs(methods: Sequence[str], p_train: Sequence[float], seeds: Sequence[int]) -> list[Run]:
    """Seed-major order, so an interrupted grid has whole seeds rather than whole methods."""
    return [Run(m, p, s) for s in seeds for p in p_train for m in methods]


def grid_tasks(
    setup: Setup,
    runs: Iterable[Run],
    runs_dir: Path,
    *,
    data_path: Path | None = None,
    p_test: Sequence[float] = P_MISS,
    epochs: int | None = None,
) -> list[Task]:
    tasks = []
    for run in runs:
        config = simulation_config(setup, run, data_path=data_path, p_test=p_test, epochs=epochs)
        as_json = json.loads(config.model_dump_json())
        digest = setup_digest(setup, as_json)
        payload = {"config": as_json, "digest": digest}
        tasks.append(Task(run.label, payload, run_file(runs_dir, setup.dataset, run, digest)))
    return tasks


def simulate_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Pool worker: one `run_simulation`, returned as the JSON the cache keeps."""
    from vfl_core.simulate import SimulationConfig, run_simulation

    config = SimulationConfig.model_validate(payload["config"])
    result = run_simulation(config, progress=False)
    return {
        "format": FORMAT,
        "digest": payload["digest"],
        "run": {
            "method": config.train.method,
            "p_train": config.p_miss_train,
            "seed": config.train.seed,
        },
        **result.to_json(),
    }


# --------------------------------------------------------------------------- reading results


def load_runs(runs_dir: Path, setup: Setup, digest: str) -> list[dict[str, Any]]:
    """Every finished run of this setup in the cache (its stored config has this digest)."""
    records = []
    for path in sorted((runs_dir / setup.dataset).glob("*.json")):
        record = read_json(path)
        if record is None or "config" not in record or "run" not in record:
            log.warning("skipping unreadable run file %s", path)
            continue
        if setup_digest(setup, record["config"]) == digest:
            records.append(record)
    return records


def metric_value(record: dict[str, Any], p_test: float, metric: str) -> float | None:
    """The metric (x 100) of the "all" row for one test p_miss of a run."""
    for result in record["results"]:
        if result["p_miss_test"] is not None and np.isclose(result["p_miss_test"], p_test):
            row = next(r for r in result["rows"] if r["observed"] == "all")
            return 100.0 * float(row[metric])
    return None


def collect(
    records: Iterable[dict[str, Any]], metric: str, p_test: Sequence[float] = P_MISS
) -> dict[CellKey, dict[int, float]]:
    """(method, train p_miss, test p_miss) -> {seed: metric x 100}."""
    cells: dict[CellKey, dict[int, float]] = defaultdict(dict)
    for record in records:
        run = record["run"]
        for p in p_test:
            value = metric_value(record, p, metric)
            if value is not None:
                cells[(run["method"], float(run["p_train"]), float(p))][int(run["seed"])] = value
    return dict(cells)


def summarize(cells: dict[CellKey, dict[int, float]]) -> dict[CellKey, Stat]:
    out = {}
    for key, by_seed in cells.items():
        values = np.array(list(by_seed.values()), dtype=np.float64)
        std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        out[key] = Stat(float(values.mean()), std, len(values))
    return out


# ---------------------------------------------------------------- vfl bench paper accuracy


@dataclass(frozen=True)
class AccuracyJob:
    dataset: str
    methods: Sequence[str]
    seeds: Sequence[int]
    p_train: Sequence[float]
    p_test: Sequence[float]
    results: Path  # benchmarks/results
    data_path: Path | None = None
    epochs: int | None = None
    jobs: int = 2
    command: str = ""

    @property
    def setup(self) -> Setup:
        return SETUPS[self.dataset]

    @property
    def runs_dir(self) -> Path:
        return self.results / "runs"


def run_grid(job: AccuracyJob, progress: bool = True) -> list[str]:
    """Run every run of the grid that is not cached; returns the labels of failed runs."""
    runs = grid_runs(job.methods, job.p_train, job.seeds)
    tasks = grid_tasks(
        job.setup,
        runs,
        job.runs_dir,
        data_path=job.data_path,
        p_test=job.p_test,
        epochs=job.epochs,
    )
    desc = f"{job.dataset} grid"
    meta = {"command": job.command}
    return run_tasks(simulate_worker, tasks, job.jobs, desc=desc, progress=progress, meta=meta)


def write_report(job: AccuracyJob) -> tuple[Path, str]:
    """Write accuracy_<dataset>.md (+ .png) from the cached runs; returns the path and text."""
    setup = job.setup
    probe = simulation_config(
        setup,
        grid_runs(job.methods[:1], job.p_train[:1], job.seeds[:1])[0],
        p_test=job.p_test,
        epochs=job.epochs,
    )
    digest = setup_digest(setup, json.loads(probe.model_dump_json()))
    records = load_runs(job.runs_dir, setup, digest)
    records = [r for r in records if r["run"]["seed"] in job.seeds]
    stats = summarize(collect(records, setup.metric, job.p_test))
    ctx = AccuracyContext(
        command=job.command,
        machine=records[0]["machine"] if records else machine(),
        methods=job.methods,
        seeds=job.seeds,
        p_train=job.p_train,
        p_test=job.p_test,
        epochs=job.epochs,
        digest=digest,
        run_commands=sorted({r.get("command", "(not recorded)") for r in records}),
    )
    md_path = job.results / f"accuracy_{setup.dataset}.md"
    png = accuracy_plot(stats, setup, ctx, md_path.with_suffix(".png"))
    text = accuracy_markdown(stats, setup, ctx, png.name if png else None)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(text)
    log.info("wrote %s from %d runs", md_path, len(records))
    return md_path, text
