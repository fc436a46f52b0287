"""The mean of a label party's heads' predictions (BLEND, MethodSpec.blend_members): a Predict
naming it answers the mean of the probabilities of LASER-VFL's head, the concatenating head and
the linear head, a party with one head refuses it, and the pooled validation choice takes it
only where it scores better than the heads picked without it (serving bundles with it chosen:
tests/test_linear_lane.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tabular_tables import write_tables
from test_linear_lane import LANE, _trained

from vfl_core.errors import ProtocolError
from vfl_core.inference.choice import Candidate, pooled_pick
from vfl_core.methods.spec import BLEND, CONCAT, LINEAR
from vfl_core.model.linear_lane import wire_width
from vfl_core.model.model_config import ModelConfig
from vfl_core.protocol import PredictCall, ServingChoice
from vfl_wire import convert


def _call(head: str, width: int, seed: int = 0) -> PredictCall:
    rng = np.random.default_rng(seed)
    embeddings = {b: rng.normal(size=(6, width)).astype(np.float32) for b in range(3)}
    return PredictCall(1, embeddings, blocks=(0, 1, 2), label_blocks=(0,), head=head)


def test_given_blend_when_a_label_party_predicts_then_the_mean_of_its_heads(tmp_path: Path) -> None:
    paths = write_tables(tmp_path / "data", n=400, share=0.8)
    _, parties = _trained([paths["bank"], paths["retail"], paths["telecom"]], LANE)
    party = parties[0]
    assert party.spec.blend_members == ("", CONCAT, LINEAR)
    width = wire_width(party.config.model)
    heads = {h: party.predict(_call(h, width)) for h in ("", CONCAT, LINEAR, BLEND)}
    for a in ("", CONCAT, LINEAR):  # three different models ...
        for b in ("", CONCAT, LINEAR):
            assert a == b or not np.allclose(heads[a], heads[b], atol=1e-4)
    want = np.mean([heads[h] for h in ("", CONCAT, LINEAR)], axis=0)  # ... and their mean
    np.testing.assert_allclose(heads[BLEND], want, atol=1e-6, rtol=0)
    np.testing.assert_allclose(heads[BLEND].sum(axis=1), 1.0, atol=1e-5)


def test_given_one_head_when_blend_is_asked_then_refused_naming_it(tmp_path: Path) -> None:
    paths = write_tables(tmp_path / "data", n=300, share=0.8)
    plain = ModelConfig(embed_dim=8, hidden=(16,), linear_lane=0)
    _, parties = _trained([paths["bank"], paths["retail"]], plain, concat_head=False)
    assert parties[0].spec.blend_members == ()
    with pytest.raises(ProtocolError, match="no head 'blend'"):
        parties[0].predict(_call(BLEND, wire_width(plain)))


def test_given_the_pooled_candidates_when_picking_then_blend_only_where_it_beats_the_pick() -> None:
    """Brier scores (lower is better): the heads' blend replaces the heads picked without it
    only where strictly better than them; without it the pick is as before."""
    laser = Candidate((), 0.100, 300, 0.010)
    concat = Candidate((), 0.090, 300, 0.012, CONCAT)  # within its error: LASER-VFL's stay
    linear = Candidate((), 0.095, 300, 0.011, LINEAR)  # beats LASER-VFL's, not concat
    assert pooled_pick([laser, concat, linear], lower=True, margin=True) is laser
    blend = Candidate((), 0.0905, 300, 0.010, BLEND)  # beats the pick, though not concat
    assert pooled_pick([laser, concat, linear, blend], lower=True, margin=True) is blend
    behind = Candidate((), 0.101, 300, 0.010, BLEND)
    assert pooled_pick([laser, concat, linear, behind], lower=True, margin=True) is laser
    tie = Candidate((), 0.100, 300, 0.010, BLEND)
    assert pooled_pick([laser, concat, linear, tie], lower=True, margin=True) is laser
    best_linear = Candidate((), 0.080, 300, 0.011, LINEAR)  # the pick: the blend is behind it
    assert pooled_pick([laser, concat, best_linear, blend], True, True) is best_linear
    short = Candidate((), 0.001, 200, 0.001, BLEND)  # scores fewer samples: no candidate
    assert pooled_pick([laser, concat, linear, short], lower=True, margin=True) is laser
    high = Candidate((), 0.95, 300, 0.01, BLEND)  # a higher-is-better metric
    assert pooled_pick([Candidate((), 0.9, 300, 0.01), high], lower=False, margin=True) is high


def test_given_blend_chosen_when_sent_then_the_wire_keeps_it_and_refuses_unknown_heads() -> None:
    choice = ServingChoice(None, {}, {(0, 1, 2): BLEND, (0, 1): LINEAR})
    again = convert.serving_choice_from_proto(convert.serving_choice_to_proto(choice))
    assert dict(again.heads) == {(0, 1, 2): BLEND, (0, 1): LINEAR}
    message = convert.serving_choice_to_proto(ServingChoice(None, {}, {(0, 1): "mean-of-all"}))
    with pytest.raises(ProtocolError, match="unknown head 'mean-of-all'"):
        convert.serving_choice_from_proto(message)
