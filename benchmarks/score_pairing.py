"""The coordinator's Score pairing attack, and the label party's defence (issue 32 item 2).

    python -m benchmarks.score_pairing --data-path ../shared/data --seeds 0,1,2

The coordinator knows every prediction it relays (each head's class and positive-class
probability per row, and the federation's, which it combines itself) and gets back from the label
party, per Score call, a confusion matrix per predictor (true x predicted) and, for binary tasks,
a 1000-bin histogram of each predictor's probability per true class. Pairing them: the rows it
predicted class j (or whose probability fell in bin b) hold exactly the labels counted in that
column (bin); when one class accounts for every row left unknown there, each of those rows has
that label. Repeated over every column, bin, predictor and Score call of the run, with the labels
deduced so far subtracted, until nothing changes (the deduction the issue's reviewer ran: 17,985
of 24,000 training rows with 0 errors on Credit).

The defence (`PrivacyConfig.score_epsilon`): the label party scores against one
randomised-response copy of its labels per split, drawn once, so each row's label is
epsilon-label-DP in everything Score ever returns. The attack then "deduces" the randomised
labels: reported are the rows deduced, how many of those are wrong about the true label, and what
it costs: the test accuracy and AUC the run reports (against the randomised labels) and the true
ones (recomputed here from the last test evaluation's predictions and the true labels; the
validation choices of threshold and early stopping see the randomised labels too).

With `--relay encrypted` (TrainConfig.encrypt_relay) evaluation is blind
(vfl_core.inference.blind): the heads' probabilities reach the label party sealed, it combines
them itself, and the coordinator's Score calls name rows but no prediction. The attack then has
only each call's rows and their class counts (any confusion matrix's row sums) to pair; in
process the blind calls carry the probabilities in the clear, which the attack does not read
(over gRPC they are sealed: tests/test_relay_grpc.py).

UCI Credit (4000 rows), two parties (labels at block 0), the defaults, in process: the Score
messages are the same over gRPC (tests/test_relay_grpc.py pins the transports together).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.privacy import LABEL_BLOCK, write_parties
from benchmarks.tabular_tables import tables
from vfl_core.inference.blind import unblinded
from vfl_core.inference.metrics import FEDERATION, accuracy_from_confusion, auc_from_histogram
from vfl_core.inference.scoring import AUC_BINS, auc_histogram, confusion_counts
from vfl_core.protocol import ScoreCall, ScoreResult, Transport
from vfl_core.simulate import SimulationConfig, run_simulation

Key = tuple[str, int]  # (split, row of the label party)


class ScoreRecorder:
    """A transport that passes every call through and keeps each Score call and its answer."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.scored: list[tuple[ScoreCall, ScoreResult]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        result = self._inner.score(block, call)
        if result is not None and block == LABEL_BLOCK:
            self.scored.append((call, result))
        return result


def constraints(
    call: ScoreCall, result: ScoreResult, coarse: int = AUC_BINS
) -> Iterable[tuple[list[Key], np.ndarray]]:
    """(rows, label counts among them) for every column of every confusion matrix and every
    bin of every histogram of one Score answer (`coarse`: the bins the label party reports,
    PrivacyConfig.score_bins, which the coordinator knows from the run's config)."""
    keys = [(call.split, int(r)) for r in call.rows]
    for confusion in list(result.confusion.values())[:1]:  # the call's rows: its class counts
        yield keys, confusion.sum(axis=1)
    for name, confusion in result.confusion.items():
        if name not in call.predictions:  # a blind call (encrypted relay): no prediction known
            continue
        predicted = call.predictions[name]
        for j in range(confusion.shape[1]):
            yield [keys[i] for i in np.flatnonzero(predicted == j)], confusion[:, j]
    for name, histogram in result.histograms.items():
        if name not in call.scores:
            continue
        scores = call.scores[name].astype(np.float64)
        width = histogram.shape[1] // coarse
        counts = histogram.reshape(2, coarse, width).sum(axis=2)
        bins = np.minimum((scores * coarse).astype(np.int64), coarse - 1)
        for b in np.unique(bins):
            yield [keys[i] for i in np.flatnonzero(bins == b)], counts[:, b]


def deduce(scored: list[tuple[ScoreCall, ScoreResult]], coarse: int = AUC_BINS) -> dict[Key, int]:
    """Every label the answers determine, propagated until nothing changes."""
    groups = [g for call, result in scored for g in constraints(call, result, coarse)]
    known: dict[Key, int] = {}
    changed = True
    while changed:
        changed = False
        for rows, counts in groups:
            unknown = [k for k in rows if k not in known]
            if not unknown:
                continue
            left = counts.astype(np.int64).copy()
            for k in rows:
                if k in known:
                    left[known[k]] -= 1
            if (left < 0).any():
                continue  # inconsistent (another call's rows): nothing to conclude
            classes = np.flatnonzero(left > 0)
            if len(classes) == 1 and left[classes[0]] == len(unknown):
                for k in unknown:
                    known[k] = int(classes[0])
                changed = True
    return known


def true_test_metrics(
    scored: list[tuple[ScoreCall, ScoreResult]], truth: dict[str, np.ndarray], seed: int = 0
) -> dict[str, float | None]:
    """The federation's accuracy and the heads' mean AUC on the test split against the true
    labels, from the predictions of the last test evaluation (its Score calls follow one
    another)."""
    tests = [p for c, _ in scored if c.split == "test" for p in plain(c, seed)]
    last: list[ScoreCall] = []
    seen: set[int] = set()
    for call in reversed(tests):  # the last evaluation: calls until a row repeats
        rows = set(call.rows.tolist())
        if rows & seen:
            break
        seen |= rows
        last.append(call)
    confusion = sum(
        confusion_counts(truth["test"][c.rows], c.predictions[FEDERATION], 2) for c in last
    )
    aucs = []
    for name in sorted({n for c in last for n in c.scores}):
        histogram = sum(
            auc_histogram(truth["test"][c.rows], c.scores[name], AUC_BINS)
            for c in last
            if name in c.scores
        )
        if isinstance(histogram, np.ndarray):
            aucs.append(auc_from_histogram(histogram))
    known = [a for a in aucs if a is not None]
    auc = statistics.mean(known) if known else None  # the mean over the heads, as reported
    return {"accuracy": float(accuracy_from_confusion(confusion)), "auc": auc}


def plain(call: ScoreCall, seed: int) -> list[ScoreCall]:
    """The predictions a blind call stands for, one call per batch, as the label party combines
    them (for the true metrics only: over gRPC the coordinator holds them sealed, so the attack
    never sees them)."""
    if not call.blind:
        return [call]
    return unblinded(call, "heads", "classification", 2, seed)


def run_one(
    table: Any,
    seed: int,
    epochs: int,
    eps: float | None,
    bins: int = AUC_BINS,
    encrypted: bool = False,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vfl-score-") as tmp:
        sources = write_parties(table, 2, Path(tmp))
        privacy: dict[str, Any] = {"score_bins": bins}
        if eps is not None:
            privacy["score_epsilon"] = eps
        train = {"seed": seed, "epochs": epochs, "privacy": privacy, "encrypt_relay": encrypted}
        config = SimulationConfig(tables=sources, clients=2, train=train)
        recorder: list[ScoreRecorder] = []

        def wrap(t: Transport) -> Transport:
            recorder.append(ScoreRecorder(t))
            return recorder[0]  # type: ignore[return-value]

        result = run_simulation(config, wrap=wrap)
    party = result.parties[LABEL_BLOCK]
    truth = {s: party.data.splits[s].labels for s in ("train", "test")}
    scored = recorder[0].scored
    known = deduce(scored, bins)
    wrong = int(sum(known[k] != truth[k[0]][k[1]] for k in known))
    report = next(iter(result.reports.values()))
    overall = next(r for r in report.rows() if r.observed == "all")
    return {
        "seed": seed,
        "score_epsilon": eps,
        "score_bins": bins,
        "encrypt_relay": encrypted,
        "score_calls": len(scored),
        "rows_scored": len({(c.split, int(r)) for c, _ in scored for r in c.rows}),
        "deduced": len(known),
        "wrong": wrong,
        "reported": {"accuracy": overall.accuracy, "auc": overall.auc},
        "true": true_test_metrics(scored, truth, seed),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, default=Path("../shared/data"))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--epsilons", default="none,2,4")
    parser.add_argument("--bins", default="1000", help="score_bins values, each with each epsilon")
    parser.add_argument("--relay", default="plain", help="plain, encrypted or both (a,b)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/score_pairing.json"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    runs = []
    command = "python -m benchmarks.score_pairing " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    for seed in map(int, args.seeds.split(",")):
        table = tables(args.data_path, False)["credit"](seed, False)
        for bins in map(int, args.bins.split(",")):
            for e in args.epsilons.split(","):
                eps = None if e == "none" else float(e)
                for relay in args.relay.split(","):
                    encrypted = relay == "encrypted"
                    runs.append(run_one(table, seed, args.epochs, eps, bins, encrypted))
                    print(json.dumps(runs[-1]), flush=True)
            summary = {
                "command": command,
                "seconds": round(time.perf_counter() - start, 1),
                "runs": runs,
                "means": _means(runs),
            }
            args.out.write_text(json.dumps(summary, indent=1) + "\n")  # kept as it grows
    print(json.dumps(summary["means"], indent=1))


def _means(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []

    def setting(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["score_epsilon"], r["score_bins"], r.get("encrypt_relay", False)

    for eps, bins, encrypted in dict.fromkeys(setting(r) for r in runs):
        group = [r for r in runs if setting(r) == (eps, bins, encrypted)]

        def mean(get: Any, group: list[dict[str, Any]] = group) -> float:
            return round(statistics.mean(get(r) for r in group), 4)

        out.append(
            {
                "score_epsilon": eps,
                "score_bins": bins,
                "encrypt_relay": encrypted,
                "seeds": len(group),
                "rows_scored": mean(lambda r: r["rows_scored"]),
                "deduced": mean(lambda r: r["deduced"]),
                "wrong": mean(lambda r: r["wrong"]),
                "reported_accuracy": mean(lambda r: r["reported"]["accuracy"]),
                "true_accuracy": mean(lambda r: r["true"]["accuracy"]),
                "reported_auc": mean(lambda r: r["reported"]["auc"] or 0.0),
                "true_auc": mean(lambda r: r["true"]["auc"] or 0.0),
            }
        )
    return out


if __name__ == "__main__":
    main()
