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
from cronrace.stores.postgres.errors import RAW_FAILURES, reply_error, translate, translating
from cronrace.stores.postgres.operator import OperatorSide
from cronrace.stores.postgres.replies import (
    decode_end_run,
    decode_lease_renewal,
    decode_records,
    decode_release,
    decode_renewal,
)
from cronrace.stores.values import (
    FinishRequest,
    Owner,
    Quarantined,
    ReleaseDecision,
    ReleaseReply,
    Renewal,
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

    async def renew(
        self,
        job: str,
        fence: int,
        ttl_ms: int,
        *,
        owner: Owner | None = None,
        tick_s: int = 0,
        starting: bool = False,
    ) -> Renewal:
        """Extend a lease held with ``fence``; re-assert one a wipe took (see the contract)."""
        reply = await self.db.value(
            "renew",
            {
                "ns": self.ns,
                "job": job,
                "fence": fence,
                "ttl_ms": ttl_ms,
                "owner": str(owner) if owner is not None else "",
                "tick": tick_s,
                "starting": starting,
            },
        )
        answer, quarantined = decode_renewal(reply)
        report_quarantined(quarantined, function="renew", job=job, fence=fence)
        return answer

    async def renew_lease(self, job: str, request: RenewRequest) -> LeaseRenewal:
        """Extend (or re-assert) a run's lease, as :func:`cronrace.protocol.renew` does
        (renew_lease(), functions/runs.sql)."""
        answer = await self.db.value(
            "renew_lease",
            {
                "ns": self.ns,
                "job": job,
                "fence": request.fence,
                "ttl_ms": request.ttl_ms,
                "owner": request.owner or "",
                "tick": request.tick_s,
                "starting": request.starting,
            },
        )
        return decode_lease_renewal(answer)

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
            self._saw_fence(request.job, request.fence, decoded.fence)
            out.append(decoded)
        return out

    async def release(
        self,
        job: str,
        fence: int,
        *,
        owner: Owner,
        lease_ttl_ms: int,
        continue_tick_s: int = 0,
        record: RunRecord | None = None,
        history: int = 1000,
    ) -> ReleaseReply:
        """Release a lease, or hand it on to a queued or continued tick (release()).

        ``record``, when given, is written in the same transaction, only if the fence still
        matched: a retry after a lost reply cannot write it twice.
        """
        (reply,) = await self._release_many(
            [(job, fence, owner, lease_ttl_ms, continue_tick_s, record, history)]
        )
        if isinstance(reply, StoreError):
            raise reply
        return reply

    async def _release_many(
        self,
        calls: Sequence[tuple[str, int, Owner, int, int, RunRecord | None, int]],
    ) -> list[ReleaseReply | StoreError]:
        payload = [
            {
                "job": job,
                "fence": fence,
                "owner": str(owner),
                "ttl_ms": ttl_ms,
                "continue_tick": continue_tick,
                "record": orjson.Fragment(record.to_json()) if record is not None else None,
                "history": history,
            }
            for job, fence, owner, ttl_ms, continue_tick, record, history in calls
        ]
        rows = await self.db.rows(
            "release", {"ns": self.ns, "requests": orjson.dumps(payload).decode()}
        )
        out: list[ReleaseReply | StoreError] = []
        for (job, fence, *_rest), (_index, reply) in zip(calls, rows, strict=True):
            if "error" in reply:
                out.append(reply_error(job, "release()", reply["error"], reply["sqlstate"]))
                continue
            try:
                decoded = decode_release(reply)
            except StoreError as exc:
                out.append(exc)
                continue
            report_quarantined(decoded.quarantined, function="release", job=job, fence=fence)
            self._saw_fence(job, fence, decoded.fence)
            out.append(decoded)
        return out

    async def finish(
        self,
        record: RunRecord,
        *,
        history: int,
        release_fence: int | None,
        owner: Owner,
        lease_ttl_ms: int,
        continue_tick_s: int = 0,
        retried: bool = False,
    ) -> ReleaseReply | None:
        """Write a run's record and, when ``release_fence`` is set, release its lease.

        Returns:
            The release decision (None without release).
        """
        if release_fence is None:
            await self.record([record], history=history)
            return None
        request = FinishRequest(
            record, history, release_fence, owner, lease_ttl_ms, continue_tick_s, retried
        )
        (reply,) = await self.finish_many([request])
        if isinstance(reply, StoreError):
            raise reply
        return reply

    async def finish_many(
        self, requests: Sequence[FinishRequest]
    ) -> list[ReleaseReply | StoreError]:
        """Write finished runs' records and release their leases, in one statement.

        When the lease had moved on (``not_owner``) the record is written on its own; after
        a retry (``retried``) only if the history does not show this fence yet, as the
        first attempt may have written it.

        Raises:
            StoreError: no answer (every request failed alike).
        """
        if not requests:
            return []
        replies = await self._release_many(
            [
                (
                    r.record.job,
                    r.release_fence,
                    r.owner,
                    r.lease_ttl_ms,
                    r.continue_tick_s,
                    r.record,
                    r.history,
                )
                for r in requests
            ]
        )
        out: list[ReleaseReply | StoreError] = []
        for request, reply in zip(requests, replies, strict=True):
            if isinstance(reply, ReleaseReply) and reply.decision is ReleaseDecision.NOT_OWNER:
                try:
                    await self._record_alone(request)
                except StoreError as exc:
                    out.append(exc)
                    continue
                except RAW_FAILURES as exc:
                    out.append(translate(exc))
                    continue
            out.append(reply)
        return out

    async def _record_alone(self, request: FinishRequest) -> None:
        record = request.record
        recent = await self.history(record.job, 20) if request.retried else []
        if not any(r.fence == record.fence and r.node == record.node for r in recent):
            await self.record([record], history=request.history)

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
