"""A tick's decision, in one place: the request it sends and what its answer calls for.

A node proposes a plan for each due job (:class:`Proposal`); for every claim it wins it
asks ``acquire.lua`` to decide (:func:`acquire_request`). :func:`decide` turns the answer
into a :class:`Verdict`: the run records to write (abandoned, superseded, stale, missed,
skipped, queued), the observer events, and the run to start or the grant to give back.
It is pure (no clock, no Redis, no logging), so a table of cases pins it
(tests/unit/test_decisions.py); :func:`report` logs a verdict and tells the observer. No
decision is silent (DESIGN.md section 3, step 7).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from cronrace.model.job import Job
from cronrace.model.policies import Catchup, Outcome, Overlap, TickPlan
from cronrace.model.records import RunRecord
from cronrace.runtime.observer import Observer
from cronrace.stores.values import AcquireDecision, AcquireMode, AcquireReply, AcquireRequest, Owner

log = logging.getLogger("cronrace.tick.loop")

#: The most ticks counted one by one when a backlog fell out of the window.
EXPIRED_COUNT_CAP = 100_000

#: The error text of a grant whose answer came back after its lease had run out.
RAN_OUT = "the grant's answer came back after its lease had run out; not run"

#: The reason of a queue_one tick skipped: it was decided late, after a newer tick queued.
NEWER_TICK_WAITS = "decided late: a newer tick is queued (queue_one keeps the newest)"
#: The reason of a won tick answered ``missed``: a later tick was decided while its answer
#: was on the way, and its catch-up policy runs no tick late (the record names the tick).
PASSED_WHILE_UNDECIDED = "decided late: a later tick was decided first (catch-up runs none late)"
#: The reason of a catch-up's older ticks skipped when its newest was queued behind a run.
NEWEST_OF_BACKLOG_WAITS = "a newer tick of its backlog is queued (queue_one keeps the newest)"


@dataclass(frozen=True, slots=True)
class Proposal:
    """What this node proposes for one job at one wake-up, before any claim is answered.

    Attributes:
        job: the job.
        plan: the ticks its claim decides (one in the steady state, a catch-up otherwise).
        trigger_id: set for a manual trigger, which claims its own key.
        shared_from_s: the plan covers ticks from this one on that other nodes may have
            decided: a backlog planned from this node's own last tick (it was frozen or
            cut off while others went on), or, with racers = k, ticks left to other
            racers; the acquire's watermark tells which were really missed
            (:func:`really_missed`).
        prior_tick_s: the job's tick just before those the plan covers (0: unknown). A
            decision passing it while another node's claim on it is still undecided lets
            that node decide it late (``acquire.lua``, ``passed``).
    """

    job: Job
    plan: TickPlan
    trigger_id: str | None = None
    shared_from_s: int | None = None
    prior_tick_s: int = 0


@dataclass(frozen=True, slots=True)
class RunStart:
    """A granted run: its ticks in order, the first one's fence, and how long to hold it."""

    ticks: tuple[int, ...]
    fence: int
    hold_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one decision calls for.

    Attributes:
        records: run records to write now (none for a run: it writes its own).
        events: ``(outcome, count)`` for the observer, one per tick not run.
        start: the run to start, if the decision granted one in time.
        unrun: a grant that must not run (its lease ran out before the answer came back):
            released with a ``lease_lost`` record.
    """

    records: tuple[RunRecord, ...] = ()
    events: tuple[tuple[Outcome, int], ...] = ()
    start: RunStart | None = None
    unrun: RunStart | None = None


def first_decided_s(p: Proposal) -> int:
    """The oldest tick a plan decides with its claim: the claim's own in the steady state;
    a backlog's first fired tick, or its first due one when it counts some as missed."""
    plan = p.plan
    first_s = plan.fire_ticks_s[0] if plan.fire_ticks_s else plan.claim_tick_s
    if p.shared_from_s is not None and plan.missed:
        return min(first_s, p.shared_from_s)
    return first_s


def acquire_request(proposal: Proposal, owner: Owner, claim_ttl_ms: int = 0) -> AcquireRequest:
    """The ``acquire.lua`` call that decides a won claim.

    A decision made late (a plan that runs nothing, decided past its tick's catch-up
    window; a run's, sent by a node frozen between its win and its decision) comes as its
    claim runs out, or after: its answer is kept ``keep_ms`` from the decision, a second
    less than the claim's lifetime (one decided in time keeps its claim as it is), and
    :func:`~cronrace.tick.acquire.acquire_retrying` sends it again for that long after a
    first failure seen past the window.
    """
    job, plan, trigger_id = proposal.job, proposal.plan, proposal.trigger_id
    fire = plan.fire_ticks_s
    mode = AcquireMode.RUN if fire else AcquireMode.MARK
    if trigger_id:
        mode = AcquireMode.TRIGGER
    return AcquireRequest(
        job=job.name,
        decide_tick_s=plan.claim_tick_s,
        mark_tick_s=plan.mark_tick_s,
        # A plan that runs nothing names its backlog's oldest tick: decided late, the script
        # takes the backlog's ticks left to this claim and answers from which (late_from).
        run_tick_s=fire[0] if fire else first_decided_s(proposal),
        # A run names it too: its backlog's older ticks (catch-up latest, or all beyond
        # max_catchup) are taken with a late decision and counted missed.
        first_tick_s=0 if trigger_id else first_decided_s(proposal),
        owner=owner,
        lease_ttl_ms=job.lease_ttl_ms,
        overlap=job.overlap,
        mode=mode,
        trigger_id=trigger_id,
        prior_tick_s=proposal.prior_tick_s,
        late_ok=job.catchup is Catchup.ALL,
        keep_ms=max(0, claim_ttl_ms - 1000) if mode is not AcquireMode.TRIGGER else 0,
    )


def further_tick_request(job: Job, tick_s: int, owner: Owner) -> AcquireRequest:
    """The fence of a catch-up's next tick under ``allow`` (no lease carries it on).

    Its claim was won with the first tick's, and the watermark is set already: it is sent
    as a trigger without an id (never remembered, never retried).
    """
    return AcquireRequest(
        job=job.name,
        decide_tick_s=tick_s,
        mark_tick_s=tick_s,
        run_tick_s=tick_s,
        owner=owner,
        lease_ttl_ms=job.lease_ttl_ms,
        overlap=job.overlap,
        mode=AcquireMode.TRIGGER,
    )


def decided_tick(plan: TickPlan) -> int:
    """The tick a decision that runs nothing is recorded under: the newest it would fire."""
    return plan.fire_ticks_s[-1] if plan.fire_ticks_s else plan.claim_tick_s


def decide(
    proposal: Proposal,
    reply: AcquireReply,
    *,
    node_id: str,
    now_ms: int,
    answered_late: bool = False,
) -> Verdict:
    """Turn ``acquire.lua``'s answer into the records, events and run it calls for.

    Args:
        proposal: what the claim was won for.
        reply: the script's answer.
        node_id: this node (records name it).
        now_ms: the shared clock, for the records.
        answered_late: the answer came back past the grant's lease deadline (a slow
            Redis, a retry): a granted run must not start, it could overlap the next.
    """
    plan = proposal.plan
    if (
        reply.decision is AcquireDecision.RUN
        and not (plan.missed or answered_late or reply.replayed)
        and not (reply.abandoned_fence or reply.superseded_tick_s)
        and plan.fire_ticks_s
        and (reply.prev_watermark_s is None or plan.fire_ticks_s[0] > reply.prev_watermark_s)
    ):
        # Nearly every decision: a run granted in time, nothing met on the way, nothing
        # missed, none of its ticks decided by another node. What the steps below would
        # make of it, without building their lists (tests/unit/tick/test_decisions.py).
        return Verdict(start=RunStart(plan.fire_ticks_s, reply.fence, reply.hold_ms / 1000))
    job, plan = proposal.job.name, really_missed(proposal, reply)
    if reply.decision is AcquireDecision.MISSED and 0 < reply.late_from_s < plan.claim_tick_s:
        # Decided late, its backlog counted from the oldest tick the script took with it
        # (left to this claim by the decision that passed it; really_missed counted them
        # decided): before, they had no record (the scheduler model with racers = 2).
        plan = dataclasses.replace(
            plan,
            missed=proposal.job.schedule.count_between(
                reply.late_from_s - 1, plan.claim_tick_s - 1, EXPIRED_COUNT_CAP
            ),
        )
    elif reply.decision is AcquireDecision.RUN and reply.late_from_s and not proposal.trigger_id:
        # A passed tick run late runs its fired ticks from late_from; the others the
        # script took with it (older than the fired ones) are missed. Counted by no one
        # before: only their run's tick was taken (the scheduler model with racers = 2).
        fired = sum(1 for t in plan.fire_ticks_s if reply.late_from_s <= t <= plan.claim_tick_s)
        covered = proposal.job.schedule.count_between(
            reply.late_from_s - 1, plan.claim_tick_s, EXPIRED_COUNT_CAP
        )
        plan = dataclasses.replace(plan, missed=max(0, covered - max(1, fired)))
    records = _met_on_the_way(job, plan, reply, node_id=node_id, now_ms=now_ms)
    events = [(record.outcome, 1) for record in records]
    if reply.decision is AcquireDecision.STALE:
        stale = RunRecord(
            job,
            plan.claim_tick_s,
            node_id,
            Outcome.STALE,
            finished_ms=now_ms,
            trigger_id=proposal.trigger_id,
        )
        return Verdict((*records, stale), (*events, (Outcome.STALE, 1)))
    if plan.missed:
        records.append(
            RunRecord(
                job,
                plan.mark_tick_s,
                node_id,
                Outcome.MISSED,
                finished_ms=now_ms,
                count=plan.missed,
            )
        )
        events.append((Outcome.MISSED, plan.missed))
    outcome = reply.decision.outcome
    if outcome in (Outcome.SKIPPED_OVERLAP, Outcome.SKIPPED_PAUSED, Outcome.QUEUED):
        # A backlog decided without a run is recorded tick by tick: its older ticks are no
        # less decided than the newest (those at or below the watermark found were other
        # nodes' to decide). Queued, only the newest waits (queue one keeps the newest):
        # the older ones are skipped.
        older = Outcome.SKIPPED_OVERLAP if outcome is Outcome.QUEUED else outcome
        prev = reply.prev_watermark_s
        if reply.late_from_s:  # a late backlog: the ticks the script took with its claim
            prev = reply.late_from_s - 1
        for tick_s in plan.fire_ticks_s[:-1]:
            if prev is not None and not proposal.trigger_id and tick_s <= prev:
                continue
            said: dict[str, object] | None = (
                {"holder_fence": reply.holder_fence} if reply.holder_fence else None
            )
            if outcome is Outcome.QUEUED:
                said = {**(said or {}), "reason": NEWEST_OF_BACKLOG_WAITS}
            records.append(RunRecord(job, tick_s, node_id, older, finished_ms=now_ms, detail=said))
            events.append((older, 1))
    if outcome is not None:
        detail: dict[str, object] | None = (
            {"holder_fence": reply.holder_fence} if reply.holder_fence else None
        )
        if outcome is Outcome.SKIPPED_OVERLAP and proposal.job.overlap is Overlap.QUEUE_ONE:
            # Queue one skips only an older tick decided late: a newer one already waits.
            detail = {**(detail or {}), "reason": NEWER_TICK_WAITS}
        elif reply.decision is AcquireDecision.MISSED:
            detail = {**(detail or {}), "reason": PASSED_WHILE_UNDECIDED}
        records.append(
            RunRecord(
                job,
                decided_tick(plan),
                node_id,
                outcome,
                finished_ms=now_ms,
                trigger_id=proposal.trigger_id,
                detail=detail,
            )
        )
        events.append((outcome, 1))
    if reply.decision is not AcquireDecision.RUN:
        return Verdict(tuple(records), tuple(events))
    # Ticks at or below the watermark found were decided by another node (a catch-up
    # overlapping a decision made meanwhile); a trigger is not a tick and runs anyway.
    # A passed tick decided late runs the ticks of its backlog the script took with it
    # (``late_from_s``: those the decision that passed them left to this claim).
    prev = reply.prev_watermark_s
    ticks = plan.fire_ticks_s
    if reply.late_from_s and not proposal.trigger_id:
        ticks = tuple(t for t in ticks if reply.late_from_s <= t <= plan.claim_tick_s)
    elif prev is not None and not proposal.trigger_id and ticks and ticks[0] <= prev:
        ticks = tuple(t for t in ticks if t > prev)
    ticks = ticks or (plan.claim_tick_s,)
    if proposal.job.overlap is not Overlap.ALLOW and (
        (reply.replayed and not reply.renewed) or answered_late
    ):
        # Every tick the grant covers goes unrun, each with its record: a catch-up backlog
        # granted as one run left its later ticks with none (the scheduler model, k racers,
        # seed 41: a node frozen between its win and its answer).
        events.append((Outcome.LEASE_LOST, len(ticks)))
        return Verdict(tuple(records), tuple(events), unrun=RunStart(ticks, reply.fence))
    start = RunStart(ticks, reply.fence, reply.hold_ms / 1000)
    return Verdict(tuple(records), tuple(events), start=start)


def really_missed(proposal: Proposal, reply: AcquireReply) -> TickPlan:
    """The plan, counting as missed only the ticks of a shared plan no other node decided.

    A plan covering ticks other nodes may have decided (``shared_from_s``) counted them all
    as missed; those at or below the watermark the acquire found were decided.
    """
    prev, plan, since_s = reply.prev_watermark_s, proposal.plan, proposal.shared_from_s
    if not plan.missed or prev is None or since_s is None:
        return plan
    decided = proposal.job.schedule.count_between(since_s - 1, prev, EXPIRED_COUNT_CAP)
    decided -= sum(1 for t in plan.fire_ticks_s if t <= prev)
    return dataclasses.replace(plan, missed=max(0, plan.missed - max(0, decided)))


def _met_on_the_way(
    job: str, plan: TickPlan, reply: AcquireReply, *, node_id: str, now_ms: int
) -> list[RunRecord]:
    """Records of what the script met: an abandoned lease, a queued tick it superseded."""
    out = []
    if reply.abandoned_fence:
        owner = reply.abandoned_owner
        out.append(
            RunRecord(
                job,
                reply.abandoned_tick_s,
                owner.node_id if owner is not None else "",
                Outcome.ABANDONED,
                reply.abandoned_fence,
                finished_ms=now_ms,
                error="lease expired without release",
            )
        )
    if reply.superseded_tick_s:
        out.append(
            RunRecord(
                job,
                reply.superseded_tick_s,
                node_id,
                Outcome.SKIPPED_OVERLAP,
                finished_ms=now_ms,
                trigger_id=reply.superseded_trigger_id,
                detail={"superseded_by": plan.claim_tick_s},
            )
        )
    return out


def report(
    proposal: Proposal, reply: AcquireReply, verdict: Verdict, *, node_id: str, observer: Observer
) -> None:
    """Log a decision and tell the observer (garbage moved aside was logged by the store)."""
    job, plan = proposal.job.name, proposal.plan
    prev = reply.prev_watermark_s
    if (
        reply.decision is AcquireDecision.RUN
        and not (verdict.events or verdict.unrun or reply.abandoned_fence)
        and (prev is None or prev < plan.claim_tick_s or proposal.trigger_id)
    ):
        return  # a run granted with nothing to say (nearly every decision): it says it starts
    missed = 0
    if proposal.shared_from_s is not None and verdict.events:
        missed = sum(count for outcome, count in verdict.events if outcome is Outcome.MISSED)
    if missed:
        # The scheduler did not say it when planning: it could not know which were missed
        # (and a node that loses the claim has nothing to say).
        log.warning(
            "ticks were missed; applying the catch-up policy",
            extra={"job": job, "catchup": proposal.job.catchup.value, "missed": missed},
        )
    if reply.abandoned_fence:
        log.warning(
            "previous run was abandoned",
            extra={"job": job, "tick": reply.abandoned_tick_s, "fence": reply.abandoned_fence},
        )
    if reply.decision is AcquireDecision.STALE:
        log.warning(
            "tick already decided (stale claim)",
            extra={"job": job, "tick": plan.claim_tick_s, "watermark": reply.prev_watermark_s},
        )
    elif reply.decision is AcquireDecision.MISSED or (
        reply.prev_watermark_s is not None
        and reply.prev_watermark_s >= plan.claim_tick_s
        and not proposal.trigger_id
    ):
        # A later tick was decided while this won claim's answer was on the way.
        log.warning(
            "won tick decided late: a later tick was decided first",
            extra={
                "job": job,
                "tick": plan.claim_tick_s,
                "watermark": reply.prev_watermark_s,
                "outcome": reply.decision.value,
                "catchup": proposal.job.catchup.value,
            },
        )
    elif reply.decision.outcome is not None:
        log.info(
            "tick decided",
            extra={
                "job": job,
                "tick": decided_tick(plan),
                "node": node_id,
                "outcome": reply.decision.outcome.value,
                "holder_fence": reply.holder_fence,
            },
        )
    if verdict.unrun is not None:
        log.warning(
            "granted run not started: its lease ran out before the answer came back",
            extra={"job": job, "tick": verdict.unrun.ticks[0], "fence": verdict.unrun.fence},
        )
    for outcome, count in verdict.events:
        observer.decision(job, outcome, count)


def not_replicated(
    short: Sequence[tuple[Proposal, int]], *, wanted: int, node_id: str, now_ms: int
) -> Verdict:
    """Records of won claims that too few replicas confirmed (``(proposal, acked)``): not run."""
    records = tuple(
        RunRecord(
            p.job.name,
            p.plan.claim_tick_s,
            node_id,
            Outcome.NOT_REPLICATED,
            finished_ms=now_ms,
            error=f"{acked} of {wanted} replicas confirmed",
        )
        for p, acked in short
    )
    return Verdict(records, tuple((Outcome.NOT_REPLICATED, 1) for _ in records))


def report_not_replicated(verdict: Verdict, *, acked: int, wanted: int, observer: Observer) -> None:
    """Log won claims that were not replicated in time, and tell the observer."""
    log.error(
        "won claims not replicated in time; not running them",
        extra={"jobs": [r.job for r in verdict.records], "acked": acked, "wanted": wanted},
    )
    for record in verdict.records:
        observer.decision(record.job, record.outcome)
