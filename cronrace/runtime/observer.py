"""The hooks through which the agent reports what it does (metrics plug in here)."""

from __future__ import annotations

from collections.abc import Callable

from cronrace.model.policies import Outcome


class Observer:
    """Receives the agent's events; every method is a no-op here.

    ``cronrace.web.metrics`` subclasses it to export Prometheus metrics. Methods must be quick
    and must not raise: they are called on the scheduler's path.
    """

    def claims(self, won: int, lost: int) -> None:
        """A claim pipeline returned."""

    def claims_taken_over(self, count: int) -> None:
        """``count`` undecided claims of members gone silent were taken over by this node."""

    def claims_skipped(self, count: int) -> None:
        """``count`` due ticks were left to other racers (``racers = k``): no claim sent."""

    def membership(self, members: int) -> None:
        """The heartbeat read the live node set: ``members`` nodes race in this view."""

    def decision(self, job: str, outcome: Outcome, count: int = 1) -> None:
        """A tick was decided without running (skipped, queued, missed, stale, abandoned)."""

    def run_started(self, job: str, lag_s: float) -> None:
        """A handler started ``lag_s`` after its tick."""

    def run_finished(self, job: str, outcome: Outcome, duration_s: float, ratio: float) -> None:
        """A handler ended; ``ratio`` is its duration over the schedule's interval."""

    def renewal(self, job: str, ok: bool) -> None:
        """A lease renewal was answered (or failed)."""

    def redis_error(self, operation: str) -> None:
        """A store call failed."""

    def record_dropped(self, job: str, outcome: Outcome) -> None:
        """A run record was given up unwritten (outbox full, or still unwritten at exit)."""

    def ready(self, ready: bool) -> None:
        """Readiness changed (the store reachable, its scripts or schema ready)."""

    def redis_refused(self, command: str, cause: str) -> None:
        """The store refused a call for good (``cause``: authentication, permission, tls,
        schema)."""

    def loop_watched(self, lag_s: Callable[[], float]) -> None:
        """The loop watchdog started; ``lag_s()`` reads the current lag from any thread."""

    def loop_stalled(self, lag_s: float) -> None:
        """The event loop woke ``lag_s`` late, past the liveness threshold."""

    def definition_disagreements(self, jobs: int) -> None:
        """``jobs`` jobs are defined differently by live nodes (0: all agree)."""
