"""`vfl bench privacy`: how much a feature-only party and the coordinator learn about the labels.

Issues 32 and 44 (the leak meter). A binary table is cut into K parties (labels at block 0, the
others feature-only, every party holding every row); the federation trains with the project's
defaults in process (whatever they are: the meter reads the epochs and rounds from what it
recorded), behind a transport that records what a coordinator relays: each party's embedding
rows (EmbedCall) and the gradient each feature-only party receives for its embedding
(BackwardCall, in the pipelined Train messages as well). From those records, per viewer:

Per epoch, the batch attacks of Li et al., "Label Leakage and Protection in Two-party Split
Learning", ICLR 2022:
  - norm: the score of a sample is the L2 norm of its gradient (Sec. 3.1).
  - direction: in each batch one sample whose label the attacker knows (the first positive
    one); the score of the others is the cosine of their gradient with its gradient (Sec. 3.2).
and, with `--known` labels known (the same rows throughout the run):
  - xdirection: the reference from the other batches of the epoch (benchmarks.privacy.attacks).
  - knn: the 5 nearest neighbours' vote in gradient space.
  - fit: a logistic regression on the epoch's gradients.
Cumulative, on each row's unit gradients summed over epochs 1..e (benchmarks.privacy.attacks):
  - sum_norm and sum_pca (no label known), sum_fit (the logistic regression).
At the end, model completion (Fu et al., USENIX Security 2022) at each feature-only party: its
trained bottom model completed by a logistic regression on 40 and on 300 known labels, against
the same regression on its raw features (`gain`).

A feature-only party sees its own gradients. The coordinator relays every party's in the clear,
so its view is every feature-only party's gradient of a sample side by side (concatenated). AUC
0.5 is no leak, 1.0 a perfect one; the table reports max(AUC, 1 - AUC).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.neighbors import KNeighborsClassifier

from benchmarks.privacy.attacks import (
    accumulate,
    auc,
    completion_attack,
    cross_batch_direction_attack,
    fitted_attack,
    known_rows,
    markdown,
    sum_norm_attack,
    sum_pca_attack,
)
from benchmarks.privacy.readback import readback
from benchmarks.tabular.tables import Table, tables
from vfl_core.auto_rounds import resolve
from vfl_core.data.tabular import TableSource
from vfl_core.protocol import BackwardCall, EmbedCall, TrainCall, Transport
from vfl_core.simulate import SimulationConfig, run_simulation

log = logging.getLogger(__name__)

TABLES = ("credit", "gen_skewed")
EPOCH_ATTACKS = ("norm", "direction", "xdirection", "knn", "fit")
CUMULATIVE_ATTACKS = ("sum_norm", "sum_pca", "sum_fit")
ATTACKS = EPOCH_ATTACKS + CUMULATIVE_ATTACKS
COMPLETION_KNOWN = (40, 300)
RESULTS = Path("benchmarks/results")
LABEL_BLOCK = 0


# ---------------------------------------------------------------- what a coordinator relays


@dataclass
class Relayed:
    """Rows embedded and gradients sent back, per (block, round): what the coordinator sees."""

    rows: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    grads: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)  # round -> epoch
    # each party's bottom model before the first round (what a party holds without any
    # gradient: as drawn, or as its label-free pretraining left it, vfl_core.privacy.pretrain)
    initial: dict[int, torch.nn.Module] = field(default_factory=dict)


class RecordingTransport:
    """A transport that passes every call through and copies the training embeddings' rows and
    the gradients relayed to the parties (the coordinator's view of a round)."""

    def __init__(self, inner: Transport, relayed: Relayed) -> None:
        self._inner = inner
        self.relayed = relayed
        for block, party in getattr(inner, "parties", {}).items():  # in process: before training
            relayed.initial[block] = copy.deepcopy(party.f)

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


# ---------------------------------------------------------------- the batch attacks


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
    return knn_on(grads, labels, known_rows(labels, known, seed))


def knn_on(grads: np.ndarray, labels: np.ndarray, chosen: np.ndarray) -> float | None:
    """k-NN (k = 5) fitted on the `chosen` rows (a mask), scored on the others."""
    if len(np.unique(labels[chosen])) < 2 or chosen.all():
        return None
    knn = KNeighborsClassifier(n_neighbors=min(5, int(chosen.sum()))).fit(
        grads[chosen], labels[chosen]
    )
    return auc(labels[~chosen], knn.predict_proba(grads[~chosen])[:, 1])


# ---------------------------------------------------------------- one viewer's records

Batch = tuple[np.ndarray, np.ndarray]  # (row indices into the viewer's train rows, gradients)


@dataclass
class View:
    """What one viewer received: per epoch its batches, and the truth of every train row."""

    labels: np.ndarray
    epochs: dict[int, list[Batch]] = field(default_factory=lambda: defaultdict(list))


def views(
    relayed: Relayed, label_of: Mapping[int, np.ndarray], blocks: list[int]
) -> dict[str, View]:
    """Per viewer ("party k", "coordinator"), its view. `label_of[block]`: the label (0/1) of
    each of that party's train rows. The coordinator's rows are numbered as the first
    feature-only party's."""
    out = {f"party {b}": View(label_of[b]) for b in blocks}
    out["coordinator"] = View(label_of[blocks[0]])
    for r in sorted({r for (_b, r) in relayed.grads}):
        epoch = relayed.epochs[r]
        got = {b: relayed.grads.get((b, r)) for b in blocks}
        for b, g in got.items():
            if g is not None:
                out[f"party {b}"].epochs[epoch].append((relayed.rows[b, r], g))
        if all(g is not None for g in got.values()):  # every feature-only party, side by side
            joined = np.concatenate([got[b] for b in blocks], axis=1)
            out["coordinator"].epochs[epoch].append((relayed.rows[blocks[0], r], joined))
    return out


def attack_view(view: View, known: int, seed: int) -> list[dict[str, Any]]:
    """Every attack of every epoch of `view`: the batch attacks on that epoch's gradients, the
    cumulative ones on the sums over the epochs so far."""
    labels = view.labels
    chosen = known_rows(labels, known, seed)
    rows: list[dict[str, Any]] = []
    sums = np.zeros(0)
    seen = np.zeros(len(labels), dtype=bool)
    for epoch, batches in sorted(view.epochs.items()):
        index = np.concatenate([i for i, _g in batches])
        grads = np.concatenate([g for _i, g in batches]).astype(np.float64)
        truth = labels[index]
        add, here = accumulate(batches, len(labels))
        sums = add if not sums.size else sums + add
        seen |= here
        rows.append(
            {
                "epoch": epoch,
                "norm": norm_attack(grads, truth),
                "direction": direction_attack([(g, labels[i]) for i, g in batches]),
                "xdirection": cross_batch_direction_attack(batches, labels, chosen),
                "knn": knn_on(grads, truth, chosen[index]),
                "fit": fitted_attack(grads, truth, chosen[index]),
                "sum_norm": sum_norm_attack(sums[seen], labels[seen]),
                "sum_pca": sum_pca_attack(sums[seen], labels[seen]),
                "sum_fit": fitted_attack(sums[seen], labels[seen], chosen[seen]),
            }
        )
    return rows


def completion(
    party: Any, initial: torch.nn.Module | None, labels: np.ndarray, seed: int
) -> dict[str, Any]:
    """Model completion at a feature-only party: its bottom model as training left it, on its
    train rows with features, against its raw (prepared) features and against its bottom model
    as initialised (`initial`: random features it held before any gradient), per number of
    known labels."""
    raw = party.split("train").features
    flat = raw.reshape(len(raw), -1)
    truth = labels[: len(raw)]
    trained = _outputs(party.f, raw, party.device)
    untrained = None if initial is None else _outputs(initial, raw, party.device)
    return {
        str(n): completion_attack(trained, flat, truth, known_rows(truth, n, seed), untrained)
        for n in COMPLETION_KNOWN
    }


def readback_party(party: Any, labels: np.ndarray, seed: int) -> dict[str, float]:
    """The label party's reads of this party's raw training block (benchmarks.privacy.readback),
    40 of its rows' raw features known."""
    raw = party.split("train").features
    embedded = _outputs(party.f, raw, party.device)
    known = known_rows(labels[: len(raw)], 40, seed)
    return readback(embedded, raw, party.config.seed, party.block, known)


def _outputs(model: torch.nn.Module, features: np.ndarray, device: Any) -> np.ndarray:
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(features).to(device)).cpu().numpy()
    model.train(was)
    return out


# ---------------------------------------------------------------- one run


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
            cells = [ids[i], *(_cell(table.columns[c][i]) for c in cols)]
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


def _cell(value: Any) -> str:
    """A CSV cell: a number as Python writes a float, a category as its name ('' if empty)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return repr(float(value))


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
    # the recommendation before issue 44 (its fresh noise averages out over the epochs: privacy.md)
    "max_norm_direction_p6": {"gradient_defence": "max_norm_direction", "direction_power": 6.0},
    # an earlier recommendation: both batch attacks <= 0.60, but early stops cost AUC
    "direction_p3": {"gradient_defence": "direction", "direction_power": 3.0},
    # between the last power that leaks above 0.60 at full training (2) and the first that holds
    "direction_p2_5": {"gradient_defence": "direction", "direction_power": 2.5},
    # stronger: the norm attack creeps up over the longer runs of a larger patience
    "direction_p6": {"gradient_defence": "direction", "direction_power": 6.0},
    "direction_p8": {"gradient_defence": "direction", "direction_power": 8.0},
    "embedding_dp": {"embedding_clip": 1.0, "embedding_noise": 1.0},
    "label_dp": {"label_epsilon": 1.0},
    # issue 44: each row's noise drawn once, the same every epoch (docs/security.md)
    **{
        f"per_row_p{p}".replace(".", "_"): {
            "gradient_defence": "max_norm_direction_per_row",
            "direction_power": float(p),
        }
        for p in (1, 2, 4, 6, 8, 12, 16, 24)
    },
    # issue 44: the feature-only parties get no gradient (their bottom models stay as drawn)
    "withhold": {"gradient_defence": "withhold"},
    # and each feature-only party's tower trained on its own rows without labels first
    "withhold_denoise": {"gradient_defence": "withhold", "feature_pretrain": "denoise"},
    "withhold_denoise_p60": {
        "gradient_defence": "withhold",
        "feature_pretrain": "denoise",
        "pretrain_epochs": 60,
    },
    # each feature-only party's tower a fixed orthogonal map of its block
    # (vfl_core.privacy.private_tower), drawn from its own seed (PRIVATE_SEEDED) or the shared one
    "withhold_ortho": {"gradient_defence": "withhold", "feature_tower": "orthogonal"},
    # SCARF's contrastive pretext task instead; the denoising one on every row the party holds
    "withhold_contrast": {"gradient_defence": "withhold", "feature_pretrain": "contrast"},
    "withhold_denoise_all": {
        "gradient_defence": "withhold",
        "feature_pretrain": "denoise",
        "pretrain_rows": "all",
    },
    # label DP at milder budgets (randomised once, before training: epochs do not compose)
    "label_dp_e2": {"label_epsilon": 2.0},
    "label_dp_e3": {"label_epsilon": 3.0},
    "label_dp_e4": {"label_epsilon": 4.0},
    # binary randomised response keeps a label with e^eps / (e^eps + 1): 0.60 at eps 0.405, the
    # largest budget whose randomised labels alone an attack cannot turn into AUC above 0.60
    "label_dp_e0_4": {"label_epsilon": 0.4},
    # RR-with-prior in two stages (LP-2ST, Ghazi et al. 2021): the prior from a logistic
    # regression on the label party's own features, fitted on half the rows' randomised labels
    **{
        f"label_prior_e{e}".replace(".", "_"): {
            "label_epsilon": float(e),
            "label_prior": "own_features",
        }
        for e in (0.4, 1, 2, 4)
    },
    # the same with per-row gradient noise on top
    **{
        f"label_prior_e{e}_per_row_p{p}": {
            "label_epsilon": float(e),
            "label_prior": "own_features",
            "gradient_defence": "max_norm_direction_per_row",
            "direction_power": float(p),
        }
        for e in (1, 2)
        for p in (8,)
    },
}


# Settings that change more than the privacy section: (a DEFENCES entry, TrainConfig fields).
# Under `withhold` the feature-only parties' bottom models are fixed random features, so the
# label party's heads decide what they are worth: a wider head, the concatenating head.
SETTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "withhold_concat": ("withhold", {"concat_head": True}),
    "withhold_head256": ("withhold", {"model": {"head_hidden": 256}}),
    "withhold_concat_head256": ("withhold", {"concat_head": True, "model": {"head_hidden": 256}}),
    # wider embeddings (every party's): more random features from a fixed tower
    "withhold_e256": ("withhold", {"model": {"embed_dim": 256}}),
    "withhold_concat_e256_h256": (
        "withhold",
        {"concat_head": True, "model": {"embed_dim": 256, "head_hidden": 256}},
    ),
    "withhold_denoise_e256": ("withhold_denoise", {"model": {"embed_dim": 256}}),
    "withhold_denoise_concat": ("withhold_denoise", {"concat_head": True}),
    "withhold_denoise_ple": ("withhold_denoise", {"model": {"num_embedding": "ple"}}),
    "withhold_denoise_p60_ple": ("withhold_denoise_p60", {"model": {"num_embedding": "ple"}}),
    "withhold_ple": ("withhold", {"model": {"num_embedding": "ple"}}),
    # the label party's head wider (every head's hidden layer; only label parties hold one):
    # more capacity for the fixed, label-free embeddings of the feature-only parties
    **{
        f"withhold_denoise{p}_h{h}": (f"withhold_denoise{p}", {"model": {"head_hidden": h}})
        for p in ("", "_p60", "_all")
        for h in (256, 1024, 2048)
    },
    "withhold_contrast_h1024": ("withhold_contrast", {"model": {"head_hidden": 1024}}),
    # random (not pretrained) towers with the wide head: no label-free learning to complete
    **{f"withhold_h{h}": ("withhold", {"model": {"head_hidden": h}}) for h in (1024, 2048)},
    "withhold_e256_h1024": ("withhold", {"model": {"embed_dim": 256, "head_hidden": 1024}}),
    "withhold_ple_h1024": ("withhold", {"model": {"num_embedding": "ple", "head_hidden": 1024}}),
    # linear towers (`--hidden ""`, every party's): a fixed linear map of a block, full rank while
    # the embedding is at least as wide as the block, gives a logistic regression what the raw
    # columns give it; the head's hidden layer does all the non-linear work
    **{
        f"withhold_lin_e{e}_h{h}": (
            "withhold",
            {"model": {"hidden": (), "embed_dim": e, "head_hidden": h}},
        )
        for e in (64, 256)
        for h in (1024, 2048)
    },
    "none_h1024": ("none", {"model": {"head_hidden": 1024}}),
    # the orthogonal towers with the wide head: from each party's own seed, or from the
    # federation's (`_shared`: the map every party can rebuild, for the read-back check)
    **{
        f"withhold_ortho{s}_h{h}": ("withhold_ortho", {"model": {"head_hidden": h}})
        for s in ("", "_shared")
        for h in (1024, 2048)
    },
}
# Settings whose feature-only parties draw their orthogonal tower from a seed of their own (in
# the meter: PRIVATE_SEED + 1000 * the run's seed + the block; the label party is not told it).
PRIVATE_SEEDED = ("withhold_ortho_h1024", "withhold_ortho_h2048")
PRIVATE_SEED = 7_000_003


def known_setting(name: str) -> bool:
    return name.partition("_patience")[0] in DEFENCES or name.partition("_patience")[0] in SETTINGS


def setting(defence: str) -> dict[str, Any]:
    """The TrainConfig fields of `defence`: a DEFENCES or SETTINGS entry, or one with
    `_patienceN` after it (the same defence with early stopping's patience N: the lever when a
    defended run stops early, benchmarks/results/privacy.md)."""
    base, _, patience = defence.partition("_patience")
    privacy, extra = SETTINGS.get(base, (base, {}))
    out: dict[str, Any] = {"privacy": DEFENCES[privacy], **extra}
    if patience:
        out["early_stop_patience"] = int(patience)
    return out


def run_one(
    table: Table, k: int, seed: int, epochs: int | None, known: int, defence: str = "none"
) -> dict[str, Any]:
    """Train one federation, recording the relay, and attack each viewer's records per epoch
    (`epochs`: the ceiling; None = the defaults')."""
    with tempfile.TemporaryDirectory(prefix="vfl-privacy-") as tmp:
        sources = write_parties(table, k, Path(tmp))
        train = {"seed": seed, **setting(defence)}
        if epochs is not None:
            train["epochs"] = epochs
        base = defence.partition("_patience")[0]
        private = {b: PRIVATE_SEED + 1000 * seed + b for b in range(1, k)}
        config = SimulationConfig(
            tables=sources,
            clients=k,
            train=train,
            private_tower_seeds=private if base in PRIVATE_SEEDED else {},
        )
        relayed = Relayed()
        start, cpu = time.perf_counter(), time.process_time()
        result = run_simulation(config, wrap=lambda t: RecordingTransport(t, relayed))
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
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
        {"viewer": viewer, **row}
        for viewer, view in views(relayed, label_of, sorted(label_of)).items()
        for row in attack_view(view, known, seed)
    ]
    completed = {
        f"party {b}": completion(result.parties[b], relayed.initial.get(b), label_of[b], seed)
        for b in sorted(label_of)
    }
    read = {}
    if config.train.privacy.feature_tower != "model":  # can the label party read the block?
        read = {
            f"party {b}": readback_party(result.parties[b], label_of[b], seed)
            for b in sorted(label_of)
        }
    report = next(iter(result.reports.values()))
    overall = next(r for r in report.rows() if r.observed == "all")
    used = resolve(config.train, tabular=True, quiet=True)  # as the run resolved it
    return {
        "table": table.name,
        "parties": k,
        "seed": seed,
        "defence": defence,
        "train": {
            "epochs": used.epochs,
            "batch_size": used.batch_size,
            "patience": used.patience(True),
        },
        "epochs_trained": len(result.epochs),
        "rounds": len({r for (_b, r) in relayed.grads}),
        "early_stop": result.early_stop,
        "accuracy": overall.accuracy,
        "auc": overall.auc,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "attacks": rows,
        "completion": completed,
        "readback": read,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--parties", default="2,3", help="K values")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, help="the ceiling; default: the defaults'")
    parser.add_argument("--known", type=int, default=40, help="labels the attacker knows")
    parser.add_argument("--defences", default="none", help=f"of {', '.join(DEFENCES)}")
    parser.add_argument("--out", type=Path, default=RESULTS / "privacy.md")
    parser.add_argument(
        "--resume", action="store_true", help="keep the runs already in the --out .json"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    loaders = tables(args.data_path, quick=False)
    for name in args.tables.split(","):
        if name not in loaders:
            raise SystemExit(f"error: no table '{name}' (Credit needs --data-path)")
    for defence in args.defences.split(","):
        if not known_setting(defence):
            names = ", ".join([*DEFENCES, *SETTINGS])
            raise SystemExit(f"error: no defence '{defence}' (of {names})")
    store = args.out.with_suffix(".json")
    runs = json.loads(store.read_text()) if args.resume and store.is_file() else []
    done = {(r["table"], r["parties"], r["seed"], r["defence"]) for r in runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.tables.split(","):
        for k in (int(v) for v in args.parties.split(",")):
            for seed in (int(v) for v in args.seeds.split(",")):
                for defence in args.defences.split(","):
                    if (name, k, seed, defence) in done:
                        continue
                    table = loaders[name](seed, False)
                    runs.append(run_one(table, k, seed, args.epochs, args.known, defence))
                    store.write_text(json.dumps(runs, separators=(",", ":")))  # a run at a time
                    log.warning(
                        "%s K=%d seed %d %s: %.1fs", name, k, seed, defence, runs[-1]["seconds"]
                    )
    command = "vfl bench privacy " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.write_text(markdown(runs, command, args.known))
