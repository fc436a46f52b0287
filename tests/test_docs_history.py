"""The manual and the results pages describe the software, not how it was built.

The project's history (which work session changed what, QA or outsider passes, scratch files
under /tmp) belongs to CHANGELOG.md and git; a page under docs/ or benchmarks/results/ that
mentions it fails here with the file, the line and the words found.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), *(ROOT / "benchmarks" / "results").rglob("*.md")])
ORDINALS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|this|that|last|next"
HISTORY = re.compile(
    r"\bstops? \d+"  # "stop 41", "stops 39"
    r"|\bstop-\d+"  # "the stop-40 bank table"
    rf"|\b(?:{ORDINALS})[ -]stop\b"  # "fifth stop", "this stop"
    r"|\b(?:before|until|since|after) stop\b"
    r"|\bQA\b"
    r"|\boutsider(?:'s)? (?:chaos )?pass(?:es)?\b"
    r"|/tmp/"
    r"|/work/(?:wt\b|wt-|main\b)"  # the developers' own checkouts
    r"|\bthe lead's\b|\bhelpers'",  # who ran what: the project's sessions
    re.IGNORECASE,
)


def history_lines(path: Path, root: Path = ROOT) -> list[str]:
    """`FILE:LINE: words` for every line of `path` that names the project's history."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        words = [m.group(0) for m in HISTORY.finditer(line)]
        if words:
            found.append(f"{path.relative_to(root)}:{number}: {', '.join(words)}")
    return found


def test_the_pattern_catches_history_and_spares_behaviour(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Measured in stop 41.\n(before the fifth stop)\nthe QA pass\nan outsider pass\n"
        "`--out /tmp/x`\nstops at the handshake; early stopping; `--early-stop-patience`\n"
        "an outsider gets no further than the handshake\nthe stop-40 bank table\n"
        "a helper thread parses; the lead's idle run\n"
        "`--compare /work/main`; `--results /work/wt/wan/x`; data in /work/shared/data\n"
    )
    assert history_lines(page, tmp_path) == [
        "page.md:1: stop 41",
        "page.md:2: fifth stop",
        "page.md:3: QA",
        "page.md:4: outsider pass",
        "page.md:5: /tmp/",
        "page.md:8: stop-40",
        "page.md:9: the lead's",
        "page.md:10: /work/main, /work/wt",
    ]


def test_no_page_names_the_projects_history() -> None:
    found = [line for page in PAGES for line in history_lines(page)]
    assert not found, "history belongs in CHANGELOG.md, not in the pages:\n" + "\n".join(found)
