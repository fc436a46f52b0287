"""`vfl bench privacy`: how much a feature-only party and the coordinator learn about the labels.

Issue 32, item 1 (the leak meters). A binary table is cut into K parties (labels at block 0, the
others feature-only, every party holding every row); the federation trains with the defaults in
process, behind a transport that records what a coordinator relays: each party's embedding rows
(EmbedCall) and the gradient each feature-only party receives for its embedding (BackwardCall, in
the pipelined Train messages as well). From those records, per epoch, the attacks of

  Li et al., "Label Leakage and Protection in Two-party Split Learning", ICLR 2022:
  - norm: the score of a sample is the L2 norm of its gradient (Sec. 3.1: the minority class's
    gradients are larger); AUC of that score against the labels.
  - direction: in each batch one sample whose label the attacker knows (the first positive one);
    the score of the others is the cosine of their gradient with its gradient (Sec. 3.2).
and a known-label k-NN (`knn`): the attacker knows the labels of `--known` training samples and
labels the rest by its 5 nearest neighbours in gradient space (the AUC of the neighbours' vote).

A feature-only party sees its own gradients. The coordinator relays every party's in the clear,
so its view is every feature-only party's gradient of a sample side by side (concatenated); the
table reports both. AUC 0.5 is no leak, 1.0 a perfect one; an AUC under 0.5 is as informative as
its mirror (an attacker who knows the sign flips it), so the table reports max(AUC, 1 - AUC).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import KNeighborsClassifier

from benchmarks.tabular_tables import Table, tables
from vfl_core.data.tabular import TableSource
from vfl_core.protocol import BackwardCall, EmbedCall, TrainCall, Transport
from vfl_core.simulate import SimulationConfig, run_simulation

log = logging.getLogger(__name__)

TABLES = ("credit", "breast_cancer")
ATTACKS = ("norm", "direction", "knn")
RESULTS = Path("benchmarks/results")
LABEL_BLOCK = 0


# ---------------------------------------------------------------- what a coordinator relays


@dataclass
class Relayed:
    """Rows embedded and gradients sent back, per (block, round): what the coordinator sees."""

    rows: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    grads: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)  # round -> epoch


class RecordingTransport:
    """A transport that passes every call through and copies the training embeddings' rows and
    the gradients relayed to the parties (the coordinator's view of a round)."""

    def __init__(self, inner: Transport, relayed: Relayed) -> None:
        self._inner = inner
        self.relayed = relayed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        for block, call in calls.items():
            self._embedded(block, call)
        return self._inner.embed(calls)

    def backward(self, calls: dict[int, BackwardCall]) -> set[int]:
        for block, call in calls.items():
            self._sent_back(block, call)
        return self._inner.backward(calls)

    def train(self, calls: dict[int, TrainCall]):
        for block, call in calls.items():
            for b in call.backward:
                self._sent_back(block, b)
            for e in call.embed:
                self._embedded(block, e)
        return self._inner.train(calls)

    def _embedded(self, block: int, call: EmbedCall) -> None:
        if call.train:
            self.relayed.rows[block, call.round_id] = np.array(call.rows, copy=True)

    def _sent_back(self, block: int, call: BackwardCall) -> None:
        if call.grad is not None:
            self.relayed.grads[block, call.round_id] = np.array(call.grad, copy=True)
            self.relayed.epochs[call.round_id] = call.epoch


# ---------------------------------------------------------------- the attacks


def auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """max(AUC, 1 - AUC): None when one class is absent."""
    if len(np.unique(labels)) < 2:
        return None
    a = float(roc_auc_score(labels, scores))
    return max(a, 1.0 - a)


def norm_attack(grads: np.ndarray, labels: np.ndarray) -> float | None:
    return auc(labels, np.linalg.norm(grads, axis=1))


def direction_attack(batches: list[tuple[np.ndarray, np.ndarray]]) -> float | None:
    """Per batch, the cosine with the gradient of its first positive sample (a known label)."""
    scores, truth = [], []
    for grads, labels in batches:
        positive = np.flatnonzero(labels == 1)
        if len(positive) == 0:
            continue
        ref = grads[positive[0]]
        rest = np.delete(np.arange(len(labels)), positive[0])
        norms = np.linalg.norm(grads[rest], axis=1) * np.linalg.norm(ref)
        scores.append(grads[rest] @ ref / np.where(norms > 0, norms, 1.0))
        truth.append(labels[rest])
    if not scores:
        return None
    return auc(np.concatenate(truth), np.concatenate(scores))


def knn_attack(grads: np.ndarray, labels: np.ndarray, known: int, seed: int) -> float | None:
    """k-NN (k = 5) on `known` samples with known labels (both classes among them)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    first = [order[np.flatnonzero(labels[order] == c)[0]] for c in (0, 1) if (labels == c).any()]
    chosen = np.unique(np.concatenate([first, order[:known]]))
    if len(np.unique(labels[chosen])) < 2:
        return None
    rest = np.setdiff1d(np.arange(len(labels)), chosen)
    knn = KNeighborsClassifier(n_neighbors=min(5, len(chosen))).fit(grads[chosen], labels[chosen])
    return auc(labels[rest], knn.predict_proba(grads[rest])[:, 1])


# ---------------------------------------------------------------- one run


def views(
    relayed: Relayed, label_of: Mapping[int, np.ndarray], blocks: list[int]
) -> dict[str, dict[int, list[tuple[np.ndarray, np.ndarray]]]]:
    """Per viewer ("party k", "coordinator") and epoch, the (gradients, labels) batches it sees.
    `label_of[block]`: the label (0/1) of each of that party's train rows."""
    out: dict[str, dict[int, list[tuple[np.ndarray, np.ndarray]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    rounds = sorted({r for (_b, r) in relayed.grads})
    for r in rounds:
        epoch = relayed.epochs[r]
        got = {b: relayed.grads.get((b, r)) for b in blocks}
        for b, g in got.items():
            if g is not None:
                out[f"party {b}"][epoch].append((g, label_of[b][relayed.rows[b, r]]))
        if all(g is not None for g in got.values()):  # every feature-only party, side by side
            b0 = blocks[0]
            joined = np.concatenate([got[b] for b in blocks], axis=1)
            out["coordinator"][epoch].append((joined, label_of[b0][relayed.rows[b0, r]]))
    return out


def attack_all(
    batches: list[tuple[np.ndarray, np.ndarray]], known: int, seed: int
) -> dict[str, float | None]:
    grads = np.concatenate([g for g, _ in batches])
    labels = np.concatenate([y for _, y in batches])
    return {
        "norm": norm_attack(grads, labels),
        "direction": direction_attack(batches),
        "knn": knn_attack(grads, labels, known, seed),
    }


def write_parties(table: Table, k: int, directory: Path) -> tuple[TableSource, ...]:
    """K CSVs with an `id` column, columns dealt round-robin, the label at block 0."""
    names = list(table.columns)
    ids = [f"r{i}" for i in range(table.rows)]
    sources = []
    for block in range(k):
        cols = names[block::k]
        path = directory / f"party{block}.csv"
        header = ["id", *cols] + (["label"] if block == LABEL_BLOCK else [])
        lines = [",".join(header)]
        for i in range(table.rows):
            cells = [ids[i], *(repr(float(table.columns[c][i])) for c in cols)]
            if block == LABEL_BLOCK:
                cells.append(str(table.label[i]))
            lines.append(",".join(cells))
        path.write_text("\n".join(lines) + "\n")
        sources.append(
            TableSource(
                path=path,
                id_column="id",
                label_column="label" if block == LABEL_BLOCK else None,
                block=block,
                num_blocks=k,
                num_classes=None if block == LABEL_BLOCK else 2,
            )
        )
    return tuple(sources)


# The defences measured beside the plain protocol (`--defences`): PrivacyConfig settings.
DEFENCES: dict[str, dict[str, Any]] = {
    "none": {},
    "max_norm": {"gradient_defence": "max_norm"},
    "direction": {"gradient_defence": "direction", "direction_power": 1.0},
    # both gradient attacks <= 0.60 on Credit over 5 epochs, not over full training
    "direction_p2": {"gradient_defence": "direction", "direction_power": 2.0},
    "direction_p4": {"gradient_defence": "direction", "direction_power": 4.0},
    # milder powers and the combination: the frontier of attack AUC and cost (privacy.md)
    "direction_p1_5": {"gradient_defence": "direction", "direction_power": 1.5},
    "direction_p1_25": {"gradient_defence": "direction", "direction_power": 1.25},
    "max_norm_direction_p1": {"gradient_defence": "max_norm_direction", "direction_power": 1.0},
    "max_norm_direction_p0_5": {"gradient_defence": "max_norm_direction", "direction_power": 0.5},
    "max_norm_direction_p2": {"gradient_defence": "max_norm_direction", "direction_power": 2.0},
    "max_norm_direction_p4": {"gradient_defence": "max_norm_direction", "direction_power": 4.0},
    # with `_patience10` the recommended label defence (docs/security.md, privacy.md)
    "max_norm_direction_p6": {"gradient_defence": "max_norm_direction", "direction_power": 6.0},
    # the recommendation until stop 37: both attacks <= 0.60, but early stops cost AUC
    "direction_p3": {"gradient_defence": "direction", "direction_power": 3.0},
    # between the last power that leaks above 0.60 at full training (2) and the first that holds
    "direction_p2_5": {"gradient_defence": "direction", "direction_power": 2.5},
    # stronger: the norm attack creeps up over the longer runs of a larger patience
    "direction_p6": {"gradient_defence": "direction", "direction_power": 6.0},
    "direction_p8": {"gradient_defence": "direction", "direction_power": 8.0},
    "embedding_dp": {"embedding_clip": 1.0, "embedding_noise": 1.0},
    "label_dp": {"label_epsilon": 1.0},
}


def setting(defence: str) -> dict[str, Any]:
    """The TrainConfig fields of `defence`: a DEFENCES entry, or one with `_patienceN` after
    it (the same defence with early stopping's patience N: the lever when a defended run stops
    early, benchmarks/results/privacy.md)."""
    base, _, patience = defence.partition("_patience")
    out: dict[str, Any] = {"privacy": DEFENCES[base]}
    if patience:
        out["early_stop_patience"] = int(patience)
    return out


def run_one(
    table: Table, k: int, seed: int, epochs: int, known: int, defence: str = "none"
) -> dict[str, Any]:
    """Train one federation, recording the relay, and attack each viewer's records per epoch."""
    with tempfile.TemporaryDirectory(prefix="vfl-privacy-") as tmp:
        sources = write_parties(table, k, Path(tmp))
        train = {"seed": seed, "epochs": epochs, **setting(defence)}
        config = SimulationConfig(tables=sources, clients=k, train=train)
        relayed = Relayed()
        start = time.perf_counter()
        result = run_simulation(config, wrap=lambda t: RecordingTransport(t, relayed))
        seconds = time.perf_counter() - start
    # The truth, by ID, from the table itself (a label party under label DP trains on others):
    # the positive class is the last of the sorted class names (c1).
    positive_name = sorted(np.unique(table.label))[-1]
    positive = {f"r{i}": int(v == positive_name) for i, v in enumerate(table.label)}
    label_of = {
        b: np.array([positive[i] for i in p.data.splits["train"].ids.tolist()])
        for b, p in result.parties.items()
        if b != LABEL_BLOCK
    }
    rows = [
        {"viewer": viewer, "epoch": epoch} | attack_all(batches, known, seed)
        for viewer, by_epoch in views(relayed, label_of, sorted(label_of)).items()
        for epoch, batches in sorted(by_epoch.items())
    ]
    report = next(iter(result.reports.values()))
    overall = next(r for r in report.rows() if r.observed == "all")
    return {
        "table": table.name,
        "parties": k,
        "seed": seed,
        "defence": defence,
        "epochs_trained": len(result.epochs),
        "early_stop": result.early_stop,
        "accuracy": overall.accuracy,
        "auc": overall.auc,
        "seconds": seconds,
        "attacks": rows,
    }


# ---------------------------------------------------------------- the report


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per table, K and viewer: each attack's AUC at the first and the last epoch and its
    maximum over epochs, as mean and sd over the seeds."""
    groups: dict[tuple[str, int, str, str], list[list[dict[str, Any]]]] = defaultdict(list)
    for run in runs:
        by_viewer: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in run["attacks"]:
            by_viewer[row["viewer"]].append(row)
        for viewer, rows in by_viewer.items():
            groups[run["table"], run["parties"], run.get("defence", "none"), viewer].append(rows)
    out = []
    for (table, k, defence, viewer), per_seed in sorted(groups.items()):
        line: dict[str, Any] = {"table": table, "parties": k, "defence": defence, "viewer": viewer}
        for attack in ATTACKS:
            first = [rows[0][attack] for rows in per_seed if rows[0][attack] is not None]
            best = [max(r[attack] for r in rows if r[attack] is not None) for rows in per_seed]
            line[f"{attack}_first"] = _mean_sd(first)
            line[f"{attack}_max"] = _mean_sd(best)
        out.append(line)
    return out


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def markdown(runs: list[dict[str, Any]], command: str, known: int) -> str:
    lines = [
        "# Label leakage: what a feature-only party and the coordinator learn "
        "(`vfl bench privacy`)",
        "",
        f"Command: `{command}`. Machine: {platform.node()}, code {_code()}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "Each table is cut into K parties (columns dealt round-robin, labels at block 0, the "
        "others feature-only, every party holding every row; the project's ID-hash test split), "
        "trained in process with the defaults, behind a transport that records what a "
        "coordinator relays. Attacks (Li et al., ICLR 2022, 'Label Leakage and Protection in "
        "Two-party Split Learning'): `norm` scores a training sample by the L2 norm of the "
        "gradient its party receives for its embedding; `direction` by the cosine with the "
        "gradient of one sample of the batch whose label the attacker knows; `knn` labels the "
        f"samples by a 5-NN vote over {known} samples of known label. A feature-only party sees "
        "its own gradients; the coordinator relays every party's in the clear and attacks them "
        "side by side. AUC: max(AUC, 1 - AUC), 0.5 = no leak, 1.0 = every label. `first`: the "
        "first epoch; `max`: the epoch where the attack did best. Mean ± sd over the seeds.",
        "",
        "| table | K | defence | viewer | norm first | norm max | direction first | "
        "direction max | knn first | knn max |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in summarise(runs):
        lines.append(
            f"| {s['table']} | {s['parties']} | {s['defence']} | {s['viewer']} | "
            f"{s['norm_first']} | {s['norm_max']} | {s['direction_first']} | "
            f"{s['direction_max']} | {s['knn_first']} | {s['knn_max']} |"
        )
    lines += ["", "The federations attacked:", ""]
    lines += ["| table | K | defence | seed | epochs trained | test accuracy | test AUC | s |"]
    lines += ["| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in runs:
        acc = f"{100 * r['accuracy']:.2f}" if r["accuracy"] is not None else "-"
        roc = f"{r['auc']:.4f}" if r["auc"] is not None else "-"
        lines.append(
            f"| {r['table']} | {r['parties']} | {r.get('defence', 'none')} | {r['seed']} | "
            f"{r['epochs_trained']} | {acc} | "
            f"{roc} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _code() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--parties", default="2,4", help="K values")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--known", type=int, default=20, help="known labels for the k-NN")
    parser.add_argument("--defences", default="none", help=f"of {', '.join(DEFENCES)}")
    parser.add_argument("--out", type=Path, default=RESULTS / "privacy.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    loaders = tables(args.data_path, quick=False)
    runs = []
    for name in args.tables.split(","):
        for k in (int(v) for v in args.parties.split(",")):
            for seed in (int(v) for v in args.seeds.split(",")):
                for defence in args.defences.split(","):
                    table = loaders[name](seed, False)
                    runs.append(run_one(table, k, seed, args.epochs, args.known, defence))
                    log.warning(
                        "%s K=%d seed %d %s: %.1fs", name, k, seed, defence, runs[-1]["seconds"]
                    )
    command = "python -m benchmarks.privacy " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(runs, command, args.known))
    args.out.with_suffix(".json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
