"""`vfl bench dlvm`: the latent-variable VFL against LASER-VFL and the baselines, the DLVM-VFL
paper's few-label protocol (arXiv 2505.11035): 8 parties, 1000 labels for MNIST-10k, 500 for
Credit, a missingness mechanism for training and each of seven for testing.

One task = (data set, training mechanism, seed, method): it trains once and evaluates every test
mechanism (the training split is the same in every variant: same seed). The label-only methods
train on the labelled rows (vfl_core.data.party_dir.labelled_rows_only); DLVM also uses the
unlabelled ones.
Results: benchmarks/results/runs/dlvm/*.json, the report benchmarks/results/dlvm.md + dlvm.png.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.pool import Task, read_json, run_tasks

log = logging.getLogger(__name__)

RUNS = "dlvm-paper"  # this protocol's run files (issue 30); runs/dlvm holds the previous one
K = 8
LABELS = {"mnist": 1000, "credit": 500}
# Of the labels, the fully aligned reserve (the paper's: 200 image, 100 tabular): every party
# observes these samples, whatever the training mechanism.
ALIGNED = {"mnist": 200, "credit": 100}
TRAIN_MECHANISMS = ("mcar:0.2", "mcar:0.5", "mnar:0.7", "mnar:0.9", "mar1", "mar2")
TEST_MECHANISMS = ("mcar:0", "mcar:0.2", "mcar:0.5", "mnar:0.7", "mnar:0.9", "mar1", "mar2")
METHODS = (
    "dlvm",
    "laser",
    "local",
    "plug",
    "vanilla",
    "svfl",
    "ensemble",
    "dlvm-drop",
    "dlvm-product",
    "dlvm-finetune",
    "dlvm-rows",
)
NAMES = {
    "dlvm": "DLVM-VFL",
    "laser": "LASER-VFL",
    "local": "Local",
    "plug": "PlugVFL",
    "svfl": "Standard VFL (random guess for a missing block)",
    "vanilla": "Vanilla VFL (zero-imputed at inference)",
    "ensemble": "Ensemble",
    "dlvm-drop": "DLVM-VFL, expert dropout 0.3",
    "dlvm-average": "DLVM-VFL, equal-weight prediction",
    "dlvm-product": "DLVM-VFL, product-of-experts posterior (deviation)",
    "dlvm-finetune": "DLVM-VFL, encoders fine-tuned in stage 2 (deviation)",
    "dlvm-rows": "DLVM-VFL, labels only on block 0's rows (deviation)",
}
# Settings of the DLVM variants (DlvmConfig fields); "dlvm" is the paper's model.
DLVM_VARIANTS: dict[str, dict[str, Any]] = {
    "dlvm": {},
    "dlvm-drop": {"expert_dropout": 0.3},
    "dlvm-average": {"predict": "average"},
    "dlvm-product": {"posterior": "product"},
    "dlvm-finetune": {"stage2": "finetune"},
    "dlvm-rows": {},  # the paper's model, the earlier label protocol (ROW_LABELS)
}
# Variants that keep a label only where block 0 holds the sample's features (this project's
# earlier protocol); every other DLVM run routes every label to the active party (the paper's).
ROW_LABELS = ("dlvm-rows",)
# The reference of `--reference` (MNIST-10k, nothing missing in training; tests below): DLVM with
# eight parties against the same code with every block in one party (centralised), SNIS against
# equal-weight prediction, and LASER-VFL on the same labels: name -> (method, parties). DLVM runs
# `--stage1-epochs` stage-1 epochs (cached per epochs, so references at several lengths add up).
REFERENCE: dict[str, tuple[str, int]] = {
    "DLVM, 8 parties": ("dlvm", 8),
    "DLVM, 1 party (centralised)": ("dlvm", 1),
    "LASER-VFL, 8 parties (labelled rows only)": ("laser", 8),
    "DLVM, 8 parties, equal-weight prediction": ("dlvm-average", 8),
}
REFERENCE_TESTS = ("mcar:0", "mcar:0.5")
# The paper's headline figures (arXiv 2505.11035 v2, abstract) and the summary of its
# lead by test missingness; its per-cell tables could not be read here.
PAPER = (
    "168 configurations (4 data sets x 6 training x 7 test missingness patterns): DLVM-VFL ahead "
    "of every baseline in 160, by 9.6 points on average over the next best (the abstract); its "
    "lead grows from 1.8 points with nothing missing at test to 13.1 at the heaviest test "
    "missingness (the issue's summary). Its per-cell tables, network sizes and epochs could not "
    "be read here (the search tool holds the abstract and the first page of the paper only), so "
    "ours stand beside these headline figures, not beside the paper's cells."
)
PAPER_LEAD = {"mcar:0": 1.8}  # the paper's lead (points) by test mechanism, where known
PAPER_MAX_LEAD = 13.1  # ... at its heaviest test missingness (which mechanism: not stated)
PAPER_MEAN_LEAD = 9.6  # ... averaged over its 168 configurations
# What differs from the paper's protocol, whatever the numbers (stated in every report).
DIFFERENCES = (
    "Only the paper's abstract could be read here: its per-cell tables, network sizes and "
    "epochs are not reproduced, and the MAR 1 / MAR 2 rules are this project's definitions "
    "(vfl_core/data/missingness.py; MCAR and MNAR follow the issue's wording).",
    "Small MLPs and few epochs on a shared 2-core machine; stage 1 is the costly part (every "
    "training sample, kappa = 10 decoder passes per sample). The header gives the epochs the "
    "runs used.",
    "Labels live with a party's rows: DLVM's classifier sees the labelled samples the active "
    "party (block 0) holds, the label-only methods those any party holds (every party holds "
    "labels here), so under training missingness of block 0 DLVM sees fewer labels.",
    "The label-only methods' figure is the federation's accuracy (mean of the heads' "
    "probabilities, one prediction per sample), DLVM's its one SNIS prediction; samples no "
    "party holds are dropped from the test split for every method.",
    "Credit is 78% one class: accuracy there moves little for any method.",
)
# What this report's grid left out of the protocol, and why (the CPU budget of the final run:
# about 1.5 hours of a 2-core machine shared with other benchmarks, load 12-23).
BUDGET = (
    "Two of the paper's six training mechanisms (MCAR 0.2 and MNAR 0.7; all seven test "
    "mechanisms), DLVM stage 1 cut from the default 30 epochs to 10: a 10-epoch DLVM run took "
    "about 2 CPU-minutes (MNIST or Credit; the worker processes' CPU time) and 5 to 25 "
    "wall-minutes at load 4 to 26 (niced, 2 runs at a time). No expert-dropout variant. The "
    "label-only methods' runs are the "
    "first helper's (its commits d302a64 to 70cf9f7, some with uncommitted changes), reused "
    "from the cache, except Credit / MNAR 0.7 Local, PlugVFL and Standard VFL seeds 1-2, run "
    "now; a rerun at this code (Credit, MCAR 0.2, Standard VFL, seed 0) gave the same seven "
    "accuracies to the last digit. The seed-0 Credit DLVM runs ran before the SNIS clamp "
    "(ea0306c, although their records name that commit: the pool records the checkout's commit "
    "when a run ends): in one of them label parties refused one prediction batch whose "
    "probabilities float32 rounding had put above 1, so that batch of one test mechanism went "
    "unscored."
)


# What task 1 of the second helper found (the numbers of its development runs are stated with
# their settings and were not rerun for this report; the tables below this text are computed
# from the cached runs).
FINDINGS = (
    "No federation defect: one round of messages gives the same gradients as one autograd graph "
    "through every party's networks, to float rounding (stage 1 with and without expert "
    "dropout, stage 2: tests/test_dlvm.py), and the gRPC run is bit-identical to the "
    "in-process one (tests/test_dlvm_grpc.py). `vfl bench dlvm --reference` runs the same code "
    "with every block in one party (no federation) beside the federation; it was not run for "
    "this report (CPU budget).",
    "The math matches the paper's description as far as it could be read: the product of "
    "experts adds precisions and precision-weights the means (the issue's 'averages the means' "
    "would not be a product of Gaussians), a missing block drops out, the bound's weights are "
    "p(z) p(h|z) prod_k p(x_k|h) / (q(h|x_O) q(z|h)) with kappa = 10, pixels in [0, 1] are "
    "Bernoulli, standardised columns Gaussian with learned variances; no KL weight or free bits "
    "(the bound has none).",
    "The defect was the schedule: 3 stage-1 epochs left the bound far from converged (the second "
    "helper's development run, MNIST, seed 0, nothing missing: 170 nats per sample after 3 "
    "epochs, 109 after 30; a linear probe on the posterior means of the 1000 labelled rows rose "
    "from 76% to 87%). `--stage1-epochs` now defaults to 30; the grid below ran fewer (the "
    "header says how many; CPU budget), and the before/after table measures the change.",
    "SNIS prediction with L = 50 is nearly single-sample: the median effective sample size of "
    "its weights was 1.4 to 2.0 of 50 on MNIST (784 Bernoulli pixels make the weights sharp), so "
    "two draws of the same model's prediction differed by up to 1.5 points; equal weights over "
    "the same samples gave 0.5 to 1.5 points more (development runs, seed 0). SNIS stays the "
    "default (the paper's) and is what the grid measures; `--dlvm-predict average` is the "
    "alternative.",
    "Under training missingness the encoders rarely see posteriors of few blocks (MCAR 0.2 on 8 "
    "blocks: 1.0% of the samples have 3 blocks or fewer; test MCAR 0.5: 36%), so DLVM can "
    "degrade faster than LASER-VFL, whose task sampling trains every subset size. "
    "`--dlvm-expert-dropout 0.3` (not the paper's) leaves each expert out of a training "
    "posterior with probability 0.3, so the encoders learn posteriors of fewer blocks; not in "
    "this report's grid (CPU budget).",
)


@dataclass(frozen=True)
class DlvmJob:
    datasets: tuple[str, ...]
    train_mechanisms: tuple[str, ...]
    test_mechanisms: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    results: Path
    data_path: Path
    stage1_epochs: int
    stage2_epochs: int
    epochs: int  # the label-only methods
    jobs: int
    command: str
    reference: bool = False  # run the reference (REFERENCE) instead of the grid

    @property
    def runs_dir(self) -> Path:
        return self.results / "runs" / RUNS

    def tasks(self) -> list[Task]:
        return self.reference_tasks() if self.reference else self.grid_tasks()

    def reference_tasks(self) -> list[Task]:
        out = []
        for seed in self.seeds:
            for i, (method, clients) in enumerate(REFERENCE.values()):
                stage1 = self.stage1_epochs if method in DLVM_VARIANTS else 0
                name = f"reference{i}_{method}_k{clients}_e{stage1}_s{seed}"
                payload = {
                    **self._payload("mnist", "mcar:0", method, seed),
                    "tests": list(REFERENCE_TESTS),
                    "clients": clients,
                    "stage1_epochs": stage1,
                }
                out.append(Task(name, payload, self.runs_dir / f"{name}.json"))
        return out

    def _payload(self, dataset: str, train: str, method: str, seed: int) -> dict[str, Any]:
        return {
            "dataset": dataset,
            "train": train,
            "tests": list(self.test_mechanisms),
            "method": method,
            "seed": seed,
            "data_path": str(self.data_path),
            "stage1_epochs": self.stage1_epochs,
            "stage2_epochs": self.stage2_epochs,
            "epochs": self.epochs,
        }

    def grid_tasks(self) -> list[Task]:
        out = []
        for dataset in self.datasets:
            for mechanism in self.train_mechanisms:
                for seed in self.seeds:
                    for method in self.methods:
                        name = f"{dataset}_{mechanism.replace(':', '')}_{method}_s{seed}"
                        payload = self._payload(dataset, mechanism, method, seed)
                        out.append(Task(name, payload, self.runs_dir / f"{name}.json"))
        return out


def run(job: DlvmJob, progress: bool = True) -> list[str]:
    meta = {"command": job.command}
    return run_tasks(worker, job.tasks(), job.jobs, desc="dlvm", progress=progress, meta=meta)


# ---------------------------------------------------------------- one task


def worker(payload: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    accuracy = _run_method(payload)
    return {"accuracy": accuracy, "seconds": time.perf_counter() - started}


def _setup(dataset: str) -> dict[str, Any]:
    """Model and optimiser settings per data set (MLPs; Credit's are the LASER paper's)."""
    if dataset == "credit":
        return {"hidden": (10, 10), "embed_dim": 10, "lr": 1e-3, "batch": 128}
    return {"hidden": (128,), "embed_dim": 64, "lr": 1e-3, "batch": 128}


def _run_method(payload: dict[str, Any]) -> dict[str, float]:
    """One method through vfl simulate's engine: accuracy per test mechanism (the federation's
    accuracy: the mean of the heads' probabilities, one prediction per sample; DLVM's one
    SNIS prediction). The label-only methods train on the labelled rows, DLVM on every row."""
    from vfl_core.config import ModelConfig, TrainConfig
    from vfl_core.methods.dlvm.config import DlvmConfig
    from vfl_core.simulate import SimulationConfig, run_simulation

    setup = _setup(payload["dataset"])
    method = payload["method"]
    dlvm = method in DLVM_VARIANTS
    train = TrainConfig(
        method="dlvm" if dlvm else method,
        seed=payload["seed"],
        epochs=payload["stage1_epochs"] if dlvm else payload["epochs"],
        batch_size=setup["batch"],
        lr=setup["lr"],
        model=ModelConfig(
            representation="mlp", hidden=setup["hidden"], embed_dim=setup["embed_dim"]
        ),
        dlvm=DlvmConfig(stage2_epochs=payload["stage2_epochs"], **DLVM_VARIANTS.get(method, {})),
    )
    clients = payload.get("clients", K)
    dataset = payload["dataset"]
    # The paper's label routing: block 0, the active party, holds every label (label-only rows
    # for the samples whose block it misses); the label-only methods keep the earlier protocol
    # (every party holds the labels of its rows), which gives them every label too.
    routed = dlvm and method not in ROW_LABELS
    config = SimulationConfig(
        dataset=dataset,
        data_path=Path(payload["data_path"]),
        clients=clients,
        missing_train=payload["train"],
        missing_test=tuple(payload["tests"]),
        labels=LABELS[dataset],
        aligned_labels=ALIGNED[dataset] if clients > 1 else 0,
        label_blocks=(0,) if routed else None,
        keep_labels=routed,
        layout="strips" if dataset == "mnist" and clients > 1 else "auto",
        train=train,
    )
    result = run_simulation(config)
    out = {}
    for spec, report in result.reports.items():
        overall = report.overall()
        fed = overall.federation_accuracy
        out[str(spec)] = float(fed if fed is not None else overall.accuracy or 0.0) * 100
    return out


# ---------------------------------------------------------------- the report


def provenance(job: DlvmJob) -> tuple[list[str], list[float], float]:
    """The commands that produced the cached runs, their 1-minute load averages at the end, and
    the total seconds of the runs."""
    commands: list[str] = []
    loads: list[float] = []
    seconds = 0.0
    for task in job.tasks():
        record = read_json(task.out)
        if record is None:
            continue
        if record.get("command") not in commands:
            commands.append(record.get("command"))
        loads.append(float(record.get("load_average", [float("nan")])[0]))
        seconds += float(record.get("seconds", 0.0))
    return commands, loads, seconds


def _settings(job: DlvmJob, key: str, dlvm: bool) -> str:
    """The values of a payload setting the cached runs used (DLVM's or the label-only
    methods'), e.g. "10" or "3, 10"; "-" when no such run is cached."""
    values = set()
    for task in job.tasks():
        record = read_json(task.out)
        if record is not None and (task.payload["method"] in DLVM_VARIANTS) == dlvm:
            values.add(int(record.get("payload", task.payload)[key]))
    return ", ".join(map(str, sorted(values))) or "-"


def collect(job: DlvmJob) -> dict[tuple[str, str, str, str], list[float]]:
    """(dataset, train, test, method) -> accuracies over the seeds that finished."""
    cells: dict[tuple[str, str, str, str], list[float]] = {}
    for task in job.tasks():
        record = read_json(task.out)
        if record is None:
            continue
        p = task.payload
        for test, value in record["accuracy"].items():
            cells.setdefault((p["dataset"], p["train"], test, p["method"]), []).append(value)
    return cells


def write_report(job: DlvmJob) -> tuple[Path, str]:
    job = replace(job, reference=False)  # the grid; the reference is a section of its own
    cells = collect(job)
    commands, loads, seconds = provenance(job)
    lines = [
        "# Latent-variable VFL (DLVM-VFL) vs LASER-VFL and baselines, few labels",
        "",
        f"Report: `{job.command}`. The runs came from:",
        "",
        *[f"- `{c}`" for c in commands],
        "",
        f"{len(loads)} runs, {seconds / 60:.0f} wall-clock minutes in all (one torch thread "
        f"each, two runs at a time; wall time under load, not CPU time). The machine was shared "
        f"(2 cores, other helpers' benchmarks and tests running): 1-minute load average at the "
        f"end of the runs {min(loads, default=float('nan')):.1f} to "
        f"{max(loads, default=float('nan')):.1f}.",
        "",
        f"K = {K} parties (MNIST-10k: 28x3/28x4 strips; Credit: the first 20 columns in 8 blocks "
        f"of 2-3), labels kept for {LABELS['mnist']} (MNIST) / {LABELS['credit']} (Credit) "
        f"training samples, seeds {', '.join(map(str, job.seeds))}. Test accuracy in %, mean "
        "+- std over seeds (n = seeds that finished). Label-only methods: "
        f"{_settings(job, 'epochs', dlvm=False)} epochs on the labelled rows, the federation's "
        "prediction (mean of the heads' probabilities). DLVM: "
        f"{_settings(job, 'stage1_epochs', dlvm=True)} stage-1 epochs over every training "
        f"sample, {_settings(job, 'stage2_epochs', dlvm=True)} stage-2 epochs on the active "
        "party's labelled rows, kappa = 10, SNIS with L = 50.",
        "",
        f"Budget: {BUDGET}",
        "",
        f"The paper: {PAPER}",
        "",
    ]
    lines += _findings(job, cells)
    for dataset in job.datasets:
        for train in job.train_mechanisms:
            lines += _table(cells, job, dataset, train)
    lines += _lead_lines(cells, job)
    lines += _answer_lines(cells, job)
    lines += ["## Differences from the paper's protocol", "", *[f"- {d}" for d in DIFFERENCES], ""]
    plot = _plot(cells, job)
    if plot is not None:
        alt = "test accuracy by test mechanism, pooled over training mechanisms and seeds"
        lines += ["", f"![{alt}]({plot.name})", ""]
    path = job.results / "dlvm.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return path, text


# ---------------------------------------------------------------- why DLVM was weak

# The previous report's DLVM runs (product of experts, encoders fine-tuned in stage 2, labels on
# block 0's rows, 10 stage-1 epochs), kept for comparison.
BEFORE_DIR = "dlvm"


def _findings(job: DlvmJob, cells) -> list[str]:
    lines = ["## Why DLVM was weak, and what changed", "", *[f"- {f}" for f in FINDINGS], ""]
    lines += _before_after(job, cells)
    lines += _reference_lines(job)
    return lines


def _before_after(job: DlvmJob, cells) -> list[str]:
    """DLVM's accuracy with the first helper's 3 stage-1 epochs and now, beside the best other
    method, at test MCAR 0 and averaged over the test mechanisms (means over seeds)."""
    rows = []
    for dataset in job.datasets:
        for train in job.train_mechanisms:
            before = _before(job, dataset, train)
            now = {t: cells.get((dataset, train, t, "dlvm"), []) for t in job.test_mechanisms}
            if not before or not all(now.values()):
                continue
            best = [
                max(
                    (
                        (np.mean(v), m)
                        for m in job.methods
                        if m not in DLVM_VARIANTS and (v := cells.get((dataset, train, t, m)))
                    ),
                    default=None,
                )
                for t in job.test_mechanisms
            ]
            if None in best:  # e.g. `--methods dlvm`: nothing to stand beside
                continue
            tests = job.test_mechanisms
            mean_now = np.mean([np.mean(now[t]) for t in tests])
            rows.append(
                f"| {dataset} | {train} | {np.mean(before[tests[0]]):.1f} | "
                f"{np.mean(now[tests[0]]):.1f} | {best[0][0]:.1f} ({NAMES[best[0][1]]}) | "
                f"{np.mean([np.mean(before[t]) for t in tests]):.1f} | {mean_now:.1f} | "
                f"{np.mean([b[0] for b in best]):.1f} |"
            )
    if not rows:
        return []
    return [
        f"DLVM before (the first helper's runs: {BEFORE_DIR}, 3 stage-1 epochs) and after (this "
        f"report's runs), test accuracy in %, mean over seeds; 'all tests': the mean over the "
        f"{len(job.test_mechanisms)} test mechanisms.",
        "",
        f"| data set | train | DLVM before, {job.test_mechanisms[0]} | DLVM now, "
        f"{job.test_mechanisms[0]} | best other, {job.test_mechanisms[0]} | DLVM before, all "
        "tests | DLVM now, all tests | best other, all tests |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


def _before(job: DlvmJob, dataset: str, train: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for seed in job.seeds:
        name = f"{dataset}_{train.replace(':', '')}_dlvm_s{seed}.json"
        record = read_json(job.results / "runs" / BEFORE_DIR / name)
        for test, value in ({} if record is None else record["accuracy"]).items():
            out.setdefault(test, []).append(value)
    return out


def _reference_lines(job: DlvmJob) -> list[str]:
    """The cached reference runs of the job's seeds, at every stage-1 length run."""
    results: dict[tuple[int, int], dict[str, list[float]]] = {}
    for i, (method, clients) in enumerate(REFERENCE.values()):
        for seed in job.seeds:
            pattern = f"reference{i}_{method}_k{clients}_e*_s{seed}.json"
            for path in sorted(job.runs_dir.glob(pattern)):
                record = read_json(path)
                epochs = int(path.stem.split("_")[-2].removeprefix("e"))
                for test, value in ({} if record is None else record["accuracy"]).items():
                    results.setdefault((i, epochs), {}).setdefault(test, []).append(value)
    if not results:
        return []
    names = list(REFERENCE)
    head = "| run | " + " | ".join(f"test {t}" for t in REFERENCE_TESTS) + " |"
    rows = [
        f"| {names[i]}{f', {e} stage-1 epochs' if e else ''} | "
        + " | ".join(_fmt(by.get(t, [])) for t in REFERENCE_TESTS)
        + " |"
        for (i, e), by in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]
    return [
        "Reference (`vfl bench dlvm --reference`): MNIST-10k, 1000 labels, nothing missing in "
        "training; the same DLVM code with the eight strips in eight parties and with the whole "
        "image in one party (no federation at all), and LASER-VFL on the same labels.",
        "",
        head,
        "| --- |" + " --- |" * len(REFERENCE_TESTS),
        *rows,
        "",
    ]


def _table(cells, job: DlvmJob, dataset: str, train: str) -> list[str]:
    present = [
        m
        for m in job.methods
        if any(k[0] == dataset and k[1] == train and k[3] == m for k in cells)
    ]
    if not present:
        return []
    head = "| method | " + " | ".join(job.test_mechanisms) + " |"
    rule = "| --- |" + " --- |" * len(job.test_mechanisms)
    rows = []
    for method in present:
        values = [cells.get((dataset, train, t, method), []) for t in job.test_mechanisms]
        rows.append(f"| {NAMES[method]} | " + " | ".join(_fmt(v) for v in values) + " |")
    return [f"## {dataset}, train {train}", "", head, rule, *rows, ""]


def _fmt(values: list[float]) -> str:
    if not values:
        return "-"
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{np.mean(values):.1f} +- {std:.1f} (n={len(values)})"


def leads(cells, job: DlvmJob) -> dict[str, dict[str, float]]:
    """dataset -> test mechanism -> mean over training mechanisms of DLVM's accuracy minus the
    best other method's (both means over seeds)."""
    out: dict[str, dict[str, float]] = {}
    for dataset in job.datasets:
        for test in job.test_mechanisms:
            gaps = []
            for train in job.train_mechanisms:
                ours = cells.get((dataset, train, test, "dlvm"))
                others = [
                    np.mean(v)
                    for m in job.methods
                    if m not in DLVM_VARIANTS and (v := cells.get((dataset, train, test, m)))
                ]
                if ours and others:
                    gaps.append(float(np.mean(ours)) - max(others))
            if gaps:
                out.setdefault(dataset, {})[test] = float(np.mean(gaps))
    return out


def _lead_lines(cells, job: DlvmJob) -> list[str]:
    table = leads(cells, job)
    if not table:
        return []
    lines = [
        "## DLVM's lead over the best other method, by test missingness",
        "",
        "Points of accuracy, averaged over the training mechanisms run (negative: DLVM trails).",
        "",
        "| data set | " + " | ".join(job.test_mechanisms) + " |",
        "| --- |" + " --- |" * len(job.test_mechanisms),
    ]
    for dataset, by_test in table.items():
        values = [f"{by_test[t]:+.1f}" if t in by_test else "-" for t in job.test_mechanisms]
        lines.append(f"| {dataset} | " + " | ".join(values) + " |")
    paper = [f"{PAPER_LEAD[t]:+.1f}" if t in PAPER_LEAD else "-" for t in job.test_mechanisms]
    lines.append("| paper (its 4 data sets) | " + " | ".join(paper) + " |")
    return [
        *lines,
        "",
        f"The paper's lead is +{PAPER_LEAD['mcar:0']} with nothing missing at test, "
        f"+{PAPER_MAX_LEAD} at its heaviest test missingness (which mechanism the summary does "
        f"not say) and +{PAPER_MEAN_LEAD} averaged over its 168 configurations.",
        "",
    ]


# Why ours differ from the paper's answer (written from the tables of the final grid; the
# computed figures are in the table of _answer_lines).
WHY = (
    "No, not in these runs: DLVM trails the best other method already with nothing missing at "
    "test, and it loses more accuracy than LASER-VFL as blocks go missing at test, on both data "
    "sets, so its (negative) lead shrinks where the paper's grows.",
    "With nothing missing at test the longer stage 1 helps on MNIST (the before/after table: 3 "
    "-> 10 epochs), not on Credit (no better under MCAR 0.2, lower under MNAR 0.7), and DLVM "
    "stays below LASER-VFL. Candidates on MNIST, none measured here: stage 1 is "
    "still short (10 epochs of the 30 the bound needed in the second helper's development run), "
    "the encoders are one-hidden-layer MLPs (the paper's sizes could not be read), and SNIS "
    "prediction is nearly single-sample on 784 Bernoulli pixels.",
    "Under test missingness DLVM's classifier p(y | h) sees posteriors it was rarely trained "
    "on: stage 2 trains it on the samples the active party holds, under training MCAR 0.2 "
    "mostly with 6 to 8 of the 8 experts (80% of samples), while a test sample under MCAR 0.5 "
    "has 4 on average (a wider posterior, nearer the prior). LASER-VFL trains a predictor "
    "for every subset of blocks by task sampling. `--dlvm-expert-dropout` targets this gap; "
    "it was not run here.",
    "Labels: every party holds the labels in this protocol, so the label-only methods train on "
    "all 500 / 1000 labelled rows, DLVM only on those the active party (block 0) holds. Credit, "
    "seed 0, from `vfl prepare` with the same settings: block 0 holds 407 of the 500 under "
    "training MCAR 0.2 and 262 under MNAR 0.7 (positive rate 0.214 and 0.256 against 0.208 and "
    "0.236 over all 500). Under MNAR 0.7 DLVM falls below Credit's 78% majority-class rate "
    "even with nothing missing at test; fewer labels is one candidate, the shift of the class "
    "mix is small; the cause is not established here.",
)


def _answer_lines(cells, job: DlvmJob) -> list[str]:
    """Does DLVM's lead grow with test missingness? Per data set: the lead with nothing missing
    at test, its mean over the tests with missing blocks, the largest, and how much DLVM and
    LASER-VFL each lose from the complete test to the incomplete ones (pooled over training
    mechanisms and seeds)."""
    table = leads(cells, job)
    clean = "mcar:0"
    missing = [t for t in job.test_mechanisms if t != clean]
    rows, verdicts = [], []
    for dataset, by_test in table.items():
        if clean not in by_test or not all(t in by_test for t in missing):
            continue
        mean_missing = float(np.mean([by_test[t] for t in missing]))
        top = max(missing, key=lambda t: by_test[t])
        drops = {
            m: _pooled(cells, job, dataset, clean, m)
            - float(np.mean([_pooled(cells, job, dataset, t, m) for t in missing]))
            for m in ("dlvm", "laser")
        }
        change = mean_missing - by_test[clean]
        rows.append(
            f"| {dataset} | {by_test[clean]:+.1f} | {mean_missing:+.1f} | {by_test[top]:+.1f} "
            f"({top}) | {change:+.1f} | {drops['dlvm']:.1f} | {drops['laser']:.1f} |"
        )
        trend = (
            f"grows by {change:.1f} points" if change > 0 else f"shrinks by {-change:.1f} points"
        )
        verdicts.append(
            f"{dataset}: the lead {trend if abs(change) >= 0.05 else 'does not move'} "
            f"(DLVM loses {drops['dlvm']:.1f} points of accuracy, LASER-VFL "
            f"{drops['laser']:.1f})"
        )
    if not rows:
        return []
    paper_change = PAPER_MAX_LEAD - PAPER_LEAD[clean]
    return [
        "## Does DLVM's advantage grow with test missingness?",
        "",
        f"Lead = DLVM minus the best other method, points, pooled over the training mechanisms "
        f"and seeds run; 'missing tests': the mean over the {len(missing)} test mechanisms with "
        f"missing blocks; 'loses': accuracy at {clean} minus the mean over the missing tests.",
        "",
        f"| data set | lead, {clean} | lead, missing tests | largest lead | change | DLVM loses "
        "| LASER-VFL loses |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        f"| paper | +{PAPER_LEAD[clean]} | - | +{PAPER_MAX_LEAD} (heaviest) | "
        f"+{paper_change:.1f} (to the heaviest) | - | - |",
        "",
        f"Answer, from these runs: {'; '.join(verdicts)}. The paper: it grows by "
        f"{paper_change:.1f} points (1.8 -> 13.1).",
        "",
        *[line for why in WHY for line in (f"- {why}",)],
        *([""] if WHY else []),
    ]


def _plot(cells, job: DlvmJob) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib missing: no plot (pip install 'laser-vfl[report]')")
        return None
    table = leads(cells, job)
    if not table:
        return None
    fig, axes = plt.subplots(1, len(job.datasets), figsize=(5 * len(job.datasets), 3.5))
    axes = np.atleast_1d(axes)
    for ax, dataset in zip(axes, job.datasets, strict=True):
        for method in job.methods:
            # pooled over every training mechanism: a variant run under fewer would mislead
            first = job.test_mechanisms[0]
            if not all((dataset, tr, first, method) in cells for tr in job.train_mechanisms):
                continue
            means = [_pooled(cells, job, dataset, t, method) for t in job.test_mechanisms]
            ax.plot(range(len(job.test_mechanisms)), means, marker="o", label=NAMES[method])
        ax.set_xticks(range(len(job.test_mechanisms)), job.test_mechanisms, rotation=30)
        ax.set_title(f"{dataset}: accuracy by test mechanism")
        ax.set_ylabel("test accuracy (%)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = job.results / "dlvm.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pooled(cells, job: DlvmJob, dataset: str, test: str, method: str) -> float:
    """Mean accuracy over every training mechanism and seed (nan: none ran)."""
    values = [v for tr in job.train_mechanisms for v in cells.get((dataset, tr, test, method), [])]
    return float(np.mean(values)) if values else float("nan")
