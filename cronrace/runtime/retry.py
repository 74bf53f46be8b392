"""The one retry policy: capped exponential backoff with full jitter (docs/design.md section 8).

Every loop that retries a Redis call counts its attempts in a :class:`Retry` and waits
:meth:`Backoff.delay_s` between them, so one formula (and one place to tune it) decides
how a node backs off. Full jitter spreads a fleet's retries after an outage: nodes that
all failed at the same instant do not all come back at the same instant.

Users: the start-up connection, the heartbeat, the control reader, the scheduler's
watermark read and its unanswered claims, the acquire retries, the outbox, and the
releases (a steeper, unjittered :class:`Backoff` cut short when Redis answers again).
A lease's renewals are not retried on a backoff but on its own cadence, bounded by its
deadline (``lease.py``). Not tenacity: every wait here must go through the agent's
:class:`~cronrace.runtime.clock.Clock` (a fake one in tests) and stay cancellable by anyio, and
the loops need the attempt count itself (log once, tell a recovery), which is all this is.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from cronrace.runtime.clock import Clock

#: The first retry waits up to this long.
BACKOFF_START_S = 0.1
#: No retry waits longer than this (a node must notice Redis's return within seconds).
BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff: attempt ``n`` waits up to ``start_s * 2**n``, at most ``max_s``.

    Attributes:
        start_s: the longest wait before the first retry (attempt 0).
        max_s: the cap.
        jitter: wait a uniform random share of the bound (full jitter), not the bound.
    """

    start_s: float = BACKOFF_START_S
    max_s: float = BACKOFF_MAX_S
    jitter: bool = True

    def bound_s(self, attempt: int) -> float:
        """The longest wait after failed attempt number ``attempt`` (from 0)."""
        if attempt >= self.slowest_attempt:
            return self.max_s
        return min(self.max_s, self.start_s * 2.0 ** max(0, attempt))

    def delay_s(self, attempt: int) -> float:
        """How long to wait after failed attempt number ``attempt`` (from 0)."""
        bound = self.bound_s(attempt)
        return random.uniform(0, bound) if self.jitter else bound

    @property
    def slowest_attempt(self) -> int:
        """The first attempt whose wait is capped: retry at this one to retry slowly."""
        if self.start_s <= 0 or self.max_s <= self.start_s:
            return 0
        return math.ceil(math.log2(self.max_s / self.start_s))


#: The policy of every Redis retry that has no reason to differ.
BACKOFF = Backoff()


def backoff_s(attempt: int) -> float:
    """The project's wait after failed attempt number ``attempt``: :data:`BACKOFF`."""
    return BACKOFF.delay_s(attempt)


class Retry:
    """The attempts of one operation: count failures, wait the backoff between them.

    ``attempt`` is the number of failures since the last success; loops read it to log
    the first failure only, or to tell a recovery (``attempt > 0`` before a success).

    Args:
        clock: sleeps (a fake clock in tests).
        backoff: the policy; default :data:`BACKOFF`.
    """

    def __init__(self, clock: Clock, backoff: Backoff = BACKOFF) -> None:
        self.clock = clock
        self.backoff = backoff
        self.attempt = 0

    def failed(self) -> float:
        """Count a failure; return how long to wait before the next attempt."""
        delay = self.backoff.delay_s(self.attempt)
        self.attempt += 1
        return delay

    async def wait(self) -> None:
        """Count a failure and sleep its backoff."""
        await self.clock.sleep(self.failed())

    def refused(self) -> None:
        """Count a failure that will not pass by itself: from now on, retry slowly."""
        self.attempt = max(self.attempt, self.backoff.slowest_attempt)

    def succeeded(self) -> bool:
        """Count a success; return whether it ended a run of failures."""
        recovered = self.attempt > 0
        self.attempt = 0
        return recovered
