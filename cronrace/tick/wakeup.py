"""The tick loop's sleep, and stopping without cutting a wake-up short.

A graceful stop (the first SIGTERM) must not cut a wake-up short: :class:`StopGate` lets
it interrupt the loops' *waits* only, and the wake-up in hand decides its ticks and starts
their runs. A forced stop may cut one short, and loses nothing by it: a claim won but not
decided runs out after ``undecided_claim_s`` and the job's next decision, on whichever
node, covers its tick; a decision made whose run never started is recorded ``abandoned``
by the job's next decision once its lease runs out (docs/design.md section 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from cronrace.runtime.clock import Clock

#: A clock that moved by more than this against the monotonic one since the loop began to
#: nap (the wall clock stepped, a new estimate of the server's offset) ends the nap.
CLOCK_MOVED_S = 0.005


class Nap:
    """The tick loop's sleep between wake-ups, ended early by :meth:`wake` (a tick added,
    a membership change) or by a clock that moved (:meth:`check_clock`)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._scope: anyio.CancelScope | None = None
        self._drift_s = 0.0

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` on the clock, or until woken: one cancel scope, no task beside."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            self._drift_s = self.clock.time() - self.clock.monotonic()
            try:
                await self.clock.sleep(seconds)
            finally:
                self._scope = None

    def wake(self) -> None:
        """End the nap now (if the loop naps)."""
        if self._scope is not None:
            self._scope.cancel()

    def check_clock(self) -> None:
        """End the nap if the wall clock moved against the monotonic one since it began.

        Two clock reads: a task that wakes anyway (the event-loop watchdog, about once a
        second) calls it, so the loop sleeps until its next tick rather than turning
        every second to look at the clock.
        """
        if self._scope is None:
            return
        moved_s = self.clock.time() - self.clock.monotonic() - self._drift_s
        if abs(moved_s) > CLOCK_MOVED_S:
            self._scope.cancel()


class StopGate:
    """Lets a graceful stop interrupt waiting, never a wake-up in hand.

    The loops wrap each wait (a sleep, a blocking read) in :meth:`waiting`; :meth:`stop`
    cancels those waits only, so a wake-up whose claims were sent always gets to decide
    its ticks and start their runs. Only cancelling the loop itself cuts one short.
    """

    def __init__(self) -> None:
        self.stopping = False
        self._waits: set[anyio.CancelScope] = set()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Wrap a wait that a graceful stop may end (the wait then returns quietly)."""
        with anyio.CancelScope() as scope:
            if self.stopping:
                scope.cancel()
            self._waits.add(scope)
            try:
                yield
            finally:
                self._waits.discard(scope)

    def stop(self) -> None:
        """End every wait now and every wait to come."""
        self.stopping = True
        for scope in self._waits:
            scope.cancel()
