"""The validation metric a run is judged by: early stopping (vfl_core.training.early_stop) and
the choices made on validation after training (vfl_core.inference.choice) both watch it."""

from __future__ import annotations

from vfl_core.data.learning_task import REGRESSION

# Validation metrics (MetricRow fields) for which lower is better.
LOWER_IS_BETTER = frozenset({"rmse", "brier"})


def watched(task: str, num_classes: int) -> str:
    """The validation metric a run is judged by (early stopping, the subset choice): RMSE for
    regression; for binary tasks the Brier score, which moves with every probability where
    the accuracy of a small validation split stays flat or saturates; else the accuracy."""
    if task == REGRESSION:
        return "rmse"
    return "brier" if num_classes == 2 else "accuracy"
