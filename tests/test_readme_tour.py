"""The README's five-minute tour runs as written and prints what the README says it prints.

The commands are the README's `bash` block after the `<!-- tour: ... -->` marker, run verbatim by
bash in a temporary directory (`.venv` there links to this interpreter's environment), with one
change: the coordinator's port 50051 becomes a free one, so the test cannot collide with another
server on the machine. The expectations (sample counts, accuracies, live blocks, files) are read
from the README's "What you should see", not repeated here.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import reserved_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = "<!-- tour:"
PORT = "127.0.0.1:50051"
TOUR_TIMEOUT_S = 420


def tour_commands(readme: str) -> str:
    """The fenced bash block that follows the tour marker, as written."""
    start = readme.index(MARKER)
    block = re.search(r"```bash\n(.*?)```", readme[start:], re.DOTALL)
    assert block is not None, "README.md: no ```bash block after the tour marker"
    return block.group(1)


def flat(text: str) -> str:
    """Text with every run of whitespace as one space (README sentences wrap across lines)."""
    return " ".join(text.split())


def run_tour(workdir: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run the tour in its own session, and end whatever it left behind (its background
    coordinator and clients) if it fails or overruns."""
    (workdir / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (workdir / "tour.sh").write_text(script)
    proc = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "tour.sh"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=TOUR_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the README tour ran past {TOUR_TIMEOUT_S} s:\n{out[-4000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # background jobs the tour left running
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_the_tour_block_is_found_and_names_the_port_the_test_replaces() -> None:
    commands = tour_commands(README.read_text())
    assert commands.startswith("source .venv/bin/activate")
    assert PORT in commands and "0.0.0.0" not in commands and "coordinator-host" not in commands


@pytest.mark.slow
def test_given_the_readme_tour_when_run_as_written_then_it_prints_what_the_readme_says(
    tmp_path: Path,
) -> None:
    readme = README.read_text()
    said = flat(readme[readme.index(MARKER) :])
    script = tour_commands(readme).replace(PORT, f"127.0.0.1:{reserved_port()}")

    done = run_tour(tmp_path, script)
    log = "\n".join(
        f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(tmp_path.glob("tour/*.log"))
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{log}"
    out = done.stdout

    # vfl prepare: `quadrant0` holds N training and M test samples
    counts = re.search(r"`quadrant0` holds (\d+) training and (\d+) test samples", said)
    assert counts is not None
    train, test = counts.groups()
    assert re.search(rf"^quadrant0\s+0\s+yes\s+{train}\s+{test}$", out, re.MULTILINE), out

    # vfl evaluate, before and after the SIGKILL: live blocks and the `all` row, in that order
    live = re.findall(r"live blocks: ([\d,]+)", said)
    totals = re.findall(r"`all (\d+) ([\d.]+%)`", said)
    assert live == ["0,1,2,3", "0,1,3"] and len(totals) == 2, said
    position = 0
    for blocks, (samples, accuracy) in zip(live, totals, strict=True):
        heading = re.compile(rf"^test set \(live blocks: {blocks}; ", re.MULTILINE)
        found = heading.search(out, position)
        assert found is not None, f"no table with live blocks {blocks}:\n{out}"
        row = re.compile(rf"^all\s+{samples}\s+{re.escape(accuracy)}\s", re.MULTILINE)
        total = row.search(out, found.end())
        assert total is not None, f"no `all {samples} {accuracy}` after {blocks}:\n{out}"
        position = total.end()

    # the files the README points at
    for name in ["config.json", "rounds.jsonl", "epochs.jsonl", "results.json"]:
        assert f"`{name}`" in said and (tmp_path / "tour" / "run" / name).is_file()
    assert "`tour/run/report/report.html`" in said
    assert (tmp_path / "tour" / "run" / "report" / "report.html").is_file()
    assert (tmp_path / "tour" / "certs" / "party0").is_dir()
