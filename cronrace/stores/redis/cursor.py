"""The dense cursor on Redis: decisions, a run's lease and its end (cronrace/protocol/).

Part of :class:`~cronrace.stores.redis.Store`: ``decide.lua``, ``renew_lease.lua`` and
``end_run.lua`` implement :func:`cronrace.protocol.decide`, :func:`~cronrace.protocol.renew`
and :func:`~cronrace.protocol.release` on the job's keys (docs/design.md section 2), with
the server's ``TIME`` as the reference's clock. A batch of decisions is one pipeline per
shard, as claims are; a script the server lost (a restart, a failover, ``SCRIPT FLUSH``) is
sent again by its source (``scripts.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from cronrace.errors import StoreError
from cronrace.protocol import DecideReply, DecideRequest, ReleaseReply, Renewal, RenewRequest
from cronrace.stores.redis.decisions import (
    decide_call,
    decode_decide,
    decode_renewal,
    decode_run_end,
    end_run_call,
    renew_call,
)
from cronrace.stores.redis.errors import Passage, passage, translate, translating
from cronrace.stores.redis.garbage import is_wrong_type, report_quarantined
from cronrace.stores.redis.replies import decode_text, int_or_none
from cronrace.stores.redis.runs import RunCommands
from cronrace.stores.redis.scripts import locate_lines
from cronrace.stores.redis.shards import get_many
from cronrace.stores.values import RunEnd

log = logging.getLogger("cronrace.stores.redis")


def _failed(script: str, job: str, error: BaseException) -> StoreError:
    """A script call's error as the store reports it: not run or maybe run (sent again, it
    answers what it did), or the script failed (with its line in the file we ship)."""
    meaning = passage(error, in_reply=True)
    if meaning.passes or meaning is Passage.REFUSED or not isinstance(error, ResponseError):
        return translate(error, in_reply=True)
    where = locate_lines(script, str(error))
    return StoreError(f"{script}.lua failed for job {job!r}: {where}")


@translating
class CursorCommands(RunCommands):
    """Decisions under the dense cursor, and the leases of the runs they grant."""

    async def decide(self, requests: Sequence[DecideRequest]) -> list[DecideReply | Exception]:
        """Decide each request atomically (``decide.lua``), one pipeline per shard.

        Each request is sent with the highest fence known for its job: the request's, or
        the one this store has seen if higher.

        Returns:
            One reply per request, or its error: :class:`~cronrace.errors.StoreError`'s
            family as the store translates errors (unavailable or ambiguous: sending the
            same request again replays its answer if it had run).

        Raises:
            RedisUnavailableError: no shard answered.
        """
        calls = [decide_call(self.keys, req, self.known_fence(req.job)) for req in requests]
        replies = await self.scripts.eval_many("decide", calls)
        out: list[DecideReply | Exception] = []
        for req, reply in zip(requests, replies, strict=True):
            if isinstance(reply, BaseException):
                out.append(_failed("decide", req.job, reply))
                continue
            try:
                decided, quarantined = decode_decide(reply)
            except StoreError as exc:
                out.append(exc)
                continue
            self._saw_fence(req.job, decided.fence, *decided.fences)
            if quarantined:
                report_quarantined(quarantined, script="decide", job=req.job, tick=req.tick_s)
            out.append(decided)
        return out

    async def renew_lease(self, job: str, request: RenewRequest) -> Renewal:
        """Extend (or re-assert) a run's lease (``renew_lease.lua``)."""
        keys, args = renew_call(self.keys, job, request)
        (reply,) = await self.scripts.eval_many("renew_lease", [(keys, args)])
        if isinstance(reply, BaseException):
            raise _failed("renew_lease", job, reply)
        renewal, quarantined = decode_renewal(reply)
        if quarantined:
            report_quarantined(quarantined, script="renew_lease", job=job, fence=request.fence)
        if renewal in (Renewal.RENEWED, Renewal.REASSERTED):
            self._saw_fence(job, request.fence)
        return renewal

    async def end_run(self, request: RunEnd) -> ReleaseReply:
        """Write a run's record and hand its lease on or release it (``end_run.lua``)."""
        (reply,) = await self.end_runs([request])
        if isinstance(reply, StoreError):
            raise reply
        return reply

    async def end_runs(self, requests: Sequence[RunEnd]) -> list[ReleaseReply | StoreError]:
        """End many runs (``end_run.lua``), one pipeline per shard: the runs that end
        together (a tick's, or those released after an outage) share a round trip.

        Returns:
            One reply, or that run's error, per request.

        Raises:
            RedisUnavailableError: no shard answered.
        """
        calls = [end_run_call(self.keys, request) for request in requests]
        replies = await self.scripts.eval_many("end_run", calls)
        out: list[ReleaseReply | StoreError] = []
        for request, reply in zip(requests, replies, strict=True):
            if isinstance(reply, BaseException):
                out.append(_failed("end_run", request.job, reply))
                continue
            try:
                ended, quarantined = decode_run_end(reply)
            except StoreError as exc:
                out.append(exc)
                continue
            if quarantined:
                report_quarantined(
                    quarantined, script="end_run", job=request.job, fence=request.fence
                )
            self._saw_fence(request.job, ended.fence)
            out.append(ended)
        return out

    async def cursors(self, jobs: Sequence[str]) -> dict[str, int | None]:
        """Each job's cursor (None: none yet, or garbage: logged, moved aside by the job's
        next decision); the fence counters are read too, as evidence of fences seen."""
        if not jobs:
            return {}
        keys = [key for job in jobs for key in (self.keys.cursor(job), self.keys.fence(job))]
        replies: list[Any] = []
        for reply in await get_many(self.client, keys):
            if isinstance(reply, Exception):
                if not is_wrong_type(reply):
                    raise reply
                reply = None
            replies.append(reply)
        out: dict[str, int | None] = {}
        for job, raw, fence in zip(jobs, replies[0::2], replies[1::2], strict=True):
            out[job] = int_or_none(raw)
            self._saw_fence(job, int_or_none(fence) or 0)
            if raw is not None and out[job] is None:
                log.error(
                    "garbage under the cursor key; treating it as absent",
                    extra={"job": job, "key": self.keys.cursor(job), "value": decode_text(raw)},
                )
        return out
