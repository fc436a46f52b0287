"""Issue 14 in one process: the rules behind the real-process tests of test_reliability_grpc.py."""

from __future__ import annotations

from vfl_client.servicer import class_weights_refusal


def test_given_balancing_run_when_class_weights_asked_then_train_split_only() -> None:
    assert class_weights_refusal("resample", "train") is None
    assert "only for the train split" in (class_weights_refusal("resample", "test") or "")
    assert "does not balance" in (class_weights_refusal("none", "train") or "")
