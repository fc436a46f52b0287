"""`vfl bench serve`'s reasons: the 429s by admission control's reason and the live parties
missing from answers by the reason each answer gave, per cell, and how a cell's callers
behaved (stamped deadline, Retry-After) in its mode column."""

from __future__ import annotations

from benchmarks.serve_callers import Reply


def live_missing_why(replies: list[Reply], faulted: set[str]) -> dict[str, int]:
    """Why the live parties missing from answers were missing: reason -> how many."""
    why: dict[str, int] = {}
    for r in replies:
        for name, reason in zip(r.missing, r.why, strict=False):
            if r.ok and name not in faulted:
                why[reason] = why.get(reason, 0) + 1
    return why


def shed_why(replies: list[Reply]) -> dict[str, int]:
    """The 429s by admission control's reason (the text between "overloaded: " and "(")."""
    why: dict[str, int] = {}
    for r in replies:
        if r.status == 429:
            why[r.shed_reason] = why.get(r.shed_reason, 0) + 1
    return why


def why_table(cells: list[dict]) -> list[str]:
    """Each cell's 429s by admission control's reason, and why live parties were missing."""
    rows = [c for c in cells if c.get("shed_why") is not None]
    if not rows:
        return []

    def text(counts: dict[str, int]) -> str:
        return "; ".join(f"{k}: {n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    lines = [
        "",
        "Why: the 429s by admission control's reason, and the live parties missing from "
        "answers by the reason the answer gave.",
        "",
        "| RTT ms | callers | mode | shed, by reason | live missing, by reason |",
        "| ---: | ---: | --- | --- | --- |",
    ]
    for c in rows:
        lines.append(
            f"| {c['rtt_ms']:g} | {c['callers']} | {mode_text(c)} | {text(c['shed_why']) or '-'} "
            f"| {text(c.get('live_missing_why') or {}) or '-'} |"
        )
    return lines


def mode_text(cell: dict) -> str:
    stamped = cell.get("stamped")
    out = cell["mode"] if stamped is None else f"{cell['mode']}, {'un' * (not stamped)}stamped"
    return out + (", Retry-After" if cell.get("honour_retry") else "")
