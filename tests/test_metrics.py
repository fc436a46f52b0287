"""The paper's metrics from confusion matrices: F1 (binary: positive class; multi-class: macro over
classes present), accuracy averaged over the observing heads per sample, and the result table."""

from __future__ import annotations

import numpy as np
import pytest

from vfl_core.inference.metrics import (
    FEDERATION,
    EvalReport,
    MetricRow,
    PatternStats,
    accuracy_from_confusion,
    f1_from_confusion,
    format_table,
)
from vfl_core.protocol import ScoreResult


def confusion(truth: list[int], predicted: list[int], classes: int) -> np.ndarray:
    out = np.zeros((classes, classes), np.int64)
    for t, p in zip(truth, predicted, strict=True):
        out[t, p] += 1
    return out


# ---------------------------------------------------------------- F1 and accuracy


def test_given_binary_confusion_when_scoring_then_f1_is_the_positive_class_f1() -> None:
    # rows = truth, columns = predicted: tn=50, fp=10, fn=5, tp=35
    conf = np.array([[50, 10], [5, 35]])
    precision, recall = 35 / 45, 35 / 40
    assert f1_from_confusion(conf) == pytest.approx(2 * precision * recall / (precision + recall))
    assert f1_from_confusion(conf) == pytest.approx(70 / 85)
    # Not the negative class's F1 (2*50 / (2*50 + 15)), nor the mean of both.
    assert f1_from_confusion(conf) != pytest.approx(100 / 115)
    assert accuracy_from_confusion(conf) == pytest.approx(85 / 100)


def test_given_binary_confusion_without_positive_predictions_when_scoring_then_f1_is_zero() -> None:
    assert f1_from_confusion(np.array([[80, 0], [20, 0]])) == 0.0
    assert f1_from_confusion(np.array([[80, 0], [0, 0]])) == 0.0  # no positives at all


def test_given_multiclass_confusion_when_scoring_then_f1_is_macro_over_present_classes() -> None:
    conf = np.array(
        [
            [5, 1, 0, 0],
            [2, 3, 1, 0],
            [0, 0, 4, 0],
            [0, 0, 2, 0],  # class 3 present, never predicted: F1 0
        ]
    )
    f1 = [2 * 5 / (6 + 7), 2 * 3 / (6 + 4), 2 * 4 / (4 + 7), 0.0]
    assert f1_from_confusion(conf) == pytest.approx(np.mean(f1))
    # A class that never occurs in the truth is left out of the mean (as in the paper's code).
    absent = np.array([[5, 1, 1], [2, 3, 0], [0, 0, 0]])
    assert f1_from_confusion(absent) == pytest.approx(np.mean([10 / 14, 6 / 9]))
    assert accuracy_from_confusion(conf) == pytest.approx(12 / 18)


def test_given_empty_confusion_when_scoring_then_zero() -> None:
    assert f1_from_confusion(np.zeros((3, 3), np.int64)) == 0.0
    assert accuracy_from_confusion(np.zeros((2, 2), np.int64)) == 0.0


# ---------------------------------------------------------------- the paper's accuracy


def test_given_two_heads_when_adding_a_batch_then_accuracy_averages_heads_per_sample() -> None:
    truth = [0, 1, 1, 0]
    head_a = [0, 1, 1, 1]  # 3 of 4 right
    head_b = [1, 0, 1, 1]  # 1 of 4 right
    federation = [0, 1, 1, 0]  # 4 of 4 right
    report = EvalReport()
    report.add(
        (0, 2),
        4,
        ScoreResult(
            confusion={
                "0": confusion(truth, head_a, 2),
                "2": confusion(truth, head_b, 2),
                FEDERATION: confusion(truth, federation, 2),
            }
        ),
    )
    row = report.overall()
    # Per sample: (1+0)/2, (1+0)/2, (1+1)/2, (0+0)/2 -> mean 0.5
    assert row.accuracy == pytest.approx(0.5)
    assert row.federation_accuracy == pytest.approx(1.0)
    f1_a = f1_from_confusion(confusion(truth, head_a, 2))
    f1_b = f1_from_confusion(confusion(truth, head_b, 2))
    assert f1_a == pytest.approx(2 * 2 / (3 + 2)) and f1_b == pytest.approx(2 * 1 / (3 + 2))
    assert row.f1 == pytest.approx((f1_a + f1_b) / 2)


def test_given_observed_sets_when_reporting_then_rows_per_set_and_pooled_per_party() -> None:
    report = EvalReport()
    # Observed set (0, 1): both heads predict 3 samples.
    t1 = [1, 0, 1]
    report.add(
        (0, 1),
        3,
        ScoreResult({"0": confusion(t1, [1, 0, 0], 2), "1": confusion(t1, [1, 1, 1], 2)}),
    )
    # Observed set (1,): only head 1 predicts 2 samples; a later batch of the same set adds 1.
    t2 = [0, 1]
    report.add((1,), 2, ScoreResult({"1": confusion(t2, [0, 1], 2)}))
    report.add((1,), 1, ScoreResult({"1": confusion([1], [0], 2)}))
    rows = report.rows()
    assert [r.observed for r in rows] == ["0,1", "1", "all"]
    by_name = {r.observed: r for r in rows}
    assert by_name["0,1"].samples == 3 and by_name["1"].samples == 3 and by_name["all"].samples == 6
    # (0,1): per sample (1+1)/2, (1+0)/2, (0+1)/2 = 2/3.  (1,): 2 of 3.
    assert by_name["0,1"].accuracy == pytest.approx(2 / 3)
    assert by_name["1"].accuracy == pytest.approx(2 / 3)
    assert by_name["all"].accuracy == pytest.approx(4 / 6)
    # Pooled per party: head 0 saw 3 samples, head 1 all 6; F1 averaged over the two parties.
    f1_0 = f1_from_confusion(confusion(t1, [1, 0, 0], 2))
    f1_1 = f1_from_confusion(confusion([*t1, *t2, 1], [1, 1, 1, 0, 1, 0], 2))
    assert by_name["all"].f1 == pytest.approx((f1_0 + f1_1) / 2)
    assert by_name["1"].f1 == pytest.approx(f1_from_confusion(confusion([0, 1, 1], [0, 1, 0], 2)))
    assert by_name["1"].federation_accuracy == 0.0  # no federation prediction was scored
    as_json = report.to_json()
    assert as_json["unscored"] == 0 and len(as_json["rows"]) == 3
    assert as_json["rows"][-1]["observed"] == "all"


def test_given_pattern_stats_when_adding_then_confusions_accumulate_per_head() -> None:
    stats = PatternStats()
    eye = np.eye(2, dtype=np.int64)
    stats.add(2, ScoreResult({"3": eye, FEDERATION: eye}))
    stats.add(2, ScoreResult({"3": eye, FEDERATION: eye}))
    assert stats.samples == 4 and stats.correct == 4
    np.testing.assert_array_equal(stats.heads["3"], 2 * np.eye(2))
    np.testing.assert_array_equal(stats.federation, 2 * np.eye(2))


def test_given_empty_report_when_reporting_then_single_zero_row() -> None:
    rows = EvalReport().rows()
    assert rows == [MetricRow("all", 0, 0.0, 0.0, 0.0)]


# ---------------------------------------------------------------- table


def test_given_rows_when_formatting_then_fixed_width_table_with_percentages() -> None:
    rows = [
        MetricRow("0,1,2,3", 6000, 0.81234, 0.8, 0.46512),
        MetricRow("all", 6000, 0.81234, 0.8, 0.46512),
    ]
    table = format_table(rows, title="test p_miss 0.0")
    lines = table.splitlines()
    assert lines[0] == "test p_miss 0.0"
    assert lines[1].split() == ["observed", "blocks", "samples", "accuracy", "fed.", "acc", "F1"]
    assert set(lines[2]) == {"-"} and len(lines[2]) == len(lines[1])
    assert lines[3].split() == ["0,1,2,3", "6000", "81.23%", "80.00%", "46.51"]
    assert lines[4].split() == ["all", "6000", "81.23%", "80.00%", "46.51"]
    assert len({len(line) for line in lines[1:]}) == 1  # columns line up
    assert not format_table(rows).startswith("\n")
    assert format_table(rows).splitlines()[0] == lines[1]
