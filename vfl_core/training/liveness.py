"""Who of the parties is there: rejoins and pauses of a run.

The up/down state machine per party is the methods layer's (vfl_core.methods.liveness, named
here too for the callers that import it from here). `Presence`, part of the round engine
(vfl_core.training.engine.Federation composes it), keeps it current between rounds:

- **Rejoins.** A party that registered again since the last round (restarted or reconnected) is
  called again at once; one that holds samples the alignment lacks, or other rows than when it
  was aligned, makes the aligner align again (vfl_core.training.aligner); a PSI party gets its
  keys again.
- **Pauses.** When no party that can train is up (every label party down; the active party for
  split-learning methods), training pauses instead of running rounds on nothing: no round is run
  or counted, the rejoins are polled every PAUSE_POLL_S and the down parties called anyway every
  `pause_probe_s` (the run's; a frozen process that was thawed answers again without registering
  again), and
  `FederationDown` ends a pause longer than the run's `rejoin_timeout_s`.

(The farewell, telling the parties that the run ended, is the coordinator's:
vfl_coordinator.runner.)
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from vfl_core.data.batch_plan import Batch
from vfl_core.methods.liveness import DOWN, REJOINING, UP, FederationDown, Liveness, Transition
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.methods.spec import active_party
from vfl_core.training.records import Pause

if TYPE_CHECKING:
    from vfl_core.training.ports import PresenceRun

__all__ = [
    "DOWN",
    "PAUSE_POLL_S",
    "REJOINING",
    "UP",
    "FederationDown",
    "Liveness",
    "Presence",
    "Transition",
]

log = logging.getLogger(__name__)

# While training is paused (no party that can train is up), how often the engine looks for
# parties that registered again (how often it calls the down ones anyway is the run's
# `pause_probe_s`: a frozen process that was thawed answers again without registering again).
PAUSE_POLL_S = 0.2


class Presence:
    """Rejoins and pauses: which parties the rounds call, kept current between rounds."""

    def __init__(self, fed: PresenceRun) -> None:
        self.fed = fed
        self.paused_since: float | None = None  # monotonic time the current pause began

    # ------------------------------------------------------------------ rejoins
    def poll_rejoins(self, tick: int | None = None) -> None:
        """Parties that registered again since the last round are called again at once."""
        fed, aligner = self.fed, self.fed.aligner
        rejoined = sorted(fed.transport.rejoined())
        infos = fed.transport.infos() if rejoined else {}
        for block in rejoined:
            if block in fed.unaligned or block not in fed.infos:
                aligner.due = True  # it holds samples the plan lacks
            elif aligner.holds_other_rows(block, infos.get(block)):
                aligner.due = True  # the plan's rows of it are another data set's
                aligner.other_rows.add(block)
                continue  # called again once aligned on its new rows (Aligner.again_if_due)
            if fed.alignment == "psi":
                aligner.resend_psi_keys(block)
            self.call_again(block, fed.tick if tick is None else tick)

    def call_again(self, block: int, tick: int) -> None:
        hooks = self.fed.hooks
        if hooks is None or not hooks.rejoined(self.fed, block):
            self.fed.liveness.rejoined(block, tick)

    # ------------------------------------------------------------------ pauses
    def pause_due(self) -> bool:
        """Whether training must pause: pausing is on and no party that can train is up."""
        return self.fed.rejoin_timeout_s is not None and not self.heads_up()

    def heads_up(self) -> bool:
        """Whether a party that can train under the method is not marked down."""
        labels = self.fed.label_blocks
        if self.fed.spec.heads == "active_party":
            labels = (active_party(labels),)  # type: ignore[assignment]
        return bool(self.fed.liveness.live(labels))

    def round_when_up(self, epoch: int, batch: Batch) -> RoundRecord:
        """Run the batch's round once a party that can train is up. A retry of the down parties
        during a pause that none of them answers is not counted: the batch waits."""
        fed = self.fed
        while True:
            probing = self._await_heads(epoch)
            record = fed.run_round(fed.round_id, epoch, batch)
            if not probing or self.heads_up():
                self._end_pause(epoch, resumed=True)
                return record
            log.info("round %d: no down party answered the retry; still paused", fed.round_id)

    def _await_heads(self, epoch: int) -> bool:
        """False at once while a party that can train is up. Otherwise pause: False when one
        registers again, True when it is time to call the down parties anyway; FederationDown
        once the pause has lasted `rejoin_timeout_s`."""
        fed, timeout = self.fed, self.fed.rejoin_timeout_s
        if timeout is None:
            return False
        self.poll_rejoins()
        if self.heads_up():
            return False
        if self.paused_since is None:
            self.paused_since = time.monotonic()
            log.warning(
                "round %d (epoch %d): no label party is up; training pauses until one comes back "
                "(at most %gs)",
                fed.round_id,
                epoch + 1,
                timeout,
            )
        probe_at = time.monotonic() + fed.pause_probe_s
        while True:
            waited = time.monotonic() - self.paused_since
            if waited >= timeout:
                self._end_pause(epoch, resumed=False)
                raise FederationDown(
                    f"no label party came back within {timeout:g}s (training "
                    f"waited {waited:.1f}s at round {fed.round_id}, epoch {epoch + 1} of "
                    f"{fed.total_epochs}): the run stops"
                )
            time.sleep(min(PAUSE_POLL_S, timeout - waited))
            self.poll_rejoins()
            if self.heads_up():
                return False
            if time.monotonic() >= probe_at:
                fed.liveness.retry_now(fed.tick)
                return True

    def _end_pause(self, epoch: int, resumed: bool) -> None:
        if self.paused_since is None:
            return
        seconds = time.monotonic() - self.paused_since
        self.paused_since = None
        self.fed.pauses.append(Pause(self.fed.round_id, epoch, seconds, resumed))
        if resumed:
            log.warning(
                "training resumes at round %d after a pause of %.1fs", self.fed.round_id, seconds
            )
