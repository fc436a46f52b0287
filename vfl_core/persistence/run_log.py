"""A run's per-epoch metrics: one JSON line per finished epoch in <run dir>/epochs.jsonl, and the
same figures as TensorBoard scalars in <run dir>/tensorboard when tensorboard is installed.

The coordinator and `vfl simulate` both give their `Federation` a `RunLog` observer
(vfl_core.lifecycle.run_federation), so both write the same file. A resumed run (checkpoint
restart) passes the epoch it resumes in: lines of that epoch and later are cut (that epoch runs
again) and the new ones appended, as rounds.jsonl does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from vfl_core.atomic_files import write_text_atomically
from vfl_core.inference.metrics import MetricRow
from vfl_core.training.engine import EpochSummary, Federation, Observer
from vfl_core.training.liveness import DOWN, REJOINING, UP, Liveness

log = logging.getLogger(__name__)

EPOCHS_FILE = "epochs.jsonl"
TENSORBOARD_DIR = "tensorboard"


@dataclass(frozen=True)
class EpochRecord:
    summary: EpochSummary
    parties: dict[str, int]  # how many parties are up / down / rejoining after the epoch
    transitions: dict[str, int]  # liveness transitions so far, e.g. {"up->down": 1}
    test: MetricRow | None = None  # overall test metrics, when the run evaluated after it

    def to_json(self) -> dict[str, object]:
        s = self.summary
        out: dict[str, object] = {
            "epoch": s.epoch,
            "rounds": s.rounds,
            "mean_loss": s.mean_loss,
            "head_losses": {str(k): v for k, v in s.head_losses.items()},
            "seconds": s.seconds,
            "cpu_seconds": s.cpu_seconds,
            "trained_rounds": s.trained_rounds,
            "incomplete_rounds": s.incomplete_rounds,
            "parties": self.parties,
            "transitions": self.transitions,
        }
        if self.test is not None:
            out["test"] = logged_metrics(self.test)
        return out


def logged_metrics(row: MetricRow) -> dict[str, object]:
    """The samples and the metrics of the task: accuracy, federation accuracy, F1 (and ROC AUC
    for binary tasks), or RMSE, MAE, R^2 and federation RMSE for regression."""
    return {k: v for k, v in row.to_json().items() if k != "observed"}


def liveness_record(
    summary: EpochSummary, liveness: Liveness, test: MetricRow | None = None
) -> EpochRecord:
    """The record of an epoch that just ended, with the liveness state machine as it stands."""
    states = Counter(liveness.state.values())
    parties = {s: states.get(s, 0) for s in (UP, DOWN, REJOINING)}
    return EpochRecord(summary, parties, liveness.counts(), test)


class LineLog:
    """A JSON-lines log (epochs.jsonl, the coordinator's rounds.jsonl) that a full disk does not
    stop the run for: the first write that fails is logged with what is lost from where, and
    the log ends there (its readers skip a line cut short) while training goes on."""

    def __init__(self, file: IO[str], what: str) -> None:
        self._file: IO[str] | None = file
        self.what = what

    def write(self, record: dict[str, object]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(record) + "\n")
        except OSError as err:
            log.error("%s %s: %s; it ends here, the run goes on", self.what, self._file.name, err)
            self._drop()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as err:
                log.error("%s %s: %s", self.what, self._file.name, err)

    def _drop(self) -> None:
        file, self._file = self._file, None
        with contextlib.suppress(OSError):  # its buffer holds the line that did not fit
            file.close()

    def __enter__(self) -> LineLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunLog(Observer[Federation]):
    """Writes an `EpochRecord` per finished epoch of the federation it observes. With
    `eval_every` N > 0 it also evaluates `split` after every N-th epoch and after the last one."""

    def __init__(
        self, directory: Path, first_epoch: int = 0, eval_every: int = 0, split: str = "test"
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / EPOCHS_FILE
        self.eval_every = eval_every
        self.split = split
        self._file = LineLog(open_epochs(self.path, first_epoch), "epoch log")
        self._board = _tensorboard(directory / TENSORBOARD_DIR, first_epoch)

    def epoch_done(self, fed: Federation, summary: EpochSummary) -> None:
        self.write(liveness_record(summary, fed.liveness, self._evaluate(fed, summary.epoch)))

    def _evaluate(self, fed: Federation, epoch: int) -> MetricRow | None:
        if self.eval_every <= 0 or self.split not in fed.alignments:
            return None
        # every eval_every epochs, and the configured ones' last and the run's (a small table's)
        if (epoch + 1) % self.eval_every and epoch + 1 not in (fed.config.epochs, fed.total_epochs):
            return None
        return fed.evaluate(self.split).overall()

    def write(self, record: EpochRecord) -> None:
        self._file.write(record.to_json())
        if self._board is not None:
            try:
                _scalars(self._board, record)
            except OSError as err:  # its writer thread's failure (a full disk), raised here
                log.error("TensorBoard log: %s; it ends here, the run goes on", err)
                self._close_board()

    def close(self) -> None:
        self._file.close()
        self._close_board()

    def _close_board(self) -> None:
        board, self._board = self._board, None
        if board is not None:
            try:
                board.close()
            except OSError as err:
                log.error("TensorBoard log: %s", err)

    def __enter__(self) -> RunLog:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_epochs(path: Path, first_epoch: int) -> IO[str]:
    """The epoch log, line-buffered: new when `first_epoch` is 0, else cut to the epochs before
    `first_epoch` (a resumed run) and appended to."""
    if first_epoch <= 0:
        return path.open("w", buffering=1)
    return reopen(path, "epoch", lambda r: r["epoch"] < first_epoch)


def reopen(path: Path, key: str, keep: Callable[[dict[str, Any]], bool]) -> IO[str]:
    """A JSON-lines log of a resumed run, cut to the records it `keep`s (the later ones run
    again) and opened to append, line-buffered."""
    kept = [r for r in read_records(path, key) if keep(r)]
    write_text_atomically(path, "".join(json.dumps(r) + "\n" for r in kept))
    return path.open("a", buffering=1)


def read_epochs(path: Path) -> list[dict[str, Any]]:
    """The complete lines of an epoch log (a crash can leave the last one cut short)."""
    return read_records(path, "epoch")


def read_records(path: Path, key: str) -> list[dict[str, Any]]:
    """The complete JSON lines of a log whose records are numbered by `key` (a crash or a full
    disk can leave a line cut short: it is dropped, with a warning if it is not the last)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if not line.endswith("\n"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s line %d is not JSON; dropped", path, number)
            continue
        if isinstance(record, dict) and isinstance(record.get(key), int):
            out.append(record)
        else:
            log.warning("%s line %d has no %s number; dropped", path, number, key)
    return out


def _tensorboard(directory: Path, first_epoch: int) -> ScalarBoard | None:
    """A ScalarBoard, or None when tensorboard is not installed (it is optional)."""
    try:
        return ScalarBoard(directory, purge_step=first_epoch if first_epoch > 0 else None)
    except ImportError as err:
        log.debug("no TensorBoard event files (%s); epochs.jsonl only", err)
        return None


class ScalarBoard:
    """TensorBoard scalars, written with tensorboard's own event file writer: the events torch's
    SummaryWriter writes for add_scalar, without importing torch (the coordinator writes this
    log and needs no torch otherwise). `purge_step` hides the events of the epochs a resumed run
    repeats, as SummaryWriter's does."""

    def __init__(self, directory: Path, purge_step: int | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._writer = EventFileWriter(str(directory))
        if purge_step is not None:
            self._writer.add_event(Event(step=purge_step, file_version="brain.Event:2"))
            start = SessionLog(status=SessionLog.START)
            self._writer.add_event(Event(step=purge_step, session_log=start))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        value_pb = self._summary.Value(tag=tag, simple_value=float(value))
        summary = self._summary(value=[value_pb])
        self._writer.add_event(self._event(summary=summary, step=step, wall_time=time.time()))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _scalars(board: ScalarBoard, record: EpochRecord) -> None:
    s, step = record.summary, record.summary.epoch
    board.add_scalar("loss/mean", s.mean_loss, step)
    for head, loss in s.head_losses.items():
        board.add_scalar(f"loss/head{head}", loss, step)
    board.add_scalar("time/seconds", s.seconds, step)
    board.add_scalar("rounds/incomplete", s.incomplete_rounds, step)
    for state, count in record.parties.items():
        board.add_scalar(f"parties/{state}", count, step)
    if record.test is not None:
        for key, value in logged_metrics(record.test).items():
            if key != "samples":
                board.add_scalar(f"test/{key}", value, step)
    board.flush()
