"""The split-learning baselines of the fault benchmark (skip, zero-fill, stale) do what defines
them when a party fails during training, and the benchmark runs end to end on digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.methods.laser.stale import StaleEmbeddings
from vfl_core.methods.registry import method_spec
from vfl_core.methods.spec import SHARED, HeadTask
from vfl_core.protocol import EmbedCall, FuseCall, PredictCall
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.faults import FaultConfig, FaultyTransport
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

K = 4
D = 6
ALL = tuple(range(K))
SECRET = b"fault-baselines"
MODEL = ModelConfig(representation="mlp", hidden=(12,), embed_dim=D)


def config(method: str, epochs: int = 1) -> TrainConfig:
    return TrainConfig(method=method, seed=3, epochs=epochs, batch_size=64, lr=1e-2, model=MODEL)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    root = tmp_path_factory.mktemp("full")
    paths = prepare_parties(load_digits_dataset(), root, K, [0.0] * K, [0.0] * K, 0.2, seed=0)
    return [load_party_dir(p) for p in paths]


def parties_of(data: list[PartyData], train: TrainConfig) -> dict[int, Party]:
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}


# ------------------------------------------------------------------------ the method rules


@pytest.mark.parametrize("method", ["zerofill", "stale"])
def test_given_split_baseline_when_blocks_fail_then_only_the_active_head_trains(
    method: str,
) -> None:
    assert method_spec(method).concatenates
    assert method_spec(method).head_input_blocks(SHARED, K) == K
    assert method_spec(method).trainable((0, 2), K, ALL)  # the active party answered
    assert not method_spec(method).trainable((1, 2, 3), K, ALL)  # the head party is gone
    assert method_spec(method).fuse_parties((0, 3), ALL) == [0]
    tasks = method_spec(method).fuse_tasks(0, (0, 3), K, ALL, np.random.default_rng(0))
    assert tasks == [HeadTask(SHARED, (0, 3), 1.0)]  # nothing dropped
    assert method_spec(method).fuse_tasks(1, (0, 1), K, ALL, np.random.default_rng(0)) == []
    assert method_spec(method).predictors((0, 1), K, ALL) == [0]
    assert method_spec(method).predictors((1, 2), K, ALL) == []


def test_given_stale_cache_when_recalling_then_last_value_per_row_and_zeros_if_never_seen() -> None:
    cache = StaleEmbeddings(rows=10, width=3, device=torch.device("cpu"))
    first = torch.arange(6, dtype=torch.float32).reshape(2, 3).requires_grad_(True)
    cache.remember(np.array([1, 4]), {2: first})
    cache.remember(np.array([4]), {2: torch.full((1, 3), 9.0)})
    got = cache.recall(np.array([4, 1, 7]), [2, 3])
    np.testing.assert_array_equal(got[2].numpy(), [[9, 9, 9], [0, 1, 2], [0, 0, 0]])
    np.testing.assert_array_equal(got[3].numpy(), np.zeros((3, 3)))
    assert not got[2].requires_grad  # a stale embedding sends no gradient anywhere


# ------------------------------------------------------------------------ at the head party


def _round(parties: dict[int, Party], fed: Federation, round_id: int, answer: tuple[int, ...]):
    al, index = fed.alignments["train"], np.arange(16)
    digest = al.digest(index)
    emb = {
        b: parties[b].embed(EmbedCall(round_id, "train", al.rows_of(b, index), digest, True, ALL))
        for b in answer
    }
    call = FuseCall(round_id, 0, {b: emb[b] for b in answer if b != 0}, ALL, ALL)
    return emb, parties[0].fuse(call), al.rows_of(0, index)


def test_given_stale_when_a_party_fails_then_its_last_embedding_of_those_samples_is_used(
    full: list[PartyData],
) -> None:
    train = config("stale")
    parties = parties_of(full, train)
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    sent, _, rows = _round(parties, fed, 0, ALL)
    # round 1: block 2 failed; the head party fills in what block 2 sent for these samples
    _, result, _ = _round(parties, fed, 1, (0, 1, 3))
    assert sorted(result.grads) == [1, 3]  # no gradient goes to the failed party
    recalled = parties[0].laser.stale.recall(rows, [2])[2].numpy()
    np.testing.assert_allclose(recalled, sent[2], rtol=1e-6)

    zero = parties_of(full, config("zerofill"))[0]  # same seed: same initial weights
    head = zero.models.head(SHARED)
    assert torch.equal(
        torch.nn.utils.parameters_to_vector(head.parameters()),
        torch.nn.utils.parameters_to_vector(
            parties_of(full, config("stale"))[0].models.head(SHARED).parameters()
        ),
    )


def test_given_zerofill_when_predicting_with_a_block_missing_then_zeros_stand_in(
    full: list[PartyData],
) -> None:
    active = parties_of(full, config("zerofill"))[0]
    gen = np.random.default_rng(0)
    emb = {b: gen.standard_normal((5, D)).astype(np.float32) for b in (0, 2)}
    got = active.predict(PredictCall(0, emb, (0, 2)))
    zeros = np.zeros((5, D), dtype=np.float32)
    want = active.predict(PredictCall(0, {**emb, 1: zeros, 3: zeros}, ALL))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------ in the engine


def test_given_svfl_when_a_party_fails_then_the_round_is_skipped_and_nothing_moves(
    full: list[PartyData],
) -> None:
    train = config("svfl")
    parties = parties_of(full, train)
    faulty = FaultyTransport(InProcessTransport(parties), FaultConfig(fail_rate=0.3), train.seed)
    records: list[RoundRecord] = []
    before: dict[int, np.ndarray] = {}

    def snapshot(record: RoundRecord) -> None:
        records.append(record)
        before[record.round_id + 1] = np.concatenate(
            [p.parameters_vector() for _, p in sorted(parties.items())]
        )

    fed = Federation(faulty, train, progress=False, on_round=snapshot)
    fed.align()
    before[0] = np.concatenate([p.parameters_vector() for _, p in sorted(parties.items())])
    fed.train()
    skipped = [r for r in records if len(r.present) < K]
    trained = [r for r in records if len(r.present) == K]
    assert skipped and trained, [r.present for r in records]
    for r in skipped:  # no optimiser step (Adam would move weights on zero gradients)
        assert r.losses == {} and r.updated == ()
        np.testing.assert_array_equal(before[r.round_id], before[r.round_id + 1])
    for r in trained:
        assert r.updated == ALL


def test_given_spared_block_when_faults_are_drawn_then_it_never_fails_and_others_unchanged(
    full: list[PartyData],
) -> None:
    def events(spare: tuple[int, ...]) -> list[tuple[int, int, str]]:
        train = config("laser")
        faults = FaultConfig(fail_rate=0.3, rejoin_rate=0.5, spare=spare)
        faulty = FaultyTransport(InProcessTransport(parties_of(full, train)), faults, 3)
        fed = Federation(faulty, train, progress=False)
        fed.align()
        fed.train()
        return faulty.events

    every, spared = events(()), events((0,))
    assert any(b == 0 for _, b, _ in every)
    assert not any(b == 0 for _, b, _ in spared)
    assert [e for e in every if e[1] != 0] == spared


# ------------------------------------------------------------------------ the benchmark


def test_given_digits_when_fault_benchmark_runs_then_report_has_every_cell_and_a_verdict(
    tmp_path: Path,
) -> None:
    args = [
        "bench", "paper", "faults", "--dataset", "digits", "--seeds", "0", "--epochs", "1",
        "--scenarios", "all", "--rejoin", "0.1", "--jobs", "0", "--no-progress",
        "--results", str(tmp_path),
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    runs = sorted((tmp_path / "runs" / "faults-digits").glob("*.json"))
    assert len(runs) == 10  # 5 methods x (no faults, all R_u=0.1) x 1 seed
    text = (tmp_path / "faults_digits.md").read_text()
    for name in ("LASER-VFL", "skip the round", "zero-fill", "stale embedding"):
        assert name in text
    assert "—" not in text.split("## Check")[0]  # every cell measured
    verdicts = [line for line in text.splitlines() if "R_u=0.1: LASER-VFL" in line]
    assert len(verdicts) == 2 * 2 * 3  # 2 metrics x 2 LASER-VFL rows x 3 baselines
    assert all(line.endswith((": ok", ": NOT MET")) for line in verdicts)
    stamps = [p.stat().st_mtime_ns for p in runs]
    again = CliRunner().invoke(app, args)  # cached runs are not run again
    assert again.exit_code == 0 and [p.stat().st_mtime_ns for p in runs] == stamps


def test_given_bad_fault_options_when_benchmarking_then_one_error_line(tmp_path: Path) -> None:
    for bad in (["--scenarios", "nobody"], ["--rejoin", "0"], ["--dataset", "credit"]):
        result = CliRunner().invoke(
            app, ["bench", "paper", "faults", "--results", str(tmp_path), *bad]
        )
        assert result.exit_code == 2, (bad, result.output)
        assert "error:" in result.output and "Traceback" not in result.output
