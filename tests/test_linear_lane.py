"""A linear model of the joined columns beside the towers (ModelConfig.linear_lane): each
tabular tower's last L values are a linear map of its row that starts at zero, the label party's
linear head reads only those values (absent blocks add nothing) and is their only teacher, the
pooled validation choice takes it by Breiman's one-standard-error rule reading validation rows
only, and the choice survives the wire and a serving bundle, which predicts as the federation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from recording import RecordingTransport
from tabular_tables import LABEL_COLUMN, bank_sources, write_tables
from test_serving_bundle import SECRET

from vfl_core.auto_rounds import resolve
from vfl_core.config import TrainConfig
from vfl_core.data.tabular import TableSource, federation_sources, load_table_federation
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.inference import choice
from vfl_core.inference.choice import Candidate, linear_wins, pooled_pick
from vfl_core.methods.registry import method_spec
from vfl_core.methods.spec import BLEND, LINEAR, LINEAR_HEAD
from vfl_core.model.linear_lane import LANE_SCALE, LaneBlind, LaneTower, LinearHead, wire_width
from vfl_core.model.model_bank import make_optimizer
from vfl_core.model.model_config import AUTO_LINEAR_LANE, ModelConfig
from vfl_core.model.models import build_representation
from vfl_core.protocol import ServingChoice
from vfl_core.serving.batch import predictions_with_rows
from vfl_core.serving.bundle import CONCAT_HEAD_FILE, LINEAR_HEAD_FILE, load_bundle, write_bundle
from vfl_core.serving.features import FeatureTable
from vfl_core.training.alignment import hash_ids
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert

LANE = ModelConfig(embed_dim=16, hidden=(16,), linear_lane=4)


def test_given_a_lane_when_built_then_its_values_start_at_zero_and_are_linear_in_the_row() -> None:
    """Two dense columns and one code column of 5 values: 16 values of the MLP, the same as
    without the lane, then 4 of the lane, 0 at first, then (trained) the dense values' linear
    map plus the code's own vector; building it moves no random state."""
    state = torch.random.get_rng_state()
    tower = build_representation(LANE, (3,), 0, categorical=(5,))
    assert torch.equal(state, torch.random.get_rng_state())
    assert isinstance(tower, LaneTower) and wire_width(LANE) == 20
    x = torch.tensor([[0.5, -1.0, 2.0], [1.5, 3.0, 4.0]])
    out = tower(x)
    assert out.shape == (2, 20) and torch.equal(out[:, 16:], torch.zeros(2, 4))
    bare = build_representation(
        LANE.model_copy(update={"linear_lane": 0}), (3,), 0, categorical=(5,)
    )
    torch.testing.assert_close(out[:, :16], bare(x), rtol=0, atol=0)  # the same MLP, bit for bit
    with torch.no_grad():
        tower.dense.weight.normal_()
        tower.codes[0].weight.normal_()
    want = x[:, :2] @ tower.dense.weight.T + tower.codes[0].weight[x[:, 2].long()]
    torch.testing.assert_close(tower(x)[:, 16:], want)


def test_given_a_lane_when_refused_then_the_error_names_why() -> None:
    for update, match in [({"ensemble": 2}, "--ensemble 1"), ({"num_embedding": "ple"}, "none")]:
        with pytest.raises(ConfigError, match=match):
            build_representation(LANE.model_copy(update=update), (3,), 0)
    with pytest.raises(ConfigError, match="tabular"):
        build_representation(LANE, (1, 8, 8), 0)
    with pytest.raises(ValueError, match="--linear-lane needs LASER-VFL's shape"):
        TrainConfig(method="zerofill", model=LANE)
    assert not TrainConfig().spec.linear_head
    spec = TrainConfig(model=LANE).spec
    assert spec.linear_head and spec.head_input_blocks(LINEAR_HEAD, 3) == 3
    assert spec.predict_subset(0, (2, 0), LINEAR) == (LINEAR_HEAD, (0, 2))
    with pytest.raises(ProtocolError, match="has no head 'linear'"):
        method_spec("laser").predict_subset(0, (0, 1), LINEAR)


def test_given_the_defaults_when_resolved_then_lanes_on_tables_whose_towers_carry_them() -> None:
    """linear_lane unset: AUTO_LINEAR_LANE for tabular parties of a method of LASER-VFL's shape
    with plain towers; none for images, other methods, ensembles, numeric embeddings or the
    wide head; given, as given."""
    assert TrainConfig().model.linear_lane is None
    assert resolve(TrainConfig(), tabular=True).model.linear_lane == AUTO_LINEAR_LANE == 4
    assert resolve(TrainConfig(), tabular=False).model.linear_lane == 0
    assert resolve(TrainConfig(method="zerofill"), tabular=True).model.linear_lane == 0
    for update in ({"ensemble": 2}, {"num_embedding": "ple"}, {"head": "wide"}):
        assert (
            resolve(TrainConfig(model=ModelConfig(**update)), tabular=True).model.linear_lane == 0
        )
    withhold = TrainConfig(privacy={"gradient_defence": "withhold"})
    assert resolve(withhold, tabular=True).model.linear_lane == 0  # fixed feature towers
    for lane in (0, 2):
        given = TrainConfig(model=ModelConfig(linear_lane=lane))
        assert resolve(given, tabular=True).model.linear_lane == lane
    assert resolve(TrainConfig(), tabular=True).spec_for(tabular=True).linear_head


def test_given_a_new_linear_head_when_fed_then_its_logits_start_at_zero() -> None:
    """As a logistic or ridge regression fitted from zero: lanes at zero and a zero bias give
    logits of 0 (torch's default bias was up to 0.5 x LANE_SCALE = 5 logits, a prediction five
    standard deviations off that took a small table's whole run to walk back)."""
    head = LinearHead(3, 16, 4, 2)
    assert torch.equal(head.linear.bias, torch.zeros(2))
    assert head.linear.weight.abs().sum() > 0  # the lanes learn through the weights
    tower = build_representation(LANE, (3,), 0, categorical=(5,))
    z = torch.cat([tower(torch.randn(5, 3)), torch.zeros(5, 40)], dim=1)
    assert torch.equal(head(z), torch.zeros(5, 2))
    z = z.detach().requires_grad_(True)
    head(z).sum().backward()
    assert z.grad is not None and z.grad[:, 16:20].abs().sum() > 0


def test_given_lanes_when_optimised_then_they_have_their_own_weight_decay() -> None:
    """The linear model's weights (a lane's map and code embeddings, the linear head's Linear)
    are penalised by lane_weight_decay, as a logistic or ridge regression is; the MLP keeps
    weight_decay; a module without lanes is one group, as before."""
    config = TrainConfig(weight_decay=1e-4, lane_weight_decay=0.5)
    tower = build_representation(LANE, (3,), 0, categorical=(5,))
    assert isinstance(tower, LaneTower)
    rest, lanes = make_optimizer(tower, config, tabular=True, rows=100).param_groups
    assert (rest["weight_decay"], lanes["weight_decay"]) == (1e-4, 0.5)
    assert [id(p) for p in lanes["params"]] == [id(tower.dense.weight), id(tower.codes[0].weight)]
    assert {id(p) for p in rest["params"]} == {id(p) for p in tower.tower.parameters()}
    (head,) = make_optimizer(LinearHead(3, 16, 4, 2), config, True, 100).param_groups
    assert head["weight_decay"] == 0.5 and len(head["params"]) == 2  # weight and bias
    bare = build_representation(
        LANE.model_copy(update={"linear_lane": 0}), (3,), 0, categorical=(5,)
    )
    (plain,) = make_optimizer(bare, config, True, 100).param_groups
    assert plain["weight_decay"] == 1e-4 and len(plain["params"]) == len(list(bare.parameters()))
    # a step without gradient from the loss: the penalty alone moves the lanes toward zero
    with torch.no_grad():
        tower.dense.weight.fill_(1.0)
    opt = make_optimizer(tower, config, tabular=True, rows=100)
    tower(torch.randn(4, 3)).sum().mul(0.0).backward()
    opt.step()
    assert (tower.dense.weight < 1.0).all()


def test_given_lanes_when_heads_are_fed_then_the_linear_reads_them_alone_and_others_never() -> None:
    head = LinearHead(3, 16, 4, 2)
    z = torch.randn(5, 3, 20)
    other = z.clone()
    other[:, :, :16] = torch.randn(5, 3, 16)  # every value but the lanes changed
    torch.testing.assert_close(head(z.flatten(1)), head(other.flatten(1)))
    absent = z.clone()
    absent[:, 2] = 0.0  # a zero-filled absent block: the two present lanes' sum
    want = LANE_SCALE * head.linear(z[:, :2, 16:].sum(dim=1))
    torch.testing.assert_close(head(absent.flatten(1)), want)
    inner = torch.nn.Linear(32, 2)
    blind = LaneBlind(inner, 2, 16, 4)
    torch.testing.assert_close(blind(z[:, :2].flatten(1)), inner(z[:, :2, :16].flatten(1)))
    for model in (head, blind):  # gradients: the linear head's into lanes, the other's never
        e = torch.randn(5, 20, requires_grad=True)
        blocks = 3 if model is head else 2
        model(torch.cat([e, torch.zeros(5, 20 * (blocks - 1))], dim=1)).sum().backward()
        assert e.grad is not None
        lanes, rest = e.grad[:, 16:].abs().sum(), e.grad[:, :16].abs().sum()
        assert (lanes > 0 and rest == 0) if model is head else (lanes == 0 and rest > 0)


def test_given_the_linear_candidate_when_choosing_then_only_where_it_beats_both() -> None:
    """Brier scores (lower is better): the linear heads are taken only where strictly better
    than every other candidate, by any margin; never on fewer samples."""
    laser = Candidate((), 0.100, 300, 0.010)
    concat = Candidate((), 0.080, 300, 0.012, "concat")
    between = Candidate((), 0.090, 300, 0.011, LINEAR)  # within one error of the best
    best = Candidate((), 0.079, 300, 0.011, LINEAR)
    assert not linear_wins(between, [laser, concat, between], lower=True)
    assert linear_wins(best, [laser, concat, best], lower=True)
    assert linear_wins(best, [laser, best], lower=True)  # without the concatenating heads
    tie = Candidate((), 0.080, 300, 0.011, LINEAR)
    assert not linear_wins(tie, [laser, concat, tie], lower=True)
    short = Candidate((), 0.010, 200, 0.001, LINEAR)  # scores fewer samples: no candidate
    assert not linear_wins(short, [laser, concat, short], lower=True)
    high = Candidate((), 0.95, 300, 0.01, LINEAR)  # a higher-is-better metric
    assert linear_wins(high, [Candidate((), 0.9, 300, 0.01), high], lower=False)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[TableSource]:
    paths = write_tables(tmp_path_factory.mktemp("tables"), n=1500, share=0.85)
    return list(bank_sources(paths))


def test_given_a_linear_lane_when_trained_and_chosen_then_four_candidates_on_validation_rows_only(
    tables: list[TableSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(choice, "MIN_CHOICE_SAMPLES", 5)
    train = TrainConfig(epochs=4, lr=5e-3, seed=0, model=ModelConfig(linear_lane=4))
    data = load_table_federation(tuple(tables))
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}
    transport = RecordingTransport(parties)
    fed = Federation(transport, train, progress=False)
    fed.align()
    fed.train()
    heads = transport.parties[0].models.heads
    assert {(), (-1,), LINEAR_HEAD} <= set(heads)
    for block, party in parties.items():  # every tower's lane learnt (from the linear head)
        lane = party.models.reps[()]
        assert isinstance(lane, LaneTower) and lane.dense.weight.abs().sum() > 0, block
    transport.embeds.clear()
    transport.scores.clear()
    chosen = fed.choose_on_validation()
    al, validation = fed.alignments["train"], fed._validation
    assert validation is not None
    for block, call in [*transport.embeds, *transport.scores]:
        assert call.split == "train"
        assert set(call.rows.tolist()) <= set(al.rows[block][validation].tolist()) - {-1}
    assert [c.head for c in chosen.pooled] == ["", "concat", LINEAR, BLEND]
    picked = pooled_pick(chosen.pooled, lower=True, margin=True)
    holding = {p for p in al.patterns() if 0 in p}
    assert picked is not None
    assert chosen.heads == (dict.fromkeys(holding, picked.head) if picked.head else {})


def test_given_a_linear_lane_when_trained_then_every_other_prediction_is_the_same_bit_for_bit(
    tables: list[TableSource],
) -> None:
    """The lanes change nothing but the linear head: the same seed with and without them, the
    same test predictions of LASER-VFL's heads and the concatenating heads, to the bit."""
    probs = []
    for lane in (0, 4):
        train = TrainConfig(epochs=3, lr=5e-3, seed=0, model=ModelConfig(linear_lane=lane))
        data = load_table_federation(tuple(tables))
        parties = {d.meta.block: Party(f"p{d.meta.block}", d, train, secret=b"s") for d in data}
        fed = Federation(InProcessTransport(parties), train, progress=False)
        fed.align()
        fed.train()
        fed.choice = choice.ValidationChoice()  # the heads themselves, no choice
        probs.append(
            [
                np.concatenate([p.party_probs[0] for p in batches])
                for head in ("", "concat")
                for batches in [fed.evaluator.predict_batches("test", None, None, head=head)]
            ]
        )
    for without, with_lanes in zip(*probs, strict=True):
        np.testing.assert_array_equal(without, with_lanes)


def _trained(
    paths: list[Path], model: ModelConfig, concat_head: bool | None = None
) -> tuple[Federation, dict[int, Party]]:
    sources = federation_sources(
        paths,
        None,
        id_column="customer_id",
        label_column=LABEL_COLUMN,
        label_blocks=None,
        task="classification",
    )
    config = TrainConfig(epochs=2, model=model, concat_head=concat_head)
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, config, secret=SECRET)
        for d in load_table_federation(sources)
    }
    fed = Federation(InProcessTransport(parties), config, progress=False)
    fed.align()
    fed.train()
    return fed, parties


@pytest.mark.parametrize("chosen", [LINEAR, BLEND])
def test_given_linear_chosen_for_a_set_when_bundles_predict_then_equal_the_federation(
    tmp_path: Path, chosen: str
) -> None:
    """The linear head, or the blend of the three heads, chosen (as validation would) for the
    full set: the label party's bundle holds what it needs, format 5, and predicts every test
    sample as the federation does."""
    paths = write_tables(tmp_path / "data", n=400, share=0.8)
    paths = [paths["bank"], paths["retail"], paths["telecom"]]
    fed, parties = _trained(paths, LANE)
    fed.choice.subsets, fed.choice.heads = {}, {(0, 1, 2): chosen}
    serving = fed.serving_choice()
    again = convert.serving_choice_from_proto(convert.serving_choice_to_proto(serving))
    assert again == serving and dict(again.heads) == {(0, 1, 2): chosen}
    bundles, lookups = {}, {}
    for block, party in parties.items():
        write_bundle(party, tmp_path / party.party_id, choice=serving)
        bundles[block] = load_bundle(tmp_path / party.party_id)
        lookups[block] = FeatureTable(
            paths[block], "customer_id", bundles[block].preprocessing, SECRET
        )
    meta = bundles[0].meta
    assert meta.format == 5 and not meta.concat_sets
    if chosen == LINEAR:
        assert meta.linear_sets == ((0, 1, 2),) and not meta.blend_sets
    else:  # the blend: every head's file
        assert meta.blend_sets == ((0, 1, 2),) and meta.blend_heads == ("", "concat", LINEAR)
        assert (tmp_path / "party0" / CONCAT_HEAD_FILE).is_file()
    assert (tmp_path / "party0" / LINEAR_HEAD_FILE).is_file()
    samples, _ = predictions_with_rows(fed, "test", None)
    by_head = {"": 0, chosen: 0}
    for s in samples:
        if 0 not in s.party_probs:
            continue
        embeddings = {}
        for b in s.observed:
            sample_id = parties[b].split("test").ids[s.rows[b]]
            _, x = lookups[b].lookup(hash_ids([sample_id], SECRET))
            embeddings[b] = bundles[b].embed(x)
        head = bundles[0].head_for(tuple(s.observed))
        by_head[head] += 1
        got = bundles[0].predict(embeddings, head)[0]
        np.testing.assert_allclose(got, s.party_probs[0], atol=1e-5, rtol=0)
    assert by_head[chosen] > 20 and by_head[""] > 5
    _, plain = _trained(paths[:2], ModelConfig(embed_dim=8, hidden=(16,), linear_lane=0))
    with pytest.raises(ConfigError, match="--linear-lane"):
        write_bundle(plain[0], tmp_path / "b0", choice=ServingChoice(None, {}, {(0, 1): LINEAR}))
    one = ModelConfig(embed_dim=8, hidden=(16,), linear_lane=0)
    _, alone = _trained(paths[:2], one, concat_head=False)
    with pytest.raises(ConfigError, match="blend head, but party party0 trained none"):
        write_bundle(alone[0], tmp_path / "b1", choice=ServingChoice(None, {}, {(0, 1): BLEND}))
