"""The paper's metrics, computed from the aggregates that label-holding parties return
(vfl_core.inference.scoring): labels never leave them.

Classification. Accuracy: per sample, the mean correctness of every observing head party's
prediction h_{k,O}, averaged over samples. F1: per party over the samples it predicted (binary:
the positive class; multi-class: macro), averaged over parties. Binary tasks add ROC AUC, per
party from histograms of its positive-class probability (ties within one of the 1000 bins count
half, so it is exact up to that resolution), averaged over parties like F1, and the Brier score
from the same histograms (each probability at its bin's centre). Tasks of more classes add the
Brier score (Brier 1950: per sample the sum over classes of (p_c - [c = y])^2; for two classes
that sum is twice the binary score above), from its sums, averaged over parties like F1.

Regression. RMSE and MAE: per sample, the mean squared (absolute) error of the observing heads'
predictions, averaged over samples (then the root for RMSE), the analogue of the accuracy; R^2 is
1 - that mean squared error over the variance of the targets; federation RMSE is of the mean of
the heads' predictions. All of them from sums of errors and targets.

Every metric per observed set and overall.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields

import numpy as np

from vfl_core.protocol import ScoreResult

FEDERATION = "federation"
Pattern = tuple[int, ...]


def f1_from_confusion(confusion: np.ndarray) -> float:
    """Binary: F1 of class 1. Multi-class: unweighted mean of per-class F1 (classes present)."""
    tp = np.diag(confusion).astype(np.float64)
    predicted = confusion.sum(axis=0)
    actual = confusion.sum(axis=1)
    denom = predicted + actual
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)
    if confusion.shape[0] == 2:
        return float(f1[1])
    return float(f1[actual > 0].mean()) if (actual > 0).any() else 0.0


def accuracy_from_confusion(confusion: np.ndarray) -> float:
    total = confusion.sum()
    return float(np.trace(confusion) / total) if total else 0.0


def auc_from_histogram(histogram: np.ndarray) -> float | None:
    """ROC AUC from (2, bins) counts of the positive-class probability (row 0 negatives, row 1
    positives): P(score of a positive > score of a negative), pairs in one bin counted half.
    None when either class is absent."""
    negatives, positives = histogram.astype(np.float64)
    total = negatives.sum() * positives.sum()
    if total == 0:
        return None
    below = np.cumsum(negatives) - negatives  # negatives in lower bins, per bin
    return float(np.sum(positives * (below + 0.5 * negatives)) / total)


@dataclass
class RegressionStats:
    """Sums for the regression metrics of one observed set (vfl_core.inference.scoring.SUMS
    order): each predictor's (5,) sums added batch by batch, kept apart per set of predictors
    and combined only when read, so that one answer for several batches (a blind evaluation's,
    vfl_core.inference.blind) gives the metrics of their batch-by-batch answers bit for bit."""

    # the predictors' names (sorted) -> name -> (5,) sums over the batches they predicted
    by_names: dict[tuple[str, ...], dict[str, np.ndarray]] = field(default_factory=dict)

    def add(self, sums: dict[str, np.ndarray]) -> None:
        kept = self.by_names.setdefault(tuple(sorted(sums)), {})
        for name, v in sums.items():
            kept[name] = v if name not in kept else kept[name] + v

    def _heads(self, column: int) -> float:
        """Sum over samples of the heads' mean of a SUMS column."""
        total = 0.0
        for kept in self.by_names.values():
            heads = [float(v[column]) for name, v in kept.items() if name != FEDERATION]
            total += sum(heads) / len(heads) if heads else 0.0
        return total

    @property
    def squared_error(self) -> float:
        """Sum over samples of the mean squared error of the heads."""
        return self._heads(0)

    @property
    def absolute_error(self) -> float:
        return self._heads(1)

    @property
    def targets(self) -> np.ndarray:
        """(3,) count, sum and sum of squares of the targets (the same under every name)."""
        return sum((next(iter(k.values()))[2:5] for k in self.by_names.values()), np.zeros(3))

    @property
    def federation(self) -> np.ndarray | None:
        """(5,) sums of the federation prediction, or None."""
        fed = [k[FEDERATION] for k in self.by_names.values() if FEDERATION in k]
        return sum(fed[1:], fed[0]) if fed else None


@dataclass
class PatternStats:
    """Everything scored for one observed set: confusion (and, for binary tasks, AUC histograms)
    per head party and for the federation, or the regression sums."""

    samples: int = 0
    # number of heads -> the sum of their confusions' traces (whole numbers, so exact however
    # the batches are grouped into answers); `correct` divides each by its number of heads
    traces: dict[int, float] = field(default_factory=dict)
    heads: dict[str, np.ndarray] = field(default_factory=dict)  # predictor -> confusion
    federation: np.ndarray | None = None
    histograms: dict[str, np.ndarray] = field(default_factory=dict)  # predictor -> (2, bins)
    brier: dict[str, np.ndarray] = field(default_factory=dict)  # predictor -> (2,) Brier sums
    regression: RegressionStats | None = None

    @property
    def correct(self) -> float:
        """Sum over samples of the mean correctness of the observing heads."""
        return sum(t / n for n, t in sorted(self.traces.items()))

    def add(self, samples: int, result: ScoreResult) -> None:
        self.samples += samples
        if result.sums:
            self.regression = self.regression or RegressionStats()
            self.regression.add(result.sums)
        heads = [c for name, c in result.confusion.items() if name != FEDERATION]
        if heads:
            n = len(heads)
            self.traces[n] = self.traces.get(n, 0.0) + sum(float(np.trace(c)) for c in heads)
        for name, conf in result.confusion.items():
            if name == FEDERATION:
                self.federation = conf if self.federation is None else self.federation + conf
            else:
                self.heads[name] = conf + self.heads.get(name, 0)
        for name, hist in result.histograms.items():
            self.histograms[name] = hist + self.histograms.get(name, 0)
        for name, sums in result.brier.items():
            self.brier[name] = sums + self.brier.get(name, 0)


@dataclass(frozen=True)
class MetricRow:
    """One line of results. Fields that do not apply to the task are None (and left out of the
    JSON and the table): accuracy, federation_accuracy and f1 for classification, auc for binary
    classification, the errors and r2 for regression."""

    observed: str  # "0,1,3" or "all"
    samples: int
    accuracy: float | None = None  # paper's accuracy (averaged over observing parties)
    federation_accuracy: float | None = None
    f1: float | None = None  # per-party F1 averaged over parties
    auc: float | None = None  # per-party ROC AUC averaged over parties
    rmse: float | None = None  # root of the mean over samples of the heads' mean squared error
    mae: float | None = None
    r2: float | None = None
    federation_rmse: float | None = None  # of the mean of the heads' predictions
    brier: float | None = None  # per-party Brier score averaged over parties

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


# A row's metrics: every field but what it describes. Each is optional (set for its task only)
# and travels as the EvaluateRow field of the same name (vfl_wire.convert).
ROW_METRICS: tuple[str, ...] = tuple(
    f.name for f in fields(MetricRow) if f.name not in ("observed", "samples")
)


@dataclass
class EvalReport:
    by_pattern: dict[Pattern, PatternStats] = field(default_factory=dict)
    unscored: int = 0  # samples for which no head party answered
    # block -> [batches it was asked for (held samples of), batches it answered]
    answers: dict[int, list[int]] = field(default_factory=dict)
    # blocks the validation choice left out of some batch (vfl_core.inference.choice): not
    # called there, which is no sign of being down
    chosen_out: set[int] = field(default_factory=set)

    def add(self, pattern: Pattern, samples: int, result: ScoreResult) -> None:
        self.by_pattern.setdefault(pattern, PatternStats()).add(samples, result)

    def count_answers(self, asked: Iterable[int], present: Iterable[int]) -> None:
        """One batch: the blocks that held its samples (and were asked), and those that answered."""
        answered = set(present)
        for block in asked:
            counts = self.answers.setdefault(block, [0, 0])
            counts[0] += 1
            counts[1] += block in answered

    def live_blocks(self) -> list[int]:
        """Blocks that answered every batch they were asked for: live throughout."""
        return sorted(b for b, (asked, got) in self.answers.items() if got == asked)

    def partly_live(self) -> dict[int, tuple[int, int]]:
        """Blocks that answered some of their batches, not all (they came back or went away
        during the evaluation): block -> (batches asked, batches answered)."""
        return {b: (n, got) for b, (n, got) in sorted(self.answers.items()) if 0 < got < n}

    @property
    def scored(self) -> int:
        return sum(s.samples for s in self.by_pattern.values())

    def rows(self) -> list[MetricRow]:
        patterns = sorted(self.by_pattern, key=lambda p: (-len(p), p))
        rows = [_row(",".join(map(str, p)), [self.by_pattern[p]]) for p in patterns]
        return [*rows, self.overall()]

    def overall(self) -> MetricRow:
        return _row("all", list(self.by_pattern.values()))

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "unscored": self.unscored,
            "rows": [row.to_json() for row in self.rows()],
        }
        if self.answers:  # the parties that answered every batch holding their samples
            out["live_blocks"] = self.live_blocks()
        if self.chosen_out:
            out["chosen_out"] = sorted(self.chosen_out)
        return out


def _row(name: str, stats: Iterable[PatternStats]) -> MetricRow:
    stats = list(stats)
    regression = [s.regression for s in stats if s.regression is not None]
    if regression:
        return _regression_row(name, sum(s.samples for s in stats), regression)
    samples = sum(s.samples for s in stats)
    correct = sum(s.correct for s in stats)
    fed = [s.federation for s in stats if s.federation is not None]
    fed_conf = sum(fed[1:], fed[0]) if fed else None
    per_party: dict[str, np.ndarray] = {}
    for s in stats:
        for block, conf in s.heads.items():
            per_party[block] = conf + per_party.get(block, 0)
    f1 = float(np.mean([f1_from_confusion(c) for c in per_party.values()])) if per_party else 0.0
    return MetricRow(
        observed=name,
        samples=samples,
        accuracy=correct / samples if samples else 0.0,
        federation_accuracy=accuracy_from_confusion(fed_conf) if fed_conf is not None else 0.0,
        f1=f1,
        auc=_mean_of(auc_from_histogram, stats),
        brier=_brier(stats, error=False),
    )


def _mean_of(
    metric: Callable[[np.ndarray], float | None], stats: list[PatternStats]
) -> float | None:
    """A histogram metric per predictor (not the federation) over the samples it predicted,
    averaged over predictors."""
    pooled: dict[str, np.ndarray] = {}
    for s in stats:
        for predictor, hist in s.histograms.items():
            if predictor != FEDERATION:
                pooled[predictor] = hist + pooled.get(predictor, 0)
    values = [a for a in map(metric, pooled.values()) if a is not None]
    return float(np.mean(values)) if values else None


def _brier(stats: list[PatternStats], error: bool) -> float | None:
    """The Brier score (`error`: its standard error) of a binary task from its histograms, of
    more classes from their Brier sums; None with neither."""
    if any(s.histograms for s in stats):
        return _mean_of(brier_error_from_histogram if error else brier_from_histogram, stats)
    return _brier_of_sums(stats, error)


def _brier_of_sums(stats: list[PatternStats], error: bool) -> float | None:
    """More than two classes: the Brier score (`error`: its standard error, from the spread of
    the per-sample scores) per predictor over the samples it predicted, averaged over
    predictors. None without Brier sums (or, for the error, with fewer than two samples)."""
    pooled: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for s in stats:
        for predictor, sums in s.brier.items():
            if predictor != FEDERATION:
                pooled[predictor] = sums + pooled.get(predictor, 0)
                counts[predictor] = counts.get(predictor, 0) + int(s.heads[predictor].sum())
    values = []
    for predictor, (total, squares) in pooled.items():
        n = counts[predictor]
        if n < (2 if error else 1):
            continue
        mean = total / n
        variance = max(squares / n - mean**2, 0.0) * n / (n - 1) if error else 0.0
        values.append(float(np.sqrt(variance / n)) if error else float(mean))
    return float(np.mean(values)) if values else None


def brier_from_histogram(histogram: np.ndarray) -> float | None:
    """Brier score, the mean squared error of the positive-class probability, from (2, bins)
    counts of it (row 0 negatives, row 1 positives), each probability taken at its bin's centre
    (exact up to half a bin: 0.0005 in probability). None when nothing was counted."""
    negatives, positives = histogram.astype(np.float64)
    total = negatives.sum() + positives.sum()
    if total == 0:
        return None
    centres = (np.arange(len(negatives)) + 0.5) / len(negatives)  # (bins,)
    return float((negatives @ centres**2 + positives @ (1 - centres) ** 2) / total)


def brier_error_from_histogram(histogram: np.ndarray) -> float | None:
    """The standard error of `brier_from_histogram`'s mean: the spread of the per-sample squared
    errors over the root of their count (each probability at its bin's centre). None when
    fewer than two samples were counted."""
    negatives, positives = histogram.astype(np.float64)
    total = negatives.sum() + positives.sum()
    if total < 2:
        return None
    centres = (np.arange(len(negatives)) + 0.5) / len(negatives)  # (bins,)
    loss_neg, loss_pos = centres**2, (1 - centres) ** 2  # per bin, by true class
    mean = (negatives @ loss_neg + positives @ loss_pos) / total
    second = (negatives @ loss_neg**2 + positives @ loss_pos**2) / total
    variance = max(second - mean**2, 0.0) * total / (total - 1)
    return float(np.sqrt(variance / total))


def standard_error(report: EvalReport, key: str) -> float | None:
    """The standard error of `report`'s overall `key` (a headline metric: "accuracy", "brier",
    "rmse") as an estimate from its samples: the accuracy as a binomial proportion, the Brier
    score from the spread of the squared errors in its histograms (per predictor, averaged over
    predictors like the score), RMSE as RMSE / sqrt(2 n), the error of a standard deviation
    estimated from n normal errors. None when it does not apply or fewer than 2 were scored."""
    row = report.overall()
    if row.samples < 2:
        return None
    if key == "accuracy" and row.accuracy is not None:
        return float(np.sqrt(row.accuracy * (1 - row.accuracy) / row.samples))
    if key == "brier":
        return _brier(list(report.by_pattern.values()), error=True)
    if key == "rmse" and row.rmse is not None:
        return float(row.rmse / np.sqrt(2 * row.samples))
    return None


def _regression_row(name: str, samples: int, stats: list[RegressionStats]) -> MetricRow:
    count, total, squares = sum((s.targets for s in stats), np.zeros(3))
    fed = [s.federation for s in stats if s.federation is not None]
    if not count:
        return MetricRow(observed=name, samples=samples)
    mse = sum(s.squared_error for s in stats) / count
    variance = squares / count - (total / count) ** 2
    fed_sums = sum(fed[1:], fed[0]) if fed else None
    return MetricRow(
        observed=name,
        samples=samples,
        rmse=float(np.sqrt(mse)),
        mae=float(sum(s.absolute_error for s in stats) / count),
        r2=float(1.0 - mse / variance) if variance > 0 else None,
        federation_rmse=float(np.sqrt(fed_sums[0] / fed_sums[2])) if fed_sums is not None else None,
    )


def unscored_note(unscored: int, live: bool = False) -> str:
    """The line under a result table that counts the samples it leaves out ("" for none)."""
    if not unscored:
        return ""
    who = "no live head party" if live else "no head party"
    noun = "sample" if unscored == 1 else "samples"
    return f"({unscored} {noun} unscored: {who}, or none the method can use, predicted them)"


def format_table(rows: list[MetricRow], title: str = "") -> str:
    """A fixed-width table for terminals and logs, with the columns of the task: accuracy,
    federation accuracy and F1 (plus ROC AUC for binary tasks), or RMSE, MAE, R^2 and federation
    RMSE for regression; binary tasks add the Brier score before ROC AUC."""
    regression = any(r.rmse is not None for r in rows)
    auc = any(r.auc is not None for r in rows)
    brier = any(r.brier is not None for r in rows)
    head = f"{'observed blocks':<16} {'samples':>8}"
    if regression:
        head += f" {'RMSE':>9} {'MAE':>9} {'R^2':>9} {'fed. RMSE':>9}"
    else:
        head += f" {'accuracy':>9} {'fed. acc':>9} {'F1':>7}"
    head += f" {'Brier':>6}" if brier else ""
    head += f" {'ROC AUC':>7}" if auc else ""
    lines = [title] if title else []
    lines += [head, "-" * len(head)]
    for r in rows:
        line = f"{r.observed:<16} {r.samples:>8}"
        line += _regression_cells(r) if regression else _classification_cells(r)
        line += f" {_fmt(r.brier, '.4f'):>6}" if brier else ""
        line += f" {_fmt(r.auc, '.4f'):>7}" if auc else ""
        lines.append(line)
    return "\n".join(lines)


def _classification_cells(r: MetricRow) -> str:
    acc, fed, f1 = (
        v if v is not None else float("nan") for v in (r.accuracy, r.federation_accuracy, r.f1)
    )
    return f" {100 * acc:>8.2f}% {100 * fed:>8.2f}% {100 * f1:>7.2f}"


def _regression_cells(r: MetricRow) -> str:
    return (
        f" {_fmt(r.rmse, '.4g'):>9} {_fmt(r.mae, '.4g'):>9} {_fmt(r.r2, '.4g'):>9} "
        f"{_fmt(r.federation_rmse, '.4g'):>9}"
    )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
