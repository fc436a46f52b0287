"""Round-labelled checkpoints of one process (a party or the coordinator) in a directory.

    <dir>/<name>-round-<round, 9 digits>.pt     e.g. checkpoints/party0-round-000000040.pt
    <dir>/<name>-best.pt                        a party's copy of early stopping's best epoch

The checkpoint of round r holds the state after round r. The best file holds the state a party
kept for early stopping (`Party.keep_snapshot`), with its round, so that a party restarted after
its run's best epoch can still go back to it (vfl_client.host). Each file is written atomically
(`vfl_core.persistence.checkpoint.save_checkpoint`) and records its run id and TrainConfig; the
newest `keep` (default two) round checkpoints are kept, so the round of the coordinator's last
checkpoint, which it writes after the parties', is always on disk. A checkpoint of another run
or configuration is refused with a ConfigError, never loaded and never deleted.

A process killed while writing leaves its temporary file (`.<file>.<random>.tmp`, see
`save_checkpoint`) behind; `clean_temporaries` deletes this name's at start.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from vfl_core.errors import ConfigError, DataError
from vfl_core.persistence.checkpoint import (
    check_checkpoint_name,
    check_config,
    load_checkpoint,
    save_checkpoint,
)

log = logging.getLogger(__name__)


class RoundCheckpoints:
    def __init__(self, directory: Path, name: str, keep: int = 2) -> None:
        check_checkpoint_name(name)
        if keep < 1:
            raise ConfigError("at least one checkpoint must be kept")
        self.directory = Path(directory)
        self.name = name
        self.keep = keep
        self._pattern = re.compile(rf"{re.escape(name)}-round-(\d+)\.pt")
        # config fields a file may hold otherwise than the caller's config (check_config)
        self.loose: tuple[str, ...] = ()

    def clean_temporaries(self) -> list[Path]:
        """Delete the temporary files of this name's interrupted writes (round checkpoints and
        the end-of-run `<name>.pt`); returns them. Call before this process writes any."""
        if not self.directory.is_dir():
            return []
        mine = re.compile(rf"\.{re.escape(self.name)}(-round-\d+|-best)?\.pt\..+\.tmp")
        removed = [p for p in self.directory.iterdir() if mine.fullmatch(p.name)]
        for path in removed:
            path.unlink(missing_ok=True)
            log.info("removed %s, left by an interrupted checkpoint write", path)
        return removed

    def path(self, round_id: int) -> Path:
        return self.directory / f"{self.name}-round-{round_id:09d}.pt"

    def rounds(self) -> list[int]:
        """Rounds with a checkpoint file, oldest first."""
        if not self.directory.is_dir():
            return []
        found = (self._pattern.fullmatch(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def save(self, round_id: int, state: dict, config_json: str, meta: dict) -> Path:
        """Write the checkpoint of `round_id`, then drop all but the newest `keep`."""
        path = self.path(round_id)
        try:
            save_checkpoint(path, state, config_json, {**meta, "round": round_id})
        except OSError as err:
            raise DataError(f"cannot write checkpoint {path}: {err}") from None
        for old in self.rounds()[: -self.keep]:
            self.path(old).unlink(missing_ok=True)
        return path

    def best_path(self) -> Path:
        return self.directory / f"{self.name}-best.pt"

    def save_best(self, round_id: int, state: dict, config_json: str, meta: dict) -> Path:
        """Write the kept state of early stopping's best epoch so far (after `round_id`),
        replacing the one written before."""
        path = self.best_path()
        try:
            save_checkpoint(path, state, config_json, {**meta, "round": round_id})
        except OSError as err:
            raise DataError(f"cannot write checkpoint {path}: {err}") from None
        return path

    def best(self, run_id: str, config_json: str) -> dict | None:
        """The kept best-epoch state, if any (its round in meta["round"]).

        Refused (ConfigError) if of another run or config, like the round checkpoints; an
        unreadable file is skipped with a warning (there is then nothing to go back to)."""
        path = self.best_path()
        if not path.is_file():
            return None
        try:
            return self._load(path, run_id, config_json)
        except DataError as err:
            log.warning("skipping unreadable checkpoint: %s", err)
            return None

    def load(self, round_id: int, run_id: str, config_json: str) -> dict[str, Any]:
        """The checkpoint of `round_id`, refused (ConfigError) if of another run or config."""
        return self._load(self.path(round_id), run_id, config_json)

    def _load(self, path: Path, run_id: str, config_json: str) -> dict[str, Any]:
        payload = load_checkpoint(path, None)
        found = payload["meta"].get("run_id")
        if found != run_id:
            raise ConfigError(
                f"{path} belongs to run {found!r}, not to run {run_id!r}: "
                "move it away or use another checkpoint directory"
            )
        check_config(path, payload["config_json"], config_json, self.loose)
        return payload

    def latest(self, run_id: str, config_json: str, at_most: int | None = None) -> dict | None:
        """The newest readable checkpoint with round <= `at_most` (None: any), or None.

        Every file is checked first, so one of another run or config stops the caller even when
        an older one would do. A corrupt file (which atomic writes rule out unless the disk
        failed) is skipped with a warning, falling back to the previous checkpoint.
        """
        loaded: dict[int, dict] = {}
        for r in self.rounds():
            try:
                loaded[r] = self.load(r, run_id, config_json)
            except DataError as err:
                log.warning("skipping unreadable checkpoint: %s", err)
        usable = [r for r in loaded if at_most is None or r <= at_most]
        return loaded[max(usable)] if usable else None

    def discard_after(self, round_id: int) -> None:
        """Delete checkpoints newer than `round_id` (an abandoned future after a rollback)."""
        for r in self.rounds():
            if r > round_id:
                log.info("discarding checkpoint of round %d (rolled back to %d)", r, round_id)
                self.path(r).unlink(missing_ok=True)
