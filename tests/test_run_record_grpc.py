"""Issue 29, item 3 with real processes: a run record that tells the truth.

- A party SIGKILLed while the coordinator serves: results.json gains the transition (with the
  time it was seen) and every evaluation served without it; `vfl report` names the party, the
  time and the calls that ran without it.
- SIGINT during training: results.json says "interrupted" with the epochs done, `vfl report`
  renders it, and the clients exit with the documented code 3 (their run did not end well).
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from harness import BIN, Cluster, prepare_digits

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def two_parties(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)


def _vfl(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "vfl"), *argv], capture_output=True, text=True, timeout=120, check=False
    )


def test_given_party_killed_while_serving_when_reported_then_party_time_and_calls_named(
    tmp_path: Path, two_parties: list[Path]
) -> None:
    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = cluster.federation(two_parties, epochs=1, serve=True)
        cluster.wait_serving(coord, 150)
        before = _vfl("evaluate", "--coordinator", coord.address, "--insecure")
        assert before.returncode == 0, before.stderr
        clients[1].signal(signal.SIGKILL)
        clients[1].wait(10)
        for _ in range(2):
            after = _vfl("evaluate", "--coordinator", coord.address, "--insecure")
            assert after.returncode == 0, after.stderr
        results = json.loads((coord.out / "results.json").read_text())  # while it still serves

    serving = results["serving"]
    assert serving["evaluations"] == 3
    events = serving["events"]
    assert [e["missing"] for e in events] == [[], [1], [1]]
    assert [e["live_blocks"] for e in events] == [[0, 1], [0], [0]]
    down = [t for t in results["transitions"] if t.get("phase") == "serving"]
    assert down and down[0]["block"] == 1 and down[0]["new"] == "down" and down[0]["at"]

    report = _vfl("report", str(coord.out))
    assert report.returncode == 0, report.stderr
    line = next(s for s in report.stdout.splitlines() if s.startswith("party of block 1 down"))
    assert down[0]["at"] in line and "2 call(s) served without it (evaluate)" in line
    html = (coord.out / "report" / "report.html").read_text()
    assert "After training" in html and down[0]["at"] in html
    assert "every party answered every phase in time" not in html


# no wall-clock bound: SIGINT once two epochs are logged, whatever the load (runs on a worker)
def test_given_sigint_during_training_when_it_stops_then_record_says_interrupted(
    tmp_path: Path, two_parties: list[Path]
) -> None:
    with Cluster(tmp_path / "cluster") as cluster:
        # the default batch (23 rounds an epoch here): SIGINT lands in epoch 3 of 200 either way
        coord, clients = cluster.federation(two_parties, epochs=200)
        cluster.wait_for(lambda: "epoch 2:" in coord.log(), 150, "two epochs")
        coord.popen.send_signal(signal.SIGINT)  # the coordinator itself, as Ctrl-C would
        assert coord.wait(60) == 130, cluster.describe()
        codes = [c.wait(60) for c in clients]
        logs = [c.log() for c in clients]

    results = coord.results()
    assert results is not None, "no results.json after SIGINT"
    assert results["status"] == "interrupted" and results["interrupted"] == "SIGINT"
    assert len(results["epochs"]) >= 2 and results["rounds"] > 0
    assert codes == [3, 3], logs  # told "run interrupted": a documented non-zero exit
    assert all("client stopped: run interrupted" in log for log in logs)
    report = _vfl("report", str(coord.out))
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith("status: interrupted: SIGINT")
