"""Issue 14, item 10: the temporary file of a checkpoint write that was interrupted (the process
was killed between mkstemp and the rename) is deleted when the process starts again; other
names' files, and finished checkpoints, are left alone."""

from __future__ import annotations

from pathlib import Path

from vfl_coordinator.checkpoints import load_resume
from vfl_coordinator.config import CoordinatorConfig
from vfl_core.persistence.checkpoint_store import RoundCheckpoints

LEFTOVERS = (".party0-round-000000040.pt.k3j2_x9.tmp", ".party0.pt.a8b_c.tmp")
KEPT = (
    ".party01-round-000000040.pt.k3j2_x9.tmp",  # another party's write (it cleans its own)
    ".coordinator-round-000000039.pt.zz.tmp",
    "party0-round-000000030.pt",
    "notes.tmp",
)


def _touch(directory: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (directory / name).write_bytes(b"partial")


def test_given_leftover_temporaries_when_store_starts_then_only_its_own_are_deleted(
    tmp_path: Path,
) -> None:
    _touch(tmp_path, LEFTOVERS + KEPT)
    removed = RoundCheckpoints(tmp_path, "party0").clean_temporaries()

    assert sorted(p.name for p in removed) == sorted(LEFTOVERS)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(KEPT)
    assert RoundCheckpoints(tmp_path / "absent", "party0").clean_temporaries() == []


def test_given_coordinator_killed_mid_write_when_started_again_then_its_temporary_is_gone(
    tmp_path: Path,
) -> None:
    _touch(tmp_path, (".coordinator-round-000000039.pt.zz.tmp", ".party0.pt.a8b_c.tmp"))
    assert load_resume(CoordinatorConfig(checkpoint_dir=tmp_path)) is None
    assert [p.name for p in tmp_path.iterdir()] == [".party0.pt.a8b_c.tmp"]
