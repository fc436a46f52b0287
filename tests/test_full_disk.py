"""A full disk during a run. Checkpoints, the round and epoch logs and results.json each fail with
one line naming the file and the reason, never a traceback; a lost checkpoint or log line does
not stop training. (Probed with real processes on a full tmpfs: a party's checkpoint failed with
torch's own RuntimeError, an INTERNAL error and, at the end, a client's traceback; a coordinator
whose checkpoint or round log hit the full disk stopped the run.)"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from harness import Cluster, digits_parties, prepare_digits

from vfl_coordinator.checkpoints import Checkpointer
from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.registry import Registry
from vfl_coordinator.servicer import CoordinatorState
from vfl_core.atomic_files import write_text_atomically
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.errors import DataError
from vfl_core.persistence.checkpoint_store import RoundCheckpoints
from vfl_core.persistence.run_log import LineLog
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport

# what torch's zip writer raises when the disk fills under it (the OS's reason is lost)
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 238400 vs 238288"


def _torch_full(monkeypatch: pytest.MonkeyPatch) -> None:
    def save(obj: object, f) -> None:
        f.write(b"PK\x03\x04 half a checkpoint")
        raise RuntimeError(f"{TORCH_FULL}\nframe #0: c10::ThrowEnforceNotMet")

    monkeypatch.setattr(torch, "save", save)


def test_given_torch_write_failure_when_checkpointing_then_one_line_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RoundCheckpoints(tmp_path, "party0")
    _torch_full(monkeypatch)
    with pytest.raises(DataError) as err:
        store.save(3, {"w": torch.zeros(2)}, "{}", {})
    message = str(err.value)
    assert message.startswith(f"cannot write checkpoint {store.path(3)}: write failed (a full")
    assert message.endswith(f"torch: {TORCH_FULL})") and "\n" not in message
    assert list(tmp_path.iterdir()) == []  # the half-written temporary is gone


def test_given_full_disk_when_logging_lines_then_one_error_and_writes_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (Linux)")
    lines = LineLog(open("/dev/full", "w", buffering=1), "round log")  # noqa: SIM115
    with caplog.at_level("ERROR"):
        for round_id in range(3):
            lines.write({"round": round_id})
        lines.close()
    assert [r.getMessage() for r in caplog.records] == [
        "round log /dev/full: [Errno 28] No space left on device; it ends here, the run goes on"
    ]


def test_given_full_disk_when_coordinator_checkpoints_then_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = TrainConfig(seed=0, epochs=1, model=ModelConfig(representation="mlp", embed_dim=8))
    parties = digits_parties(tmp_path, 2, cfg)
    fed = Federation(InProcessTransport(parties), cfg, progress=False)
    fed.align()
    config = CoordinatorConfig(out=tmp_path / "out", checkpoint_dir=tmp_path / "ckpt", train=cfg)
    state = CoordinatorState(Registry(2), "run", cfg.model_dump_json())
    checkpointer = Checkpointer(config, state, None)
    checkpointer.checkpoint_done(fed, 5, {0, 1})
    assert state.resume_round == 5

    _torch_full(monkeypatch)
    with caplog.at_level("ERROR"):
        checkpointer.checkpoint_done(fed, 9, {0, 1})  # returns: training goes on
    assert state.resume_round == 5  # restarted parties still roll back to round 5
    [error] = [r.getMessage() for r in caplog.records]
    assert error.startswith("cannot write checkpoint ") and "write failed (a full disk?" in error
    assert error.endswith("training goes on (a restarted coordinator resumes from round 5)")
    assert checkpointer.store.rounds() == [5]


def test_given_full_disk_when_writing_results_then_one_line_and_the_old_file_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results.json"
    results.write_text('{"old": true}')

    def full(self: Path, text: str, *args: object, **kwargs: object) -> int:
        with open(self, "w") as f:
            f.write(text[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(DataError, match=r"^cannot write .*results\.json: No space left on device$"):
        write_text_atomically(results, '{"new": true}')
    monkeypatch.undo()
    assert results.read_text() == '{"old": true}' and list(tmp_path.iterdir()) == [results]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs with a few KiB left (root only), unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        (disk / "filler").write_bytes(b"x" * (256 - 12) * 1024)
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow
def test_given_full_disk_when_a_federation_trains_then_it_finishes_and_says_what_was_lost(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, full_disk: Path
) -> None:
    parties = prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)
    extra = ["--checkpoint-every", "20", "--checkpoint-dir", str(full_disk / "coordinator")]
    extra += ["--out", str(full_disk / "out")]
    coord, clients = cluster.federation(
        parties,
        epochs=3,
        extra=extra,
        client_extra=lambda d: ["--checkpoint-dir", str(full_disk / d.name)],
    )
    assert coord.wait(240) == 2, coord.tail()
    log = coord.log()
    assert log.rstrip().splitlines()[-1] == (
        f"error: cannot write {full_disk / 'out' / 'results.json'}: No space left on device"
    )
    assert "epoch 3: " in log and "test metrics" in log  # every epoch trained, then evaluated
    assert "did not save" in log  # the parties' checkpoints
    assert "round log " in log and "it ends here, the run goes on" in log
    for client in clients:
        assert client.wait(120) == 2, client.tail()
        last = client.log().rstrip().splitlines()[-1]
        want = f"error: cannot write a checkpoint to {full_disk / client.data.name}"
        assert last.startswith(want), client.tail()
        assert "Checkpoint refused: cannot write checkpoint" in client.log()
    for proc in (coord, *clients):
        assert "Traceback" not in proc.log() and "\u256d" not in proc.log(), proc.tail(60)
    assert not [p.name for p in full_disk.rglob(".*.tmp")]  # no half-written file left
