"""Clocks: wall time to locate ticks, monotonic time to sleep and to measure deadlines.

Every node of a fleet must agree on *which* tick is due, so by default "now" is not the
node's own wall clock but the Redis server's, estimated NTP-style from ``TIME`` samples
taken with the heartbeat (:class:`ServerOffsetClock`). A node whose wall clock is off by
seconds then neither fires early (and wins a tick before the others are awake) nor late.
Sleeping and lease deadlines always use the monotonic clock, which no one can step.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio


@runtime_checkable
class Clock(Protocol):
    """What the agent needs to know about time."""

    def time(self) -> float:
        """Return wall-clock time as UTC epoch seconds (used only to locate ticks)."""
        ...

    def monotonic(self) -> float:
        """Return seconds on a clock that never steps (used for sleeps and deadlines)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep for ``seconds`` of monotonic time."""
        ...


class SystemClock:
    """The process's own clocks, optionally skewed (tests use the skew to fake a bad NTP)."""

    def __init__(self, skew_s: float = 0.0) -> None:
        self.skew_s = skew_s

    #: The clock itself, not a method calling it: asked several times per run.
    monotonic = staticmethod(time.monotonic)

    def time(self) -> float:
        return time.time() + self.skew_s

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """One ``TIME`` exchange: the server's offset from our wall clock and the round trip."""

    offset_s: float
    rtt_s: float


class ServerOffsetClock:
    """Wall time corrected to the Redis server's clock.

    The offset is taken from the sample with the smallest round trip among the recent ones
    (NTP's clock filter): the shortest exchange has the least room for asymmetric delay.
    Until the first sample arrives the base clock is used unchanged.
    """

    def __init__(self, base: Clock | None = None, *, window: int = 8) -> None:
        self.base: Clock = base if base is not None else SystemClock()
        self._samples: deque[OffsetSample] = deque(maxlen=window)
        self._offset_s = 0.0

    @property
    def offset_s(self) -> float:
        """The current estimate of server time minus our wall time, in seconds."""
        return self._offset_s

    @property
    def synced(self) -> bool:
        """Whether at least one server sample has been taken."""
        return bool(self._samples)

    def add_sample(self, *, sent_wall_s: float, received_wall_s: float, server_s: float) -> None:
        """Record one exchange: our wall time before and after, and the server's ``TIME``."""
        rtt_s = max(0.0, received_wall_s - sent_wall_s)
        midpoint_s = sent_wall_s + rtt_s / 2
        self._samples.append(OffsetSample(offset_s=server_s - midpoint_s, rtt_s=rtt_s))
        best = min(self._samples, key=lambda sample: sample.rtt_s)
        self._offset_s = best.offset_s

    def time(self) -> float:
        return self.base.time() + self._offset_s

    def monotonic(self) -> float:
        return self.base.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)
