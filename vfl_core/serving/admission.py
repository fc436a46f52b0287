"""Admission control at the gateway: a request whose deadline cannot be met is shed (refused at
once: HTTP 429, gRPC RESOURCE_EXHAUSTED) instead of answered late or answered without parties
that are alive.

Why shed rather than answer from fewer parties. Under load the gateway's own queue eats the
deadline: measured at 64 callers, 12% of the answers lacked a party that was alive and had
answered in time for a request that had not queued, and the caller saw only the answer's
`missing` field. A caller that is told "overloaded" can retry elsewhere (another gateway
replica) or back off; one that is silently given a weaker prediction cannot tell.

The rule, checked when the gateway comes to start a request (after any queue):
- its deadline is spent: shed (`SPENT`);
- the time left is less than what a request needs now: shed (`CANNOT_MEET`). What a request
  needs is the median of the last WINDOW requests' times from start to the parties' answers
  all in (requests that waited for no party, or whose awaited parties did not all answer, are
  not counted: they say nothing of how long a whole answer takes). Until MIN_SAMPLES are known
  nothing is shed by this rule.
And when the answer is ready more than LATE_GRACE_S past its deadline (an overloaded
interpreter between the wait for the parties and the head), it is shed (`LATE`) instead of
sent late; an answer to a request its caller stamped with its own deadline is shed once more
than STAMP_GRACE_S past that stamp. The last such check runs just before the reply's bytes are
written (vfl_client.serving_app), so no answer leaves the gateway later than that.
A request that a party awaited for it did not answer in time, although that party answered
some request within the last three deadlines (alive, only slow: the machine or the queue, not
a frozen or dead party), is shed too (`SLOW_PEER`, vfl_core.serving.gateway): an answer
without a party that is alive is a weaker prediction the caller cannot tell from a good one.
The deadline itself may be the caller's (an absolute time it stamped on the request when
sending it: the time the request waited before the gateway read it then counts against it).
The HTTP endpoint also sheds a request at once when too many wait for a thread (`QUEUE_FULL`,
vfl_client.serving_app).
"""

from __future__ import annotations

import threading
from collections import deque

from vfl_core.errors import VflError

WINDOW = 64  # recent whole answers the estimate is the median of
MIN_SAMPLES = 8
SPENT = "deadline spent queued at the gateway"
CANNOT_MEET = "deadline cannot be met"
LATE = "deadline passed while answering"
QUEUE_FULL = "too many requests waiting at the gateway"
SLOW_PEER = "a live party's answer came too late"
# An answer ready later than its deadline by more than this is shed instead of sent: the head
# runs after the wait for the parties, which ends at the deadline at the latest.
LATE_GRACE_S = 0.015  # the tail an answer may have past its deadline (issue 46: p99 <= +15 ms)
# ... past the caller's own deadline (X-Deadline-At): the caller counts from when it sent the
# request, so the gateway's reply must leave by then, the rest of the 15 ms for its way back
# (the kernel, the caller's thread taking it)
STAMP_GRACE_S = 0.005


class Overloaded(VflError):
    """A request shed by admission control; `reason` is one of the reasons above."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"overloaded: {reason} ({detail}); retry later or elsewhere")
        self.reason = reason


class Admission:
    """The gateway's admission rule and the estimate it uses."""

    def __init__(
        self,
        window: int = WINDOW,
        min_samples: int = MIN_SAMPLES,
        late_grace_s: float = LATE_GRACE_S,
        stamp_grace_s: float = STAMP_GRACE_S,
    ) -> None:
        self.late_grace_s = late_grace_s
        self.stamp_grace_s = stamp_grace_s
        self._recent: deque[float] = deque(maxlen=window)
        self._min = min_samples
        self._lock = threading.Lock()

    def needed(self) -> float:
        """Seconds a whole answer takes now (0 until MIN_SAMPLES are known)."""
        with self._lock:
            if len(self._recent) < self._min:
                return 0.0
            ordered = sorted(self._recent)
        return ordered[len(ordered) // 2]

    def admit(self, now: float, deadline: float) -> None:
        """Raise Overloaded when a request starting at `now` cannot meet `deadline`."""
        left = deadline - now
        if left <= 0:
            raise Overloaded(SPENT, f"{-1000 * left:.0f} ms past it")
        needed = self.needed()
        if left < needed:
            raise Overloaded(CANNOT_MEET, f"{1000 * left:.0f} ms left, {1000 * needed:.0f} needed")

    def check_late(self, now: float, deadline: float, stamp: float | None = None) -> None:
        """Raise Overloaded when an answer ready at `now` is late: past `deadline` (the
        gateway's own) by more than late_grace_s, or past the caller's `stamp` (its own
        deadline, when it gave one) by more than stamp_grace_s."""
        if now > deadline + self.late_grace_s:
            raise Overloaded(LATE, f"{1000 * (now - deadline):.0f} ms past it")
        if stamp is not None and now > stamp + self.stamp_grace_s:
            raise Overloaded(LATE, f"{1000 * (now - stamp):.0f} ms past the caller's deadline")

    def record(self, seconds: float) -> None:
        """A request's time from start to its awaited parties' answers all in."""
        with self._lock:
            self._recent.append(seconds)
