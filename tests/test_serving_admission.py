"""Admission control's rule (vfl_core.serving.admission), on given clock values."""

from __future__ import annotations

import pytest

from vfl_core.serving.admission import (
    CANNOT_MEET,
    LATE,
    LATE_GRACE_S,
    MIN_SAMPLES,
    SPENT,
    STAMP_GRACE_S,
    Admission,
    Overloaded,
)


def test_given_a_spent_deadline_then_shed_as_spent() -> None:
    with pytest.raises(Overloaded) as err:
        Admission().admit(now=10.0, deadline=9.99)
    assert err.value.reason == SPENT


def test_given_less_time_left_than_a_whole_answer_takes_then_shed() -> None:
    admission = Admission()
    for seconds in [0.03] * (MIN_SAMPLES - 1):
        admission.record(seconds)
    admission.admit(now=0.0, deadline=0.01)  # too few known: nothing shed by this rule
    admission.record(0.03)
    assert admission.needed() == pytest.approx(0.03)
    admission.admit(now=0.0, deadline=0.05)
    with pytest.raises(Overloaded) as err:
        admission.admit(now=0.0, deadline=0.02)
    assert err.value.reason == CANNOT_MEET and "20 ms left, 30 needed" in str(err.value)


def test_given_an_answer_past_its_deadline_then_shed_only_beyond_the_grace() -> None:
    admission = Admission()
    admission.check_late(now=1.0 + LATE_GRACE_S / 2, deadline=1.0)
    with pytest.raises(Overloaded) as err:
        admission.check_late(now=1.0 + 2 * LATE_GRACE_S, deadline=1.0)
    assert err.value.reason == LATE


def test_given_a_callers_stamp_then_an_answer_past_it_beyond_its_grace_is_shed() -> None:
    """The caller's own deadline (X-Deadline-At) binds with its own, smaller grace: the reply
    must leave the gateway by then, the rest of the caller's 15 ms is the reply's way back."""
    admission = Admission()
    admission.check_late(now=1.0 + STAMP_GRACE_S / 2, deadline=2.0, stamp=1.0)
    with pytest.raises(Overloaded) as err:
        admission.check_late(now=1.0 + 2 * STAMP_GRACE_S, deadline=2.0, stamp=1.0)
    assert err.value.reason == LATE and "caller's deadline" in str(err.value)
    with pytest.raises(Overloaded):  # the gateway's own deadline still binds when earlier
        admission.check_late(now=1.0 + 2 * LATE_GRACE_S, deadline=1.0, stamp=5.0)
