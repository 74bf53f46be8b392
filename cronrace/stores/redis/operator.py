"""What operators read and control: nodes, job states, history, pause, manual triggers.

The CLI and the agent's operator API use these; none of them decides a tick. Garbage under
a key reads as unset (and is logged); the next write moves it aside.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

from redis.exceptions import ResponseError

from cronrace.model.records import NodeInfo, RunRecord
from cronrace.stores.redis.base import StoreBase
from cronrace.stores.redis.errors import translating
from cronrace.stores.redis.garbage import is_wrong_type, quarantine
from cronrace.stores.redis.replies import (
    decode_claim_owner,
    decode_job_state,
    decode_run_entries,
    decode_text,
)
from cronrace.stores.values import JobState

log = logging.getLogger("cronrace.stores.redis")

#: The highest sequence number of a stream id (an unsigned 64-bit integer).
MAX_STREAM_SEQUENCE = 2**64 - 1


@translating
class OperatorCommands(StoreBase):
    """The operator side of :class:`~cronrace.stores.redis.Store`."""

    async def nodes(self, *, heartbeat_ttl_ms: int) -> list[NodeInfo]:
        """List live nodes, newest heartbeat first."""
        seconds, micros = await self.client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        rows = await self.client.zrangebyscore(self.keys.nodes, now_ms, "+inf", withscores=True)
        out = [
            NodeInfo(
                node_id=decode_text(node),
                expires_ms=int(score),
                last_seen_ms=int(score) - heartbeat_ttl_ms,
            )
            for node, score in rows
        ]
        return sorted(out, key=lambda node: node.last_seen_ms, reverse=True)

    async def known_jobs(self) -> list[str]:
        """Every job any node of this namespace has registered."""
        return sorted(decode_text(job) for job in await self.client.smembers(self.keys.jobs))

    async def job_states(self, jobs: Sequence[str]) -> list[JobState]:
        """Read what Redis knows of each job, in one round trip; garbage reads as unset."""
        pipe = self.client.pipeline(transaction=False)
        read = []
        for job in jobs:
            read += [self.keys.cursor(job), self.keys.lease(job), self.keys.lease(job)]
            read += [self.keys.state(job), self.keys.fence(job)]
            pipe.get(self.keys.cursor(job))
            pipe.hgetall(self.keys.lease(job))
            pipe.pttl(self.keys.lease(job))
            pipe.hgetall(self.keys.state(job))
            pipe.get(self.keys.fence(job))
        replies = await pipe.execute(raise_on_error=False)
        for index, (key, reply) in enumerate(zip(read, replies, strict=True)):
            if not isinstance(reply, Exception):
                continue
            if not is_wrong_type(reply):
                raise reply
            log.error("garbage under a key; shown as unset", extra={"key": key})
            replies[index] = None
        states = [
            decode_job_state(job, *replies[index * 5 : index * 5 + 5])
            for index, job in enumerate(jobs)
        ]
        for state in states:
            lease_fence = state.lease.fence if state.lease else 0
            self._saw_fence(state.job, state.last_fence or 0, lease_fence)
        return states

    # -- operator controls -----------------------------------------------------------

    async def set_paused(self, job: str, paused: bool) -> None:
        """Pause or resume a job for every node (``decide.lua`` reads the flag)."""
        if paused:
            command = self._command(job, "state", "hset", "paused", "1")
        else:
            command = self._command(job, "state", "hdel", "paused")
        await self._pipeline_repairing([command])

    async def request_trigger(self, job: str) -> str:
        """Ask every node to race for one immediate run of ``job``; return its id.

        The trigger is outstanding (``triggers:{<job>}``, posted at the server's clock)
        before any node reads it: a decision removes it (docs/design.md section 3).
        """
        trigger_id = secrets.token_hex(8)
        seconds, micros = await self.client.time()
        posted_ms = int(seconds) * 1000 + int(micros) // 1000
        outstanding = self._command(job, "triggers", "hset", trigger_id, posted_ms)
        await self._pipeline_repairing([outstanding])
        fields = {"op": "trigger", "job": job, "id": trigger_id}
        xadd = self._command("", "control", "xadd", fields, maxlen=1000, approximate=True)
        await self._pipeline_repairing([xadd])
        return trigger_id

    async def trigger_claimant(self, job: str, trigger_id: str) -> str | None:
        """Return the node that claimed a manual trigger, or None while nobody has."""
        value = await self.client.get(self.keys.trigger_claim(job, trigger_id))
        owner = decode_claim_owner(value)
        return None if owner is None else owner.node_id

    async def control_position(self) -> str:
        """Return the stream id after which new control requests will appear."""
        seconds, micros = await self.client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        # The last id of the millisecond before: a request written in this same millisecond
        # gets the id "<now_ms>-0", which "<now_ms>-0" itself would leave out (XREAD reads
        # strictly after). A request of that earlier instant may be read too: harmless,
        # since every node reads every request and a trigger's claim decides who runs it.
        return f"{now_ms - 1}-{MAX_STREAM_SEQUENCE}"

    async def read_control(
        self, after_id: str, *, block_ms: int
    ) -> list[tuple[str, dict[str, str]]]:
        """Block up to ``block_ms`` for control requests newer than ``after_id``."""
        try:
            reply = await self.client.xread(
                {self.keys.control: after_id}, block=block_ms, count=100
            )
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            await quarantine(self.scripts, self._command("", "control", "xread"))
            return []
        out: list[tuple[str, dict[str, str]]] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                out.append(
                    (
                        decode_text(entry_id),
                        {decode_text(k): decode_text(v) for k, v in fields.items()},
                    )
                )
        return out

    async def history(self, job: str, limit: int) -> list[RunRecord]:
        """Return the newest ``limit`` run records of ``job``, newest first."""
        try:
            entries = await self.client.xrevrange(self.keys.runs(job), count=limit)
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            # Reading moves nothing: the next record written moves the garbage aside.
            log.error(
                "garbage under the run history key; no history to show",
                extra={"job": job, "key": self.keys.runs(job), "error": str(exc)},
            )
            return []
        return decode_run_entries(job, entries)

    async def histories(self, jobs: Sequence[str], limit: int) -> dict[str, list[RunRecord]]:
        """Return the newest ``limit`` run records of each job, newest first; one round trip.

        A job whose history key holds garbage reads as no history (logged), as in
        :meth:`history`.
        """
        if not jobs:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for job in jobs:
            pipe.xrevrange(self.keys.runs(job), count=limit)
        out: dict[str, list[RunRecord]] = {}
        for job, reply in zip(jobs, await pipe.execute(raise_on_error=False), strict=True):
            if isinstance(reply, Exception):
                if not is_wrong_type(reply):
                    raise reply
                log.error(
                    "garbage under the run history key; no history to show",
                    extra={"job": job, "key": self.keys.runs(job), "error": str(reply)},
                )
                reply = []
            out[job] = decode_run_entries(job, reply)
        return out
