"""The paper's metrics, computed from confusion matrices that label-holding parties return.

Accuracy: per sample, the mean correctness of every observing head party's prediction h_{k,O},
averaged over samples. F1: per party over the samples it predicted (binary: the positive class;
multi-class: macro), averaged over parties. Both also per observed set, and for the federation
prediction (mean of the heads' probabilities).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

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


@dataclass
class PatternStats:
    """Everything scored for one observed set: confusion per head party and for the federation."""

    samples: int = 0
    correct: float = 0.0  # sum over samples of the mean correctness of the observing heads
    heads: dict[str, np.ndarray] = field(default_factory=dict)  # predictor -> confusion
    federation: np.ndarray | None = None

    def add(self, samples: int, confusions: dict[str, np.ndarray]) -> None:
        self.samples += samples
        heads = [c for name, c in confusions.items() if name != FEDERATION]
        if heads:
            self.correct += sum(float(np.trace(c)) for c in heads) / len(heads)
        for name, conf in confusions.items():
            if name == FEDERATION:
                self.federation = conf if self.federation is None else self.federation + conf
            else:
                self.heads[name] = conf + self.heads.get(name, 0)


@dataclass(frozen=True)
class MetricRow:
    observed: str  # "0,1,3" or "all"
    samples: int
    accuracy: float  # paper's accuracy (averaged over observing parties)
    federation_accuracy: float
    f1: float  # per-party F1 averaged over parties


@dataclass
class EvalReport:
    by_pattern: dict[Pattern, PatternStats] = field(default_factory=dict)
    unscored: int = 0  # samples for which no head party answered

    def add(self, pattern: Pattern, samples: int, confusions: dict[str, np.ndarray]) -> None:
        self.by_pattern.setdefault(pattern, PatternStats()).add(samples, confusions)

    def rows(self) -> list[MetricRow]:
        patterns = sorted(self.by_pattern, key=lambda p: (-len(p), p))
        rows = [_row(",".join(map(str, p)), [self.by_pattern[p]]) for p in patterns]
        return [*rows, self.overall()]

    def overall(self) -> MetricRow:
        return _row("all", list(self.by_pattern.values()))

    def to_json(self) -> dict[str, object]:
        return {
            "unscored": self.unscored,
            "rows": [row.__dict__ for row in self.rows()],
        }


def _row(name: str, stats: Iterable[PatternStats]) -> MetricRow:
    stats = list(stats)
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
    )


def format_table(rows: list[MetricRow], title: str = "") -> str:
    """A fixed-width table for terminals and logs."""
    head = f"{'observed blocks':<16} {'samples':>8} {'accuracy':>9} {'fed. acc':>9} {'F1':>7}"
    lines = [title] if title else []
    lines += [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.observed:<16} {r.samples:>8} {100 * r.accuracy:>8.2f}% "
            f"{100 * r.federation_accuracy:>8.2f}% {100 * r.f1:>7.2f}"
        )
    return "\n".join(lines)
