"""The parts of the round engine one by one (vfl_core.training.engine.Federation composes them):
the aligner's re-alignment and key resend, the train rows held out for validation, the presence
(rejoins and pauses), one LASER round's answer checks, the evaluator's draws, the validator's
threshold and the snapshot's round trip. In one process, on a small digits federation."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError
from vfl_core.inference.federation_view import EvaluatingFederation
from vfl_core.methods.federation_port import FederationPort
from vfl_core.methods.liveness import DOWN, REJOINING, UP
from vfl_core.protocol import FuseResult, PartyInfo, PsiCall
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.laser_round import sum_grads
from vfl_core.training.party import Party

K = 3
SECRET = b"engine-parts"


class Scripted(InProcessTransport):
    """Block 1 is silent for its first `silent_for` alignment calls; `back` are reported as
    registered again; `moved` registers again with other row counts; PSI keys sent are kept."""

    def __init__(self, parties: dict[int, Party], silent_for: int = 0) -> None:
        super().__init__(parties)
        self.silent_for = silent_for
        self.back: set[int] = set()
        self.moved: dict[int, PartyInfo] = {}
        self.psi_sent: list[dict[int, PsiCall]] = []

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        answers = super().id_hashes(split, blocks)
        if self.silent_for > 0:
            self.silent_for -= 1
            answers.pop(1, None)
        return answers

    def infos(self) -> dict[int, PartyInfo]:
        return {**super().infos(), **self.moved}

    def rejoined(self) -> set[int]:
        back, self.back = self.back, set()
        return back

    def psi_keys(self, calls: dict[int, PsiCall]) -> set[int]:
        self.psi_sent.append(calls)
        return super().psi_keys(calls)


@pytest.fixture(scope="module")
def datas(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    root: Path = tmp_path_factory.mktemp("parts")
    paths = prepare_parties(load_digits_dataset(), root, K, [0.1] * K, [0.1] * K, 0.2, seed=0)
    return [load_party_dir(p) for p in paths]


def _config(**kwargs: object) -> TrainConfig:
    model = ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))
    return TrainConfig(seed=0, epochs=2, batch_size=128, lr=1e-2, model=model, **kwargs)


def _federation(
    datas: list[PartyData], cfg: TrainConfig | None = None, silent_for: int = 0, **kwargs: object
) -> tuple[Scripted, Federation]:
    cfg = cfg or _config()
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    transport = Scripted(parties, silent_for)
    return transport, Federation(transport, cfg, progress=False, **kwargs)


# ---------------------------------------------------------------- the methods' port


@pytest.mark.parametrize("port", [FederationPort, EvaluatingFederation])
def test_given_the_engine_when_seen_through_a_lower_layers_port_then_it_has_every_member(
    datas: list[PartyData], port: type
) -> None:
    _, fed = _federation(datas)
    names = set(port.__annotations__) | {
        n for n in vars(port) if not n.startswith("__") and callable(getattr(port, n, None))
    }
    names |= {n for n, v in vars(port).items() if isinstance(v, property)}
    for base in port.__mro__[1:]:
        names |= set(getattr(base, "__annotations__", {}))
        names |= {n for n, v in vars(base).items() if isinstance(v, property) or callable(v)}
    names = {n for n in names if not n.startswith("__") and n != "_is_protocol"}
    assert {"tick", "record", "accept", "alignments", "liveness", "config"} <= names
    missing = sorted(n for n in names if not hasattr(fed, n))
    assert missing == []


# ---------------------------------------------------------------- aligner


def test_given_party_silent_at_alignment_when_heard_again_then_aligner_aligns_it_when_due(
    datas: list[PartyData],
) -> None:
    transport, fed = _federation(datas, silent_for=2)
    fed.align()
    assert fed.unaligned == {1} and 1 not in fed.alignments["train"].rows

    transport.back = {1}
    fed.presence.poll_rejoins()
    assert fed.aligner.due  # an unaligned party is back: align again when due

    fed.cursor.position = 3  # mid-epoch: the epoch's plan keeps its parties
    fed.aligner.again_if_due()
    assert fed.unaligned == {1}

    fed.cursor.position = 0  # an epoch's start
    fed.aligner.again_if_due()
    assert fed.unaligned == set() and not fed.aligner.due
    assert set(fed.alignments["train"].rows) == set(range(K))


def test_given_party_back_on_other_rows_when_polled_then_not_called_until_aligned_again(
    datas: list[PartyData],
) -> None:
    transport, fed = _federation(datas)
    fed.align()
    old = fed.infos[2]
    fed.liveness.failed(2, 0, "embed", immediate=True)
    assert fed.liveness.state[2] == DOWN

    samples = {**old.samples, "train": old.samples["train"] - 1}
    transport.moved = {2: dataclasses.replace(old, samples=samples)}
    transport.back = {2}
    fed.presence.poll_rejoins()
    assert fed.aligner.due and fed.aligner.other_rows == {2}
    assert fed.liveness.state[2] == DOWN  # its old rows are another data set's: not called


def test_given_psi_alignment_when_party_restarts_then_its_keys_are_sent_again_in_row_order(
    datas: list[PartyData],
) -> None:
    transport, fed = _federation(datas, alignment="psi")
    fed.align()
    transport.psi_sent.clear()
    transport.back = {0}
    fed.presence.poll_rejoins()

    sent = {next(iter(calls.values())).split: calls[0] for calls in transport.psi_sent}
    assert set(sent) == {"train", "test"}
    for split, call in sent.items():
        al = fed.alignments[split]
        rows = al.rows[0]
        by_row = sorted(np.flatnonzero(rows >= 0), key=lambda i: rows[i])
        assert list(call.points) == [al.keys[int(i)] for i in by_row]
    assert fed.liveness.state[0] == REJOINING


# ---------------------------------------------------------------- train rows


def test_given_early_stopping_when_planned_then_validation_rows_never_train(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas, _config(early_stop_patience=2, validation_fraction=0.2))
    fed.align()
    rows = fed.train_rows
    assert rows.training is not None and rows.validation is not None
    assert not set(rows.training) & set(rows.validation)
    for epoch in range(2):
        planned = np.concatenate([b.index for b in fed.plan(epoch)])
        assert not set(planned) & set(rows.validation)
        assert sorted(planned) == sorted(set(planned))  # each training sample once
    assert fed.early_stop is not None
    assert fed.early_stop.validation_samples == len(rows.validation)


def test_given_patience_and_too_small_a_share_when_aligned_then_clear_error(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas, _config(early_stop_patience=2, validation_fraction=1e-4))
    with pytest.raises(ConfigError, match="validation_fraction"):
        fed.align()


# ---------------------------------------------------------------- presence


def test_given_label_party_down_when_pausing_is_on_then_pause_is_due_until_it_rejoins(
    datas: list[PartyData],
) -> None:
    transport, fed = _federation(datas, rejoin_timeout_s=5.0)
    fed.align()
    assert not fed.presence.pause_due()
    for b in fed.label_blocks:
        fed.liveness.failed(b, 0, "fuse", immediate=True)
    assert fed.presence.pause_due()

    transport.back = set(fed.label_blocks)
    fed.presence.poll_rejoins()
    assert not fed.presence.pause_due()
    assert {fed.liveness.state[b] for b in fed.label_blocks} == {REJOINING}


def test_given_no_rejoin_timeout_when_label_party_down_then_no_pause(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas)
    fed.align()
    for b in fed.label_blocks:
        fed.liveness.failed(b, 0, "fuse", immediate=True)
    assert not fed.presence.pause_due()


# ---------------------------------------------------------------- one round


def test_given_heads_gradients_when_summed_then_own_head_left_out_in_head_order() -> None:
    g = {k: np.full((2, 3), float(k + 1), dtype=np.float32) for k in range(3)}
    fused = {k: FuseResult(loss=0.0, grads={b: g[k] for b in range(3)}) for k in range(3)}
    np.testing.assert_array_equal(sum_grads(fused, 0), g[1] + g[2])
    assert sum_grads({0: fused[0]}, 0) is None  # only its own head answered


def test_given_malformed_embeddings_when_accepted_then_refused_and_recorded_as_missed(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas, down_after=1)
    fed.align()
    good = np.zeros((4, 8), dtype=np.float32)
    answers = {
        0: good,
        1: good.astype(np.float64),  # wrong dtype
        2: np.full((4, 8), np.nan, dtype=np.float32),  # not finite
    }
    kept = fed.laser.accept(answers, (0, 1, 2), 4, "embed", "test")
    assert list(kept) == [0]
    assert fed.liveness.state == {0: UP, 1: DOWN, 2: DOWN}


# ---------------------------------------------------------------- evaluation


def test_given_a_batch_when_its_draws_are_asked_twice_then_the_same(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas)
    fed.align()
    batch = fed.plan(0)[0]
    first = fed.evaluator.eval_rng(batch).random(5)
    fed.request_id += 7  # another request: the draws are keyed by the samples
    np.testing.assert_array_equal(fed.evaluator.eval_rng(batch).random(5), first)


def test_given_blocks_holding_none_of_a_batch_when_predicting_then_no_call_and_no_answer(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas)
    fed.align()
    preds = list(fed.evaluator.predict_batches("test", None, blocks=[0]))
    outside = [p for p in preds if 0 not in p.pattern]
    assert outside and all(p.predicted is None and p.present == () for p in outside)
    assert fed.request_id == len(preds) - len(outside)  # only the others were requests


# ---------------------------------------------------------------- validator


@pytest.mark.parametrize(("configured", "expected"), [(0.5, None), (0.3, 0.3)])
def test_given_a_configured_threshold_when_asked_then_validator_answers_it(
    datas: list[PartyData], configured: float, expected: float | None
) -> None:
    _, fed = _federation(datas, _config(threshold=configured))
    assert fed.validator.threshold() == expected


def test_given_no_choice_when_served_then_every_asked_party_and_none_dropped(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas)
    fed.align()
    assert fed.validator.served((0, 1, 2), None) == (None, ())
    assert fed.validator.served((0, 1), [0]) == ([0], ())


# ---------------------------------------------------------------- snapshot


def test_given_a_run_cut_mid_epoch_when_snapshot_restored_then_the_same_snapshot(
    datas: list[PartyData],
) -> None:
    _, fed = _federation(datas, pipeline=False)
    fed.align()
    fed.train_epoch(0)
    plan = fed.plan(1)
    for batch in plan[:2]:
        fed.run_round(fed.round_id, 1, batch)
        fed.round_id += 1
        fed.cursor.position += 1
    fed.liveness.failed(2, fed.tick, "embed", immediate=True)
    saved = fed.snapshot()

    _, again = _federation(datas, pipeline=False)
    again.align()
    again.restore(saved)
    assert again.snapshot() == saved
    assert again.cursor.epoch == 1 and again.cursor.position == 2
    assert again.liveness.state[2] == DOWN

    _, back = _federation(datas, pipeline=False)
    back.align()
    back.restore(saved, present=[2])  # it registered again since
    assert back.liveness.state[2] == REJOINING


# ---------------------------------------------------------------- layering


def test_given_the_methods_and_the_inference_choices_when_parsed_then_no_engine_import() -> None:
    """Issue 28 item 4: the methods' programs and specs, and the inference layer's choices, see
    the engine through its ports, and import none of the round engine's modules (TYPE_CHECKING
    imports included)."""
    root = Path(__file__).resolve().parents[1] / "vfl_core"
    files = [
        *root.glob("methods/*/program.py"),
        *root.glob("methods/*/spec.py"),
        *root.glob("methods/*.py"),
        root / "inference/choice.py",
        root / "inference/subsets.py",
    ]
    engine = (
        "vfl_core.training.engine",
        "vfl_core.training.alignment",
        "vfl_core.training.liveness",
    )
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(engine):
                found.append(f"{path.relative_to(root)}: {node.module}")
    assert len(files) > 6 and found == []
