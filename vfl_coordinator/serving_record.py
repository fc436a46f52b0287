"""What happens after training, kept in the run's record (results.json) as it happens.

results.json used to be written once, when training ended: a party killed while the
coordinator served, and the evaluations that ran without it, were in no record, so `vfl report`
said "every party answered every phase in time" about the very event the demo shows. Here every
Evaluate and Predict the coordinator serves after training is appended (when, which split, how
many samples, which parties answered every batch and which held samples but did not), with the
liveness transitions since the last event, each stamped with the time it was seen; results.json
is rewritten atomically after each, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

from vfl_core.atomic_files import write_text_atomically
from vfl_core.errors import VflError
from vfl_core.inference.metrics import EvalReport
from vfl_core.lifecycle import missing_blocks
from vfl_core.training.engine import Federation

log = logging.getLogger(__name__)

MAX_EVENTS = 500  # events kept in results.json; the counts go on (a server answers for days)


def now() -> str:
    """The time of an event, as results.json writes it (UTC, to the millisecond)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class ServingRecord:
    """Appends the serving phase to `results` (as returned by the run) and rewrites
    `out`/results.json after each event."""

    def __init__(self, out: Path, results: dict[str, object], fed: Federation) -> None:
        self.path = Path(out) / "results.json"
        self.results = results
        self._seen = len(fed.liveness.transitions)  # those of training are in results already
        self._lock = threading.Lock()
        self.serving: dict[str, object] = {
            "since": now(),
            "evaluations": 0,
            "predictions": 0,
            "events": [],
            "events_dropped": 0,
        }
        results["serving"] = self.serving

    def evaluated(self, fed: Federation, split: str, report: EvalReport) -> None:
        self._add(
            fed,
            "evaluations",
            {
                "kind": "evaluate",
                "split": split,
                "samples": report.scored,
                "unscored": report.unscored,
                "live_blocks": report.live_blocks(),
                "missing": missing_blocks(
                    fed, split, report.live_blocks(), report.chosen_out - set(report.answers)
                ),
            },
        )

    def predicted(self, fed: Federation, split: str, samples: int, live: list[int]) -> None:
        self._add(
            fed,
            "predictions",
            {
                "kind": "predict",
                "split": split,
                "samples": samples,
                "live_blocks": live,
                "missing": missing_blocks(fed, split, live),
            },
        )

    def _add(self, fed: Federation, counter: str, event: dict[str, object]) -> None:
        with self._lock:
            at = now()
            self._transitions(fed, at)
            self.serving[counter] = int(self.serving[counter]) + 1  # type: ignore[call-overload]
            events = self.serving["events"]
            assert isinstance(events, list)
            if len(events) < MAX_EVENTS:
                events.append({"at": at, **event})
            else:
                dropped = self.serving["events_dropped"]
                self.serving["events_dropped"] = int(dropped) + 1  # type: ignore[call-overload]
            self._write()

    def _transitions(self, fed: Federation, at: str) -> None:
        """The liveness transitions since the last event (a party found down while serving)."""
        new = fed.liveness.transitions[self._seen :]
        if not new:
            return
        self._seen += len(new)
        listed = self.results.setdefault("transitions", [])
        assert isinstance(listed, list)
        for t in new:
            listed.append({**t.__dict__, "at": at, "phase": "serving"})
        self.results["transition_counts"] = fed.liveness.counts()

    def _write(self) -> None:
        try:
            write_text_atomically(self.path, json.dumps(self.results, indent=2, default=str))
        except VflError as err:  # a full disk (DataError) must not stop the serving
            log.warning("could not update %s: %s", self.path, err)
