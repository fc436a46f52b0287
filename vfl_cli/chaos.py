"""Guest loss with real processes: the fault model of `vfl_core.training.faults`, applied to
clients.

`FaultyTransport` drops a failed party's calls inside one process. Here the same model (each
party that is up fails with probability R_d per tick, each failed party comes back with
probability R_u) acts on real client processes: a failure is a SIGKILL (the party comes back as
the same command restarted, resuming from its checkpoint) or a SIGSTOP (it comes back with
SIGCONT, mid-call, as a thawed process does). A tick is wall-clock time, not a round: a process
restart takes seconds while a round takes milliseconds. Draws come from the seed's FAULTS
stream, so the sequence of decisions is reproducible; which rounds they land in is not.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from vfl_core.seeding import Stream, rng

log = logging.getLogger(__name__)

FaultKind = Literal["kill", "freeze"]
_CHAOS_TAG = 7  # sub-stream of FAULTS, apart from the in-process fault draws


@dataclass
class GuestLoss:
    """Fail and bring back client processes at random; `procs` is shared with the launcher."""

    procs: dict[int, subprocess.Popen]  # block -> the client process now serving it
    restart: Callable[[int], subprocess.Popen]  # start the block's client again, same command
    fail_rate: float
    rejoin_rate: float
    kind: FaultKind = "kill"
    every: float = 2.0  # seconds per tick
    seed: int = 0
    # Whether a block's current process has joined the federation: one still starting up is
    # neither failed nor counted (killing it before it ever answered would test nothing).
    ready: Callable[[int], bool] = lambda _block: True
    down: set[int] = field(default_factory=set)
    events: list[tuple[int, int, str]] = field(default_factory=list)  # (tick, block, what)

    def tick(self, number: int) -> None:
        gen = rng(self.seed, Stream.FAULTS, _CHAOS_TAG, number)
        for block in sorted(self.procs):
            u = gen.random()
            if block in self.down and u < self.rejoin_rate:
                self._back(block, number)
            elif block not in self.down and u < self.fail_rate and self.ready(block):
                self._fail(block, number)

    def heal(self) -> None:
        """Bring every failed party back (training is over, or the launcher stops)."""
        for block in sorted(self.down):
            self._back(block, -1)

    def run(self, stop: threading.Event) -> None:
        number = 0
        while not stop.wait(self.every):
            self.tick(number)
            number += 1

    def _fail(self, block: int, number: int) -> None:
        proc = self.procs[block]
        if proc.poll() is not None:
            return  # exited by itself: nothing to fail
        if self.kind == "kill":
            proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        else:
            proc.send_signal(signal.SIGSTOP)
        self.down.add(block)
        self.events.append((number, block, self.kind))
        log.info(
            "chaos: block %d %s at tick %d",
            block,
            "killed" if self.kind == "kill" else "frozen",
            number,
        )

    def _back(self, block: int, number: int) -> None:
        self.down.discard(block)
        if self.kind == "kill":
            self.procs[block] = self.restart(block)
            what = "restarted"
        else:
            self.procs[block].send_signal(signal.SIGCONT)
            what = "thawed"
        self.events.append((number, block, what))
        log.info("chaos: block %d %s at tick %d", block, what, number)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, _, what in self.events:
            out[what] = out.get(what, 0) + 1
        return out


@contextlib.contextmanager
def running(chaos: GuestLoss | None):
    """Run the chaos loop in a thread for the duration of the block, then heal every party."""
    if chaos is None:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=chaos.run, args=(stop,), name="chaos", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        chaos.heal()
