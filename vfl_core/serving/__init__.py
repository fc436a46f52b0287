"""Serving predictions: the coordinator's batch `Predict` (vfl_core.serving.batch) and online
serving from per-party bundles (bundle, features, gateway, batching)."""

from vfl_core.serving.batch import (
    no_head,
    predict_waiting,
    predictions_with_rows,
    refuse_unanswered,
)

__all__ = ["no_head", "predict_waiting", "predictions_with_rows", "refuse_unanswered"]
