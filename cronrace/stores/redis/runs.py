"""A run's Redis side: renewing and releasing its lease, and writing its record.

Part of :class:`~cronrace.stores.redis.Store` (its base class): ``end_run.lua`` releases a lease
or hands it on, and appends the run's record in the same call, so the next run of a job
never starts before the history shows this one; runs finishing together share a pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import ResponseError

from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.stores.redis.errors import translating
from cronrace.stores.redis.garbage import Command, is_wrong_type
from cronrace.stores.redis.operator import OperatorCommands
from cronrace.stores.redis.replies import (
    decode_run_entries,
)


@translating
class RunCommands(OperatorCommands):
    """Leases and records of runs: renew, release, finish, record."""

    async def record(self, records: Sequence[RunRecord], *, history: int) -> None:
        """Append run records to their jobs' history streams (one pipeline)."""
        if not records:
            return
        commands: list[Command] = []
        for record in records:
            commands.append(
                self._command(
                    record.job,
                    "runs",
                    "xadd",
                    {"r": record.to_json()},
                    maxlen=history,
                    approximate=True,
                )
            )
            if record.outcome is Outcome.MISSED:
                commands.append(
                    self._command(record.job, "state", "hincrby", "missed", record.count)
                )
        await self._pipeline_repairing(commands)

    async def records_since(self, job: str, since_ms: int, limit: int) -> list[RunRecord]:
        """Return up to ``limit`` records of ``job`` appended since ``since_ms``, oldest first.

        Stream entry ids are the server's clock in milliseconds, so this finds every record
        written after that instant (a retry reads it so as not to write a record twice).
        """
        try:
            entries = await self.client.xrange(
                self.keys.runs(job), min=f"{max(0, since_ms)}-0", count=limit
            )
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            return []  # garbage: nothing of ours is there; the next record moves it aside
        return decode_run_entries(job, entries)
