"""Every Redis command cronrace uses: :class:`Store`.

This package is the only place that spells a key or a Redis command (DESIGN.md section
7). All keys of one job share the hash tag ``{<job>}``, so every script touches one
Cluster slot. Scripts live in ``scripts``; garbage under our keys is moved aside and
reported (``garbage``), never left to fail every tick of its job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, cast

from redis.exceptions import RedisError

from cronrace.errors import RedisUnavailableError, StoreError
from cronrace.records import RunRecord
from cronrace.store.client import AMBIGUOUS_ERRORS, follow_primary
from cronrace.store.garbage import (
    TRANSIENT_REPLY_ERRORS,
    Command,
    is_wrong_type,
    report_quarantined,
)
from cronrace.store.operator import OperatorCommands
from cronrace.store.replies import (
    AcquireReply,
    AcquireRequest,
    Claim,
    HeartbeatReply,
    NotReplicatedError,
    ReleaseReply,
    decode_acquire,
    decode_quarantined,
    decode_text,
    int_or_none,
)
from cronrace.store.scripts import locate_lines

log = logging.getLogger("cronrace.store")


class Store(OperatorCommands):
    """Redis operations of one namespace: the race, decisions, leases, records, handlers.

    The shared state lives in :class:`~cronrace.store.base.StoreBase`, the operator side
    in :class:`~cronrace.store.operator.OperatorCommands`.
    """

    # -- the race --------------------------------------------------------------------

    def _claim_key(self, claim: Claim) -> str:
        if claim.trigger_id is not None:
            return self.keys.trigger_claim(claim.job, claim.trigger_id)
        return self.keys.claim(claim.job, claim.tick_s)

    async def claim(
        self, claims: Sequence[Claim], value: str, *, wait_replicas: int = 0, wait_ms: int = 0
    ) -> list[bool]:
        """Race for every claim in one pipeline; True where this node won.

        Args:
            claims: the ticks (or triggers) to race for.
            value: this process's claim value, ``<node_id>:<nonce>``.
            wait_replicas: when > 0, end the pipeline with ``WAIT`` so that a won claim
                counts only once that many replicas have it (a failover could otherwise
                lose it and let another node win the same tick).
            wait_ms: how long ``WAIT`` may block.

        Raises:
            RedisUnavailableError: Redis did not answer; the claims are ambiguous and the
                caller must call :meth:`resolve_claims` before deciding anything.
            NotReplicatedError: claims were won but fewer replicas confirmed them.
        """
        pipe = self.client.pipeline(transaction=False)
        for claim in claims:
            pipe.set(self._claim_key(claim), value, nx=True, px=claim.ttl_ms)
        won = await self._execute_claims(pipe, wait_replicas, wait_ms, lambda r: list(r))
        self._saw_claims(claims, won)
        return won

    def _saw_claims(self, claims: Sequence[Claim], won: Sequence[bool]) -> None:
        # A claim lost to another node means the job has been decided, almost always with
        # a fence: evidence (1) that a missing counter is a wipe, not a brand-new job.
        for claim, ok in zip(claims, won, strict=True):
            if not ok:
                self._saw_fence(claim.job, 1)

    async def _execute_claims(
        self, pipe: Any, wait_replicas: int, wait_ms: int, decode: Any
    ) -> list[bool]:
        if wait_replicas > 0:
            # WAIT covers the writes of this connection only: it must share the pipeline.
            pipe.execute_command("WAIT", wait_replicas, wait_ms)
        try:
            replies = await pipe.execute()
        except AMBIGUOUS_ERRORS as exc:
            raise RedisUnavailableError(f"claim failed: {exc}") from exc
        acked = int(replies.pop()) if wait_replicas > 0 else 0
        won = [bool(reply) for reply in decode(replies)]
        if wait_replicas > 0 and any(won) and acked < wait_replicas:
            raise NotReplicatedError(won, acked)
        return won

    async def resolve_claims(
        self, claims: Sequence[Claim], value: str, *, wait_replicas: int = 0, wait_ms: int = 0
    ) -> list[bool]:
        """Claim again and read each key back: a claim whose reply was lost may have won.

        The claim value is unique to this process, so finding it under the key means this
        node won, whichever attempt set it (DESIGN.md section 8).
        """
        pipe = self.client.pipeline(transaction=False)
        for claim in claims:
            key = self._claim_key(claim)
            pipe.set(key, value, nx=True, px=claim.ttl_ms)
            pipe.get(key)
        # acquire.lua appends its answer to the claim value ("<value>\n..."), so a won
        # claim that was already decided still reads as won.
        won = await self._execute_claims(
            pipe,
            wait_replicas,
            wait_ms,
            lambda r: [decode_text(found).split("\n", 1)[0] == value for found in r[1::2]],
        )
        self._saw_claims(claims, won)
        return won

    async def acquire(self, requests: Sequence[AcquireRequest]) -> list[AcquireReply | Exception]:
        """Decide every won claim in one pipeline (``acquire.lua``).

        Each request carries the highest fence this store has seen for its job, so the
        script can tell a wiped job (counter missing, fence known) from a brand-new one.

        Returns:
            One reply per request, or its error: :class:`RedisUnavailableError` when that
            call did not run and may be sent again (Redis loading, read-only, ...), a
            :class:`StoreError` for a script failure.

        Raises:
            RedisUnavailableError: Redis did not answer; the scripts may or may not have
                run. Sending the same requests again is safe: each returns its first
                answer (``replayed``) when it had run.
        """
        calls = []
        for req in requests:
            keys = (
                self.keys.lease(req.job),
                self.keys.fence(req.job),
                self.keys.last(req.job),
                self.keys.pending(req.job),
                self.keys.state(req.job),
                self._claim_key(Claim(req.job, req.decide_tick_s, 0, req.trigger_id)),
                self.keys.hold(req.job),
            )
            args = (
                req.decide_tick_s,
                req.mark_tick_s,
                req.run_tick_s,
                req.owner,
                req.lease_ttl_ms,
                req.overlap,
                req.mode,
                req.request_id,
                self.known_fence(req.job),
                self.keys.quarantine(req.job),
                req.trigger_id or "",
            )
            calls.append((keys, args))
        try:
            replies = await self.scripts.eval_many("acquire", calls)
        except AMBIGUOUS_ERRORS as exc:
            raise RedisUnavailableError(f"acquire failed: {exc}") from exc
        out: list[AcquireReply | Exception] = []
        for req, reply in zip(requests, replies, strict=True):
            if isinstance(reply, TRANSIENT_REPLY_ERRORS):
                out.append(RedisUnavailableError(f"acquire did not run: {reply}"))
                continue
            if isinstance(reply, Exception):
                where = locate_lines("acquire", str(reply))
                out.append(StoreError(f"acquire.lua failed for job {req.job!r}: {where}"))
                continue
            decoded = decode_acquire(reply)
            self._saw_fence(req.job, decoded.fence, decoded.holder_fence, decoded.abandoned_fence)
            report_quarantined(
                decoded.quarantined, script="acquire", job=req.job, tick=req.decide_tick_s
            )
            out.append(decoded)
        return out

    async def renew(self, job: str, fence: int, ttl_ms: int) -> int:
        """Extend a lease: 1 renewed, 0 gone, -1 held by another fence."""
        keys = [self.keys.lease(job), self.keys.hold(job)]
        reply = await self._eval("renew", keys, [fence, ttl_ms, self.keys.quarantine(job)])
        report_quarantined(decode_quarantined(reply[1]), script="renew", job=job, fence=fence)
        return int(reply[0])

    async def release(
        self,
        job: str,
        fence: int,
        *,
        owner: str,
        lease_ttl_ms: int,
        continue_tick_s: int = 0,
        record: RunRecord | None = None,
        history: int = 1000,
    ) -> ReleaseReply:
        """Release a lease (``release.lua``), or hand it on to a queued or continued tick.

        ``record``, when given, is appended to the history in the same script, only if the
        fence still matched: a retry after a lost reply cannot write it twice.
        """
        keys = [self.keys.lease(job), self.keys.fence(job), self.keys.pending(job)]
        keys += [self.keys.state(job), self.keys.runs(job), self.keys.hold(job)]
        payload = record.to_json() if record is not None else b""
        args = [fence, owner, lease_ttl_ms, continue_tick_s, payload, history]
        args.append(self.keys.quarantine(job))
        reply = await self._eval("release", keys, args)
        quarantined = decode_quarantined(reply[3])
        report_quarantined(quarantined, script="release", job=job, fence=fence)
        self._saw_fence(job, fence, int(reply[1]))
        return ReleaseReply(
            decision=decode_text(reply[0]),
            fence=int(reply[1]),
            tick_s=int(reply[2]),
            warnings=tuple(q.kind for q in quarantined),
            hold_ms=int(reply[4]),
            quarantined=quarantined,
            trigger_id=decode_text(reply[5]) or None,
        )

    async def finish(
        self,
        record: RunRecord,
        *,
        history: int,
        release_fence: int | None,
        owner: str,
        lease_ttl_ms: int,
        continue_tick_s: int = 0,
        retried: bool = False,
    ) -> ReleaseReply | None:
        """Write a run's record and, when ``release_fence`` is set, release its lease.

        With a lease both happen in one script call (one round trip), so the next run of
        the job never starts before the history shows this one. When the lease had moved
        on (``not_owner``) the record is appended on its own; after a retry (``retried``)
        only if the history does not show this fence yet, as the first attempt may have
        written it.

        Returns:
            The release decision (None without release).
        """
        if release_fence is None:
            await self.record([record], history=history)
            return None
        reply = await self.release(
            record.job,
            release_fence,
            owner=owner,
            lease_ttl_ms=lease_ttl_ms,
            continue_tick_s=continue_tick_s,
            record=record,
            history=history,
        )
        if reply.decision == "not_owner":
            recent = await self.history(record.job, 20) if retried else []
            if not any(r.fence == record.fence and r.node == record.node for r in recent):
                await self.record([record], history=history)
        return reply

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
            if record.outcome == "missed":
                commands.append(
                    self._command(record.job, "state", "hincrby", "missed", record.count)
                )
        await self._pipeline_repairing(commands)

    # -- node bookkeeping ------------------------------------------------------------

    async def heartbeat(
        self,
        node_id: str,
        *,
        now_ms: int,
        ttl_ms: int,
        epoch_candidate: str,
        prune: bool = True,
    ) -> HeartbeatReply:
        """Read the server clock and the epoch, and refresh this node's heartbeat.

        One round trip (two on Sentinel: the sentinels are asked where the primary is, so
        that a node leaves a demoted primary within a heartbeat). ``now_ms`` is the
        caller's estimate of server time; with ``prune``, members whose heartbeat expired
        before it are dropped from the live set (readers filter by score anyway, so
        pruning now and then is enough).
        """
        await follow_primary(self.client)
        commands = [
            self._command("", "epoch", "set", epoch_candidate, nx=True),
            self._command("", "epoch", "get"),
            self._command("", "nodes", "zadd", {node_id: now_ms + ttl_ms}),
        ]
        if prune:
            commands.append(self._command("", "nodes", "zremrangebyscore", "-inf", now_ms))
        # Garbage under the epoch is moved aside like any other: the fresh epoch then
        # written makes every node hold new runs once, as after a wipe (the safe side).
        (seconds, micros), *replies = await self._pipeline_repairing(commands, time_first=True)
        return HeartbeatReply(
            server_time_s=int(seconds) + int(micros) / 1e6, epoch=decode_text(replies[1])
        )

    async def leave(self, node_id: str) -> None:
        """Remove this node from the live set (graceful shutdown)."""
        await self.client.zrem(self.keys.nodes, node_id)

    async def register_jobs(self, specs: dict[str, dict[str, str]]) -> None:
        """Publish job definitions so that operator commands can list them."""
        if not specs:
            return
        commands = [self._command("", "jobs", "sadd", *specs)]
        for job, spec in specs.items():
            mapping = {f"spec_{k}": v for k, v in spec.items()}
            commands.append(self._command(job, "state", "hset", mapping=mapping))
        await self._pipeline_repairing(commands)

    async def watermarks(self, jobs: Sequence[str]) -> dict[str, int | None]:
        """Read the watermark of each job; garbage reads as None and is logged.

        The fence counters are read too: they are this node's first evidence that a job
        has had fences (see :meth:`known_fence`).
        """
        if not jobs:
            return {}
        # One GET per key (each in its job's slot, for Cluster); garbage of another type
        # reads as unset here, and the job's first acquire moves it aside and reports it.
        pipe = self.client.pipeline(transaction=False)
        for job in jobs:
            pipe.get(self.keys.last(job))
            pipe.get(self.keys.fence(job))
        replies = [
            None if isinstance(reply, Exception) and is_wrong_type(reply) else reply
            for reply in await pipe.execute(raise_on_error=False)
        ]
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        values, fences = replies[0::2], replies[1::2]
        out: dict[str, int | None] = {}
        for job, raw, fence in zip(jobs, values, fences, strict=True):
            out[job] = int_or_none(raw)
            self._saw_fence(job, int_or_none(fence) or 0)
            if raw is not None and out[job] is None:
                log.error(
                    "garbage under watermark key; treating it as absent",
                    extra={"job": job, "key": self.keys.last(job), "value": decode_text(raw)[:80]},
                )
        return out

    # -- what handlers and targets write --------------------------------------------

    async def fenced_set(self, key: str, value: str | bytes, fence: int, ttl_ms: int = 0) -> bool:
        """Write ``value`` under ``key`` unless a higher fence wrote it before."""
        reply = await self._eval(
            "fenced_set", [key, f"{key}:cronrace-fence"], [fence, value, ttl_ms]
        )
        report_quarantined(decode_quarantined(reply[1]), script="fenced_set", fence=fence)
        return bool(int(reply[0]))

    async def push_stream(self, stream: str, fields: dict[str, str], maxlen: int | None) -> str:
        """Append one entry to a Redis stream (the stream target); return its id."""
        entry_id = await self.client.xadd(
            stream, cast(Any, fields), maxlen=maxlen, approximate=maxlen is not None
        )
        return decode_text(entry_id)

    async def ping(self) -> bool:
        """Return whether Redis answers."""
        try:
            return bool(await self.client.ping())
        except (RedisError, OSError):
            return False
