"""The reference state in a Redis namespace's keys (docs/design.md section 2), both ways.

Expiries are written absolute (``PXAT``, ``PEXPIREAT``) and read absolute
(``PEXPIRETIME``), so that loading and reading take no time out of a lifetime.
"""

from __future__ import annotations

from typing import Any

from cronrace.model.records import RunRecord
from cronrace.protocol import Claim, JobState, Lease, Pending
from cronrace.protocol.values import ClaimKey
from cronrace.stores.redis import Keys
from cronrace.stores.redis.decisions import decode_claim, encode_memo
from cronrace.stores.redis.replies import decode_run_entries, decode_text
from cronrace.stores.values import reference_record
from tests.topology import keys_matching


def _ticks(raw: str | None) -> tuple[int, ...]:
    return tuple(int(t) for t in (raw or "").split())


class RedisCodec:
    """One namespace's keys as reference states."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def _claim_key(self, job: str, key: ClaimKey) -> str:
        if isinstance(key, int):
            return self.keys.claim(job, key)
        return self.keys.trigger_claim(job, key.removeprefix("trigger:"))

    async def load(self, job: str, state: JobState, now_ms: int) -> None:
        of = self.keys.of(job)
        pipe = self.client.pipeline(transaction=False)
        fields: dict[str, Any] = {}
        if state.cursor_s is not None:
            pipe.set(of.cursor, state.cursor_s)
        if state.origin_s is not None:
            fields["origin"] = state.origin_s
        if state.fence is not None:
            pipe.set(of.fence, state.fence)
        lease = state.lease
        if lease is not None and lease.expires_ms > now_ms:
            held = {"owner": lease.owner, "fence": lease.fence, "ticks": _spell(lease.ticks_s)}
            held["started_ms"] = now_ms
            if lease.trigger_id is not None:
                held["trigger"] = lease.trigger_id
            if lease.held:
                held["held"] = 1
            if lease.reasserted:
                held["reasserted"] = 1
            pipe.hset(of.lease, mapping=held)
            pipe.pexpireat(of.lease, lease.expires_ms)
        if state.run is not None:
            run = state.run
            fields.update(run_owner=run.owner, run_fence=run.fence, run_ticks=_spell(run.ticks_s))
            if run.trigger_id is not None:
                fields["run_trigger"] = run.trigger_id
        if state.pending is not None:
            pipe.set(of.pending, state.pending.tick_s)
            if state.pending.trigger_id is not None:
                fields["pending_trigger"] = state.pending.trigger_id
        if state.paused:
            fields["paused"] = 1
        if fields:
            pipe.hset(of.state, mapping=fields)
        if state.hold_until_ms > now_ms:
            pipe.set(of.hold, state.hold_fence, pxat=state.hold_until_ms)
        for key, claim in state.claims:
            if claim.expires_ms > now_ms:
                value = claim.owner if claim.memo is None else encode_memo(claim.owner, claim.memo)
                pipe.set(self._claim_key(job, key), value, pxat=claim.expires_ms)
        if state.triggers:
            # Newest first: a small hash lists its fields in the order written, and a
            # store must not take that order for their age.
            pipe.hset(of.triggers, mapping=dict(reversed(state.triggers)))
        for r in state.history:
            record = RunRecord(
                job, r.tick_s, r.node, r.outcome, r.fence, 0, now_ms, None, r.count,
                r.trigger_id, None, r.last_s,
            )  # fmt: skip
            pipe.xadd(of.runs, {"r": record.to_json()})
        await pipe.execute()

    async def read(self, job: str) -> JobState:
        of = self.keys.of(job)
        pipe = self.client.pipeline(transaction=False)
        pipe.get(of.cursor)
        pipe.hgetall(of.state)
        pipe.get(of.fence)
        pipe.hgetall(of.lease)
        pipe.execute_command("PEXPIRETIME", of.lease)
        pipe.get(of.pending)
        pipe.execute_command("PEXPIRETIME", of.hold)
        pipe.get(of.hold)
        pipe.hgetall(of.triggers)
        pipe.xrange(of.runs)
        (
            cursor,
            state,
            fence,
            lease,
            lease_at,
            pending,
            hold_at,
            hold_fence,
            triggers,
            runs,
        ) = await pipe.execute()
        s = {decode_text(k): decode_text(v) for k, v in state.items()}
        held = {decode_text(k): decode_text(v) for k, v in lease.items()}
        return JobState(
            cursor_s=None if cursor is None else int(cursor),
            origin_s=int(s["origin"]) if "origin" in s else None,
            fence=None if fence is None else int(fence),
            lease=_lease(held, int(lease_at)) if held else None,
            run=_run(s),
            pending=None if pending is None else Pending(int(pending), s.get("pending_trigger")),
            paused=s.get("paused") == "1",
            hold_until_ms=max(0, int(hold_at)),
            hold_fence=int(hold_fence) if hold_at > 0 and hold_fence is not None else 0,
            claims=await self._claims(job),
            triggers=tuple(
                sorted(
                    ((decode_text(t), int(at)) for t, at in triggers.items()),
                    key=lambda t: (t[1], t[0]),
                )
            ),
            history=tuple(reference_record(r) for r in decode_run_entries(job, runs)),
        )

    async def _claims(self, job: str) -> tuple[tuple[ClaimKey, Claim], ...]:
        prefix = self.keys.claim(job, 0).removesuffix("0")
        names = sorted(decode_text(k) for k in await keys_matching(self.client, prefix + "*"))
        if not names:
            return ()
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
            pipe.execute_command("PEXPIRETIME", name)
        replies = await pipe.execute()
        found: list[tuple[ClaimKey, Claim]] = []
        for name, raw, at in zip(names, replies[0::2], replies[1::2], strict=True):
            if raw is None:
                continue  # ran out between listing and reading
            rest = name.removeprefix(prefix)
            key: ClaimKey = rest if rest.startswith("trigger:") else int(rest)
            owner, memo = decode_claim(raw)
            found.append((key, Claim(owner, int(at), memo)))
        return tuple(sorted(found, key=lambda kc: str(kc[0])))


def _spell(ticks: tuple[int, ...]) -> str:
    return " ".join(map(str, ticks))


def _lease(held: dict[str, str], expires_ms: int) -> Lease:
    return Lease(
        held["owner"],
        int(held["fence"]),
        _ticks(held.get("ticks")),
        held.get("trigger"),
        expires_ms,
        held=held.get("held") == "1",
        reasserted=held.get("reasserted") == "1",
    )


def _run(s: dict[str, str]) -> Lease | None:
    if "run_fence" not in s:
        return None
    return Lease(
        s["run_owner"], int(s["run_fence"]), _ticks(s.get("run_ticks")), s.get("run_trigger")
    )
