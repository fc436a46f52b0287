"""Issue 5 in one process: the liveness state machine with `rejoining`, periodic checkpoints and
a resume that is bit-identical to an uninterrupted run, round-labelled checkpoint files, and the
fault-injecting transport (also through `vfl simulate --fault-rate`)."""

from __future__ import annotations

import logging
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
from vfl_core.errors import ConfigError, DataError
from vfl_core.persistence import checkpoint
from vfl_core.persistence.checkpoint_store import RoundCheckpoints
from vfl_core.training.engine import Callbacks, Federation, RoundRecord
from vfl_core.training.faults import FaultConfig, FaultyTransport
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.liveness import DOWN, REJOINING, UP, Liveness
from vfl_core.training.party import Party

K = 4
SECRET = b"faults-test"
RUN = "run-a"


@pytest.fixture(scope="module")
def party_paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("faults")
    return prepare_parties(load_digits_dataset(), root, K, [0.2] * K, [0.2] * K, 0.2, seed=0)


@pytest.fixture(scope="module")
def datas(party_paths: list[Path]) -> list[PartyData]:
    return [load_party_dir(p) for p in party_paths]


def config(epochs: int = 2, seed: int = 1) -> TrainConfig:
    model = ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))
    return TrainConfig(seed=seed, epochs=epochs, lr=1e-2, model=model)


def parties(datas: list[PartyData], cfg: TrainConfig) -> dict[int, Party]:
    return {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in datas}


def stores(root: Path) -> dict[int, RoundCheckpoints]:
    return {b: RoundCheckpoints(root, f"party{b}") for b in range(K)}


# ------------------------------------------------------------------------ liveness


def test_given_restarted_party_when_it_registers_again_then_rejoining_until_it_answers() -> None:
    live = Liveness([0, 1], down_after=2, retry_every=10)
    live.failed(1, 3, "embed")
    live.failed(1, 4, "embed")
    assert live.state[1] == DOWN and not live.should_call(1, 5)

    live.rejoined(1, 6)
    assert live.state[1] == REJOINING and live.should_call(1, 6)
    live.answered(1, 6)
    live.rejoined(0, 7)  # an up party that restarted before it was marked down
    live.failed(0, 7, "embed")  # a rejoining party that misses is down at once

    moves = [(t.block, t.old, t.new) for t in live.transitions]
    assert moves == [
        (1, UP, DOWN),
        (1, DOWN, REJOINING),
        (1, REJOINING, UP),
        (0, UP, REJOINING),
        (0, REJOINING, DOWN),
    ]
    assert live.counts() == {
        "down->rejoining": 1,
        "rejoining->down": 1,
        "rejoining->up": 1,
        "up->down": 1,
        "up->rejoining": 1,
    }
    copy = Liveness([0, 1])
    copy.load_state(live.to_state())
    assert (copy.state, copy.missed) == (live.state, live.missed)
    assert copy.transitions == live.transitions


# ------------------------------------------------------------------------ checkpoints and resume


class Crash(Exception):
    """The coordinator dies right after writing a checkpoint."""


def _train_with_checkpoints(
    datas: list[PartyData], cfg: TrainConfig, root: Path, crash_at: int | None
) -> tuple[dict[int, Party], Federation, dict[int, dict]]:
    ps = parties(datas, cfg)
    store = stores(root)

    def save(p: Party, round_id: int) -> None:
        store[p.block].save(round_id, p.state_dict(), cfg.model_dump_json(), {"run_id": RUN})

    fed = Federation(InProcessTransport(ps, save), cfg, progress=False, checkpoint_every=10)
    snapshots: dict[int, dict] = {}

    def on_checkpoint(round_id: int, saved: set[int]) -> None:
        assert saved == set(range(K))
        snapshots[round_id] = fed.snapshot()
        if round_id == crash_at:
            raise Crash

    fed.observers.append(Callbacks(checkpoint=on_checkpoint))
    fed.align()
    with pytest.raises(Crash) if crash_at is not None else _nothing():
        fed.train()
    return ps, fed, snapshots


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_given_crash_after_checkpoint_when_resumed_from_files_then_bit_identical_to_no_crash(
    datas: list[PartyData], tmp_path: Path
) -> None:
    cfg = config()
    reference, ref_fed, _ = _train_with_checkpoints(datas, cfg, tmp_path / "ref", None)
    _, crashed, snapshots = _train_with_checkpoints(datas, cfg, tmp_path / "run", crash_at=49)
    assert crashed.round_id == 50 and crashed.cursor.position > 0  # mid-epoch

    restored = parties(datas, cfg)
    for block, store in stores(tmp_path / "run").items():
        assert store.rounds() == [39, 49]  # the newest two
        restored[block].load_state_dict(store.latest(RUN, cfg.model_dump_json(), 49)["state"])
    records: list[RoundRecord] = []
    fed = Federation(InProcessTransport(restored), cfg, progress=False, on_round=records.append)
    fed.align()
    fed.restore(snapshots[49])
    summaries = fed.train()

    assert records[0].round_id == 50 and fed.round_id == ref_fed.round_id
    assert [s.rounds for s in summaries] == [s.rounds for s in ref_fed.cursor.summaries]
    assert [s.mean_loss for s in summaries] == [s.mean_loss for s in ref_fed.cursor.summaries]
    for block, party in reference.items():
        got, want = restored[block].parameters_vector(), party.parameters_vector()
        np.testing.assert_array_equal(got, want)
    assert fed.evaluate().to_json() == ref_fed.evaluate().to_json()


def test_given_checkpoint_every_n_when_training_then_saved_every_n_rounds_and_at_the_end(
    datas: list[PartyData], tmp_path: Path
) -> None:
    cfg = config(epochs=1)
    rounds: list[int] = []
    fed = Federation(
        InProcessTransport(parties(datas, cfg), lambda p, r: rounds.append(r)),
        cfg,
        progress=False,
        checkpoint_every=7,
    )
    fed.align()
    fed.train()
    total = fed.round_id
    expected = sorted({*range(6, total, 7), total - 1})
    assert sorted(set(rounds)) == expected and len(rounds) == K * len(expected)


def test_given_store_when_saving_then_newest_two_kept_and_later_rounds_discarded(
    tmp_path: Path,
) -> None:
    store = RoundCheckpoints(tmp_path, "party0")
    cfg = config().model_dump_json()
    for r in (9, 19, 29):
        store.save(r, {"x": torch.tensor([r])}, cfg, {"run_id": RUN})
    assert store.rounds() == [19, 29]
    assert store.latest(RUN, cfg, at_most=25)["meta"]["round"] == 19
    assert store.latest(RUN, cfg, at_most=5) is None
    store.discard_after(19)
    assert store.rounds() == [19]
    (tmp_path / "party0-round-000000039.pt").write_bytes(b"torn")  # not ours: atomic writes
    assert store.latest(RUN, cfg)["meta"]["round"] == 19  # unreadable files are skipped


def test_given_crash_between_write_and_rename_when_saving_a_round_then_previous_one_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RoundCheckpoints(tmp_path, "party0")
    cfg = config().model_dump_json()
    store.save(19, {"x": torch.tensor([19])}, cfg, {"run_id": RUN})

    def crash(src: object, dst: object) -> None:
        assert Path(str(src)).stat().st_size > 0  # the new checkpoint is fully written
        raise OSError("killed before rename")

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    with pytest.raises(DataError, match="killed before rename"):
        store.save(29, {"x": torch.tensor([29])}, cfg, {"run_id": RUN})
    monkeypatch.undo()

    assert store.rounds() == [19] and not list(tmp_path.glob("*.tmp"))
    saved = store.latest(RUN, cfg, at_most=29)
    assert saved["meta"]["round"] == 19 and saved["state"]["x"].item() == 19


@pytest.mark.parametrize("other", ["run", "config"])
def test_given_checkpoint_of_another_run_or_config_when_loading_then_refused_in_one_line(
    tmp_path: Path, other: str
) -> None:
    store = RoundCheckpoints(tmp_path, "party0")
    cfg = config().model_dump_json()
    store.save(9, {"x": torch.zeros(1)}, cfg, {"run_id": RUN})
    run, want = (RUN, config(seed=2).model_dump_json()) if other == "config" else ("run-b", cfg)

    with pytest.raises(ConfigError) as err:
        store.latest(run, want)

    assert "\n" not in str(err.value) and str(store.path(9)) in str(err.value)
    assert ("seed" if other == "config" else "run-b") in str(err.value)
    assert store.rounds() == [9]  # refused, not deleted


# ------------------------------------------------------------------------ fault injection


def _faulty_run(
    datas: list[PartyData], faults: FaultConfig, epochs: int = 1
) -> tuple[FaultyTransport, Federation, list[RoundRecord]]:
    cfg = config(epochs=epochs)
    faulty = FaultyTransport(InProcessTransport(parties(datas, cfg)), faults, cfg.seed)
    records: list[RoundRecord] = []
    fed = Federation(faulty, cfg, progress=False, on_round=records.append)
    fed.align()
    fed.train()
    return faulty, fed, records


def test_given_fault_rates_when_training_twice_then_same_faults_and_failed_parties_absent(
    datas: list[PartyData],
) -> None:
    faults = FaultConfig(fail_rate=0.3, rejoin_rate=0.5)
    a, fed, records = _faulty_run(datas, faults)
    b, _, again = _faulty_run(datas, faults)

    assert a.events == b.events and [r.present for r in records] == [r.present for r in again]
    failed = [e for e in a.events if e[2] == "failed"]
    # up a share R_u / (R_d + R_u) of the time, failing with R_d then: ~0.19 per party-round
    assert 0.1 < len(failed) / (len(records) * K) < 0.3
    down: set[int] = set()
    for record in records:
        for _, block, kind in (e for e in a.events if e[0] == record.round_id):
            (down.add if kind == "failed" else down.discard)(block)
        assert not down & set(record.present), record  # a failed party never takes part
        assert not down & set(record.updated)
    assert any(t.new == REJOINING for t in fed.liveness.transitions)  # comebacks are reported


def test_given_rejoin_rate_one_when_a_party_fails_then_it_misses_exactly_that_round(
    datas: list[PartyData],
) -> None:
    faulty, _, records = _faulty_run(datas, FaultConfig(fail_rate=0.2, rejoin_rate=1.0))
    for round_id, block, kind in faulty.events:
        if kind == "failed":
            assert block not in records[round_id].present
            assert (round_id + 1, block, "back") in faulty.events or round_id == len(records) - 1


def test_given_link_loss_when_training_then_about_that_share_of_calls_is_lost(
    datas: list[PartyData],
) -> None:
    faulty, _, records = _faulty_run(datas, FaultConfig(link_loss=0.1))
    assert not faulty.events  # no party failures, only lost messages
    incomplete = sum(r.present != r.pattern for r in records)
    assert faulty.lost > 0 and incomplete > 0
    assert faulty.counts()["lost_calls"] == faulty.lost


def test_given_fault_options_when_simulating_from_the_cli_then_faults_are_counted(
    party_paths: list[Path], tmp_path: Path
) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = tmp_path / "sim.json"
    args = ["simulate", *[x for p in party_paths for x in ("--data", str(p))], "--epochs", "1"]
    args += ["--representation", "mlp", "--hidden", "8", "--embed-dim", "4", "--no-progress"]
    args += ["--fault-rate", "0.3", "--rejoin-rate", "0.5", "--out", str(out)]
    try:
        result = CliRunner().invoke(app, args)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        torch.set_num_threads(1)
    assert result.exit_code == 0, result.output
    assert "injected faults: failures" in result.output
    assert '"failures"' in out.read_text()
