"""`vfl bench paper faults`: training through party failures, in the setting of the DVFL paper.

Amalanshu, Sirvi, Inouye, "Decoupled Vertical Federated Learning" (guest loss): MNIST as four
28x7 strips, at every training round each party that is up fails with probability R_d and each
failed party comes back with probability R_u. We compare LASER-VFL with three split-learning
baselines that share one concatenation head at the active party (block 0) and differ only in what
they do when a party is missing in a round: skip the round (`svfl`), zero-fill its embedding
(`zerofill`) or reuse its last embedding of the same sample (`stale`).

Two scenarios: every party can fail ("all"), or the active party never fails ("host": DVFL's
guests fail, the label-holding host stays). Every method sees the same failures for a given seed
(the draws come from the seed's FAULTS stream, not from the method). Evaluation is on the test
split with every party back. One run per (method, scenario, R_d, R_u, seed), cached as JSON under
`runs/faults/`; an interrupted benchmark resumes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.paper import simulate_worker
from benchmarks.pool import Task, machine, read_json, run_tasks
from benchmarks.setups import SETUPS, Stat, md_table, pyplot, save_figure, write_job_report

log = logging.getLogger(__name__)

# Rows of the tables. `laser@0` is LASER-VFL with labels at block 0 only: the split-learning
# baselines only ever use block 0's labels (their one head is at the active party), so this row
# separates what LASER-VFL's algorithm buys from what labels at every party buy.
METHODS: tuple[str, ...] = ("laser", "laser@0", "svfl", "zerofill", "stale")
NAMES = {
    "laser": "LASER-VFL (labels at every party)",
    "laser@0": "LASER-VFL (labels at block 0 only)",
    "svfl": "split learning, skip the round",
    "zerofill": "split learning, zero-fill",
    "stale": "split learning, stale embedding",
}
SCENARIOS = {"all": (), "host": (0,)}  # scenario -> blocks that never fail
FAIL_RATE = 0.3
REJOIN_RATES: tuple[float, ...] = (1.0, 0.5, 0.1)
# A small MLP per 28x7 strip: the fault grid is 28 runs per seed on a shared 2-core CPU, where the
# accuracy grid's CNN took minutes per run.
MNIST_STRIP_MODEL = {"representation": "mlp", "hidden": (128,), "embed_dim": 32}
MNIST_NOTES = (
    "MNIST-10k (the t10k file as a data set of its own), 8 000 train / 2 000 test split from the "
    "seed, four 28x7 strips (one per party). Per party an MLP 196 -> 128 -> 32; linear heads; "
    "Adam lr 1e-3, weight decay 1e-4; batch 64; {epochs} epochs."
)
DVFL_PUBLISHED = (
    "DVFL (the paper's own method) reaches 97.58 to 97.81% test accuracy on full MNIST "
    "(60 000 training images) under guest loss; the paper's split-learning baselines lose more."
)


@dataclass(frozen=True)
class Cell:
    method: str
    scenario: str  # "none" for the run without faults
    rejoin: float | None  # R_u; None without faults

    @property
    def column(self) -> str:
        return "no faults" if self.rejoin is None else f"{self.scenario} R_u={self.rejoin:g}"


@dataclass(frozen=True)
class FaultJob:
    seeds: Sequence[int]
    results: Path
    data_path: Path | None
    methods: Sequence[str] = METHODS
    scenarios: Sequence[str] = ("all", "host")
    rejoin_rates: Sequence[float] = REJOIN_RATES
    fail_rate: float = FAIL_RATE
    epochs: int | None = None
    dataset: str = "mnist"  # digits for tests
    jobs: int = 1
    command: str = ""

    def cells(self) -> list[Cell]:
        settings = [("none", None), *((s, r) for s in self.scenarios for r in self.rejoin_rates)]
        return [Cell(m, s, r) for m in self.methods for s, r in settings]

    def config(self, cell: Cell, seed: int) -> dict[str, Any]:
        setup = SETUPS[self.dataset]
        method, _, labels = cell.method.partition("@")
        train = {**setup.train, "method": method, "seed": seed}
        if self.dataset == "mnist":
            train["model"] = MNIST_STRIP_MODEL
        if self.epochs is not None:
            train["epochs"] = self.epochs
        faults: dict[str, Any] = {}
        if cell.rejoin is not None:
            spare = SCENARIOS[cell.scenario]
            faults = {"fail_rate": self.fail_rate, "rejoin_rate": cell.rejoin, "spare": spare}
        return {
            "dataset": self.dataset,
            "data_path": str(self.data_path) if self.data_path is not None else None,
            "clients": 4,
            "p_miss_test": [0.0],
            "test_fraction": setup.test_fraction,
            "layout": "strips",
            # every party holds labels (the baselines' active party is block 0), or only `@k`
            "label_blocks": [int(labels)] if labels else None,
            "train": train,
            "faults": faults,
        }

    def digest(self) -> str:
        """What every run of this benchmark shares (setup, epochs, R_d), not the cell or seed."""
        probe = self.config(Cell("laser", "none", None), 0)
        shared = {**probe, "train": {**probe["train"], "method": None, "seed": None}}
        shared.pop("data_path")
        shared["fail_rate"] = self.fail_rate
        return hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:10]

    def tasks(self) -> list[Task]:
        digest, out = self.digest(), self.results / "runs" / f"faults-{self.dataset}"
        tasks = []
        for seed in self.seeds:
            for cell in self.cells():
                rejoin = "none" if cell.rejoin is None else f"{cell.scenario}-ru{cell.rejoin:g}"
                name = f"{cell.method}-{rejoin}-seed{seed}-{digest}.json"
                payload = {"config": self.config(cell, seed), "digest": digest}
                tasks.append(Task(f"{cell.method} {cell.column} seed{seed}", payload, out / name))
        return tasks

    @property
    def report_path(self) -> Path:
        suffix = "" if self.dataset == "mnist" else f"_{self.dataset}"
        return self.results / f"faults{suffix}.md"


def run(job: FaultJob, progress: bool = True) -> list[str]:
    meta = {"command": job.command}
    return run_tasks(
        simulate_worker, job.tasks(), job.jobs, desc="fault runs", progress=progress, meta=meta
    )


def _cell_of(record: dict[str, Any]) -> Cell:
    config = record["config"]
    faults = config.get("faults") or {}
    method, labels = config["train"]["method"], config.get("label_blocks")
    if labels:
        method += "@" + ",".join(map(str, labels))
    if not faults.get("fail_rate"):
        return Cell(method, "none", None)
    scenario = "host" if list(faults.get("spare") or []) else "all"
    return Cell(method, scenario, float(faults["rejoin_rate"]))


def collect(job: FaultJob) -> dict[Cell, dict[int, dict[str, Any]]]:
    """Cell -> seed -> {"accuracy": %, "faults": counts} of every finished run of this job."""
    found: dict[Cell, dict[int, dict[str, Any]]] = defaultdict(dict)
    for task in job.tasks():
        record = read_json(task.out)
        if record is None:
            continue
        row = next(r for r in record["results"][0]["rows"] if r["observed"] == "all")
        seed = int(record["config"]["train"]["seed"])
        found[_cell_of(record)][seed] = {
            "accuracy": 100.0 * float(row["accuracy"]),
            "federation": 100.0 * float(row["federation_accuracy"]),
            "faults": record.get("faults") or {},
            "seconds": float(record["seconds"]),
            "machine": record.get("machine"),
            "command": record.get("command", "(not recorded)"),
        }
    return dict(found)


def stat(values: Sequence[float]) -> Stat:
    arr = np.asarray(values, dtype=np.float64)
    return Stat(float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0, len(arr))


def _columns(job: FaultJob) -> list[tuple[str, float | None]]:
    return [("none", None), *((s, r) for s in job.scenarios for r in job.rejoin_rates)]


def _label(scenario: str, rejoin: float | None) -> str:
    return Cell("", scenario, rejoin).column


def _fmt(s: Stat | None) -> str:
    return "—" if s is None else f"{s.mean:.2f} ± {s.std:.2f} ({s.n})"


Found = dict[Cell, dict[int, dict[str, Any]]]
# "federation": the federation's one answer per sample (the mean of the head parties'
# probabilities); "accuracy": the LASER-VFL paper's, each observing predictor's correctness
# averaged. A split-learning baseline has one predictor, so for it the two are the same.
METRICS = {"federation": "the federation's prediction", "accuracy": "per predictor (paper's)"}


def losses(found: Found, cell: Cell, metric: str = "federation") -> Stat | None:
    """Accuracy lost to the faults, paired by seed with the same method's no-fault run."""
    base, runs = found.get(Cell(cell.method, "none", None), {}), found.get(cell, {})
    seeds = sorted(set(base) & set(runs))
    if not seeds:
        return None
    return stat([base[s][metric] - runs[s][metric] for s in seeds])


def _acc(found: Found, cell: Cell, metric: str = "federation") -> Stat | None:
    runs = found.get(cell)
    return stat([r[metric] for r in runs.values()]) if runs else None


def verdict(job: FaultJob, found: Found, metric: str = "federation") -> list[str]:
    """The issue's acceptance check at R_u = 0.1: each LASER-VFL row against each baseline."""
    lines = []
    for scenario in job.scenarios:
        for ours_key in (m for m in job.methods if m.startswith("laser")):
            ours = losses(found, Cell(ours_key, scenario, 0.1), metric)
            for method in (m for m in job.methods if not m.startswith("laser")):
                theirs = losses(found, Cell(method, scenario, 0.1), metric)
                if ours is None or theirs is None:
                    lines.append(f"- {scenario}, R_u=0.1, {ours_key} vs {method}: runs missing")
                    continue
                ok = "ok" if ours.mean < theirs.mean else "NOT MET"
                lines.append(
                    f"- {scenario}, R_d={job.fail_rate:g}, R_u=0.1: {NAMES[ours_key]} loses "
                    f"{ours.mean:.2f} points, {NAMES[method]} {theirs.mean:.2f}: {ok}"
                )
    return lines


def _tables(job: FaultJob, found: Found, metric: str) -> list[str]:
    cols = _columns(job)
    header = ["method", *(_label(s, r) for s, r in cols)]
    acc = [
        [NAMES[m], *(_fmt(_acc(found, Cell(m, s, r), metric)) for s, r in cols)]
        for m in job.methods
    ]
    lost = [
        [NAMES[m], *(_fmt(losses(found, Cell(m, s, r), metric)) for s, r in cols[1:])]
        for m in job.methods
    ]
    return [
        f"### Test accuracy %: {METRICS[metric]}",
        "",
        *md_table(header, acc),
        "",
        f"### Accuracy lost to the faults: {METRICS[metric]} (points; no-fault run minus faulty "
        "run, paired by seed)",
        "",
        *md_table(header[:1] + header[2:], lost),
        "",
    ]


def _failures(job: FaultJob, found: Found) -> str:
    counts = []
    for s, r in _columns(job)[1:]:
        runs = found.get(Cell(job.methods[0], s, r), {})
        fails = [v["faults"].get("failures", 0) for v in runs.values()]
        counts.append(f"{_label(s, r)}: {np.mean(fails):.0f}" if fails else f"{_label(s, r)}: —")
    return "Failures injected per run (mean over seeds): " + ", ".join(counts) + "."


INTRO = (
    "Test accuracy % (mean ± sample std over seeds, number of seeds in parentheses), evaluated "
    "with every party present after training under guest loss: at each training round every "
    "party that is up fails with probability R_d = {rd:g} and every failed party comes back "
    "with probability R_u. Scenario `all`: any party can fail, including block 0, which holds "
    "the split-learning head; `host`: block 0 never fails (DVFL's setting, where only guests "
    "fail). Every method sees the same failures for a seed. The split-learning baselines share "
    "one concatenation head at block 0 and use only block 0's labels; LASER-VFL is run with "
    "labels at every party (a head each) and with labels at block 0 only (one head, as the "
    "baselines). Two metrics: the federation's prediction (one answer per sample: the mean of "
    "the heads' probabilities) and the LASER-VFL paper's per-predictor accuracy (each head's "
    "correctness, averaged); with one head they coincide."
)


# What the recorded MNIST table says (3 seeds, 2026-11-22); rewritten by hand when runs change.
READING = (
    "Reading (3 seeds, 2026-11-22, the federation's prediction). When any party can fail "
    "(`all`), LASER-VFL with labels at every party loses least at every R_u: 12.8 points at "
    "R_u = 0.1 against 26.6 (zero-fill), 25.4 (stale) and 80.2 (skip), because the round goes "
    "on with whichever parties are up while the baselines' one head is down three rounds in "
    "four. Its per-predictor accuracy loses 26.6 points there, level with zero-fill and one "
    "point behind stale: the guests' own heads, trained only when their party is up, are weak "
    "alone; together (the federation's answer) they are strong. With labels at block 0 only, "
    "LASER-VFL in `all` loses 32.0, more than zero-fill and stale. When the head party never "
    "fails (`host`, DVFL's setting), zero-fill (3.8) and stale (3.1) lose less than LASER-VFL "
    "(7.8 with labels everywhere, 5.8 with labels at block 0 only); only skipping the round "
    "(50.3) loses more. So the issue's claim holds against every baseline only in `all`; in "
    "`host` it holds against skip and not against zero-fill or stale. Our explanation: the "
    "evaluation has every party present, which a concatenation head trained with zeros or stale "
    "values for absent guests handles well (real embeddings only add information), while "
    "LASER-VFL's heads are trained on the mean of the few embeddings present and meet the mean "
    "of all four mostly at test time. LASER-VFL's advantage is predicting with parties missing; "
    "here the faults hit training only."
)


def markdown(job: FaultJob, found: Found, png: str | None) -> str:
    from datetime import UTC, datetime

    setup = SETUPS[job.dataset]
    epochs = job.epochs if job.epochs is not None else setup.train["epochs"]
    first = next((v for runs in found.values() for v in runs.values()), None)
    where = first["machine"] if first else machine()
    title = "four 28x7 strips" if job.dataset == "mnist" else "four strips"
    lines = [
        f"# Fault benchmark: training through party failures ({job.dataset}, {title})",
        "",
        INTRO.format(rd=job.fail_rate),
        "",
        "- Runs made by: "
        + "; ".join(
            f"`{c}`" for c in sorted({v["command"] for r in found.values() for v in r.values()})
        ),
        f"- This report written by: `{job.command}`",
        f"- Written: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; seeds {', '.join(map(str, job.seeds))}"
        f"; setup digest `{job.digest()}` (run files in `runs/faults-{job.dataset}/`)",
        f"- Machine: {where.get('cores')}-core CPU, torch {where.get('torch')}, one torch thread "
        "per run, shared with other work.",
        "- Setup: "
        + (MNIST_NOTES.format(epochs=epochs) if job.dataset == "mnist" else setup.notes),
        "",
        "## Results",
        "",
        *_tables(job, found, "federation"),
        *_tables(job, found, "accuracy"),
        _failures(job, found),
        "",
    ]
    if png:
        lines += [f"![fault benchmark]({png})", ""]
    lines += ["## Check (the issue's acceptance)", ""]
    for metric, name in METRICS.items():
        lines += [f"With {name}:", "", *verdict(job, found, metric), ""]
    if job.dataset == "mnist":
        lines += [READING, ""]
    if job.dataset == "mnist":
        lines += [
            "## Beside DVFL's published figures",
            "",
            DVFL_PUBLISHED + " Our data set is smaller: MNIST-10k (the t10k file), 8 000 "
            f"training and 2 000 test images, {epochs} epochs of a small MLP per strip, so "
            "our absolute accuracies are lower than theirs; compare the losses within this "
            "table, not our accuracies with theirs.",
            "",
        ]
    return "\n".join(lines)


def plot(job: FaultJob, found: Found, out: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    cols = _columns(job)[1:]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(job.methods)
    for i, m in enumerate(job.methods):
        stats = [losses(found, Cell(m, s, r)) for s, r in cols]
        ax.bar(
            np.arange(len(cols)) + i * width,
            [s.mean if s else np.nan for s in stats],
            width,
            yerr=[s.std if s else 0 for s in stats],
            label=NAMES[m],
        )
    ax.set_xticks(np.arange(len(cols)) + width * (len(job.methods) - 1) / 2)
    ax.set_xticklabels([_label(s, r) for s, r in cols])
    ax.set_ylabel("accuracy lost to faults (points,\nthe federation's prediction)")
    ax.set_title(f"Guest loss, R_d = {job.fail_rate:g}: lower is better")
    ax.legend(fontsize=8)
    return save_figure(plt, fig, out)


def write_report(job: FaultJob) -> tuple[Path, str]:
    return write_job_report(
        job.report_path,
        collect(job),
        lambda found, out: plot(job, found, out),
        lambda found, png: markdown(job, found, png),
    )
