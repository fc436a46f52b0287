"""The one retry policy (vfl_core.training.retry): pauses, and asking again until good or out of
time."""

from __future__ import annotations

import time

import pytest

from vfl_core.training import retry
from vfl_core.training.retry import Backoff, reconnect_backoff, retry_until


def test_given_cap_when_paused_repeatedly_then_doubles_up_to_cap_and_resets() -> None:
    backoff = Backoff(0.2, cap=1.0)
    assert [backoff.next() for _ in range(5)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])
    backoff.reset()
    assert backoff.planned == 0.2


def test_given_no_cap_then_every_pause_is_the_first() -> None:
    backoff = Backoff(2.0)
    assert [backoff.next() for _ in range(3)] == [2.0, 2.0, 2.0]


def test_given_jitter_then_each_pause_within_its_band_around_the_plan() -> None:
    backoff = reconnect_backoff(cap=5.0)
    planned = []
    for _ in range(8):
        planned.append(backoff.planned)
        pause = backoff.next()
        assert 0.8 * planned[-1] <= pause <= 1.2 * planned[-1]
    assert planned == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])


def test_given_answer_good_on_third_try_then_stops_there(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", pauses.append)
    answers = iter([[1], [1], [], [1]])
    seen: list[list[int]] = []
    got = retry_until(
        lambda: next(answers),
        bool,
        time.monotonic() + 60,
        Backoff(0.5),
        lambda a, _: seen.append(a),
    )
    assert got == [] and pauses == [0.5, 0.5] and seen == [[1], [1]]


def test_given_time_up_then_last_answer_returned_without_pausing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", pauses.append)
    got = retry_until(lambda: "bad", lambda a: a == "bad", time.monotonic() - 1, Backoff(1.0))
    assert got == "bad" and pauses == []
