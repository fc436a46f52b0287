"""LASER-VFL with a concatenating head beside its own (TrainConfig.concat_head, issue 27): each
label party also trains a head on the zero-filled concatenation of the present embeddings, and the
validation choice (vfl_core/inference/choice.py) predicts an observed set with it only where it
beats LASER-VFL's heads by more than its standard error, reading validation rows only; the
choice and the heads survive a save and predict as chosen, in process and over the wire.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from recording import RecordingTransport
from tabular_tables import bank_sources, write_tables

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import TableSource, load_table_federation
from vfl_core.errors import ProtocolError
from vfl_core.inference import choice
from vfl_core.inference.choice import Candidate, best_candidate
from vfl_core.methods.registry import method_spec
from vfl_core.methods.spec import CONCAT, CONCAT_HEAD
from vfl_core.protocol import PredictCall
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert_party
from vfl_wire.convert import header

FAST = {"epochs": 4, "lr": 5e-3, "seed": 0, "concat_head": True}


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[TableSource]:
    paths = write_tables(tmp_path_factory.mktemp("tables"), n=1500, share=0.85)
    return list(bank_sources(paths))


@pytest.fixture(autouse=True)
def small_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the small test tables' validation split choose (its patterns hold a few dozen)."""
    monkeypatch.setattr(choice, "MIN_CHOICE_SAMPLES", 5)
    monkeypatch.setattr(choice, "MIN_CLASS_SAMPLES", 2)


def _parties(tables: list[TableSource], train: TrainConfig) -> dict[int, Party]:
    data = load_table_federation(tuple(tables))
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}


def _trained(
    tables: list[TableSource], train: TrainConfig
) -> tuple[Federation, RecordingTransport]:
    transport = RecordingTransport(_parties(tables, train))
    fed = Federation(transport, train, progress=False)
    fed.align()
    fed.train()
    return fed, transport


def test_given_concat_head_when_configured_then_only_laser_shaped_methods_take_it() -> None:
    spec = TrainConfig(concat_head=True).spec
    assert spec.concat_head and spec.head_input_blocks(CONCAT_HEAD, 3) == 3
    assert not TrainConfig().spec.concat_head  # LASER-VFL's plain behaviour by default
    with pytest.raises(ValueError, match="--concat-head needs LASER-VFL's shape"):
        TrainConfig(method="zerofill", concat_head=True)
    with pytest.raises(ProtocolError, match="has no head 'concat'"):
        method_spec("laser").predict_subset(0, (0, 1), CONCAT)
    assert spec.predict_subset(0, (1, 0), CONCAT) == (CONCAT_HEAD, (0, 1))


def test_given_the_defaults_when_tables_or_images_then_the_concat_head_on_tables_only() -> None:
    """concat_head unset: the concatenating head for feature vectors (the tables defaults) with
    LASER-VFL's shape, chosen once on all validation rows; never for images (the paper's
    benchmarks and the digits demo), a method without subset predictors or one with stages;
    set, it is what it says."""
    default = TrainConfig()
    assert default.concat_head is None and default.concat_choice == "all"
    assert default.spec_for(tabular=True).concat_head
    assert not default.spec_for(tabular=False).concat_head and not default.spec.concat_head
    assert not TrainConfig(concat_head=False).spec_for(tabular=True).concat_head
    assert TrainConfig(concat_head=True).spec_for(tabular=False).concat_head
    for method in ("zerofill", "vanilla", "dvfl"):
        assert not TrainConfig(method=method).spec_for(tabular=True).concat_head


def test_given_concat_head_when_training_then_each_label_party_trains_both_heads() -> None:
    """The label party's loss terms: LASER-VFL's sampled subsets on its own head, then one term
    of the whole present set on the concatenating head; a feature-only set adds none."""
    spec = TrainConfig(concat_head=True).spec
    rng = np.random.default_rng(0)
    tasks = spec.fuse_tasks(0, (0, 1, 2), 3, (0,), rng, (1, 2))
    assert tasks[-1].head == CONCAT_HEAD and tasks[-1].subset == (0, 1, 2)
    assert [t.head for t in tasks[:-1]] == [()] * (len(tasks) - 1)
    plain = method_spec("laser").fuse_tasks(0, (0, 1, 2), 3, (0,), np.random.default_rng(0), (1, 2))
    assert [(t.head, t.subset) for t in tasks[:-1]] == [(t.head, t.subset) for t in plain]
    assert all(t.head != CONCAT_HEAD for t in spec.fuse_tasks(0, (1, 2), 3, (0,), rng, (1, 2)))
    # LASER-VFL's weights a_i, b_i: 1 + 1 + 1/3 and 2 + 1/2; the concatenating head's its own
    assert sum(t.weight for t in tasks[:-1]) == pytest.approx(29 / 6) and tasks[-1].weight == 5.0
    light = TrainConfig(concat_head=True, concat_weight=1.0).spec
    weighted = light.fuse_tasks(0, (0, 1, 2), 3, (0,), np.random.default_rng(0), (1, 2))
    assert weighted[-1].weight == 1.0 and weighted[:-1] == tasks[:-1]


def test_given_a_concat_candidate_when_choosing_then_it_must_beat_the_full_set_by_its_error() -> (
    None
):
    full = Candidate((0, 1, 2), 0.80, 200, 0.03)
    near = Candidate((0, 1, 2), 0.82, 200, 0.027, CONCAT)
    far = Candidate((0, 1, 2), 0.85, 200, 0.025, CONCAT)
    assert best_candidate([full, near], lower=False) is full
    assert best_candidate([full, far], lower=False) is far
    assert best_candidate([full, near], lower=False, margin=False) is near


def test_given_concat_head_when_choosing_then_only_validation_rows_and_by_the_rule(
    tables: list[TableSource],
) -> None:
    fed, transport = _trained(tables, TrainConfig(**FAST, concat_choice="sets"))
    transport.embeds.clear()
    transport.scores.clear()
    transport.predicts.clear()
    chosen = fed.choose_on_validation()
    al, validation = fed.alignments["train"], fed._validation
    assert validation is not None and chosen.candidates
    for block, call in [*transport.embeds, *transport.scores]:
        assert call.split == "train"
        allowed = set(al.rows[block][validation].tolist()) - {-1}
        assert set(call.rows.tolist()) <= allowed, f"block {block} read a non-validation row"
    assert {c.head for _, c in transport.predicts} == {"", CONCAT}
    for pattern, cands in chosen.candidates.items():
        concat = [c for c in cands if c.head == CONCAT]
        assert len(concat) == (1 if 0 in pattern else 0)  # where a label party observes
        if not concat:
            continue
        full, other = cands[0], concat[0]
        assert other.blocks == full.blocks and other.scored == full.scored
        assert full.value is not None and other.value is not None and other.error is not None
        beats = full.value - other.value > other.error  # Brier: lower is better
        if chosen.head(pattern) == CONCAT:
            assert beats and chosen.kept(pattern) == pattern
        else:
            assert chosen.head(pattern) == ""


@pytest.mark.parametrize(
    "train",
    [
        TrainConfig(**FAST, concat_choice="all"),
        TrainConfig(epochs=4, lr=5e-3, seed=0),  # the defaults: on for tables, chosen pooled
    ],
    ids=["concat-choice-all", "defaults"],
)
def test_given_concat_choice_all_when_choosing_then_once_on_all_validation_rows_by_the_rule(
    tables: list[TableSource], train: TrainConfig
) -> None:
    """One choice for every observed set holding the bank: on all their validation rows, the
    concatenating heads replace LASER-VFL's (and the subsets chosen there) only when better by
    more than their standard error; no per-set candidate of the concatenating head. The
    defaults do this on tables."""
    fed, transport = _trained(tables, train)
    assert fed.spec.concat_head and CONCAT_HEAD in transport.parties[0].models.heads
    transport.embeds.clear()
    transport.scores.clear()
    chosen = fed.choose_on_validation()
    al, validation = fed.alignments["train"], fed._validation
    assert validation is not None
    for block, call in [*transport.embeds, *transport.scores]:
        assert call.split == "train"
        allowed = set(al.rows[block][validation].tolist()) - {-1}
        assert set(call.rows.tolist()) <= allowed, f"block {block} read a non-validation row"
    assert all(not c.head for cands in chosen.candidates.values() for c in cands)
    laser, concat, *others = chosen.pooled  # the defaults' linear heads and blend too
    assert laser.head == "" and concat.head == CONCAT and laser.scored == concat.scored > 0
    assert laser.value is not None and concat.value is not None and concat.error is not None
    assert [c.head for c in others] == ["linear", "blend"]  # lanes unset: on for tables
    holding = {p for p in al.patterns() if 0 in p}
    picked = choice.pooled_pick(chosen.pooled, lower=True, margin=True)
    assert picked is not None
    if picked.head == "" and laser.value - concat.value <= concat.error:  # Brier: lower wins
        assert chosen.heads == {}
    else:
        assert chosen.heads == dict.fromkeys(holding, picked.head)
        assert not set(chosen.subsets) & holding
    if picked.head == CONCAT:  # by more than its standard error
        assert laser.value - concat.value > concat.error
    again = choice.ValidationChoice.from_json(json.loads(json.dumps(chosen.to_json())))
    assert again == chosen


def test_given_other_test_labels_and_features_when_trained_then_the_same_head_choice(
    tables: list[TableSource],
) -> None:
    """Every test label flipped and every test feature replaced: the same choice of heads and
    subsets, per set and pooled, and the same validation record."""
    defaults = TrainConfig(epochs=4, lr=5e-3, seed=0)  # on tables: the head, chosen pooled
    for train in (TrainConfig(**FAST, concat_choice="sets"), defaults):
        parties = _parties(tables, train)
        fed = Federation(InProcessTransport(parties), train, progress=False)
        fed.align()
        fed.train()
        other_parties = _parties(tables, train)
        for party in other_parties.values():
            test = party.data.splits["test"]
            rng = np.random.default_rng(7)
            labels = None if test.labels is None else 1 - test.labels
            features = rng.normal(size=test.features.shape).astype(np.float32)
            party.data.splits["test"] = replace(test, labels=labels, features=features)
        other = Federation(InProcessTransport(other_parties), train, progress=False)
        other.align()
        other.train()
        assert fed.choice.to_json() == other.choice.to_json()
        assert fed.evaluate("test").to_json() != other.evaluate("test").to_json()


def _forced(fed: Federation) -> tuple[int, ...]:
    """Choose the concatenating heads for the fully observed set (whatever validation said), so
    that what follows does not depend on the small table's scores."""
    full = (0, 1, 2)
    fed.choice.subsets.pop(full, None)
    fed.choice.heads[full] = CONCAT
    return full


def _probs(fed: Federation, pattern: tuple[int, ...], head: str | None) -> np.ndarray:
    batches = [
        p.party_probs[0]
        for p in fed.evaluator.predict_batches("test", None, None, head=head)
        if p.pattern == pattern
    ]
    return np.concatenate(batches)


def test_given_a_saved_model_when_loaded_then_it_predicts_with_the_chosen_head(
    tables: list[TableSource],
) -> None:
    """Parties' state and the coordinator's snapshot (the choice) saved and loaded into fresh
    parties and a fresh engine: the same heads, the same choice, the same test scores; the
    chosen pattern is predicted with the concatenating head and the others with LASER-VFL's."""
    train = TrainConfig(**FAST, concat_choice="sets")
    fed, transport = _trained(tables, train)
    full = _forced(fed)
    laser, concat = _probs(fed, full, ""), _probs(fed, full, CONCAT)
    assert not np.allclose(laser, concat)  # two heads, two answers
    np.testing.assert_array_equal(_probs(fed, full, None), concat)
    np.testing.assert_array_equal(_probs(fed, (0, 1), None), _probs(fed, (0, 1), ""))
    states = {b: p.state_dict() for b, p in transport.parties.items()}
    saved = json.loads(json.dumps(fed.snapshot()))
    assert {"observed": [0, 1, 2], "head": CONCAT} in saved["choice"]["heads"]

    fresh = _parties(tables, train)
    for block, party in fresh.items():
        party.load_state_dict(states[block])
    assert CONCAT_HEAD in fresh[0].models.heads
    for key in (CONCAT_HEAD, ()):
        for a, b in zip(
            fresh[0].models.head(key).parameters(),
            transport.parties[0].models.head(key).parameters(),
            strict=True,
        ):
            assert torch.equal(a, b)
    again = Federation(InProcessTransport(fresh), train, progress=False)
    again.align()
    again.restore(saved)
    assert again.choice.to_json() == fed.choice.to_json()
    np.testing.assert_array_equal(_probs(again, full, None), concat)
    assert again.evaluate("test").to_json() == fed.evaluate("test").to_json()


def test_given_a_predict_call_naming_a_head_when_sent_over_grpc_then_it_arrives() -> None:
    call = PredictCall(3, {0: np.ones((2, 4), dtype=np.float32)}, (0, 1), (0,), (), CONCAT)
    wire = convert_party.predict_call_to_proto(call, header("run", "coordinator"))
    back = convert_party.predict_call_from_proto(wire)
    assert back.head == CONCAT and back.blocks == (0, 1) and back.request_id == 3
    np.testing.assert_array_equal(back.embeddings[0], call.embeddings[0])
    plain = PredictCall(3, {0: np.ones((2, 4), dtype=np.float32)})
    wire = convert_party.predict_call_to_proto(plain, header("run", "coordinator"))
    assert convert_party.predict_call_from_proto(wire).head == ""


def test_given_a_head_choice_when_simulate_prints_the_choice_then_it_names_the_sets() -> None:
    from vfl_cli.simulate_cmd import _choice_lines

    saved = {"heads": [{"observed": [0, 1, 2], "head": CONCAT}], "subsets": []}
    assert _choice_lines(saved) == [
        "observed set 0,1,2 predicted with the concat heads (validation)"
    ]
