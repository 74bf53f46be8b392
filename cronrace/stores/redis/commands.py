"""Every Redis command cronrace uses: :class:`Store`.

This package is the only place that spells a key or a Redis command (docs/design.md
section 7). All keys of one job share the hash tag ``{<job>}``, so every script touches one
Cluster slot. Scripts live in ``scripts``; garbage under our keys is moved aside and
reported (``garbage``), never left to fail every tick of its job.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from cronrace.errors import RedisAccessError, RedisUnavailableError, StoreError
from cronrace.stores.redis.claimreplies import (
    CLAIM_MOVING_ROUNDS,
    LOST,
    WON,
    add_again,
    failed_items,
    first_error,
    slot_moving,
)
from cronrace.stores.redis.cursor import CursorCommands
from cronrace.stores.redis.errors import translating
from cronrace.stores.redis.garbage import is_wrong_type, report_quarantined
from cronrace.stores.redis.keys import fence_key
from cronrace.stores.redis.members import MemberCommands
from cronrace.stores.redis.replies import (
    decode_claim_owner,
    decode_quarantined,
    decode_text,
    int_or_none,
)
from cronrace.stores.redis.shards import ShardReply, per_shard
from cronrace.stores.values import (
    Claim,
    ClaimOutcome,
    ClaimReply,
    Owner,
)

log = logging.getLogger("cronrace.stores.redis")

#: A lost claim witnesses a wipe only while it has this long (s) to live still: a claim
#: read back just before its expiry could have expired on its own.
WITNESS_MARGIN_S = 1.0


@translating
class Store(CursorCommands, MemberCommands):
    """Redis operations of one namespace: the race, decisions, leases, records, handlers.

    The shared state lives in :class:`~cronrace.stores.redis.base.StoreBase`, the operator side
    in :class:`~cronrace.stores.redis.operator.OperatorCommands`, decisions under the dense
    cursor in :class:`~cronrace.stores.redis.cursor.CursorCommands`, runs' records in
    :class:`~cronrace.stores.redis.runs.RunCommands`, heartbeats and membership in
    :class:`~cronrace.stores.redis.members.MemberCommands`.
    """

    # -- the race --------------------------------------------------------------------

    async def claim_each(
        self,
        claims: Sequence[Claim],
        owner: Owner,
        *,
        read_back: bool = False,
        wait_replicas: int = 0,
        wait_ms: int = 0,
    ) -> list[ClaimReply]:
        """Race for every claim: one pipeline per shard, in parallel, decided per shard.

        Args:
            claims: the ticks (or triggers) to race for.
            owner: this process; its ``<node_id>:<nonce>`` is the claim's value.
            read_back: read every key back after claiming it (:attr:`Claim.read_back`
                asks it for one), for claims that may have been written by an attempt
                whose reply was lost: the value is unique to this process, so finding it
                means this node won, whichever attempt set it (docs/design.md section 8).
                Found decided (decide.lua appended its answer), it was this process's
                and is decided: lost, not won again.
            wait_replicas: when > 0, each shard's pipeline ends with ``WAIT``, so that a
                won claim counts only once that many replicas have it (a failover could
                otherwise lose it and let another node win the same tick).
            wait_ms: how long ``WAIT`` may block.

        Returns:
            One reply per claim; ``UNKNOWN`` where its shard did not answer.

        Raises:
            RedisUnavailableError: no shard answered; every claim is ambiguous.
        """
        spell, spell_trigger = self.keys.claim, self.keys.trigger_claim
        keys = [
            spell(c.job, c.tick_s) if c.trigger_id is None else spell_trigger(c.job, c.trigger_id)
            for c in claims
        ]
        value = str(owner)
        # Until this node has seen a fence of a job, each of its claims reads the job's
        # counter too: a claim lost to a winner whose acquire has not reached Redis yet
        # (a loaded machine), or whose winner died, is no evidence that the job has a
        # fence; only a fence seen is (``known_fence``). One GET per job, at start-up.
        # A claim lost while the counter was not there yet is kept as a witness: should it
        # be gone at the next claim although its TTL has not run out, Redis lost the job's
        # data, which is evidence enough (a node that lost only a job's first tick and
        # then meets a wipe must hold, or its run overlaps the winner's).
        seen = self._fences_seen  # known_fence, without a call per claim
        probes = [not seen.get(claim.job) for claim in claims]
        sent_at = time.monotonic()
        witnesses = [
            self._witness_of(claim.job, sent_at) if probe else None
            for claim, probe in zip(claims, probes, strict=True)
        ]
        reads = [read_back or claim.read_back for claim in claims]

        def add(pipe: Any, index: int) -> None:
            # pipe.set(key, value, nx=True, px=ttl), without its argument checks per claim.
            pipe.execute_command("SET", keys[index], value, "PX", claims[index].ttl_ms, "NX")
            if reads[index]:
                pipe.get(keys[index])
            if probes[index]:
                pipe.get(self.keys.fence(claims[index].job))
                witness = witnesses[index]
                if witness is not None:
                    pipe.exists(witness)

        replies = await self._claims_sent(keys, add, wait_replicas=wait_replicas, wait_ms=wait_ms)
        out: list[ClaimReply] = []
        errors: list[BaseException] = []
        for claim, reply, witness, read in zip(claims, replies, witnesses, reads, strict=True):
            answers = reply.replies
            claim_replies = 2 if read else 1
            probed = False
            if isinstance(answers, list) and len(answers) > claim_replies:
                # The fence probe: garbage there (or an error reply) is no evidence, and
                # the job's next acquire moves it aside.
                probed = self._probed(claim.job, answers[claim_replies:], witness)
                answers = answers[:claim_replies]
            failed: BaseException | None = None
            if isinstance(answers, list):
                for answer in answers:
                    if isinstance(answer, BaseException):
                        failed = answer
                        break
            else:
                failed = answers
            if failed is not None:
                errors.append(failed)
                out.append(ClaimReply(ClaimOutcome.UNKNOWN))
                continue
            assert isinstance(answers, list)
            # decide.lua appends its answer to the claim's value once decided: a claim read
            # back is this process's to decide only while it holds the bare value. Decided,
            # it was decided here (by an earlier wake-up); won again, the remembered grant
            # of a run that has finished was granted a second time (a tick ran twice).
            won = bool(answers[0]) or (read and decode_text(answers[1]) == value)
            if not won:
                if probed and claim.trigger_id is None and self.known_fence(claim.job) == 0:
                    self._lost_unseen[claim.job] = (
                        keys[len(out)],
                        sent_at + claim.ttl_ms / 1000 - WITNESS_MARGIN_S,
                    )
                out.append(ClaimReply(ClaimOutcome.LOST, reply.acked) if reply.acked else LOST)
            elif wait_replicas > 0 and reply.acked < wait_replicas:
                out.append(ClaimReply(ClaimOutcome.NOT_REPLICATED, reply.acked))
            else:
                out.append(ClaimReply(ClaimOutcome.WON, reply.acked) if reply.acked else WON)
        if errors and len(errors) == len(out):
            if isinstance(errors[0], RedisAccessError):
                raise errors[0]  # refused, not unavailable: the access watch has it
            raise RedisUnavailableError(f"claim failed: {errors[0]}") from errors[0]
        if errors:
            log.error(
                "claims on some shards were not answered; they will be read back",
                extra={"unanswered": len(errors), "claims": len(out), "error": str(errors[0])},
            )
        return out

    async def _claims_sent(
        self,
        keys: Sequence[str],
        add: Callable[[Any, int], object],
        *,
        wait_replicas: int,
        wait_ms: int,
    ) -> list[ShardReply]:
        """Send the claims; those refused while their slot moves are sent again at once.

        A claim is one key, so its slot is never half-moved for it for long: redis-py
        follows ``ASK`` and ``MOVED``, and gives up only when the slot map it holds is
        behind for longer than its redirections last. Nothing ran then, so sending the same
        ``SET NX`` again is safe, and a healthy cluster being resharded makes no claim
        ambiguous and no node not ready.
        """
        replies = await per_shard(
            self.client, keys, add, wait_replicas=wait_replicas, wait_ms=wait_ms
        )
        for _round in range(CLAIM_MOVING_ROUNDS):
            moving = [i for i in failed_items(replies) if slot_moving(replies[i])]
            if not moving:
                break
            log.info(
                "claims met a slot moving between shards; sending them again",
                extra={
                    "claims": len(moving),
                    "key": keys[moving[0]],
                    "error": str(first_error(replies[moving[0]])),
                },
            )
            again = await per_shard(
                self.client,
                [keys[i] for i in moving],
                functools.partial(add_again, add, moving),
                wait_replicas=wait_replicas,
                wait_ms=wait_ms,
            )
            for index, reply in zip(moving, again, strict=True):
                replies[index] = reply
        return replies

    def _witness_of(self, job: str, now_s: float) -> str | None:
        """The lost claim of ``job`` to read back with this claim, while it must exist."""
        witness = self._lost_unseen.get(job)
        if witness is None:
            return None
        if now_s >= witness[1]:
            del self._lost_unseen[job]  # it may have expired on its own: no witness now
            return None
        return witness[0]

    def _probed(self, job: str, answers: Sequence[Any], witness: str | None = None) -> bool:
        """Take a claim's probe answers (the counter, then ``witness``'s if one was sent);
        False when the counter could not be read.

        Two claims of one job in a batch (a tick and a manual trigger) carry the same
        witness: the first answer takes it out of the bookkeeping, the second is read
        from ``witness``, not from it."""
        if isinstance(answers[0], BaseException):
            return False
        fence = int_or_none(answers[0])
        if fence:
            self._saw_fence(job, fence)
            self._lost_unseen.pop(job, None)
            return True
        if len(answers) > 1 and answers[1] == 0:
            # A claim this node lost is gone before its TTL: Redis lost the job's data,
            # and a fence the winner may be running under with it.
            log.warning(
                "a lost claim vanished before its TTL: taking it as a wipe of the job",
                extra={"job": job, "claim": witness},
            )
            self._lost_unseen.pop(job, None)
            self._saw_fence(job, 1)
        return True

    async def read_claims(self, claims: Sequence[Claim], owner: Owner) -> list[bool]:
        """Read claim keys back without claiming: True where one holds ``owner`` (ours)."""
        if not claims:
            return []
        pipe = self.client.pipeline(transaction=False)  # GETs, not MGET: one slot per job
        for claim in claims:
            pipe.get(self._claim_key(claim))
        found = await pipe.execute()
        value = str(owner)
        return [raw is not None and str(decode_claim_owner(raw)) == value for raw in found]

    # -- node bookkeeping ------------------------------------------------------------

    async def register_jobs(self, specs: dict[str, dict[str, str]]) -> None:
        """Publish job definitions so that operator commands can list them.

        Only the specs not already stored as they are: ``<ns>:specs`` keeps each job's
        published spec (JSON) beside the fields written into its state hash, and one
        ``HMGET`` of it tells which differ. A node of 10,000 jobs starting where the
        fleet published the same definitions writes nothing (it wrote 10,001 commands:
        ~40 % of its start-up CPU); the last node to publish a job's changed spec still
        wins, as before. A wipe takes ``<ns>:specs`` with the state hashes, so the
        heartbeat's publishing after it writes every spec again.
        """
        if not specs:
            return
        sort = orjson.OPT_SORT_KEYS
        # Decoded: orjson's bytes keep the 1 kB it allocates each (10 MB for 10,000 specs,
        # 40 MB at the peak of a start-up), a str only its length.
        published = {job: orjson.dumps(spec, option=sort).decode() for job, spec in specs.items()}
        try:
            stored = await self.client.hmget(self.keys.specs, list(published))
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            stored = [None] * len(published)  # garbage: moved aside by the HSET below
        changed = [
            job
            for job, old in zip(published, stored, strict=True)
            if old is None or old.decode() != published[job]
        ]
        if not changed:
            return
        commands = [self._command("", "jobs", "sadd", *changed)]
        for job in changed:
            mapping = {f"spec_{k}": v for k, v in specs[job].items()}
            commands.append(self._command(job, "state", "hset", mapping=mapping))
        commands.append(
            self._command("", "specs", "hset", mapping={job: published[job] for job in changed})
        )
        await self._pipeline_repairing(commands)

    # -- what handlers and targets write --------------------------------------------

    async def fenced_set(self, key: str, value: str | bytes, fence: int, ttl_ms: int = 0) -> bool:
        """Write ``value`` under ``key`` unless a higher fence wrote it before.

        The highest fence is kept under :func:`~cronrace.stores.redis.keys.fence_key`, in the same
        Cluster slot as ``key``.

        Raises:
            StoreError: ``key`` has braces but no hash tag, so no key in its slot can be
                named for the fence.
        """
        reply = await self._eval("fenced_set", [key, fence_key(key)], [fence, value, ttl_ms])
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
        except (RedisError, RedisClusterException, OSError, StoreError):
            return False
