"""Granted runs that will not run: recorded, and their leases released.

A grant is registered before its run's task starts (:class:`Grant`), so that a run the
agent never got to start (a forced stop) is still recorded and released; a catch-up
sequence or a queued tick cut short by a stop gets its records too. Nothing won is
dropped without a record (docs/design.md section 3, step 7).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from cronrace.model.job import Job
from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.runtime.clock import Clock
from cronrace.tick.outbox import Outbox
from cronrace.tick.releases import Releases

log = logging.getLogger("cronrace.run")


@dataclass(slots=True, eq=False)
class Grant:
    """A decided run that holds a fence (and a lease, unless overlap is ``allow``).

    Registered by the scheduler before the run's task is started, so that a run which
    never got to start (the agent was stopped by force) is still released and recorded.
    """

    job: Job
    ticks: list[int]
    fence: int
    granted_mono: float
    trigger_id: str | None = None
    #: Under ``allow``: one fence per tick (each runs apart, with no lease).
    fences: list[int] = field(default_factory=list)


class UnrunRuns:
    """The part of :class:`~cronrace.tick.runner.Runner` that records runs that will not run."""

    clock: Clock
    node_id: str
    outbox: Outbox
    releases: Releases
    _unstarted: set[Grant]

    def _now_ms(self) -> int:
        # The shared clock, as everywhere else: a node whose wall clock is off must not
        # write records that are off.
        return int(self.clock.time() * 1000)

    async def release_unstarted(self) -> None:
        """Record and release every granted run whose task never started.

        Called by the agent after its run group ended: only a forced stop leaves any.
        """
        while self._unstarted:
            grant = self._unstarted.pop()
            log.warning(
                "granted run never started (the agent was stopped by force); releasing it",
                extra={"job": grant.job.name, "tick": grant.ticks[0], "fence": grant.fence},
            )
            await self.release_unrun(
                grant.job,
                grant.ticks,
                grant.fence,
                Outcome.CANCELLED,
                "the agent was stopped before the run started",
                trigger_id=grant.trigger_id,
                retry_s=grant.job.lease_ttl_s,
            )

    async def release_unrun(
        self,
        job: Job,
        ticks: list[int],
        fence: int,
        outcome: Outcome,
        why: str,
        *,
        trigger_id: str | None,
        retry_s: float,
    ) -> None:
        """Record a granted run that will not start, and release its lease.

        The release is retried for ``retry_s`` at most (0: once); a record the store did
        not take goes to the outbox. The release hands nothing on: the store records the
        grant's further ticks, and a tick queued behind it, ``cancelled``. Under ``allow``
        (no lease) the further ticks are recorded here.
        """
        record = RunRecord(
            job.name,
            ticks[0],
            self.node_id,
            outcome,
            fence,
            finished_ms=self._now_ms(),
            error=why,
            trigger_id=trigger_id,
        )
        if job.overlap is Overlap.ALLOW:
            self._keep_unrun(job, ticks[1:], outcome, why)
            await self.outbox.write([record], history=job.history)
        else:
            until = self.clock.monotonic() + retry_s
            await self.releases.finish(job, record, fence, until_mono=until, hand_on=False)

    def _keep_unrun(
        self,
        job: Job,
        ticks: Iterable[int],
        outcome: Outcome = Outcome.CANCELLED,
        why: str = "the agent stopped before this catch-up tick ran",
    ) -> None:
        """Record ticks of a catch-up sequence that will not run (by default: the agent
        stopped)."""
        now_ms = self._now_ms()
        records = [
            RunRecord(job.name, tick_s, self.node_id, outcome, finished_ms=now_ms, error=why)
            for tick_s in ticks
        ]
        if records:
            self.outbox.keep(records, history=job.history, maybe_written=False)
