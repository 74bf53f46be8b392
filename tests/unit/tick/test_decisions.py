"""A tick's decision as a table: (plan, acquire.lua's answer) -> records, events, runs."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from cronrace.model.job import Job
from cronrace.model.policies import Outcome, Overlap, TickPlan
from cronrace.runtime.observer import Observer
from cronrace.stores.values import AcquireDecision, AcquireMode, AcquireReply, Owner
from cronrace.tick.decisions import (
    NEWER_TICK_WAITS,
    NEWEST_OF_BACKLOG_WAITS,
    PASSED_WHILE_UNDECIDED,
    Proposal,
    RunStart,
    Verdict,
    acquire_request,
    decide,
    further_tick_request,
    not_replicated,
    report,
)

NOW_MS = 1_000_500
ME = "n1"
OWNER = Owner("n1", "abc")


def job(overlap: Overlap = Overlap.SKIP) -> Job:
    return Job.define(lambda ctx: None, "* * * * * *", name="j", overlap=overlap, lease_ttl=10)


def steady(tick: int = 100) -> TickPlan:
    return TickPlan(tick, tick, (tick,), 0)


def answer(decision: AcquireDecision = AcquireDecision.RUN, **fields: Any) -> AcquireReply:
    base = AcquireReply(
        decision=decision,
        fence=7 if decision is AcquireDecision.RUN else 0,
        prev_watermark_s=None,
        holder_fence=0,
        holder_owner=None,
        abandoned_tick_s=0,
        abandoned_fence=0,
        abandoned_owner=None,
        warnings=(),
        superseded_tick_s=0,
    )
    return dataclasses.replace(base, **fields)


def outcomes(verdict: Verdict) -> list[tuple[str, int, int]]:
    """Each record as (outcome, tick, count): what the history will show."""
    return [(r.outcome.value, r.tick_s, r.count) for r in verdict.records]


# (name, overlap, plan, trigger_id, reply, records, events, start ticks / fence)
CASES: list[tuple[str, Overlap, TickPlan, str | None, AcquireReply, list[Any], list[Any], Any]] = [
    (
        "steady tick runs",
        Overlap.SKIP,
        steady(),
        None,
        answer(),
        [],
        [],
        ((100,), 7),
    ),
    (
        "a late backlog runs the ticks the script took with its claim (late_from)",
        Overlap.ALLOW,
        TickPlan(103, 103, (101, 102, 103), 0),
        None,
        answer(prev_watermark_s=104, late_from_s=101),
        [],
        [],
        ((101, 102, 103), 7),
    ),
    (
        "a late backlog whose older ticks another claim's decision took runs its own tick",
        Overlap.ALLOW,
        TickPlan(103, 103, (101, 102, 103), 0),
        None,
        answer(prev_watermark_s=104, late_from_s=103),
        [],
        [],
        ((103,), 7),
    ),
    (
        "a late backlog skipped for a newer run records each tick it took",
        Overlap.SKIP,
        TickPlan(103, 103, (101, 102, 103), 0),
        None,
        answer(AcquireDecision.SKIPPED_OVERLAP, prev_watermark_s=104, late_from_s=102),
        [("skipped:overlap", 102, 1), ("skipped:overlap", 103, 1)],
        [(Outcome.SKIPPED_OVERLAP, 1), (Outcome.SKIPPED_OVERLAP, 1)],
        None,
    ),
    (
        "a won tick passed by a later decision runs late (catchup all)",
        Overlap.ALLOW,
        steady(),
        None,
        answer(prev_watermark_s=101),
        [],
        [],
        ((100,), 7),
    ),
    (
        "a won tick passed by a later decision is recorded missed otherwise",
        Overlap.SKIP,
        steady(),
        None,
        answer(AcquireDecision.MISSED, prev_watermark_s=101),
        [("missed", 100, 1)],
        [(Outcome.MISSED, 1)],
        None,
    ),
    (
        "overlap skip records the tick with the holder's fence",
        Overlap.SKIP,
        steady(),
        None,
        answer(AcquireDecision.SKIPPED_OVERLAP, holder_fence=6),
        [("skipped:overlap", 100, 1)],
        [(Outcome.SKIPPED_OVERLAP, 1)],
        None,
    ),
    (
        "paused",
        Overlap.SKIP,
        steady(),
        None,
        answer(AcquireDecision.SKIPPED_PAUSED),
        [("skipped:paused", 100, 1)],
        [(Outcome.SKIPPED_PAUSED, 1)],
        None,
    ),
    (
        "queued behind a live run",
        Overlap.QUEUE_ONE,
        steady(),
        None,
        answer(AcquireDecision.QUEUED, holder_fence=6),
        [("queued", 100, 1)],
        [(Outcome.QUEUED, 1)],
        None,
    ),
    (
        "a newer queued tick supersedes the older one",
        Overlap.QUEUE_ONE,
        steady(101),
        None,
        answer(AcquireDecision.QUEUED, superseded_tick_s=100),
        [("skipped:overlap", 100, 1), ("queued", 101, 1)],
        [(Outcome.SKIPPED_OVERLAP, 1), (Outcome.QUEUED, 1)],
        None,
    ),
    (
        "stale: nothing else is recorded, not even the missed ticks",
        Overlap.SKIP,
        TickPlan(105, 105, (105,), 3),
        None,
        answer(AcquireDecision.STALE, prev_watermark_s=105),
        [("stale", 105, 1)],
        [(Outcome.STALE, 1)],
        None,
    ),
    (
        "catch-up latest: the missed ticks in one record, the newest runs",
        Overlap.SKIP,
        TickPlan(105, 105, (105,), 4),
        None,
        answer(),
        [("missed", 105, 4)],
        [(Outcome.MISSED, 4)],
        ((105,), 7),
    ),
    (
        "catch-up skip: only marked, only missed",
        Overlap.SKIP,
        TickPlan(105, 105, (), 5),
        None,
        answer(AcquireDecision.MARKED),
        [("missed", 105, 5)],
        [(Outcome.MISSED, 5)],
        None,
    ),
    (
        "catch-up all runs the ticks above the watermark found",
        Overlap.SKIP,
        TickPlan(104, 104, (102, 103, 104), 0),
        None,
        answer(prev_watermark_s=102),
        [],
        [],
        ((103, 104), 7),
    ),
    (
        "a trigger runs whatever the watermark",
        Overlap.SKIP,
        TickPlan(100, 100, (100,), 0),
        "t1",
        answer(prev_watermark_s=200),
        [],
        [],
        ((100,), 7),
    ),
    (
        "an abandoned lease is recorded under its node, then the tick runs",
        Overlap.SKIP,
        steady(),
        None,
        answer(abandoned_tick_s=99, abandoned_fence=5, abandoned_owner=Owner("n2", "x")),
        [("abandoned", 99, 1)],
        [(Outcome.ABANDONED, 1)],
        ((100,), 7),
    ),
    (
        "a replayed grant whose lease moved on does not start",
        Overlap.SKIP,
        steady(),
        None,
        answer(replayed=True, renewed=False),
        [],
        [(Outcome.LEASE_LOST, 1)],
        "unrun",
    ),
    (
        "a replayed grant whose lease was renewed starts",
        Overlap.SKIP,
        steady(),
        None,
        answer(replayed=True, renewed=True),
        [],
        [],
        ((100,), 7),
    ),
    (
        "a backlog skipped for overlap is recorded tick by tick",
        Overlap.SKIP,
        TickPlan(102, 102, (100, 101, 102), 0),
        None,
        answer(AcquireDecision.SKIPPED_OVERLAP, holder_fence=6),
        [("skipped:overlap", 100, 1), ("skipped:overlap", 101, 1), ("skipped:overlap", 102, 1)],
        [(Outcome.SKIPPED_OVERLAP, 1)] * 3,
        None,
    ),
    (
        "a skipped backlog's ticks another node decided are not recorded here",
        Overlap.SKIP,
        TickPlan(102, 102, (100, 101, 102), 0),
        None,
        answer(AcquireDecision.SKIPPED_OVERLAP, holder_fence=6, prev_watermark_s=100),
        [("skipped:overlap", 101, 1), ("skipped:overlap", 102, 1)],
        [(Outcome.SKIPPED_OVERLAP, 1)] * 2,
        None,
    ),
    (
        "allow has no lease to lose: a replayed grant starts",
        Overlap.ALLOW,
        steady(),
        None,
        answer(replayed=True, renewed=False),
        [],
        [],
        ((100,), 7),
    ),
]


@pytest.mark.parametrize(
    ("overlap", "plan", "trigger_id", "reply", "records", "events", "start"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decision_table(
    overlap: Overlap,
    plan: TickPlan,
    trigger_id: str | None,
    reply: AcquireReply,
    records: list[Any],
    events: list[Any],
    start: Any,
) -> None:
    verdict = decide(Proposal(job(overlap), plan, trigger_id), reply, node_id=ME, now_ms=NOW_MS)
    assert outcomes(verdict) == records
    assert list(verdict.events) == events
    if start == "unrun":
        assert verdict.start is None
        assert verdict.unrun == RunStart((plan.fire_ticks_s[0],), reply.fence)
    elif start is None:
        assert verdict.start is None
        assert verdict.unrun is None
    else:
        assert verdict.start == RunStart(*start)
        assert verdict.unrun is None
    assert all(r.finished_ms == NOW_MS and r.job == "j" for r in verdict.records)


def test_records_name_who_decided_and_what_they_met() -> None:
    reply = answer(
        AcquireDecision.QUEUED,
        holder_fence=6,
        superseded_tick_s=99,
        superseded_trigger_id="t0",
        abandoned_tick_s=98,
        abandoned_fence=4,
        abandoned_owner=Owner("n2", "x"),
    )
    verdict = decide(Proposal(job(Overlap.QUEUE_ONE), steady(), "t1"), reply, node_id=ME, now_ms=1)
    abandoned, superseded, queued = verdict.records
    assert (abandoned.node, abandoned.fence, abandoned.error) == (
        "n2",
        4,
        "lease expired without release",
    )
    assert (superseded.node, superseded.trigger_id, superseded.detail) == (
        ME,
        "t0",
        {"superseded_by": 100},
    )
    assert (queued.node, queued.trigger_id, queued.detail) == (ME, "t1", {"holder_fence": 6})


@pytest.mark.parametrize(
    ("overlap", "detail"),
    [
        (Overlap.QUEUE_ONE, {"holder_fence": 6, "reason": NEWER_TICK_WAITS}),
        (Overlap.SKIP, {"holder_fence": 6}),
    ],
)
def test_a_queue_one_skip_says_a_newer_tick_waits(overlap: Overlap, detail: Any) -> None:
    """Queue one skips only a tick decided late behind a newer queued one: the record says so."""
    reply = answer(AcquireDecision.SKIPPED_OVERLAP, holder_fence=6)
    (skipped,) = decide(Proposal(job(overlap), steady(), None), reply, node_id=ME, now_ms=1).records
    assert (skipped.outcome, skipped.tick_s, skipped.detail) == (
        Outcome.SKIPPED_OVERLAP,
        100,
        detail,
    )


def test_a_backlog_queued_behind_a_run_records_its_older_ticks_skipped() -> None:
    """Queue one keeps the newest: the backlog's claimed tick waits (acquire.lua queues it)
    and is recorded queued; each older tick is recorded skipped, saying why, and none is
    left without a record (those at or below the watermark were others')."""
    plan = TickPlan(104, 104, (101, 102, 103, 104), 0)
    reply = answer(AcquireDecision.QUEUED, holder_fence=6, prev_watermark_s=101)
    verdict = decide(Proposal(job(Overlap.QUEUE_ONE), plan, None), reply, node_id=ME, now_ms=1)
    said = {"holder_fence": 6, "reason": NEWEST_OF_BACKLOG_WAITS}
    assert [(r.tick_s, r.outcome, r.detail) for r in verdict.records] == [
        (102, Outcome.SKIPPED_OVERLAP, said),
        (103, Outcome.SKIPPED_OVERLAP, said),
        (104, Outcome.QUEUED, {"holder_fence": 6}),
    ]
    assert verdict.events == ((Outcome.SKIPPED_OVERLAP, 1),) * 2 + ((Outcome.QUEUED, 1),)
    assert verdict.start is None


def test_a_won_tick_answered_missed_names_itself_and_says_why() -> None:
    """The record of a won tick passed while undecided names that tick (count 1), unlike
    a catch-up's missed record, which names the newest tick and counts those before it:
    the reason tells them apart (the fault tests' witness excuses the tick by it)."""
    reply = answer(AcquireDecision.MISSED, prev_watermark_s=101)
    (missed,) = decide(Proposal(job(), steady(), None), reply, node_id=ME, now_ms=1).records
    assert (missed.outcome, missed.tick_s, missed.count, missed.detail) == (
        Outcome.MISSED,
        100,
        1,
        {"reason": PASSED_WHILE_UNDECIDED},
    )


def test_a_grant_answered_past_its_lease_deadline_is_given_back() -> None:
    """Every tick of the backlog the grant covered is given back unrun (each gets its
    record): only the first was, and the second went without one (scheduler model)."""
    verdict = decide(
        Proposal(job(), TickPlan(104, 104, (103, 104), 0)),
        answer(),
        node_id=ME,
        now_ms=NOW_MS,
        answered_late=True,
    )
    assert verdict.start is None
    assert verdict.unrun == RunStart((103, 104), 7)
    assert verdict.events == ((Outcome.LEASE_LOST, 2),)
    late_allow = decide(
        Proposal(job(Overlap.ALLOW), steady()), answer(), node_id=ME, now_ms=1, answered_late=True
    )
    assert late_allow.start == RunStart((100,), 7)  # no lease, nothing to overlap


def test_a_grant_after_a_wipe_holds_its_run() -> None:
    verdict = decide(Proposal(job(), steady()), answer(hold_ms=2500), node_id=ME, now_ms=1)
    assert verdict.start == RunStart((100,), 7, hold_s=2.5)


@pytest.mark.parametrize(
    ("plan", "trigger_id", "mode", "run_tick"),
    [
        (TickPlan(100, 100, (100,), 0), None, AcquireMode.RUN, 100),
        (TickPlan(104, 104, (102, 103, 104), 2), None, AcquireMode.RUN, 102),
        (TickPlan(104, 104, (), 5), None, AcquireMode.MARK, 104),
        (TickPlan(100, 100, (100,), 0), "t1", AcquireMode.TRIGGER, 100),
    ],
)
def test_acquire_request_follows_the_plan(
    plan: TickPlan, trigger_id: str | None, mode: AcquireMode, run_tick: int
) -> None:
    request = acquire_request(Proposal(job(Overlap.REPLACE), plan, trigger_id), OWNER)
    assert (request.mode, request.run_tick_s, request.decide_tick_s) == (
        mode,
        run_tick,
        plan.claim_tick_s,
    )
    assert (request.overlap, request.owner, request.trigger_id) == (
        Overlap.REPLACE,
        OWNER,
        trigger_id,
    )
    expected_id = f"trigger:{trigger_id}" if trigger_id else f"{mode}:{plan.claim_tick_s}"
    assert request.request_id == expected_id


def test_acquire_request_carries_the_prior_tick_and_whether_late_ticks_run() -> None:
    every = Job.define(lambda ctx: None, "* * * * * *", name="j", catchup="all", lease_ttl=10)
    request = acquire_request(Proposal(every, steady(), prior_tick_s=99), OWNER)
    assert (request.prior_tick_s, request.late_ok) == (99, True)
    request = acquire_request(Proposal(job(), steady()), OWNER)  # catchup latest
    assert (request.prior_tick_s, request.late_ok) == (0, False)


def test_a_further_catch_up_tick_is_never_remembered() -> None:
    request = further_tick_request(job(Overlap.ALLOW), 103, OWNER)
    assert (request.mode, request.decide_tick_s, request.run_tick_s) == (
        AcquireMode.TRIGGER,
        103,
        103,
    )
    assert request.request_id == ""


def test_not_replicated_claims_are_recorded_not_run() -> None:
    verdict = not_replicated([(Proposal(job(), steady()), 0)], wanted=1, node_id=ME, now_ms=NOW_MS)
    (record,) = verdict.records
    assert (record.outcome, record.error) == (Outcome.NOT_REPLICATED, "0 of 1 replicas confirmed")
    assert verdict.events == ((Outcome.NOT_REPLICATED, 1),)


class Counting(Observer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Outcome, int]] = []

    def decision(self, job: str, outcome: Outcome, count: int = 1) -> None:
        self.seen.append((job, outcome, count))


def test_report_logs_and_counts_each_event(caplog: pytest.LogCaptureFixture) -> None:
    proposal = Proposal(job(), TickPlan(105, 105, (105,), 3))
    reply = answer(AcquireDecision.STALE, prev_watermark_s=105)
    verdict = decide(proposal, reply, node_id=ME, now_ms=1)
    observer = Counting()
    with caplog.at_level(logging.INFO, logger="cronrace.tick.loop"):
        report(proposal, reply, verdict, node_id=ME, observer=observer)
    assert observer.seen == [("j", Outcome.STALE, 1)]
    assert [r.getMessage() for r in caplog.records] == ["tick already decided (stale claim)"]


@pytest.mark.parametrize(
    ("watermark", "missed"),
    [(None, 4), (99, 4), (102, 1), (104, 0)],
)
def test_a_shared_plan_counts_only_the_ticks_no_other_racer_decided(
    watermark: int | None, missed: int
) -> None:
    """racers = k: ticks 100-104 may have been decided by others; the watermark tells."""
    proposal = Proposal(job(), TickPlan(105, 105, (105,), 4), shared_from_s=100)
    verdict = decide(proposal, answer(prev_watermark_s=watermark), node_id=ME, now_ms=1)
    assert [e for e in verdict.events if e[0] is Outcome.MISSED] == (
        [(Outcome.MISSED, missed)] if missed else []
    )
    assert verdict.start == RunStart((105,), 7)


def test_a_late_run_counts_the_older_ticks_it_took_missed() -> None:
    """Catch-up latest: the plan covers 101-103 and fires 103 alone. Passed while its
    answer was on the way, it is run late (the script took 101-103: late_from 101); 101
    and 102 are missed. Before, really_missed counted them decided (the watermark was
    past them) and nothing recorded them (the scheduler model with racers = 2)."""
    plan = TickPlan(103, 103, (103,), 2)
    proposal = Proposal(job(Overlap.ALLOW), plan, shared_from_s=101)
    verdict = decide(proposal, answer(prev_watermark_s=104, late_from_s=101), node_id=ME, now_ms=0)
    assert outcomes(verdict) == [("missed", 103, 2)]
    assert verdict.start == RunStart((103,), 7)
    # Its older ticks taken by another claim's decision: its own tick alone, none missed.
    verdict = decide(proposal, answer(prev_watermark_s=104, late_from_s=103), node_id=ME, now_ms=0)
    assert (outcomes(verdict), verdict.start) == ([], RunStart((103,), 7))


def test_acquire_request_names_the_oldest_tick_the_plan_covers() -> None:
    backlog = Proposal(job(), TickPlan(104, 104, (104,), 3), shared_from_s=101)
    request = acquire_request(backlog, OWNER)
    assert (request.run_tick_s, request.first_tick_s) == (104, 101)
    assert acquire_request(Proposal(job(), steady()), OWNER).first_tick_s == 100
    trigger = acquire_request(Proposal(job(), steady(), "t1"), OWNER, 42_000)
    assert (trigger.first_tick_s, trigger.keep_ms) == (0, 0)
    # A decision keeps its answer a second less than its claim lives (one in time keeps
    # its claim as it is); a trigger's is not kept past its claim.
    assert acquire_request(backlog, OWNER, 42_000).keep_ms == 41_000
