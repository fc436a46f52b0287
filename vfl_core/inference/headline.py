"""Which test metric a run is summed up by, and how its values are written.

Classification metrics are fractions shown in % (changes in points), higher is better; the
regression errors are in the target's own units and lower is better; R^2 is unitless. The
headline of a task is the metric that `vfl simulate`'s drop-one lines and `vfl report` use
unless told otherwise: accuracy for classification, RMSE for regression.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION
from vfl_core.errors import ConfigError


@dataclass(frozen=True)
class Metric:
    key: str  # field of MetricRow and key of the JSON rows
    label: str  # for people: "accuracy", "RMSE"
    task: str
    percent: bool = False  # a fraction shown in % (changes in points)
    lower_is_better: bool = False
    decimals: int | None = None  # None: three significant digits of the values compared

    @property
    def unit(self) -> str:
        """What the values are measured in, for axis labels."""
        if self.percent:
            return "%"
        return "target units" if self.decimals is None else "unitless"

    def shown(self, value: float) -> float:
        """The number as written: in % for fractions, else as is."""
        return 100 * value if self.percent else value

    def places(self, reference: float) -> int:
        """Decimal places for values of about the size of `reference`."""
        if self.percent:
            return 2
        if self.decimals is not None:
            return self.decimals
        if reference == 0 or not math.isfinite(reference):
            return 3
        return max(1, 2 - math.floor(math.log10(abs(reference))))

    def format(self, value: float, reference: float | None = None) -> str:
        """'85.20%', 'RMSE' values as '61.3', R^2 as '0.412'."""
        places = self.places(value if reference is None else reference)
        return f"{self.shown(value):.{places}f}" + ("%" if self.percent else "")

    def format_change(self, delta: float, reference: float) -> str:
        """A difference of two values near `reference`: '+1.30 points', '+2.7'."""
        text = f"{self.shown(delta):+.{self.places(reference)}f}"
        return text + " points" if self.percent else text

    def worse(self, delta: float) -> bool:
        """Whether a change by `delta` makes the metric worse."""
        return delta > 0 if self.lower_is_better else delta < 0


METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric("accuracy", "accuracy", CLASSIFICATION, percent=True),
        Metric("federation_accuracy", "federation accuracy", CLASSIFICATION, percent=True),
        Metric("f1", "F1", CLASSIFICATION, percent=True),
        Metric("auc", "ROC AUC", CLASSIFICATION, decimals=3),
        Metric("brier", "Brier score", CLASSIFICATION, lower_is_better=True, decimals=4),
        Metric("rmse", "RMSE", REGRESSION, lower_is_better=True),
        Metric("mae", "MAE", REGRESSION, lower_is_better=True),
        Metric("r2", "R²", REGRESSION, decimals=3),
        Metric("federation_rmse", "federation RMSE", REGRESSION, lower_is_better=True),
    )
}


# Metrics a classification run may lack: ROC AUC (binary only) and the Brier score (binary, and
# of more classes where the run's results record it).
BINARY_ONLY = ("auc", "brier")


def headline(task: str) -> Metric:
    return METRICS["rmse" if task == REGRESSION else "accuracy"]


def task_metrics(task: str) -> list[Metric]:
    return [m for m in METRICS.values() if m.task == task]


def task_of_rows(rows: Iterable[Mapping[str, object]]) -> str:
    """The task of results written without one: regression rows carry errors, not accuracy."""
    keys = {k for row in rows for k in row}
    return REGRESSION if {"rmse", "mae"} & keys else CLASSIFICATION


def choose_metric(
    task: str, name: str | None, has_auc: bool, has_brier: bool | None = None
) -> Metric:
    """The metric `--metric name` asks for on a run of `task` (None: the headline); a ConfigError
    naming the option when it is unknown or does not apply. `has_brier` None: as `has_auc`."""
    has = {"auc": has_auc, "brier": has_auc if has_brier is None else has_brier}
    if name is None:
        return headline(task)
    metric = METRICS.get(name)
    if metric is None:
        raise ConfigError(f"--metric must be one of {', '.join(METRICS)}, not {name!r}")
    if metric.task != task:
        choices = ", ".join(
            m.key for m in task_metrics(task) if m.key not in BINARY_ONLY or has[m.key]
        )
        raise ConfigError(f"--metric {name} is for {metric.task}; this {task} run has {choices}")
    if name in BINARY_ONLY and not has[name]:
        only = " (binary classification only)" if name == "auc" else ""
        raise ConfigError(f"--metric {name}: this run has no {metric.label}{only}")
    return metric


# Validation metrics (MetricRow fields) for which lower is better.
LOWER_IS_BETTER = frozenset({"rmse", "brier"})


def watched(task: str, num_classes: int) -> str:
    """The validation metric a run is judged by (early stopping, the subset choice): RMSE for
    regression; for classification the Brier score, which moves with every probability where
    the accuracy of a small validation split stays flat, saturates or jumps by a sample (on a
    task of more than two classes the accuracy was watched until a 3-class table's runs stopped
    and restored their weights at lucky epochs: docs/tabular-defaults.md)."""
    if task == REGRESSION:
        return "rmse"
    return "brier"
