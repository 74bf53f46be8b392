"""The event-loop watchdog: liveness that reflects whether the agent's loop still turns.

A handler that blocks the event loop (``time.sleep`` or CPU work in an ``async def``) stops
every claim, renewal and heartbeat of the agent, while the metrics server, which answers
from a thread of its own, would go on saying "healthy". The watchdog is a small task that
sleeps a short period again and again and notes when it woke. From any thread,
:meth:`LoopWatchdog.lag_s` is how late the loop is *now* (how long ago it should have woken
and did not) or was at its last wake-up; above the threshold the agent is not alive, and
``/healthz`` answers 503 so that the orchestrator restarts it (docs/design.md section 8).

It measures real time (``time.monotonic``), never the agent's clock: a fake or skewed
clock must not make a healthy loop look stuck.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

log = logging.getLogger("cronrace.runtime.watchdog")

#: How often the watchdog wakes, at most; a lag is seen within this much of its start.
#: A second: each wake-up is event-loop work of every node, every period, whatever it runs
#: (four a second cost a node as much as its heartbeat), and a loop blocked past the
#: threshold (5 s by default) is still seen within a second of it.
PERIOD_MAX_S = 1.0


class LoopWatchdog:
    """Measure how late the event loop wakes a sleeper.

    Args:
        threshold_s: a loop this late (or later) is stuck: :meth:`problem` says so.
        period_s: how often to wake; default a quarter of the threshold, at most 1 s.
    """

    def __init__(self, *, threshold_s: float, period_s: float | None = None) -> None:
        self.threshold_s = threshold_s
        self.period_s = period_s if period_s is not None else min(PERIOD_MAX_S, threshold_s / 4)
        #: Called on the loop with the lag of every wake-up above the threshold.
        self.on_stall: Callable[[float], None] | None = None
        #: Called on the loop at every wake-up (at least once a second): a cheap check that
        #: would otherwise need a wake-up of its own (the tick loop's look at the clock).
        self.on_wake: Callable[[], None] | None = None
        # Written by the loop, read by the metrics thread: plain floats, replaced whole.
        self._due_mono: float | None = None
        self._last_lag_s = 0.0

    def lag_s(self) -> float:
        """How late the loop is now, or was at its last wake-up (0 when not watching)."""
        due = self._due_mono
        if due is None:
            return 0.0
        return max(self._last_lag_s, time.monotonic() - due)

    def problem(self) -> str | None:
        """One line saying the loop is stuck, or None while it turns in time."""
        lag = self.lag_s()
        if lag < self.threshold_s:
            return None
        return (
            f"event loop blocked for {lag:.1f}s (limit {self.threshold_s:g}s): a handler "
            "blocks it (time.sleep or CPU work in an async def?); claims and lease "
            "renewals are not running"
        )

    async def run(self) -> None:
        """Watch until cancelled."""
        self._last_lag_s = 0.0
        try:
            while True:
                slept = time.monotonic()
                self._due_mono = slept + self.period_s
                await anyio.sleep(self.period_s)
                lag = max(0.0, time.monotonic() - slept - self.period_s)
                self._last_lag_s = lag
                if self.on_wake is not None:
                    self.on_wake()
                if lag >= self.threshold_s:
                    log.error(
                        "the event loop was blocked; nothing ran meanwhile (claims, "
                        "renewals, heartbeats): a handler must not block it",
                        extra={"lag_s": round(lag, 3), "limit_s": self.threshold_s},
                    )
                    if self.on_stall is not None:
                        self.on_stall(lag)
        finally:
            self._due_mono = None
            self._last_lag_s = 0.0
