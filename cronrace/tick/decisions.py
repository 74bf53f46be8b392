"""A tick's decision on this node: the request it sends and what its answer calls for.

A node proposes a plan for each due job (:class:`Proposal`); for every claim it wins it
sends a decision (:func:`decide_request`), which the store makes atomically as the
reference protocol does (cronrace/protocol/). The records of every tick the decision
covers are written by the store in the same step: nothing here writes one. What is left
to the node is to say what happened (:func:`report`: logs at the right level, the
observer's counts) and to start the run it was granted (:func:`run_start`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cronrace.model.job import Job
from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import Answer, DecideReply, DecideRequest, Record, Verdict
from cronrace.runtime.observer import Observer
from cronrace.stores.values import Owner
from cronrace.tick.plans import Plan

log = logging.getLogger("cronrace.tick.loop")

#: How the decision records a node did not make itself are said: what was met on the way.
_LEVELS = {
    Outcome.ABANDONED: logging.ERROR,
    Outcome.DATA_LOST: logging.CRITICAL,
    Outcome.LEASE_LOST: logging.WARNING,
    Outcome.MISSED: logging.WARNING,
    Outcome.SKIPPED_OVERLAP: logging.INFO,
    Outcome.SKIPPED_PAUSED: logging.INFO,
    Outcome.QUEUED: logging.INFO,
}
_MESSAGES = {
    Outcome.ABANDONED: "a run's lease ran out before it was released: recorded abandoned",
    Outcome.DATA_LOST: "the store lost this job's data: recorded; new runs wait one lease_ttl",
    Outcome.LEASE_LOST: "a run was replaced (overlap replace): it loses its lease",
    Outcome.MISSED: "ticks not fired (catch-up policy or window): recorded missed",
    Outcome.SKIPPED_OVERLAP: "tick skipped: the previous run is still alive",
    Outcome.SKIPPED_PAUSED: "tick skipped: the job is paused",
    Outcome.QUEUED: "tick queued behind the running one",
}


@dataclass(frozen=True, slots=True)
class Proposal:
    """What this node proposes for one job at one wake-up, before its claim is answered.

    Attributes:
        job: the job.
        plan: (cursor, tick] as this node planned it.
        trigger_id: set for a manual trigger, which claims its own key.
    """

    job: Job
    plan: Plan
    trigger_id: str | None = None


@dataclass(frozen=True, slots=True)
class RunStart:
    """A granted run: its ticks in order, their fences, and how long to hold it."""

    ticks: tuple[int, ...]
    fence: int
    fences: tuple[int, ...] = ()
    hold_s: float = 0.0


def decide_request(
    proposal: Proposal,
    owner: Owner,
    *,
    claim_ttl_ms: int,
    trigger_window_ms: int,
    known_fence: int = 0,
) -> DecideRequest:
    """The decision a won claim sends."""
    job, plan = proposal.job, proposal.plan
    return DecideRequest(
        job=job.name,
        tick_s=plan.tick_s,
        cursor_s=plan.cursor_s,
        from_s=plan.from_s,
        fire_s=plan.fire_s,
        missed=plan.missed,
        owner=str(owner),
        overlap=job.overlap,
        lease_ttl_ms=job.lease_ttl_ms,
        claim_ttl_ms=claim_ttl_ms,
        known_fence=known_fence,
        trigger_window_ms=trigger_window_ms,
        trigger_id=proposal.trigger_id,
        history=job.history,
    )


def run_start(proposal: Proposal, reply: DecideReply) -> RunStart | None:
    """The run a decision granted, if it may start now.

    A fresh grant starts; a replayed one (an answer lost, the request sent again) only if
    its lease still held its fence (``renewed``): otherwise its lease ran out before its
    answer came back, and the job's next decision records it abandoned.
    """
    if reply.answer is not Answer.DECIDED or reply.verdict is not Verdict.RUN:
        return None
    if reply.replayed and not reply.renewed:
        return None
    fences = reply.fences if proposal.job.overlap is Overlap.ALLOW else ()
    return RunStart(reply.ticks_s, reply.fence, fences, reply.hold_ms / 1000)


def report(proposal: Proposal, reply: DecideReply, *, node_id: str, observer: Observer) -> None:
    """Log what the decision did and tell the observer (never silent)."""
    job = proposal.job.name
    if reply.answer is not Answer.DECIDED:
        if reply.answer is Answer.STALE:
            log.info(
                "manual trigger decided already, or past its window",
                extra={"job": job, "trigger": proposal.trigger_id, "node": node_id},
            )
        return
    if reply.data_lost:
        log.critical(
            "the store lost this job's data (its cursor or fence counter is gone): new runs "
            "wait one lease_ttl, as runs started before may still be alive",
            extra={"job": job, "tick": reply.cursor_s, "hold_ms": reply.hold_ms},
        )
    for record in reply.records:
        _say(job, record, node_id, proposal.trigger_id)
        count = record.count if record.outcome is Outcome.MISSED else 1
        if record.outcome is not Outcome.GRANTED:
            observer.decision(job, record.outcome, count)


def _say(job: str, record: Record, node_id: str, trigger_id: str | None) -> None:
    level = _LEVELS.get(record.outcome)
    if level is None or not log.isEnabledFor(level):
        return
    fields: dict[str, object] = {
        "job": job,
        "tick": record.tick_s,
        "node": node_id,
        "outcome": record.outcome.value,
    }
    if record.fence:
        fields["fence"] = record.fence
    if record.outcome is Outcome.MISSED:
        fields["count"] = record.count
        fields["last_tick"] = record.last_s
    if record.trigger_id or trigger_id:
        fields["trigger"] = record.trigger_id or trigger_id
    if record.node != node_id:
        fields["ran_on"] = record.node
    log.log(level, _MESSAGES[record.outcome], extra=fields)
