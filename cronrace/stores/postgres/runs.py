"""A run's side of the PostgreSQL store: renewing and releasing its lease, its record.

Part of :class:`~cronrace.stores.postgres.PostgresStore` (its base class): ``release()``
releases a lease or hands it on and writes the run's record in the same transaction, so
the next run of a job never starts before the history shows this one; runs finishing
together share one statement.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson

from cronrace.errors import StoreError
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.protocol.values import ReleaseReply as RunEndReply
from cronrace.protocol.values import Renewal as LeaseRenewal
from cronrace.protocol.values import RenewRequest
from cronrace.stores.postgres.errors import reply_error, translating
from cronrace.stores.postgres.operator import OperatorSide
from cronrace.stores.postgres.replies import (
    decode_end_run,
    decode_lease_renewal,
    decode_quarantined,
    decode_records,
)
from cronrace.stores.values import (
    Quarantined,
    RunEnd,
)

log = logging.getLogger("cronrace.stores.postgres")


def report_quarantined(quarantined: Sequence[Quarantined], **context: Any) -> None:
    """Log, at ERROR, each garbage value a function moved to the quarantine table."""
    for item in quarantined:
        log.error(
            "garbage in a row moved to the quarantine table",
            extra={"kind": item.kind, "where": item.key, "moved_to": item.moved_to, **context},
        )


@translating
class RunSide(OperatorSide):
    """Leases and records of runs: renew, release, finish, record."""

    async def renew_lease(self, job: str, request: RenewRequest) -> LeaseRenewal:
        """Extend (or re-assert) a run's lease, as :func:`cronrace.protocol.renew` does
        (renew_lease(), functions/runs.sql)."""
        reply = await self.db.value(
            "renew_lease",
            {
                "ns": self.ns,
                "job": job,
                "fence": request.fence,
                "ttl_ms": request.ttl_ms,
                "owner": request.owner or "",
                "tick": request.tick_s,
                "starting": request.starting,
                "trigger": request.trigger_id or "",
                "history": request.history,
            },
        )
        answer, quarantined = decode_lease_renewal(reply)
        report_quarantined(quarantined, function="renew_lease", job=job, fence=request.fence)
        return answer

    async def end_run(self, request: RunEnd) -> RunEndReply:
        """Write a run's record and hand its lease on or release it, as
        :func:`cronrace.protocol.release` does (end_run(), functions/runs.sql): the record
        only while the fence holds, so a retry never writes it twice."""
        (reply,) = await self.end_runs([request])
        if isinstance(reply, StoreError):
            raise reply
        return reply

    async def end_runs(self, requests: Sequence[RunEnd]) -> list[RunEndReply | StoreError]:
        """End runs finishing together in one statement (end_runs()): one reply, or that
        run's error, per request.

        Raises:
            StoreError: no answer (every request failed alike).
        """
        if not requests:
            return []
        payload = [
            {
                "job": r.job,
                "fence": r.fence,
                "owner": str(r.owner),
                "ttl_ms": r.lease_ttl_ms,
                "record": None if r.record is None else orjson.Fragment(r.record.to_json()),
                "hand_on": r.hand_on,
                "history": r.history,
            }
            for r in requests
        ]
        rows = await self.db.rows(
            "end_runs", {"ns": self.ns, "requests": orjson.dumps(payload).decode()}
        )
        out: list[RunEndReply | StoreError] = []
        for request, (_index, reply) in zip(requests, rows, strict=True):
            if "error" in reply:
                out.append(reply_error(request.job, "end_run()", reply["error"], reply["sqlstate"]))
                continue
            try:
                decoded = decode_end_run(reply)
            except StoreError as exc:
                out.append(exc)
                continue
            quarantined = decode_quarantined(reply.get("warnings"))
            report_quarantined(
                quarantined, function="end_run", job=request.job, fence=request.fence
            )
            self._saw_fence(request.job, request.fence, decoded.fence)
            out.append(decoded)
        return out

    async def record(self, records: Sequence[RunRecord], *, history: int) -> None:
        """Append run records to their jobs' histories (one statement)."""
        if not records:
            return
        ordered = sorted(records, key=lambda record: record.job)
        await self.db.rows(
            "record",
            {
                "ns": self.ns,
                "jobs": [record.job for record in ordered],
                "records": [record.to_json().decode() for record in ordered],
                "missed": [
                    record.count if record.outcome is Outcome.MISSED else 0 for record in ordered
                ],
                "history": history,
            },
        )

    async def records_since(self, job: str, since_ms: int, limit: int) -> list[RunRecord]:
        """Return up to ``limit`` records of ``job`` written since ``since_ms``, oldest first."""
        rows = await self.db.rows(
            "records_since",
            {"ns": self.ns, "job": job, "since_ms": max(0, since_ms), "limit": limit},
        )
        return decode_records(job, rows)
