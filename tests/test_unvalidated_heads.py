"""The heads a run predicts with where nothing is held out to choose them on
(TrainConfig.unvalidated_heads; vfl_core.inference.unvalidated): by default a regression
predicts every observed set holding a label party with the mean of the label party's heads
(BLEND), a classification with LASER-VFL's; the rule reads no row, and a label party's bundle
then predicts as the federation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_serving_bundle import bundle_predictions, trained

from benchmarks.tabular.rows import simulate_row
from benchmarks.tabular.tables import ID_COLUMN, LABEL_COLUMN, prepare, tables
from vfl_core.data.learning_task import CLASSIFICATION, REGRESSION
from vfl_core.inference.unvalidated import MAX_EVERY_SET, unvalidated_heads
from vfl_core.methods.spec import BLEND, CONCAT, LINEAR
from vfl_core.serving.batch import predictions_with_rows
from vfl_core.serving.bundle import load_bundle
from vfl_core.training.engine import Federation

MEMBERS = ("", CONCAT, LINEAR)
EVERY = {(0,), (0, 1), (0, 2), (0, 1, 2)}  # the sets of 3 parties holding label party 0


def test_given_the_task_and_rule_when_nothing_is_held_out_then_the_heads_of_every_label_set() -> (
    None
):
    patterns = [(0, 1, 2), (1,)]
    assert unvalidated_heads(
        "auto", REGRESSION, MEMBERS, [0, 1, 2], [0], patterns
    ) == dict.fromkeys(EVERY, BLEND)
    assert unvalidated_heads("auto", CLASSIFICATION, MEMBERS, [0, 1, 2], [0], patterns) == {}
    assert unvalidated_heads("blend", CLASSIFICATION, MEMBERS, [0, 1, 2], [0], patterns) == (
        dict.fromkeys(EVERY, BLEND)
    )
    assert unvalidated_heads("laser", REGRESSION, MEMBERS, [0, 1, 2], [0], patterns) == {}
    assert unvalidated_heads("auto", REGRESSION, ("", CONCAT), [0, 1], [1], patterns) == {
        (1,): BLEND,
        (0, 1): BLEND,
    }
    assert unvalidated_heads("auto", REGRESSION, (), [0, 1, 2], [0], patterns) == {}  # one head
    many = list(range(MAX_EVERY_SET + 1))  # beyond it: the training rows' sets only
    assert unvalidated_heads("auto", REGRESSION, MEMBERS, many, [0], patterns) == {(0, 1, 2): BLEND}


def _federation(tmp_path: Path, table: str, **train: object) -> tuple[Federation, dict, list]:
    """A small table of the benchmark (scikit-learn's diabetes or wine: a few hundred rows, no
    validation split) over three parties, trained in process (test_serving_bundle.trained);
    and the parties' CSVs."""
    data = tables(tmp_path / "none", False, extra=True)[table](0, False)
    paths = list(prepare(data, 0, tmp_path / table).split.paths)
    fed, parties = trained(paths, ID_COLUMN, LABEL_COLUMN, data.task, **train)
    return fed, parties, paths


def test_given_a_small_regression_when_trained_then_every_label_set_predicts_the_heads_mean(
    tmp_path: Path,
) -> None:
    fed, parties, _ = _federation(tmp_path, "diabetes")
    assert fed.train_rows.validation is None  # nothing held out: 442 rows
    assert parties[0].spec.blend_members == MEMBERS
    assert fed.choice.heads == dict.fromkeys(EVERY, BLEND)
    assert fed.serving_choice().heads == fed.choice.heads
    samples, _ = predictions_with_rows(fed, "test", None)
    labelled = [s for s in samples if 0 in s.party_probs]
    assert len(labelled) > 50
    # the label party's prediction is the mean of its three heads' on the same embeddings
    blended = {s.id_hash: s.party_probs[0] for s in labelled}
    each = {}
    for h in MEMBERS:
        fed.choice.heads = dict.fromkeys(EVERY, h)
        predicted, _ = predictions_with_rows(fed, "test", None)
        each[h] = {s.id_hash: s.party_probs[0] for s in predicted if 0 in s.party_probs}
    for key, value in blended.items():
        want = np.mean([each[h][key] for h in MEMBERS], axis=0)
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-4)
    assert not np.allclose(each[""][key], each[LINEAR][key])  # the heads differ


@pytest.mark.parametrize(
    ("table", "train"),
    [("wine", {}), ("diabetes", {"unvalidated_heads": "laser"})],
)
def test_given_classes_or_the_laser_rule_when_nothing_is_held_out_then_laser_vfls_heads(
    tmp_path: Path, table: str, train: dict
) -> None:
    fed, _, _ = _federation(tmp_path, table, **train)
    assert fed.train_rows.validation is None
    assert fed.choice.heads == {}


def test_given_the_blend_where_nothing_is_held_out_when_bundles_predict_then_equal_the_federation(
    tmp_path: Path,
) -> None:
    """The label party's bundle carries every head the blend averages and predicts each test
    sample as the federation does (online equals batch)."""
    fed, parties, paths = _federation(tmp_path, "diabetes")
    got, want = bundle_predictions(tmp_path, fed, parties, paths, ID_COLUMN)
    assert len(got) > 50
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    meta = load_bundle(tmp_path / "party0").meta
    assert set(meta.blend_sets) == EVERY and meta.blend_heads == MEMBERS


def test_given_a_small_regression_when_simulated_then_its_record_names_the_blended_sets(
    tmp_path: Path,
) -> None:
    data = tables(tmp_path / "none", False, extra=True)["diabetes"](0, False)
    prep = prepare(data, 0, tmp_path / "parties")
    row = simulate_row("federation", prep, [0, 1, 2], tmp_path / "run.json", 2)
    assert {tuple(h["observed"]): h["head"] for h in row["heads"]} == dict.fromkeys(EVERY, BLEND)
