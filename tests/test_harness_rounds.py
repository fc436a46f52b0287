"""The harness's rounds.jsonl reader: it parses only what was added since the last call, and
must still return exactly the file's complete lines when a resumed run rewrote the file."""

from __future__ import annotations

import json
from pathlib import Path

from harness import Coordinator


def _coordinator(out: Path) -> Coordinator:
    return Coordinator("coordinator", [], out / "log", None, out=out)  # type: ignore[arg-type]


def _write(out: Path, rounds: range, tail: str = "") -> None:
    lines = "".join(json.dumps({"round": r, "epoch": r // 10}) + "\n" for r in rounds)
    (out / "rounds.jsonl").write_text(lines + tail)


def test_given_lines_appended_between_calls_then_every_complete_line_once(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    assert coord.rounds() == []  # no file yet
    _write(tmp_path, range(3), tail='{"round": 3, "ep')  # a line being written
    assert [r["round"] for r in coord.rounds()] == [0, 1, 2]
    _write(tmp_path, range(5))
    assert [r["round"] for r in coord.rounds()] == [0, 1, 2, 3, 4]
    assert [r["round"] for r in coord.rounds()] == [0, 1, 2, 3, 4]  # nothing new


def test_given_file_rewritten_by_a_resume_then_read_again_from_the_start(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    _write(tmp_path, range(8))
    assert len(coord.rounds()) == 8
    _write(tmp_path, range(5))  # the resumed coordinator cut rounds 5..7 ...
    with (tmp_path / "rounds.jsonl").open("a") as file:  # ... and ran them again, other epochs
        file.write("".join(json.dumps({"round": r, "epoch": 99}) + "\n" for r in range(5, 9)))
    rounds = coord.rounds()
    assert [r["round"] for r in rounds] == list(range(9))
    assert [r["epoch"] for r in rounds[5:]] == [99] * 4


def test_given_a_caller_pops_a_key_then_the_next_call_still_has_it(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    _write(tmp_path, range(2))
    coord.rounds()[0].pop("epoch")  # as the equivalence tests do with "losses"
    assert coord.rounds()[0] == {"round": 0, "epoch": 0}
