"""Issue 46's acceptance lines for `vfl bench serve`, read from its cells, and the gateway's
own count of the requests it shed (its Prometheus endpoint), to set beside the callers' 429s.

- at MAX_CALLERS_SHED callers with a party frozen: p99 of the answered requests <= the
  deadline + GRACE_MS, every other request shed with a 429 the gateway counted;
- at <= MAX_CALLERS_LIVE callers: 0 answers missing a live party.
"""

from __future__ import annotations

import http.client
import re
import statistics
from typing import Any

GRACE_MS = 15.0
MAX_CALLERS_SHED = 256
MAX_CALLERS_LIVE = 64
_SHED = re.compile(r"^vfl_serving_shed_total\{([^}]*)\}\s+([0-9.e+]+)$", re.MULTILINE)


def shed_counted(port: int) -> float:
    """The gateway's `vfl_serving_shed_total` over HTTP, every reason together."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(float(v) for labels, v in _SHED.findall(text) if 'transport="http"' in labels)


def late_answers(replies: list[Any], deadline_ms: float) -> dict[str, object]:
    """The answers (200) the callers had later than the deadline + GRACE_MS, and the mean ms
    of them after the gateway's last deadline check (`after`: the reply's way back)."""
    late = [r for r in replies if r.status == 200 and 1000 * r.took > deadline_ms + GRACE_MS]
    after = [1000 * r.steps["after"] for r in late if "after" in r.steps]
    return {"late_answers": len(late), "late_after_ms": statistics.fmean(after) if after else -1.0}


def acceptance_lines(cells: list[dict], deadline_ms: float) -> list[str]:
    """One line per acceptance clause and cell it applies to, each met or not, as measured."""
    lines = ["", "Issue 46's acceptance, as measured in this run:", ""]
    bound = deadline_ms + GRACE_MS
    for c in cells:
        if c["mode"] != "stop" or c["callers"] != MAX_CALLERS_SHED:
            continue
        answered = c["requests"] - c.get("shed", 0) - c["failed"]
        p99 = c.get("answered_p99_ms", -1.0)
        counted = c.get("shed_counted")
        held = p99 <= bound if answered else True
        others = c["failed"] == 0 and (counted is None or counted == c.get("shed", 0))
        lines.append(
            f"- {_cell_name(c)}: answered p99 {_ms(p99)} ms against {bound:g} "
            f"({_verdict(held, answered)}; {answered} answered); every other request a "
            f"429: {c.get('shed', 0)} shed, {c['failed']} failed, the gateway counted "
            f"{'-' if counted is None else f'{counted:.0f}'} ({'met' if others else 'NOT met'})."
            + _late_text(c)
        )
    live = [c for c in cells if c["callers"] <= MAX_CALLERS_LIVE]
    if live:
        missing = sum(c.get("live_missing", 0) for c in live)
        answers = sum(c["requests"] - c.get("shed", 0) - c["failed"] for c in live)
        lines.append(
            f"- <= {MAX_CALLERS_LIVE} callers ({len(live)} cells, {answers} answers): "
            f"{missing} answers missing a live party ({'met' if missing == 0 else 'NOT met'})."
        )
    return lines if len(lines) > 3 else []


def _verdict(held: bool, answered: int) -> str:
    if not answered:
        return "nothing answered: met only vacuously"
    return "met" if held else "NOT met"


def _late_text(cell: dict) -> str:
    late = cell.get("late_answers", 0)
    if not late:
        return ""
    return (
        f" {late} answers reached their caller past the bound, on average "
        f"{_ms(cell.get('late_after_ms', -1.0))} ms of their time after the gateway's last "
        "deadline check on them."
    )


def _cell_name(cell: dict) -> str:
    stamped = "stamped" if cell.get("stamped") else "unstamped"
    retry = ", callers honouring Retry-After" if cell.get("honour_retry") else ""
    return f"{cell['callers']} callers, party3 frozen, {stamped}{retry}"


def _ms(value: float) -> str:
    return "-" if value < 0 else f"{value:.1f}"
