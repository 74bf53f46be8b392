"""A run's Redis side: renewing and releasing its lease, and writing its record.

Part of :class:`~cronrace.stores.redis.Store` (its base class): ``release.lua`` releases a lease
or hands it on, and appends the run's record in the same call, so the next run of a job
never starts before the history shows this one; runs finishing together share a pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from cronrace.errors import StoreError
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.stores.redis.errors import RAW_FAILURES, Passage, passage, translate, translating
from cronrace.stores.redis.garbage import Command, is_wrong_type, report_quarantined
from cronrace.stores.redis.operator import OperatorCommands
from cronrace.stores.redis.replies import (
    decode_quarantined,
    decode_release,
    decode_renewal,
    decode_run_entries,
)
from cronrace.stores.redis.scripts import locate_lines
from cronrace.stores.values import FinishRequest, Owner, ReleaseDecision, ReleaseReply, Renewal


@translating
class RunCommands(OperatorCommands):
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
        keys = [
            self.keys.lease(job),
            self.keys.hold(job),
            self.keys.fence(job),
            self.keys.state(job),
        ]
        args = [
            fence,
            ttl_ms,
            self.keys.quarantine(job),
            str(owner) if owner is not None else "",
            tick_s,
            "1" if starting else "0",
        ]
        reply = await self._eval("renew", keys, args)
        report_quarantined(decode_quarantined(reply[1]), script="renew", job=job, fence=fence)
        return decode_renewal(reply[0])

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
        """Release a lease (``release.lua``), or hand it on to a queued or continued tick.

        ``record``, when given, is appended to the history in the same script, only if the
        fence still matched: a retry after a lost reply cannot write it twice.
        """
        keys, args = self._release_call(
            job, fence, owner, lease_ttl_ms, continue_tick_s, record, history
        )
        reply = await self._eval("release", keys, args)
        return self._decode_release(job, fence, reply)

    def _release_call(
        self,
        job: str,
        fence: int,
        owner: Owner,
        lease_ttl_ms: int,
        continue_tick_s: int,
        record: RunRecord | None,
        history: int,
    ) -> tuple[list[str], list[Any]]:
        of = self.keys.of(job)
        keys = [of.lease, of.fence, of.pending, of.state, of.runs, of.hold]
        payload = record.to_json() if record is not None else b""
        spelled = self._owner_spelled
        if spelled[0] is not owner:  # one owner per agent: spelled once, not per run
            spelled = self._owner_spelled = (owner, str(owner))
        args = [fence, spelled[1], lease_ttl_ms, continue_tick_s, payload, history, of.quarantine]
        return keys, args

    def _decode_release(self, job: str, fence: int, reply: Any) -> ReleaseReply:
        quarantined = decode_quarantined(reply[3])
        if quarantined:  # nearly never: no call with its keywords per release
            report_quarantined(quarantined, script="release", job=job, fence=fence)
        self._saw_fence(job, fence, int(reply[1]))
        return decode_release(reply, quarantined)

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

        With a lease both happen in one script call (one round trip): see
        :meth:`finish_many`, which this is for one run.

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
        """Write finished runs' records and release their leases, in one pipeline per shard.

        Each run's record and release happen in one script call, so the next run of the
        job never starts before the history shows this one. When the lease had moved on
        (``not_owner``) the record is appended on its own; after a retry (``retried``)
        only if the history does not show this fence yet, as the first attempt may have
        written it.

        Returns:
            One release decision per request, or that request's error.

        Raises:
            StoreError: no call got an answer (every request failed alike).
        """
        calls = [
            self._release_call(
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
        replies = await self.scripts.eval_many("release", calls)
        out: list[ReleaseReply | StoreError] = []
        for request, reply in zip(requests, replies, strict=True):
            try:
                decoded = self._finished(request, reply)
                if decoded.decision is ReleaseDecision.NOT_OWNER:
                    await self._record_alone(request)
                out.append(decoded)
            except StoreError as exc:
                out.append(exc)
            except RAW_FAILURES as exc:
                out.append(translate(exc))
        return out

    def _finished(self, request: FinishRequest, reply: Any) -> ReleaseReply:
        """Decode one run's release (not a coroutine: one per run, nearly all released)."""
        if isinstance(reply, BaseException):
            if passage(reply, in_reply=True) is Passage.FAILED and isinstance(reply, ResponseError):
                raise type(reply)(locate_lines("release", str(reply))) from reply
            raise translate(reply, in_reply=True) from reply
        return self._decode_release(request.record.job, request.release_fence, reply)

    async def _record_alone(self, request: FinishRequest) -> None:
        """Write a run's record on its own: the lease had moved on, so the release did not."""
        record = request.record
        recent = await self.history(record.job, 20) if request.retried else []
        if not any(r.fence == record.fence and r.node == record.node for r in recent):
            await self.record([record], history=request.history)

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
