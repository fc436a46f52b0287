"""What a test process spends polling a coordinator's rounds.jsonl: the harness's
`Coordinator.rounds()` parsed every line on every call; it now parses only the lines added since
the last one. A run is simulated in this process: rounds appended at the federation's pace
(~50 a second at batch 16) and polled every 50 ms (`harness.wait_for`'s interval), as
`Cluster.wait_rounds` and test_restarts' waits do, with the records of a real digits run.
Both readers must return the same records at every poll.

    python -m benchmarks.round_polling --rounds 2000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harness import Coordinator  # noqa: E402

PER_POLL = 2.5  # rounds written between two polls: 50 rounds/s, polled every 0.05 s


def parse_all(out: Path) -> list[dict]:
    """The reader before: every complete line, parsed again on each call."""
    try:
        text = (out / "rounds.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def record(number: int) -> str:
    """A round record shaped like a 4-party digits run's."""
    pattern = [b for b in range(4) if (number >> b) & 1 or b == number % 4]
    losses = {str(b): 2.302585092994046 - number * 1e-4 - b * 1e-5 for b in pattern}
    fields = {"round": number, "epoch": number // 97, "pattern": pattern, "present": pattern}
    return json.dumps({**fields, "losses": losses, "updated": pattern}) + "\n"


def run(rounds: int) -> tuple[float, float, int]:
    """(CPU s of every poll with the old reader, CPU s with the harness's, polls)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        coord = Coordinator("coordinator", [], out / "log", None, out=out)  # type: ignore[arg-type]
        old = new = 0.0
        polls, written = 0, 0
        with (out / "rounds.jsonl").open("w") as file:
            while written < rounds:
                target = min(rounds, int((polls + 1) * PER_POLL))
                file.write("".join(record(n) for n in range(written, target)))
                file.write('{"round": ')  # a line being written when the poll comes
                file.flush()
                written = target
                start = time.process_time()
                before = parse_all(out)
                middle = time.process_time()
                after = coord.rounds()
                end = time.process_time()
                assert after == before and len(after) == written
                old, new, polls = old + middle - start, new + end - middle, polls + 1
                file.seek(file.tell() - len('{"round": '))
                file.truncate()
        return old, new, polls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    old, new, polls = run(args.rounds)
    print(f"{args.rounds} rounds, {polls} polls ({polls * 0.05:.0f} s of waiting at 50 ms)")
    print("| reader | CPU s of all polls | ms per poll |")
    print("| --- | ---: | ---: |")
    print(f"| parse every line (before) | {old:.2f} | {1000 * old / polls:.2f} |")
    print(f"| parse new lines (harness) | {new:.2f} | {1000 * new / polls:.2f} |")


if __name__ == "__main__":
    main()
