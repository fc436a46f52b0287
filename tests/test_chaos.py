"""Guest loss on real processes (vfl_cli/chaos.py): the R_d / R_u model kills and restarts, or
freezes and thaws, real processes; and `vfl demo --fault-rate` trains through it end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vfl_cli.chaos import GuestLoss

BIN = Path(sys.executable).parent


def _becomes(proc: subprocess.Popen, stopped: bool) -> bool:
    """Whether the process is (or, within 2 s, gets) stopped or running as wanted: signals
    are delivered asynchronously. Stopped is state T in /proc/PID/stat."""
    for _ in range(100):
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        if (stat.rsplit(")", 1)[1].split()[0] in ("T", "t")) == stopped:
            return True
        time.sleep(0.02)
    return False


class Sleepers:
    """Three stand-in client processes, and every process started to replace one."""

    def __init__(self) -> None:
        self.initial = {b: subprocess.Popen(["sleep", "300"]) for b in range(3)}
        self.started: list[subprocess.Popen] = []

    def restart(self, _block: int) -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "300"])
        self.started.append(proc)
        return proc

    def chaos(self, kind: str, ready: Callable[[int], bool] = lambda _b: True) -> GuestLoss:
        return GuestLoss(dict(self.initial), self.restart, 0.5, 0.5, kind=kind, seed=1, ready=ready)

    def close(self) -> None:
        for proc in [*self.initial.values(), *self.started]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def sleepers() -> Iterator[Sleepers]:
    procs = Sleepers()
    yield procs
    procs.close()


def test_given_kill_faults_when_ticking_then_failed_processes_die_and_come_back_as_new_ones(
    sleepers: Sleepers,
) -> None:
    chaos = sleepers.chaos("kill")
    original = dict(chaos.procs)
    for number in range(12):
        chaos.tick(number)
        for block, proc in chaos.procs.items():
            assert (proc.poll() is not None) == (block in chaos.down)  # down means dead
    kills = [e for e in chaos.events if e[2] == "kill"]
    assert kills and any(e[2] == "restarted" for e in chaos.events)
    assert all(original[b].returncode == -9 for _, b, _ in kills if original[b].poll() is not None)
    chaos.heal()
    assert not chaos.down and all(p.poll() is None for p in chaos.procs.values())
    assert chaos.counts()["kill"] == chaos.counts()["restarted"]


def test_given_freeze_faults_when_ticking_then_failed_processes_are_stopped_then_thawed(
    sleepers: Sleepers,
) -> None:
    chaos = sleepers.chaos("freeze")
    for number in range(12):
        chaos.tick(number)
        for block, proc in chaos.procs.items():
            assert _becomes(proc, stopped=block in chaos.down), (number, block)
    assert any(e[2] == "freeze" for e in chaos.events)
    chaos.heal()
    assert all(_becomes(p, stopped=False) for p in chaos.procs.values())
    assert not sleepers.started  # nothing restarted: the same processes carry on


def test_given_the_same_seed_when_ticking_twice_then_the_same_decisions(sleepers: Sleepers) -> None:
    a = sleepers.chaos("freeze")
    for number in range(8):
        a.tick(number)
    a.heal()
    b = sleepers.chaos("freeze")
    for number in range(8):
        b.tick(number)
    b.heal()
    assert a.events == b.events


def test_given_a_party_not_yet_joined_when_ticking_then_it_is_never_failed(
    sleepers: Sleepers,
) -> None:
    chaos = sleepers.chaos("kill", ready=lambda block: block != 1)
    for number in range(12):
        chaos.tick(number)
    assert chaos.events and not any(b == 1 for _, b, _ in chaos.events)
    chaos.heal()


@pytest.mark.slow
@pytest.mark.alone  # 20 epochs with a party killed or restarted every 1.5 s: one core each
def test_given_fault_rates_when_the_demo_runs_then_it_trains_through_kills_and_cleans_up(
    tmp_path: Path,
) -> None:
    """The README's demo under guest loss (real processes, SIGKILL and restart from checkpoints):
    training completes, every killed client came back, inference works, nothing left running."""
    work = tmp_path / "demo"
    # The seed's first ticks kill a client (tick 0, 1.5 s into training) and restart it (tick 1,
    # 3 s), on any machine: the faults start with training and every client has joined by then.
    # 20 epochs (about 630 rounds, 6.5 s or more) last two ticks or more past the restart.
    args = [
        str(BIN / "vfl"), "demo", "--workdir", str(work), "--epochs", "20",
        "--fault-rate", "0.3", "--rejoin-rate", "0.5", "--fault-every", "1.5",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    injected = next(line for line in done.stdout.splitlines() if "injected:" in line)
    assert "kill" in injected and "restarted" in injected, injected
    counts = json.loads((work / "run" / "results.json").read_text())["transition_counts"]
    # The coordinator noticed: a killed party went down, or registered again before it missed
    # enough phases to be marked down (a restart is fast when training rounds are slow).
    assert sum(n for t, n in counts.items() if t.startswith("up->")) >= 1, counts
    assert "prediction carried on without it" in done.stdout
    leftovers = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", leftovers.stdout
