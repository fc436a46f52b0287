"""Early stopping's best-epoch copy on disk (vfl_client.host, checkpoint_store): a party that
restarts after its run's best epoch can still go back to it, and a copy from a future that a
restarted coordinator rolled back past is dropped. Logic only; the real processes are in
tests/test_restarts.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from test_checkpoint import CONFIG_JSON, SECRET, _party, _train_one_round

from vfl_client.host import PartyHost
from vfl_client.servicer import PartyServicer
from vfl_core.errors import ConfigError
from vfl_core.persistence.checkpoint_store import RoundCheckpoints
from vfl_core.training.party import Party, party_info

RUN = "run-best"


def _host(directory: Path | None, party: Party, session: str = "") -> PartyHost:
    servicer = PartyServicer(party.party_id)
    servicer.attach(party, RUN)
    host = PartyHost(
        servicer,
        party_info(party.party_id, party.data),
        "127.0.0.1:1",
        RUN,
        connect=lambda: None,  # type: ignore[arg-type, return-value]
        secret=SECRET.decode(),
        checkpoint_dir=directory,
        unreachable_timeout_s=1.0,
    )
    host.session = session
    return host


def _weights(party: Party) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in party.f.state_dict().items()}


def _kept_then_trained_on(directory: Path, session: str) -> dict[str, torch.Tensor]:
    """A party keeps its state after round 1 (kind keep: memory and disk), trains round 2 and
    dies; returns the kept weights."""
    party = _party()
    host = _host(directory, party, session)
    _train_one_round(party, 0)
    _train_one_round(party, 1)
    party.keep_snapshot(1)
    host.save_best(party, 1)
    kept = _weights(party)
    _train_one_round(party, 2)
    assert any(not torch.equal(kept[k], v) for k, v in party.f.state_dict().items())
    return kept


def test_given_a_copy_kept_under_the_same_coordinator_when_the_party_restarts_then_it_goes_back(
    tmp_path: Path,
) -> None:
    """The coordinator still runs (same session) and resumes from an older checkpoint (-1:
    none): the copy of round 1 is its run's, whatever the resume round."""
    kept = _kept_then_trained_on(tmp_path, "session-a")
    again = _host(tmp_path, _party())  # the restarted process: a fresh party, no session yet
    again.resync(-1, "session-a")
    party = again.party
    assert not party.restore_snapshot(2)  # only the kept round
    assert party.restore_snapshot(1)
    for key, value in party.f.state_dict().items():
        assert torch.equal(value, kept[key]), key


def test_given_a_restarted_coordinator_resuming_after_the_kept_round_when_resynced_then_kept(
    tmp_path: Path,
) -> None:
    kept = _kept_then_trained_on(tmp_path, "session-a")
    again = _host(tmp_path, _party())
    again.resync(1, "session-b")
    assert again.party.restore_snapshot(1)
    assert all(torch.equal(v, kept[k]) for k, v in again.party.f.state_dict().items())


def test_given_a_restarted_coordinator_rolled_back_past_the_kept_round_then_the_copy_is_dropped(
    tmp_path: Path,
) -> None:
    """Round 1 is in the future the new coordinator abandoned: going back to it would mix two
    timelines, so the copy is deleted (the rerun keeps its own best epoch again)."""
    _kept_then_trained_on(tmp_path, "session-a")
    store = RoundCheckpoints(tmp_path, "party0")
    assert store.best_path().is_file()
    again = _host(tmp_path, _party())
    again.resync(0, "session-b")
    assert not again.party.restore_snapshot(1)
    assert not store.best_path().exists()


def test_given_a_best_copy_of_another_run_when_read_then_refused_and_kept(tmp_path: Path) -> None:
    store = RoundCheckpoints(tmp_path, "party0")
    store.save_best(3, {"w": torch.ones(2)}, CONFIG_JSON, {"run_id": "run-other"})
    with pytest.raises(ConfigError, match="run-other"):
        store.best(RUN, CONFIG_JSON)
    assert store.best_path().is_file()
    assert store.rounds() == []  # not a round checkpoint
    host = _host(tmp_path, _party())
    with pytest.raises(ConfigError, match="run-other"):  # the client stops with this line
        host.resync(-1, "session-a")
    assert host.servicer.party is None  # detached: nothing is saved over anything at exit
    assert store.best_path().is_file()


def test_given_a_corrupt_best_copy_when_resynced_then_warned_and_nothing_to_go_back_to(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    RoundCheckpoints(tmp_path, "party0").best_path().write_bytes(b"not a checkpoint")
    again = _host(tmp_path, _party())
    with caplog.at_level(logging.WARNING):
        again.resync(-1, "session-a")
    assert "skipping unreadable checkpoint" in caplog.text
    assert not again.party.restore_snapshot(1)


def test_given_an_unwritable_directory_when_keeping_then_memory_only_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the checkpoint directory should be")
    party = _party()
    host = _host(blocker, party, "session-a")
    party.keep_snapshot(0)
    with caplog.at_level(logging.WARNING):
        host.save_best(party, 0)
    assert "kept in memory only" in caplog.text
    assert party.restore_snapshot(0)


def test_given_an_interrupted_best_write_when_the_store_starts_then_its_temporary_is_removed(
    tmp_path: Path,
) -> None:
    leftover = tmp_path / ".party0-best.pt.abc123.tmp"
    leftover.write_bytes(b"partial")
    other = tmp_path / ".party1-best.pt.abc123.tmp"
    other.write_bytes(b"partial")
    assert RoundCheckpoints(tmp_path, "party0").clean_temporaries() == [leftover]
    assert other.exists()


@pytest.mark.parametrize(("session", "resume_round", "kept"), [
    ("session-a", -1, True),  # the same coordinator: its run still has round 1
    ("session-b", 1, True),  # a restarted one resuming after round 1
    ("session-b", 0, False),  # a restarted one that rolled back past it
])  # fmt: skip
def test_given_no_checkpoint_dir_when_resynced_then_the_memory_copy_follows_the_same_rule(
    session: str, resume_round: int, kept: bool
) -> None:
    party = _party()
    host = _host(None, party, "session-a")
    _train_one_round(party, 0)
    _train_one_round(party, 1)
    party.keep_snapshot(1)
    host.resync(resume_round, session)
    assert host.party is party  # without a checkpoint directory the party object stays
    assert party.restore_snapshot(1) is kept
