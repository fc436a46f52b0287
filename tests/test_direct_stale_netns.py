"""A feature party's link cut and restored under the tables' default rounds (issue 43): staleness 3
and the late verdict on the direct data plane, each process in its own network namespace (its own
address, a bridge between them), mutual TLS, each party of its own CSV table.

The cut party's process stays alive: the rounds go on without it once it misses a deadline (its
embeddings of the rounds in flight, and the label party's gradients to it, are lost on the
wire), and once the link is back it trains again, with the label party calling it at the
address it had. Needs root and `ip netns`; skipped with the reason otherwise (tests/netns.py).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from netns import NetnsLab, Support, probe, sweep_stale
from tabular_tables import BLOCKS, bank_client_args, write_tables

from vfl_cli.certs_cmd import create_federation
from vfl_core.auto_rounds import AUTO_STALENESS

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.alone]

BIN = Path(sys.executable).parent
PORT_C, PORT_P = 50051, 50061
ROLES = ["coordinator", *BLOCKS]
CUT = "retail"
SECRET = "vfl-netns-secret"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[NetnsLab]:
    found: Support = probe()
    if found.reason is not None:
        pytest.skip(f"network namespaces unavailable: {found.reason}")
    sweep_stale()
    logs = tmp_path / "logs"
    logs.mkdir()
    with NetnsLab(ROLES, logs, bridge=found.bridge) as the_lab:
        yield the_lab
    assert the_lab.leftovers() == [], "namespaces left behind"


def _rounds(out: Path) -> list[dict[str, Any]]:
    try:
        text = (out / "rounds.jsonl").read_text()
    except FileNotFoundError:
        return []
    complete = text[: text.rfind("\n") + 1]  # a line being written is left for later
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def _wait(check: Callable[[], Any], timeout: float, what: str, lab: NetnsLab) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := check():
            return found
        time.sleep(0.05)
    logs = "\n".join(f"--- {role}\n{lab.log(role)}" for role in ROLES)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")


def test_given_stale_direct_rounds_when_a_feature_partys_link_is_cut_and_restored_then_it_trains(
    lab: NetnsLab, tmp_path: Path
) -> None:
    certs = tmp_path / "certs"
    create_federation(certs, [f"party{k}" for k in BLOCKS.values()], [])
    tables = write_tables(tmp_path / "tables", n=3000)
    out = tmp_path / "run"
    coordinator = lab.popen(
        "coordinator",
        [
            str(BIN / "vfl-coordinator"),
            *("--clients", "3", "--listen", f"0.0.0.0:{PORT_C}", "--out", str(out)),
            *("--epochs", "100", "--early-stop-patience", "1000", "--deadline", "1.5"),
            *("--retry-every", "3", "--register-timeout", "60", "--no-progress"),
            *("--farewell", "0", "--tls-dir", str(certs), "--alignment", "hmac"),
            *("--data-plane", "auto"),  # what an unset plane is on tables
        ],
    )
    parties = []
    for name, path in tables.items():
        target = f"{lab.address('coordinator', seen_from=name)}:{PORT_C}"
        party = lab.popen(
            name,
            [
                str(BIN / "vfl-client"),
                *("--data", str(path), *bank_client_args(path), "--coordinator", target),
                *("--listen", f"0.0.0.0:{PORT_P}", "--secret", SECRET, "--alignment", "hmac"),
                *("--register-timeout", "60", "--tls-dir", str(certs)),
            ],
        )
        parties.append(party)
    block = BLOCKS[CUT]
    _wait(lambda: len(_rounds(out)) >= 60, 120, "60 rounds", lab)
    lab.cut(CUT)
    cut_at = len(_rounds(out))

    def trained_without() -> list[dict] | None:
        # past the rounds in flight at the cut: two blocks of (S + 1) // 2 (direct_stale)
        later = _rounds(out)[cut_at + 2 * ((AUTO_STALENESS + 1) // 2) :]
        missed = [r for r in later if block in r["pattern"] and block not in r["present"]]
        return missed if len([r for r in missed if r["losses"]]) >= 3 else None

    _wait(trained_without, 60, "rounds trained without the cut party", lab)
    lab.restore(CUT)
    restored_at = len(_rounds(out))

    def trained_again() -> dict | None:
        return next((r for r in _rounds(out)[restored_at:] if block in r["updated"]), None)

    back = _wait(trained_again, 90, "a round the reconnected party trained in", lab)
    assert coordinator.wait(timeout=180) == 0, lab.log("coordinator")
    for proc in parties:  # every party, the cut one included, ran to the end
        assert proc.wait(timeout=60) == 0, "\n".join(lab.log(r) for r in ROLES)

    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "ok", results
    train = results["config"]["train"]
    assert (train["staleness"], train["overlap_validation"]) == (AUTO_STALENESS, True), train
    assert train["epoch_flow"] and train["fresh_own_tower"], train  # the tables' recipe
    assert train["data_plane"] == "direct", train
    assert block in back["present"] and "0" in back["losses"]
    rounds = _rounds(out)
    assert [r["round"] for r in rounds] == list(range(len(rounds)))
    moves = [(t["old"], t["new"]) for t in results["transitions"] if t["block"] == block]
    assert ("up", "down") in moves and moves[-1][1] == "up", moves
    for role in ROLES:
        assert "Traceback" not in lab.log(role, tail=10_000), lab.log(role)
