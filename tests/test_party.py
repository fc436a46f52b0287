"""One party on a tiny digits federation: a training round (Embed, Fuse, Backward), idempotent
retries, refusal of stale or malformed calls, feature-only parties, the gradients a head sends,
and prediction."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.learning_task import head_loss
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.methods.laser import objective as laser
from vfl_core.methods.laser import party_steps as laser_steps
from vfl_core.methods.laser.objective import sample_tasks
from vfl_core.protocol import BackwardCall, EmbedCall, FuseCall, PredictCall, ScoreCall
from vfl_core.seeding import Stream, rng
from vfl_core.training.alignment import Alignment
from vfl_core.training.party import Party

K = 4
SECRET = b"party-test"
EMBED_DIM = 6
BATCH = 16
CONFIG = TrainConfig(
    seed=3,
    batch_size=BATCH,
    lr=1e-2,
    weight_decay=0.0,
    model=ModelConfig(representation="mlp", embed_dim=EMBED_DIM, hidden=(12,)),
)


def prepared(root: Path, label_blocks: list[int] | None) -> list[PartyData]:
    paths = prepare_parties(
        load_digits_dataset(),
        root,
        num_blocks=K,
        p_miss_train=[0.0] * K,
        p_miss_test=[0.0] * K,
        test_fraction=0.2,
        seed=0,
        label_blocks=label_blocks,
    )
    return [load_party_dir(p) for p in paths]


@pytest.fixture(scope="module")
def all_labels(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    return prepared(tmp_path_factory.mktemp("digits"), None)


@pytest.fixture(scope="module")
def one_feature_only(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    return prepared(tmp_path_factory.mktemp("digits_fo"), [0, 1, 2])


def make_parties(datas: list[PartyData], config: TrainConfig = CONFIG) -> dict[int, Party]:
    return {d.meta.block: Party(f"p{d.meta.block}", d, config, secret=SECRET) for d in datas}


def align(parties: dict[int, Party], split: str = "train") -> Alignment:
    return Alignment.build({b: p.id_hashes(split) for b, p in parties.items()})


def embed_calls(
    al: Alignment, blocks, round_id: int, index: np.ndarray, split: str = "train"
) -> dict[int, EmbedCall]:
    digest = al.digest(index)
    return {
        b: EmbedCall(round_id, split, al.rows_of(b, index), digest, split == "train")
        for b in blocks
    }


def run_round(
    parties: dict[int, Party], al: Alignment, round_id: int, index: np.ndarray
) -> tuple[dict, dict]:
    """What the engine does in one round, written out by hand."""
    calls = embed_calls(al, parties, round_id, index)
    emb = {b: parties[b].embed(c) for b, c in calls.items()}
    heads = [b for b, p in parties.items() if p.g is not None]
    fused = {
        k: parties[k].fuse(FuseCall(round_id, 0, {b: e for b, e in emb.items() if b != k}))
        for k in heads
    }
    for b, party in parties.items():
        grads = [fused[k].grads[b] for k in sorted(fused) if k != b]
        party.backward(BackwardCall(round_id, 0, sum(grads[1:], grads[0]) if grads else None))
    return emb, fused


def params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(before: list[torch.Tensor], module: torch.nn.Module) -> bool:
    return all(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def same(before: list[torch.Tensor], module: torch.nn.Module) -> bool:
    return all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


INDEX = np.arange(5, 5 + BATCH)


# ---------------------------------------------------------------- a round


def test_given_full_federation_when_a_round_runs_then_every_f_and_g_changes(
    all_labels: list[PartyData],
) -> None:
    parties = make_parties(all_labels)
    al = align(parties)
    before_f = {b: params(p.f) for b, p in parties.items()}
    before_g = {b: params(p.g) for b, p in parties.items()}
    emb, fused = run_round(parties, al, 0, INDEX)
    for b, party in parties.items():
        assert emb[b].shape == (BATCH, EMBED_DIM) and emb[b].dtype == np.float32
        assert changed(before_f[b], party.f), f"f_{b} did not change"
        assert changed(before_g[b], party.g), f"g_{b} did not change"
        assert np.isfinite(fused[b].loss) and fused[b].loss > 0
        assert sorted(fused[b].grads) == [c for c in range(K) if c != b]
    assert all(p.last_round == 0 for p in parties.values())


def test_given_retried_calls_when_answering_then_same_answers_and_no_second_step(
    all_labels: list[PartyData],
) -> None:
    parties = make_parties(all_labels)
    al = align(parties)
    calls = embed_calls(al, parties, 0, INDEX)
    emb = {b: parties[b].embed(c) for b, c in calls.items()}
    for b, c in calls.items():
        np.testing.assert_array_equal(parties[b].embed(c), emb[b])
    party = parties[0]
    fuse_call = FuseCall(0, 0, {b: e for b, e in emb.items() if b != 0})
    first = party.fuse(fuse_call)
    g_after_first = params(party.g)
    second = party.fuse(fuse_call)
    assert second.loss == first.loss
    assert second.grads.keys() == first.grads.keys()
    for b in first.grads:
        np.testing.assert_array_equal(second.grads[b], first.grads[b])
    assert same(g_after_first, party.g)  # the retry did not step g again
    backward = BackwardCall(0, 0, np.ones((BATCH, EMBED_DIM), np.float32))
    party.backward(backward)
    f_after_first = params(party.f)
    party.backward(backward)
    assert same(f_after_first, party.f)


def test_given_finished_round_when_old_or_foreign_round_arrives_then_stale_round_error(
    all_labels: list[PartyData],
) -> None:
    parties = make_parties(all_labels)
    al = align(parties)
    run_round(parties, al, 4, INDEX)
    run_round(parties, al, 5, INDEX + BATCH)
    party = parties[1]
    old = embed_calls(al, [1], 4, INDEX)[1]
    with pytest.raises(StaleRoundError, match="stale"):
        party.embed(old)
    with pytest.raises(StaleRoundError):
        party.fuse(FuseCall(4, 0, {}))
    with pytest.raises(StaleRoundError):
        party.backward(BackwardCall(6, 0, None))  # never embedded
    # The current round repeated with other rows is refused too (not silently re-run).
    other_rows = embed_calls(al, [1], 5, INDEX)[1]
    with pytest.raises(ProtocolError, match="other rows"):
        party.embed(other_rows)


def test_given_fresh_party_when_fuse_or_backward_arrive_first_then_stale_round_error(
    all_labels: list[PartyData],
) -> None:
    party = make_parties(all_labels)[0]
    with pytest.raises(StaleRoundError):
        party.fuse(FuseCall(0, 0, {}))
    with pytest.raises(StaleRoundError):
        party.backward(BackwardCall(0, 0, None))


# ---------------------------------------------------------------- malformed calls


def test_given_wrong_digest_or_rows_when_embedding_then_protocol_error(
    all_labels: list[PartyData],
) -> None:
    parties = make_parties(all_labels)
    al = align(parties)
    party = parties[2]
    rows = al.rows_of(2, INDEX)
    n = len(party.data.splits["train"])
    wrong_digest = al.digest(INDEX[::-1])
    bad_calls = {
        "digest": EmbedCall(0, "train", rows, wrong_digest, True),
        "past the end": EmbedCall(0, "train", np.array([0, n]), al.digest(INDEX[:2]), True),
        "negative": EmbedCall(0, "train", np.array([-1, 0]), al.digest(INDEX[:2]), True),
        "empty": EmbedCall(0, "train", np.array([], np.int64), al.digest(INDEX[:0]), True),
        "split": EmbedCall(0, "valid", rows, al.digest(INDEX), True),
    }
    for name, call in bad_calls.items():
        with pytest.raises(ProtocolError):
            party.embed(call)
        assert party.last_round == -1, name  # a refused call does not start the round
    assert party.embed(EmbedCall(0, "train", rows, al.digest(INDEX), True)).shape == (
        BATCH,
        EMBED_DIM,
    )


def bad_arrays() -> dict[str, np.ndarray]:
    good = np.zeros((BATCH, EMBED_DIM), np.float32)
    nan = good.copy()
    nan[3, 1] = np.nan
    inf = good.copy()
    inf[0, 0] = np.inf
    return {
        "rows": np.zeros((BATCH + 1, EMBED_DIM), np.float32),
        "width": np.zeros((BATCH, EMBED_DIM + 1), np.float32),
        "rank": np.zeros((BATCH * EMBED_DIM,), np.float32),
        "dtype": good.astype(np.float64),
        "nan": nan,
        "inf": inf,
    }


@pytest.mark.parametrize("case", sorted(bad_arrays()))
def test_given_malformed_embedding_when_fusing_then_protocol_error_and_no_step(
    all_labels: list[PartyData], case: str
) -> None:
    parties = make_parties(all_labels)
    al = align(parties)
    emb = {b: parties[b].embed(c) for b, c in embed_calls(al, parties, 0, INDEX).items()}
    party = parties[0]
    g_before = params(party.g)
    others = {b: e for b, e in emb.items() if b != 0}
    with pytest.raises(ProtocolError):
        party.fuse(FuseCall(0, 0, {**others, 2: bad_arrays()[case]}))
    assert same(g_before, party.g)
    assert party.fuse(FuseCall(0, 0, others)).grads.keys() == {1, 2, 3}  # still usable


@pytest.mark.parametrize("case", sorted(bad_arrays()))
def test_given_malformed_gradient_when_backward_then_protocol_error_and_no_step(
    all_labels: list[PartyData], case: str
) -> None:
    parties = make_parties(all_labels)
    al = align(parties)
    party = parties[1]
    party.embed(embed_calls(al, [1], 0, INDEX)[1])
    f_before = params(party.f)
    with pytest.raises(ProtocolError):
        party.backward(BackwardCall(0, 0, bad_arrays()[case]))
    assert same(f_before, party.f)
    party.backward(BackwardCall(0, 0, np.ones((BATCH, EMBED_DIM), np.float32)))
    assert changed(f_before, party.f)


# ---------------------------------------------------------------- feature-only party


def test_given_feature_only_party_when_training_then_no_head_but_f_learns_from_others(
    one_feature_only: list[PartyData],
) -> None:
    parties = make_parties(one_feature_only)
    al = align(parties)
    lonely = parties[3]
    assert lonely.g is None and lonely.g_opt is None and not lonely.info.has_labels
    assert lonely.class_weights("train") is None
    f_before = params(lonely.f)
    emb, fused = run_round(parties, al, 0, INDEX)
    assert sorted(fused) == [0, 1, 2]
    assert all(np.abs(fused[k].grads[3]).sum() > 0 for k in fused)
    assert changed(f_before, lonely.f)
    with pytest.raises(ProtocolError, match="no fusion head"):
        lonely.fuse(FuseCall(0, 0, {b: e for b, e in emb.items() if b != 3}))
    with pytest.raises(ProtocolError, match="no fusion head"):
        lonely.predict(PredictCall(0, emb))
    rows = al.rows_of(3, INDEX)
    with pytest.raises(ProtocolError, match="no labels"):
        lonely.score(ScoreCall("train", rows, al.digest(INDEX), {"x": np.zeros(BATCH, np.int64)}))


# ---------------------------------------------------------------- the gradients a head sends


def manual_grads(
    w: torch.Tensor,
    bias: torch.Tensor,
    emb: dict[int, np.ndarray],
    tasks: list,
    target: np.ndarray,
) -> dict[int, np.ndarray]:
    """dL_k/dE_j for a linear head, by hand: L_k = sum_i a_i CE(W mean_{S_i} E + b, y)."""
    w64, b64 = w.double().numpy(), bias.double().numpy()
    batch = len(target)
    onehot = np.eye(w64.shape[0])[target]
    grads = {b: np.zeros((batch, w64.shape[1])) for b in emb}
    for subset, weight in tasks:
        fused = np.mean([emb[b].astype(np.float64) for b in subset], axis=0)
        logits = fused @ w64.T + b64
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        d_fused = weight * (probs - onehot) / batch @ w64  # (B, d)
        for b in subset:
            grads[b] += d_fused / len(subset)
    return grads


@pytest.mark.parametrize("round_id", [0, 1, 7])
def test_given_round_when_fusing_then_sent_gradients_equal_manual_dl_de(
    all_labels: list[PartyData], round_id: int
) -> None:
    parties = make_parties(all_labels)
    al = align(parties)
    index = INDEX + round_id
    emb = {b: parties[b].embed(c) for b, c in embed_calls(al, parties, round_id, index).items()}
    k = 2
    head = parties[k]
    w, bias = (p.detach().clone() for p in head.g.parameters())
    tasks = sample_tasks(k, sorted(emb), rng(CONFIG.seed, Stream.TASKS, round_id, k))
    target = head.data.splits["train"].labels[al.rows_of(k, index)]
    expected = manual_grads(w, bias, emb, tasks, target)
    result = head.fuse(FuseCall(round_id, 0, {b: e for b, e in emb.items() if b != k}))
    for b in (0, 1, 3):
        np.testing.assert_allclose(result.grads[b], expected[b], atol=1e-6, rtol=1e-5)
    # Backward applies the received sum plus the head's own gradient through f_k.
    received = np.ones((len(index), EMBED_DIM), np.float32) * 0.01
    f_copy = copy.deepcopy(head.f)
    x = torch.from_numpy(head.data.splits["train"].features[al.rows_of(k, index)])
    f_copy(x).backward(torch.from_numpy(received + expected[k].astype(np.float32)))
    head.backward(BackwardCall(round_id, 0, received))
    for p_copy, p in zip(f_copy.parameters(), head.f.parameters(), strict=True):
        torch.testing.assert_close(p.grad, p_copy.grad, atol=1e-6, rtol=1e-5)


def test_given_a_round_when_fusing_then_the_trained_loss_is_laser_sampled_loss_of_its_tasks(
    all_labels: list[PartyData], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loss a head party trains goes through vfl_core.methods.laser.objective.sampled_loss,
    # the very function whose exact expectation over task samples test_laser.py enumerates
    # (invariant 2).
    parties = make_parties(all_labels)
    al = align(parties)
    round_id, k = 2, 1
    emb = {b: parties[b].embed(c) for b, c in embed_calls(al, parties, round_id, INDEX).items()}
    head = copy.deepcopy(parties[k].g)  # g_k before the step that fuse takes
    tasks = sample_tasks(k, sorted(emb), rng(CONFIG.seed, Stream.TASKS, round_id, k))
    target = torch.from_numpy(parties[k].data.splits["train"].labels[al.rows_of(k, INDEX)])
    tensors = {b: torch.from_numpy(e) for b, e in emb.items()}
    with torch.no_grad():
        expected = laser.sampled_loss(head, tensors, tasks, target, head_loss("classification"))

    seen: list[list] = []
    real = laser.sampled_loss

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append(list(args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(laser_steps, "sampled_loss", spy)
    result = parties[k].fuse(FuseCall(round_id, 0, {b: e for b, e in emb.items() if b != k}))
    assert seen == [tasks]  # one call, on exactly the sampled tasks
    assert result.loss == float(expected)  # bit for bit


def test_given_same_seed_round_and_party_when_fusing_then_same_tasks_and_result(
    all_labels: list[PartyData],
) -> None:
    results = []
    for _ in range(2):
        parties = make_parties(all_labels)
        al = align(parties)
        _, fused = run_round(parties, al, 3, INDEX)
        results.append(fused)
    for k in range(K):
        assert results[0][k].loss == results[1][k].loss
        for b in results[0][k].grads:
            np.testing.assert_array_equal(results[0][k].grads[b], results[1][k].grads[b])


# ---------------------------------------------------------------- prediction


def test_given_test_batch_when_predicting_then_probabilities_sum_to_one(
    all_labels: list[PartyData],
) -> None:
    parties = make_parties(all_labels)
    train_al = align(parties)
    for r in range(3):
        run_round(parties, train_al, r, INDEX + r * BATCH)
    al = align(parties, "test")
    index = np.arange(40)
    emb = {b: parties[b].embed(c) for b, c in embed_calls(al, parties, 0, index, "test").items()}
    assert all(p.last_round == 2 for p in parties.values())  # inference is not a round
    for observed in ([0, 1, 2, 3], [1, 3], [2]):
        for k in observed:
            probs = parties[k].predict(PredictCall(9, {b: emb[b] for b in observed}))
            assert probs.shape == (len(index), 10) and probs.dtype == np.float32
            assert (probs >= 0).all()
            np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    with pytest.raises(ProtocolError, match="lacks its own block"):
        parties[0].predict(PredictCall(9, {1: emb[1], 2: emb[2]}))
    with pytest.raises(ProtocolError, match="batch size"):
        parties[0].predict(PredictCall(9, {0: emb[0], 1: emb[1][:5]}))
    with pytest.raises(ProtocolError):
        parties[0].predict(PredictCall(9, {0: emb[0].astype(np.float64)}))


def test_given_predictions_when_scoring_then_confusion_counts_match_labels(
    all_labels: list[PartyData],
) -> None:
    parties = make_parties(all_labels)
    al = align(parties, "test")
    index = np.arange(30)
    rows = al.rows_of(0, index)
    truth = parties[0].data.splits["test"].labels[rows]
    predicted = (truth + np.arange(30) % 2) % 10  # every other one wrong
    out = parties[0].score(ScoreCall("test", rows, al.digest(index), {"0": predicted}))
    confusion = out.confusion["0"]
    assert not out.histograms and not out.sums  # ten classes: no AUC
    assert confusion.shape == (10, 10) and confusion.sum() == 30
    assert np.trace(confusion) == 15
    with pytest.raises(ProtocolError, match="wrong shape or classes"):
        parties[0].score(ScoreCall("test", rows, al.digest(index), {"0": predicted + 10}))
    with pytest.raises(ProtocolError, match="digest"):
        parties[0].score(ScoreCall("test", rows, al.digest(index[::-1]), {"0": predicted}))


# ------------------------------------------------------- the heads' parts (encrypted relay)


@pytest.mark.parametrize("wire", ["float32", "int8"])
def test_given_heads_gradients_as_parts_when_backward_then_the_party_adds_them_as_the_coordinator(
    all_labels: list[PartyData], wire: str
) -> None:
    """With an encrypted relay the coordinator forwards the heads' gradients unsummed: the
    party adds them in head order and rounds the sum as the coordinator's would have been, so
    it steps to exactly the weights of a party sent the coordinator's sum."""
    from vfl_core.methods.gradient_sum import add_in_order
    from vfl_core.model.quantize import round_trip
    from vfl_core.training.inprocess import InProcessTransport

    config = CONFIG.model_copy(update={"wire_dtype": wire})
    gen = np.random.default_rng(7)
    parts = tuple(
        round_trip(gen.normal(size=(BATCH, EMBED_DIM)).astype(np.float32), wire) for _ in range(3)
    )
    weights = []
    for call in (
        BackwardCall(0, 0, round_trip(add_in_order(parts), wire)),
        BackwardCall(0, 0, None, parts),
    ):
        parties = make_parties(all_labels, config)
        al = align(parties)
        party = parties[1]
        party.embed(embed_calls(al, [1], 0, INDEX)[1])
        InProcessTransport({1: party}).backward({1: call})
        weights.append(params(party.f))
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))


def test_given_parts_of_different_shapes_when_backward_then_protocol_error_and_no_step(
    all_labels: list[PartyData],
) -> None:
    parties = make_parties(all_labels)
    party = parties[1]
    party.embed(embed_calls(align(parties), [1], 0, INDEX)[1])
    f_before = params(party.f)
    good = np.ones((BATCH, EMBED_DIM), np.float32)
    with pytest.raises(ProtocolError, match="parts of shapes"):
        party.backward(BackwardCall(0, 0, None, (good, good[:, :1])))
    assert same(f_before, party.f)
