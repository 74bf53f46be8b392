"""What a decision records: one run record per tick decided without running, and why.

``acquire.lua`` answers a decision (run, skipped, queued, stale, ...) and what it met on
the way (an abandoned lease, a superseded queued tick). This turns that answer into the
run records it calls for, logs it, and tells the observer: no decision is silent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cronrace.clock import Clock
from cronrace.config import AgentSettings
from cronrace.observer import Observer
from cronrace.policies import Outcome
from cronrace.records import RunRecord
from cronrace.store import AcquireReply, ClaimReply

if TYPE_CHECKING:
    from cronrace.wakeup import Decided

log = logging.getLogger("cronrace.scheduler")


def decision_records(
    d: Decided, reply: AcquireReply, *, node_id: str, now_ms: int, observer: Observer
) -> list[RunRecord]:
    """Log a decision and return the run records it calls for (none for a run)."""
    # Garbage moved aside by the script (reply.quarantined) was logged by the store.
    job, plan, node = d.job.name, d.plan, node_id
    out: list[RunRecord] = []
    if reply.abandoned_fence:
        out.append(
            RunRecord(
                job,
                reply.abandoned_tick_s,
                reply.abandoned_owner.split(":")[0],
                Outcome.ABANDONED,
                reply.abandoned_fence,
                finished_ms=now_ms,
                error="lease expired without release",
            )
        )
        log.warning(
            "previous run was abandoned",
            extra={"job": job, "tick": reply.abandoned_tick_s, "fence": reply.abandoned_fence},
        )
        observer.decision(job, Outcome.ABANDONED.value)
    if reply.superseded_tick_s:
        out.append(
            RunRecord(
                job,
                reply.superseded_tick_s,
                node,
                Outcome.SKIPPED_OVERLAP,
                finished_ms=now_ms,
                trigger_id=reply.superseded_trigger_id,
                detail={"superseded_by": plan.claim_tick_s},
            )
        )
        observer.decision(job, Outcome.SKIPPED_OVERLAP.value)
    if reply.decision == "stale":
        out.append(RunRecord(job, plan.claim_tick_s, node, Outcome.STALE, finished_ms=now_ms))
        log.warning(
            "tick already decided (stale claim)",
            extra={"job": job, "tick": plan.claim_tick_s, "watermark": reply.prev_watermark_s},
        )
        observer.decision(job, Outcome.STALE.value)
        return out
    if plan.missed:
        out.append(
            RunRecord(
                job,
                plan.mark_tick_s,
                node,
                Outcome.MISSED,
                finished_ms=now_ms,
                count=plan.missed,
            )
        )
        observer.decision(job, Outcome.MISSED.value, plan.missed)
    outcome = {
        "skipped:overlap": Outcome.SKIPPED_OVERLAP,
        "skipped:paused": Outcome.SKIPPED_PAUSED,
        "queued": Outcome.QUEUED,
    }.get(reply.decision)
    if outcome is not None:
        tick = plan.fire_ticks_s[-1] if plan.fire_ticks_s else plan.claim_tick_s
        out.append(
            RunRecord(
                job,
                tick,
                node,
                outcome,
                finished_ms=now_ms,
                trigger_id=d.trigger_id,
                detail={"holder_fence": reply.holder_fence} if reply.holder_fence else None,
            )
        )
        log.info(
            "tick decided",
            extra={
                "job": job,
                "tick": tick,
                "node": node,
                "outcome": outcome.value,
                "holder_fence": reply.holder_fence,
            },
        )
        observer.decision(job, outcome.value)
    return out


def not_replicated_records(
    short: Sequence[tuple[Decided, ClaimReply]],
    settings: AgentSettings,
    clock: Clock,
    observer: Observer,
) -> list[RunRecord]:
    """Log and return the records of won claims too few replicas confirmed (not run)."""
    now_ms = int(clock.time() * 1000)
    wanted = settings.claim_replicas
    records = [
        RunRecord(
            d.job.name,
            d.plan.claim_tick_s,
            settings.node_id,
            Outcome.NOT_REPLICATED,
            finished_ms=now_ms,
            error=f"{reply.acked} of {wanted} replicas confirmed",
        )
        for d, reply in short
    ]
    log.error(
        "won claims not replicated in time; not running them",
        extra={
            "jobs": [r.job for r in records],
            "acked": min(reply.acked for _d, reply in short),
            "wanted": wanted,
        },
    )
    for record in records:
        observer.decision(record.job, record.outcome.value)
    return records
