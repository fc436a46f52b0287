"""Predictions for samples the label party does not hold (issue 14, item 2), in process.

Labels at one party of three (digits, 30% of blocks missing). LASER-VFL heads also serve the
subsets of feature-only blocks; a label party may hold the label of a sample without its features
(a label-only row, `keep_labels`), trains on the others' embeddings of it and scores it; and at
inference a label party predicts for a set of feature-only parties from their embeddings alone.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.learning_task import head_loss
from vfl_core.data.party_dir import PartyData, PartySplit, load_party_dir, save_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import DataError, ProtocolError
from vfl_core.methods.laser import objective as laser
from vfl_core.methods.laser import party_steps as laser_steps
from vfl_core.protocol import BackwardCall, EmbedCall, FuseCall, PartyInfo, PredictCall
from vfl_core.seeding import Stream, rng
from vfl_core.simulate import SimulationConfig, run_simulation
from vfl_core.training import party as party_module
from vfl_core.training.alignment import Alignment, batch_digest, epoch_plan, eval_plan
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert

K = 3
SECRET = b"label-only"
OTHERS = (1, 2)  # the feature-only parties; labels at 0
MODEL = ModelConfig(representation="mlp", hidden=(16,), embed_dim=8)


def config(method: str = "laser", epochs: int = 1) -> TrainConfig:
    return TrainConfig(method=method, seed=2, epochs=epochs, batch_size=32, lr=1e-2, model=MODEL)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    root = tmp_path_factory.mktemp("keep")
    paths = prepare_parties(
        load_digits_dataset(), root, K, [0.3] * K, [0.3] * K, 0.2, seed=0, label_blocks=[0],
        keep_labels=True,
    )  # fmt: skip
    return tuple(paths)


@pytest.fixture(scope="module")
def data(dirs: tuple[Path, ...]) -> list[PartyData]:
    return [load_party_dir(d) for d in dirs]


def federation(data: list[PartyData], train: TrainConfig) -> tuple[Federation, dict[int, Party]]:
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    return fed, parties


# ---------------------------------------------------------------- data


def test_given_keep_labels_when_preparing_then_the_label_party_keeps_labels_of_what_it_misses(
    data: list[PartyData], tmp_path: Path
) -> None:
    for name in ("train", "test"):
        split = data[0].splits[name]
        n = len(split.features)
        assert split.label_only > 0 and len(split.ids) == n + split.label_only
        others = set(data[1].splits[name].ids) | set(data[2].splits[name].ids)
        assert set(split.ids[n:]) == others - set(split.ids[:n])  # exactly what it misses
        assert all(d.splits[name].label_only == 0 for d in data[1:])
    again = tmp_path / "copy"
    save_party_dir(again, data[0])
    loaded = load_party_dir(again)
    for name, split in data[0].splits.items():
        np.testing.assert_array_equal(loaded.splits[name].ids, split.ids)
        np.testing.assert_array_equal(loaded.splits[name].labels, split.labels)
        np.testing.assert_array_equal(loaded.splits[name].features, split.features)
    info = party_module.party_info("party0", data[0])
    assert info.label_only == {n: s.label_only for n, s in data[0].splits.items()}
    assert party_module.party_info("party1", data[1]).label_only == {}


def test_given_broken_label_only_rows_when_loading_or_building_then_one_line_errors(
    data: list[PartyData], tmp_path: Path
) -> None:
    path = tmp_path / "p0"
    save_party_dir(path, data[0])
    (path / "train" / "label_only_labels.npy").unlink()
    with pytest.raises(DataError, match=r"label_only_labels\.npy: missing"):
        load_party_dir(path)
    save_party_dir(path, data[0])
    ids = np.load(path / "train" / "label_only_ids.npy")
    ids[0] = np.load(path / "train" / "ids.npy")[0]  # a sample both with and without features
    np.save(path / "train" / "label_only_ids.npy", ids)
    with pytest.raises(DataError, match="duplicated sample ID"):
        load_party_dir(path)
    split = data[1].splits["train"]
    with pytest.raises(DataError, match="only a label party may hold label-only rows"):
        PartySplit(np.concatenate([split.ids, ["extra"]]), split.features, None)


# ---------------------------------------------------------------- alignment and plans


def test_given_label_only_rows_when_aligned_then_batches_group_by_pattern_and_label_holders() -> (
    None
):
    # block 0: features of a, b and only the labels of c, d, f; block 1: a, c, e; block 2: b, c, d
    a, b, c, d, e, f = (bytes([i]) * 32 for i in range(6))
    al = Alignment.build({0: [a, b, c, d, f], 1: [a, c, e], 2: [b, c, d]}).with_label_only({0: 2})
    index = {key: i for i, key in enumerate(al.keys)}
    patterns = {p: sorted(al.keys[i] for i in idx) for p, idx in al.patterns().items()}
    assert patterns == {(0, 1): [a], (0, 2): [b], (1, 2): [c], (2,): [d], (1,): [e]}
    groups = {g: sorted(al.keys[i] for i in idx) for g, idx in al.groups().items()}
    assert groups == {
        ((0, 1), ()): [a],
        ((0, 2), ()): [b],
        ((1, 2), (0,)): [c],
        ((2,), (0,)): [d],
        ((1,), ()): [e],
    }  # f: only its label is held anywhere, so no batch has it
    for plan in (epoch_plan(al, 0, 0, 2), eval_plan(al, 2)):
        seen = sorted(int(i) for batch in plan for i in batch.index)
        assert seen == sorted(index[k] for k in (a, b, c, d, e))
        for batch in plan:
            assert (batch.pattern, batch.label_only) in groups
    assert al.label_only[0][index[c]] and not al.label_only[0][index[a]]


# ---------------------------------------------------------------- a party


def _label_only_round(data: list[PartyData], round_id: int = 0):
    fed, parties = federation(data, config())
    batch = next(b for b in fed.plan(0) if b.pattern == OTHERS and b.label_only == (0,))
    al = fed.alignments["train"]
    digest = al.digest(batch.index)
    emb = {
        b: parties[b].embed(
            EmbedCall(round_id, "train", al.rows_of(b, batch.index), digest, True, OTHERS)
        )
        for b in OTHERS
    }
    call = FuseCall(round_id, 0, emb, OTHERS, (0,), al.rows_of(0, batch.index), digest)
    return parties, emb, call


def test_given_a_label_only_batch_when_the_label_party_fuses_then_it_trains_on_the_others_alone(
    data: list[PartyData], monkeypatch: pytest.MonkeyPatch
) -> None:
    parties, emb, call = _label_only_round(data)
    head = parties[0]
    g_before, f_before = copy.deepcopy(head.g), copy.deepcopy(head.f)
    tasks = laser.head_tasks(0, OTHERS, OTHERS, rng(2, Stream.TASKS, 0, 0))
    assert [s for s, _ in tasks] and all(0 not in s for s, _ in tasks)
    target = torch.from_numpy(head.data.splits["train"].labels[call.rows])
    tensors = {b: torch.from_numpy(e) for b, e in emb.items()}
    with torch.no_grad():
        want = laser.sampled_loss(g_before, tensors, tasks, target, head_loss("classification"))
    seen: list[list] = []
    real = laser.sampled_loss

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append(list(args[2]))  # type: ignore[call-overload]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(laser_steps, "sampled_loss", spy)
    result = head.fuse(call)
    assert seen == [tasks] and result.loss == float(want)  # the tested objective, bit for bit
    assert sorted(result.grads) == [1, 2]
    assert all(np.abs(g).sum() > 0 for g in result.grads.values())
    g_after = [p.detach().clone() for p in head.g.parameters()]
    assert any(not torch.equal(x, y) for x, y in zip(g_after, g_before.parameters(), strict=True))
    assert all(
        torch.equal(x, y) for x, y in zip(head.f.parameters(), f_before.parameters(), strict=True)
    )
    again = head.fuse(call)  # a retry: the same answer and no second step
    assert again.loss == result.loss
    assert all(torch.equal(x, y) for x, y in zip(g_after, head.g.parameters(), strict=True))
    with pytest.raises(ProtocolError, match="embedded nothing"):
        head.backward(BackwardCall(0, 0, None))


def test_given_label_only_rows_when_asked_to_embed_or_fuse_wrongly_then_protocol_errors(
    data: list[PartyData],
) -> None:
    parties, _, call = _label_only_round(data)
    head = parties[0]
    assert call.rows is not None
    with pytest.raises(ProtocolError, match="label-only rows"):
        head.embed(EmbedCall(1, "train", call.rows, call.digest, True, OTHERS))
    own = np.arange(4)  # rows with features: the party embeds those, it does not fuse on labels
    digest = batch_digest(head.alignment_keys("train")[r] for r in own)
    with pytest.raises(ProtocolError, match="holds features of some rows"):
        head.fuse(FuseCall(3, 0, {}, OTHERS, (0,), own, digest))
    with pytest.raises(ProtocolError, match="digest mismatch"):
        head.fuse(FuseCall(3, 0, {}, OTHERS, (0,), call.rows, digest))
    with pytest.raises(ProtocolError, match="no fusion head"):
        parties[1].fuse(call)
    assert head.last_round == -1  # refused calls start no round


def test_given_a_set_without_label_parties_when_predicting_then_the_label_party_serves_it(
    data: list[PartyData],
) -> None:
    _, parties = federation(data, config())
    gen = np.random.default_rng(0)
    emb = {b: gen.standard_normal((5, MODEL.embed_dim)).astype(np.float32) for b in OTHERS}
    probs = parties[0].predict(PredictCall(0, emb, OTHERS, (0,)))
    head = parties[0].g
    head.eval()
    with torch.no_grad():
        fused = torch.from_numpy((emb[1] + emb[2]) / 2)
        want = torch.softmax(head(fused), dim=1).numpy()
    np.testing.assert_allclose(probs, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ProtocolError, match="lacks its own block"):  # not told who has labels
        parties[0].predict(PredictCall(0, emb, OTHERS))
    with pytest.raises(ProtocolError, match="lacks its own block"):  # block 1 holds labels
        parties[0].predict(PredictCall(0, emb, OTHERS, (0, 1)))
    _, local = federation(data, config("local"))
    with pytest.raises(ProtocolError, match="lacks its own block"):  # a local predictor
        local[0].predict(PredictCall(0, emb, OTHERS, (0,)))


# ---------------------------------------------------------------- the federation


def test_given_labels_at_one_party_when_simulated_then_sets_without_it_are_predicted_and_scored(
    dirs: tuple[Path, ...],
) -> None:
    records: list[RoundRecord] = []
    sim = run_simulation(
        SimulationConfig(party_dirs=dirs, secret=SECRET.decode(), train=config(epochs=10)),
        on_round=records.append,
    )
    report = sim.reports[None]
    assert report.unscored == 0  # every test sample a party observes has its label at party 0
    test = [load_party_dir(d).splits["test"] for d in dirs]
    own = set(test[0].ids[: len(test[0].features)])
    for observed in ((1,), (2,), (1, 2)):
        held = [set(t.ids[: len(t.features)]) for t in test]
        expected = {
            i for i in set().union(*held) if {b for b in range(K) if i in held[b]} == set(observed)
        }
        assert expected and not expected & own
        stats = report.by_pattern[observed]
        assert stats.samples == len(expected)
        accuracy = stats.correct / stats.samples  # the table's accuracy of the set
        assert accuracy > 0.4, (observed, accuracy)  # ten classes: chance is 0.1
    # label-only training batches: only party 0's head learns, from the others' embeddings
    label_only_rounds = [r for r in records if r.pattern == OTHERS]
    assert label_only_rounds and all(set(r.losses) == {0} for r in label_only_rounds)
    assert all(r.losses[0] > 0 and r.updated == OTHERS for r in label_only_rounds)


def test_given_labels_at_one_party_when_predicting_then_samples_only_others_hold_get_a_class(
    data: list[PartyData],
) -> None:
    fed, _ = federation(data, config())
    fed.train()
    keys = fed.alignments["test"].keys
    without_labels = [p for p in fed.predict_batches("test") if not set(p.present) & {0}]
    assert without_labels
    for pred in without_labels:
        assert sorted(pred.party_probs) == [0]  # party 0 answered from the others' blocks
        for sample in pred.samples(keys):
            assert 0 <= sample.predicted_class < 10
            assert set(sample.observed) <= set(OTHERS)


class SilentPredictor(InProcessTransport):
    """Party 0 embeds and predicts its own sets but never answers a Predict for the others'
    sets (a deadline missed every time)."""

    def __init__(self, parties: dict[int, Party]) -> None:
        super().__init__(parties)
        self.asked = 0

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        serving = 0 in calls and 0 not in calls[0].embeddings
        self.asked += serving
        return super().predict({k: c for k, c in calls.items() if not (k == 0 and serving)})


def test_given_a_label_party_that_misses_predict_when_serving_others_then_it_is_marked_down(
    data: list[PartyData],
) -> None:
    train = config(epochs=0).model_copy(update={"eval_batch_size": 4096})
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}
    transport = SilentPredictor(parties)
    fed = Federation(transport, train, progress=False)
    fed.align()
    preds = list(fed.predict_batches("test"))
    assert len([p for p in preds if 0 not in p.pattern]) == 3  # the sets {1}, {2}, {1, 2}
    assert transport.asked == 1  # one missed deadline, then party 0 is down: not asked again
    assert any(0 in p.present for p in preds)  # it answered its own sets before that
    assert fed.liveness.state[0] == "down"
    assert all(p.predicted is None for p in preds if 0 not in p.present)


# ---------------------------------------------------------------- tables and the wire


def test_given_a_csv_row_with_a_label_and_no_feature_when_loaded_then_it_is_a_label_only_row(
    tmp_path: Path,
) -> None:
    table = tmp_path / "bank.csv"
    lines = ["id,income,region,label"]
    lines += [f"c{i},{10 * i},r{i % 3},{i % 2}" for i in range(20)]
    lines += [f"x{i},,,{i % 2}" for i in range(6)]  # labels only
    table.write_text("\n".join(lines) + "\n")
    source = TableSource(
        path=table, id_column="id", label_column="label", block=0, num_blocks=2, test_fraction=0
    )
    party, fitted = load_table_party(source)
    split = party.splits["train"]
    assert split.label_only == 6 and len(split.features) == 20
    assert list(split.ids[20:]) == [f"x{i}" for i in range(6)]
    assert list(split.labels[20:]) == [i % 2 for i in range(6)]
    income = next(c for c in fitted.columns if c.name == "income")
    assert income.mean == pytest.approx(np.mean([10 * i for i in range(20)]))
    assert not income.indicator  # the label-only rows are not "missing" cells of the fit
    info = party_module.party_info("bank", party)
    assert info.label_only == {"train": 6}
    features_only = load_table_party(
        source.model_copy(update={"label_column": None, "num_classes": 2, "block": 1})
    )[0]
    assert features_only.splits["train"].label_only == 0  # imputed, as before
    assert len(features_only.splits["train"].features) == 26


def test_given_label_only_fields_when_round_tripped_over_the_wire_then_equal_or_refused() -> None:
    info = PartyInfo(
        "p0", 0, 3, "d", (4,), 2, True, {"train": 10, "test": 4}, label_only={"train": 3}
    )
    assert convert.party_info_from_proto(convert.party_info_to_proto(info)) == info
    for bad in (
        PartyInfo("p0", 0, 3, "d", (4,), 2, True, {"train": 2}, label_only={"train": 3}),
        PartyInfo("p1", 1, 3, "d", (4,), 2, False, {"train": 10}, label_only={"train": 1}),
    ):
        with pytest.raises(ProtocolError, match="label-only rows"):
            convert.party_info_from_proto(convert.party_info_to_proto(bad))
    header = convert.header("run", "coordinator")
    emb = {1: np.ones((2, 3), np.float32)}
    call = FuseCall(4, 1, emb, (1, 2), (0,), np.array([7, 9]), b"d" * 32)
    back = convert.fuse_call_from_proto(convert.fuse_call_to_proto(call, header))
    assert back.rows is not None and back.rows.tolist() == [7, 9] and back.digest == call.digest
    plain = convert.fuse_call_from_proto(convert.fuse_call_to_proto(FuseCall(4, 1, emb), header))
    assert plain.rows is None and plain.digest == b""
    req = convert.fuse_call_to_proto(FuseCall(4, 1, emb), header)
    req.digest = b"d" * 32
    with pytest.raises(ProtocolError, match="digest: present without rows"):
        convert.fuse_call_from_proto(req)
    predict = PredictCall(3, emb, (1, 2), (0,))
    assert convert.predict_call_from_proto(
        convert.predict_call_to_proto(predict, header)
    ).label_blocks == (0,)


def test_given_serve_feature_only_off_when_simulated_then_the_papers_objective_and_no_answer(
    dirs: tuple[Path, ...],
) -> None:
    train = config(epochs=2).model_copy(update={"serve_feature_only": False})
    assert train.spec.serves_feature_only is False and config().spec.serves_feature_only
    for round_id in range(20):  # the paper's tasks, draw for draw, though 1 and 2 hold no labels
        paper = laser.sample_tasks(0, (0, 1, 2), rng(2, Stream.TASKS, round_id, 0))
        tasks = train.spec.fuse_tasks(
            0, (0, 1, 2), K, (0,), rng(2, Stream.TASKS, round_id, 0), OTHERS
        )
        assert [(t.subset, t.weight) for t in tasks] == paper
        served = config().spec.fuse_tasks(
            0, (0, 1, 2), K, (0,), rng(2, Stream.TASKS, round_id, 0), OTHERS
        )
        assert [(t.subset, t.weight) for t in served][: len(paper)] == paper
        assert [t.subset for t in served][len(paper) :] and all(
            0 not in t.subset for t in served[len(paper) :]
        )
    records: list[RoundRecord] = []
    sim = run_simulation(
        SimulationConfig(party_dirs=dirs, secret=SECRET.decode(), train=train),
        on_round=records.append,
    )
    report = sim.reports[None]
    assert not {(1,), (2,), (1, 2)} & set(report.by_pattern)
    assert report.unscored > 0  # the samples only parties 1 and 2 hold: no head for them
    assert all(r.losses == {} for r in records if r.pattern == OTHERS)  # nothing trains there


def test_given_a_regression_task_when_labels_at_one_party_then_sets_without_it_get_errors(
    tmp_path: Path,
) -> None:
    from vfl_core.data.datasets import load_diabetes_dataset

    paths = prepare_parties(
        load_diabetes_dataset(), tmp_path, K, [0.3] * K, [0.3] * K, 0.2, seed=0, label_blocks=[0],
        keep_labels=True,
    )  # fmt: skip
    labels = load_party_dir(paths[0]).splits["test"].labels
    assert labels is not None and labels.dtype == np.float32  # label-only targets stay real
    sim = run_simulation(SimulationConfig(party_dirs=tuple(paths), train=config(epochs=3)))
    rows = {r.observed: r for r in sim.reports[None].rows()}
    for observed in ("1", "2", "1,2"):
        assert rows[observed].samples > 0 and rows[observed].rmse is not None
        assert rows[observed].accuracy is None
    assert sim.reports[None].unscored == 0
