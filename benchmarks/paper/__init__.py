"""The paper suite (`vfl bench paper`): LASER-VFL beside the paper's baselines on the paper's
setups. This module holds the accuracy grid of the paper's Table 1 (`vfl bench paper accuracy`):
methods x train p_miss x test p_miss x seeds, run by the other experiments of the suite too
(label-only, below; paper.faults) and by the option sweeps (benchmarks.wire_dtype); its report is
benchmarks.setups's. At the end of this module: `vfl bench paper label-only`.

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
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.pool import Task, machine, read_json, run_tasks
from benchmarks.setups import (
    P_MISS,
    PAPER_MODEL,
    PAPER_PLAIN,
    SETUPS,
    AccuracyContext,
    CellKey,
    Setup,
    Stat,
    accuracy_markdown,
    accuracy_plot,
    md_table,
    paper_plain,
)
from vfl_core.config import TrainConfig
from vfl_core.data.party_dir import PartyData
from vfl_core.inference.metrics import accuracy_from_confusion, f1_from_confusion
from vfl_core.model.models import build_head, build_representation
from vfl_core.seeding import Stream, derive_seed, rng

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


# ------------------------------------------- label-only: samples only feature-only parties hold
# `vfl bench paper label-only`: predictions for samples the label party does not hold (issue 14).
#
# K = 3 column blocks (Credit: the paper's Credit setup otherwise; digits: the README's digits
# training defaults, 8x8 images cut into three strips), labels at block 0 only, every party misses
# each train and test sample with probability p_miss. Per seed, side by side in one run:
#
# - `ours`: LASER-VFL whose heads serve the feature-only parties, with label-only rows (block 0
#   keeps the label of every sample whose block it misses: `--keep-labels`);
# - `ours-no-label-only`: the same objective, without label-only rows;
# - `paper`: the paper's objective (`--no-serve-feature-only`), without label-only rows;
# - `centralised`: for each observed set S without block 0, one model in one process on the joined
#   blocks of S (the centralised reference below), trained on the training samples S observes and
#   tested on the test samples observed by exactly S.
#
# Each run is cached as JSON under `runs/label_only-<dataset>/`; an interrupted benchmark resumes.


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


def label_only_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Pool worker: a federation run, or the centralised models of one seed."""
    if payload["variant"] != CENTRAL:
        return {"variant": payload["variant"], **simulate_worker(payload)}
    return {"variant": CENTRAL, **centralised_worker(payload)}


def centralised_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The centralised model of every observed set without block 0, on the data the `ours`
    run of this seed trains and is tested on."""
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


def run_label_only(job: LabelOnlyJob, progress: bool = True) -> list[str]:
    meta = {"command": job.command}
    return run_tasks(
        label_only_worker,
        job.tasks(),
        job.jobs,
        desc="label-only runs",
        progress=progress,
        meta=meta,
    )


# ------------------------------------------------------------------------------ reading


def collect_label_only(job: LabelOnlyJob) -> dict[str, dict[int, dict[str, dict[str, Any]]]]:
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


def label_only_records(job: LabelOnlyJob) -> list[dict[str, Any]]:
    return [r for r in (read_json(t.out) for t in job.tasks()) if r is not None]


def stat(values: Sequence[float]) -> str:
    if not values:
        return "—"
    arr = 100.0 * np.asarray(values, dtype=np.float64)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
    return f"{arr.mean():.2f} ± {std:.2f} ({len(arr)})"


# ---------------------------------------------------------------- the centralised reference
# A centralised reference for a federation's observed sets: one model in one process on the
# joined feature blocks of a set S, trained on every training sample whose blocks S are all
# observed (with its label) and tested on the test samples observed by exactly S.
#
# The model is a party's representation model on the concatenated blocks of S followed by a
# linear head (`vfl_core.model.models`), trained with the run's optimiser settings, epochs, batch
# size and class balancing, so the only difference from the federation is where the features are.

Joined = tuple[np.ndarray, np.ndarray]  # (n, sum of block widths) float32, (n,) int64 labels


def observed_sets(parties: Sequence[PartyData], split: str) -> dict[str, tuple[int, ...]]:
    """Sample ID -> the blocks holding its features in `split`."""
    holders: dict[str, list[int]] = {}
    for party in sorted(parties, key=lambda p: p.meta.block):
        s = party.splits[split]
        for sample in s.ids[: len(s.features)].tolist():
            holders.setdefault(sample, []).append(party.meta.block)
    return {i: tuple(b) for i, b in holders.items()}


def joined(parties: Sequence[PartyData], split: str, blocks: Sequence[int], exact: bool) -> Joined:
    """Features of `blocks` side by side and the labels (from any label party, label-only rows
    included), for the samples observed by every block of `blocks` (`exact`: by those only)."""
    sets = observed_sets(parties, split)
    wanted = set(blocks)
    ids = sorted(i for i, s in sets.items() if (set(s) == wanted if exact else wanted <= set(s)))
    labels: dict[str, int] = {}
    for party in parties:
        s = party.splits[split]
        if s.labels is not None:
            labels.update(zip(s.ids.tolist(), s.labels.tolist(), strict=True))
    ids = [i for i in ids if i in labels]
    by_block = {p.meta.block: p.splits[split] for p in parties}
    columns = []
    for b in sorted(blocks):
        row = {sample: r for r, sample in enumerate(by_block[b].ids.tolist())}
        columns.append(by_block[b].features[[row[i] for i in ids]].reshape(len(ids), -1))
    x = np.concatenate(columns, axis=1) if ids else np.zeros((0, 0), np.float32)
    return x.astype(np.float32), np.array([labels[i] for i in ids], dtype=np.int64)


def train_model(data: Joined, train: TrainConfig, num_classes: int, key: int) -> nn.Module:
    """The party model on the joined blocks, trained like the federation (one seed: init and
    batch order)."""
    x, y = (torch.from_numpy(a) for a in data)
    seed = derive_seed(train.seed, Stream.INIT_REPRESENTATION, 100 + key)
    model = nn.Sequential(
        build_representation(train.model, (x.shape[1],), seed),
        build_head(train.model, num_classes, seed + 1),
    )
    lr = train.learning_rate(False)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=train.weight_decay)
    weights = None
    if train.balance == "resample":
        counts = np.bincount(data[1], minlength=num_classes).astype(np.float64)
        weights = (1.0 / np.maximum(counts, 1.0))[data[1]]
        weights /= weights.sum()
    model.train()
    for epoch in range(train.epochs):
        gen = rng(train.seed, Stream.PLAN, 1000 + key, epoch)
        order = (
            gen.permutation(len(y)) if weights is None else gen.choice(len(y), len(y), p=weights)
        )
        size = train.batch_rows(len(order))
        for start in range(0, len(order), size):
            batch = torch.from_numpy(order[start : start + size])
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
    return model.eval()


def evaluate(model: nn.Module, data: Joined, num_classes: int) -> dict[str, Any]:
    """Samples, accuracy and F1 (the federation's definitions, from a confusion matrix)."""
    x, y = data
    with torch.no_grad():
        predicted = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(confusion, (y, predicted), 1)
    return {
        "samples": len(y),
        "accuracy": accuracy_from_confusion(confusion) if len(y) else None,
        "f1": f1_from_confusion(confusion) if len(y) else None,
    }


# ---------------------------------------------------------------- the report

Found = dict[str, dict[int, dict[str, dict[str, Any]]]]
NAMES = {
    "ours": "LASER-VFL, heads serve the others, label-only rows",
    "ours-no-label-only": "LASER-VFL, heads serve the others, no label-only rows",
    "paper": "LASER-VFL, the paper's objective, no label-only rows",
    CENTRAL: "centralised model on the same blocks",
}


def _name(blocks: tuple[int, ...]) -> str:
    return ",".join(map(str, blocks))


def _values(found: Found, variant: str, observed: str, metric: str) -> list[float]:
    return [
        rows[observed][metric]
        for rows in found.get(variant, {}).values()
        if rows.get(observed, {}).get(metric) is not None
    ]


def _pooled(found: Found, variant: str, sets: Sequence[tuple[int, ...]]) -> list[float]:
    values = [pooled(rows, sets) for rows in found.get(variant, {}).values()]
    return [v for v in values if v is not None]


def _paired(found: Found, a: str, b: str, sets: Sequence[tuple[int, ...]]) -> str:
    """Mean ± std over seeds of the per-seed difference a - b of the pooled accuracy, points."""
    seeds = sorted(set(found.get(a, {})) & set(found.get(b, {})))
    diffs = [
        100.0 * (pooled(found[a][s], sets) - pooled(found[b][s], sets))  # type: ignore[operator]
        for s in seeds
        if pooled(found[a][s], sets) is not None and pooled(found[b][s], sets) is not None
    ]
    if not diffs:
        return "—"
    std = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else 0.0
    return f"{np.mean(diffs):+.2f} ± {std:.2f} points ({len(diffs)} seeds)"


def _samples(found: Found, observed: str) -> str:
    counts = _values(found, "ours", observed, "samples") or _values(
        found, "paper", observed, "samples"
    )
    return f"{np.mean(counts):.0f}" if counts else "—"


def others_table(found: Found) -> list[str]:
    rows = []
    for blocks in OTHER_SETS:
        o = _name(blocks)
        rows.append(
            [o, _samples(found, o)]
            + [stat(_values(found, v, o, m)) for m in ("accuracy", "f1") for v in ("ours", CENTRAL)]
        )
    rows.append(
        [
            "all three",
            "",
            stat(_pooled(found, "ours", OTHER_SETS)),
            stat(_pooled(found, CENTRAL, OTHER_SETS)),
            "",
            "",
        ]
    )
    header = ["observed set", "test samples", "accuracy, LASER-VFL", "accuracy, centralised"]
    return md_table([*header, "F1 x 100, LASER-VFL", "F1 x 100, centralised"], rows)


def with_labels_table(found: Found) -> list[str]:
    variants = ("paper", "ours-no-label-only", "ours")
    rows = []
    for blocks in WITH_LABELS:
        o = _name(blocks)
        rows.append(
            [o, _samples(found, o)]
            + [stat(_values(found, v, o, "accuracy")) for v in variants]
            + [stat(_values(found, v, o, "f1")) for v in variants]
        )
    rows.append(
        ["all four", "", *(stat(_pooled(found, v, WITH_LABELS)) for v in variants), "", "", ""]
    )
    header = ["observed set", "test samples"]
    header += [f"accuracy, {v}" for v in variants] + [f"F1 x 100, {v}" for v in variants]
    return md_table(header, rows)


def _provenance(job: LabelOnlyJob) -> list[str]:
    recs = label_only_records(job)
    if not recs:
        return ["No finished runs yet."]
    loads = [r["load_average"][0] for r in recs if r.get("load_average")]
    seconds = [r.get("seconds") for r in recs if r.get("seconds") is not None]
    machine = recs[0].get("machine", {})
    lines = [
        f"- command: `{recs[0].get('command', job.command) or job.command}`",
        f"- code: {', '.join(sorted({str(r.get('code')) for r in recs}))}; runs from "
        f"{min(r['started'] for r in recs)} to {max(r['finished'] for r in recs)} (UTC)",
        f"- machine: {machine.get('cores')} cores ({machine.get('cpu')}), torch "
        f"{machine.get('torch')}, one torch thread per run; shared with other people's jobs: "
        f"1-minute load average at the start of each run {min(loads):.2f} to {max(loads):.2f}",
    ]
    if seconds:
        lines.append(
            f"- a federation run took {min(seconds):.0f} to {max(seconds):.0f} s (median "
            f"{np.median(seconds):.0f} s)"
        )
    return lines


def write_label_only_report(job: LabelOnlyJob) -> tuple[Path, str]:
    found = collect_label_only(job)
    config = job.config("ours", 0)
    train = config["train"]
    lines = [
        f"# Predictions for samples the label party does not hold ({job.dataset})",
        "",
        f"K = 3 column blocks of {job.dataset}, labels at block 0 only, every party misses each "
        f"train and test sample with p_miss {job.p_miss}; seeds {', '.join(map(str, job.seeds))}; "
        f"training: {json.dumps(train, sort_keys=True)} (method laser). Variants, each run for "
        "every seed in the same invocation:",
        "",
        *(f"- `{v}`: {n}" for v, n in NAMES.items()),
        "",
        "The centralised model is one party's model (same hidden sizes, embedding and linear "
        "head) on the joined blocks of the set, trained in one process with the same optimiser, "
        "epochs, batch size and class balancing on every training sample the set's parties "
        "observe, and tested on the test samples observed by exactly that set: where the "
        "features are is the only difference. Accuracy and F1 as in the federation's table "
        "(per observed set; F1 of the positive class for two classes, mean over classes "
        "otherwise); mean ± sample std over seeds (seeds in parentheses).",
        "",
        *_provenance(job),
        "",
        "## Samples observed only by the other parties",
        "",
        *others_table(found),
        "",
        f"LASER-VFL minus centralised, accuracy of the three sets taken together: "
        f"{_paired(found, 'ours', CENTRAL, OTHER_SETS)}.",
        "",
        "## Observed sets that contain the label party",
        "",
        "Does serving the others cost the label party's own predictions?",
        "",
        *with_labels_table(found),
        "",
        f"Heads serve the others (no label-only rows) minus the paper's objective, the four sets "
        f"taken together: {_paired(found, 'ours-no-label-only', 'paper', WITH_LABELS)}; with "
        f"label-only rows minus the paper's: {_paired(found, 'ours', 'paper', WITH_LABELS)}.",
        "",
    ]
    text = "\n".join(lines)
    path = job.report_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, text
