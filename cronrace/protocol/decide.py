"""Claims and decisions: the dense cursor (docs/design.md section 3).

One invariant carries the protocol:

    I-cursor. Every scheduled tick s of a job with origin < s <= cursor has been decided
    exactly once, and the record of that decision is in the job's history.

The cursor moves only inside a decision, and a decision covers exactly the ticks between
the cursor and its own tick, writing their records in the same atomic step. A claim owns
no tick: it only says who may move the cursor now (and keeps the decision's answer for
its retries). So a tick at or below the cursor is decided and recorded, and a tick above
it is still open: the job's next decision, whoever makes it, covers it.

A decision answers, in this order: a retry of a decision made under the same claim gets
its remembered answer (``replayed``); ``covered`` when the cursor is at or past its tick;
``lost`` when another owner holds its claim; ``moved`` when the cursor is not the one its
caller planned from. None of these writes anything. Otherwise it decides every tick of
(cursor, tick]: records the ranges its caller does not fire ``missed``, records a run whose
lease ran out unreleased ``abandoned``, applies the pause flag and the overlap policy to
the ticks it fires, appends every record, sets the cursor, and keeps its answer under the
claim for ``claim_ttl``.
"""

from __future__ import annotations

from dataclasses import replace

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol.lease import fence_floor, grant, hold_left_ms, next_fence, start_hold
from cronrace.protocol.values import (
    Answer,
    Claim,
    ClaimKey,
    DecideReply,
    DecideRequest,
    JobState,
    Lease,
    Pending,
    Record,
    Verdict,
)


def claim(
    state: JobState,
    key: ClaimKey,
    owner: str,
    *,
    ttl_ms: int,
    now_ms: int,
    read_back: bool = False,
) -> tuple[bool, JobState]:
    """Race for ``key`` (``SET NX PX``): won when nobody holds it.

    With ``read_back`` (an earlier claim's reply was lost), a claim this owner holds and
    has not decided counts as won too; a decided one never does (its answer is for the
    retries of that decision, not for a second one).
    """
    held = state.claim_at(key, now_ms)
    if held is None:
        return True, state.with_claim(key, Claim(owner, now_ms + ttl_ms))
    return read_back and held.owner == owner and held.memo is None, state


def post_trigger(state: JobState, trigger_id: str, *, now_ms: int) -> JobState:
    """An operator asks for one immediate run: the trigger is outstanding until decided."""
    return replace(state, triggers=(*state.triggers, (trigger_id, now_ms)))


def set_paused(state: JobState, paused: bool) -> JobState:
    """Pause or resume the job."""
    return replace(state, paused=paused)


def decide(
    state: JobState, req: DecideRequest, *, now_ms: int, now_us: int
) -> tuple[DecideReply, JobState]:
    """Decide ``req`` atomically against ``state`` (see the module docstring)."""
    held = state.claim_at(req.claim_key, now_ms)
    if held is not None and held.owner == req.owner and held.memo is not None:
        return _replay(state, req, held.memo, now_ms)
    if req.trigger_id is None and state.cursor_s is not None and state.cursor_s >= req.tick_s:
        return DecideReply(Answer.COVERED, cursor_s=state.cursor_s), state
    if held is not None and held.owner != req.owner:
        return DecideReply(Answer.LOST, cursor_s=state.cursor_s), state
    records: list[Record] = []
    data_lost = False
    if req.trigger_id is not None:
        if req.trigger_id not in dict(state.triggers):
            return DecideReply(Answer.STALE, cursor_s=state.cursor_s), state
        state = replace(state, triggers=tuple(t for t in state.triggers if t[0] != req.trigger_id))
    elif state.cursor_s != req.cursor_s:
        if state.cursor_s is not None or req.cursor_s is None:
            return DecideReply(Answer.MOVED, cursor_s=state.cursor_s), state
        # The store has no cursor where the caller saw one: it lost the job's data. The loss
        # is recorded, runs granted before it may be alive (hold), and the decision goes on
        # from the caller's cursor.
        data_lost = True
        records.append(Record(req.cursor_s, Outcome.DATA_LOST, req.node, last_s=req.cursor_s))
        floor = fence_floor(state, known_fence=req.known_fence, now_ms=now_ms, now_us=now_us)
        state = start_hold(state, now_ms=now_ms, ttl_ms=req.lease_ttl_ms, before_fence=floor)
    state, swept = _sweep(state, req, now_ms)
    records += swept
    records += [
        Record(m.first_s, Outcome.MISSED, req.node, count=m.count, last_s=m.last_s)
        for m in req.missed
    ]
    outcome = _fire(state, req, now_ms=now_ms, now_us=now_us)
    state = outcome.state
    records += outcome.records
    if req.trigger_id is None:
        origin = req.from_s if state.cursor_s is None else state.origin_s
        state = replace(state, cursor_s=req.tick_s, origin_s=origin)
    reply = DecideReply(
        Answer.DECIDED,
        cursor_s=state.cursor_s,
        verdict=outcome.verdict,
        fence=outcome.fences[0] if outcome.fences else 0,
        fences=outcome.fences if req.overlap is Overlap.ALLOW else (),
        ticks_s=outcome.ticks_s,
        hold_ms=outcome.hold_ms,
        data_lost=data_lost or outcome.data_lost,
        records=tuple(records),
    )
    memo = Claim(req.owner, now_ms + req.claim_ttl_ms, replace(reply, records=()))
    return reply, state.with_claim(req.claim_key, memo).appended(reply.records)


def _replay(
    state: JobState, req: DecideRequest, memo: DecideReply, now_ms: int
) -> tuple[DecideReply, JobState]:
    """A retry of a decision made (its answer was lost): the same answer again.

    A grant may start only while its lease still holds its fence and neither the counter
    nor the caller knows a higher fence: a failover to a replica that lagged can put back a
    grant and its lease although fences above it were handed out since. A grant whose
    lease ran out before its answer came back never starts: its run is recorded
    ``abandoned`` by the job's next decision.
    """
    renewed = False
    if memo.verdict is Verdict.RUN:
        if req.overlap is Overlap.ALLOW:
            renewed = True  # no lease to lose
        else:
            lease = state.live_lease(now_ms)
            newest = max(state.fence or 0, req.known_fence)
            if lease is not None and lease.fence == memo.fence and newest <= memo.fence:
                renewed = True
                state = replace(state, lease=replace(lease, expires_ms=now_ms + req.lease_ttl_ms))
    return replace(memo, replayed=True, renewed=renewed, records=()), state


def _sweep(state: JobState, req: DecideRequest, now_ms: int) -> tuple[JobState, list[Record]]:
    """Record what ran out: a run whose lease expired unreleased (with the tick that
    waited behind it), and manual triggers outstanding longer than their window."""
    records: list[Record] = []
    node = req.node
    if state.live_lease(now_ms) is None:
        run, pending = state.run, state.pending
        if run is not None:
            ran = _node_of(run.owner)
            records += [
                Record(t, Outcome.ABANDONED, ran, run.fence, trigger_id=run.trigger_id)
                for t in run.ticks_s
            ]
        if pending is not None:
            records.append(
                Record(pending.tick_s, Outcome.ABANDONED, node, trigger_id=pending.trigger_id)
            )
        state = replace(state, lease=None, run=None, pending=None)
    if req.trigger_window_ms > 0:
        late = [(t, at) for t, at in state.triggers if at + req.trigger_window_ms <= now_ms]
        if late:
            records += [Record(at // 1000, Outcome.MISSED, node, trigger_id=t) for t, at in late]
            state = replace(state, triggers=tuple(t for t in state.triggers if t not in late))
    return state, records


class _Fired:
    """What a decision did with the ticks it fires."""

    __slots__ = ("data_lost", "fences", "hold_ms", "records", "state", "ticks_s", "verdict")

    def __init__(
        self,
        state: JobState,
        verdict: Verdict,
        records: list[Record],
        *,
        fences: tuple[int, ...] = (),
        ticks_s: tuple[int, ...] = (),
        hold_ms: int = 0,
        data_lost: bool = False,
    ) -> None:
        self.state, self.verdict, self.records = state, verdict, records
        self.fences, self.ticks_s, self.hold_ms, self.data_lost = (
            fences,
            ticks_s,
            hold_ms,
            data_lost,
        )


def _fire(state: JobState, req: DecideRequest, *, now_ms: int, now_us: int) -> _Fired:
    """Apply the pause flag and the overlap policy to the ticks the decision fires."""
    fire, node, trigger = req.fire_s, req.node, req.trigger_id
    if not fire:
        return _Fired(state, Verdict.NOTHING, [])
    if state.paused:
        paused = [Record(t, Outcome.SKIPPED_PAUSED, node, trigger_id=trigger) for t in fire]
        return _Fired(state, Verdict.SKIPPED_PAUSED, paused)
    lease = state.live_lease(now_ms)
    records: list[Record] = []
    if req.overlap is Overlap.ALLOW:
        fences: list[int] = []
        lost_any = False
        for tick_s in fire:
            fence, lost, state = next_fence(
                state, known_fence=req.known_fence, now_ms=now_ms, now_us=now_us
            )
            if lost:
                lost_any = True
                state = start_hold(
                    state, now_ms=now_ms, ttl_ms=req.lease_ttl_ms, before_fence=fence - 1
                )
            fences.append(fence)
            records.append(Record(tick_s, Outcome.GRANTED, node, fence, trigger_id=trigger))
        hold_ms = hold_left_ms(state, now_ms)
        return _Fired(
            state,
            Verdict.RUN,
            records,
            fences=tuple(fences),
            ticks_s=fire,
            hold_ms=hold_ms,
            data_lost=lost_any,
        )
    if lease is not None:
        if req.overlap is Overlap.SKIP:
            records = [Record(t, Outcome.SKIPPED_OVERLAP, node, trigger_id=trigger) for t in fire]
            return _Fired(state, Verdict.SKIPPED_OVERLAP, records)
        if req.overlap is Overlap.QUEUE_ONE:
            # At most one waits, the newest: the one it displaces, and the older ticks of
            # this decision, are skipped.
            waiting = state.pending
            if waiting is not None:
                records.append(
                    Record(
                        waiting.tick_s, Outcome.SKIPPED_OVERLAP, node, trigger_id=waiting.trigger_id
                    )
                )
            records += [Record(t, Outcome.SKIPPED_OVERLAP, node) for t in fire[:-1]]
            records.append(Record(fire[-1], Outcome.QUEUED, node, trigger_id=trigger))
            state = replace(state, pending=Pending(fire[-1], trigger))
            return _Fired(state, Verdict.QUEUED, records)
        # replace: the old run loses its lease (its next renewal fails, it is cancelled).
        run = state.run
        if run is not None:
            ran = _node_of(run.owner)
            records += [
                Record(t, Outcome.LEASE_LOST, ran, run.fence, trigger_id=run.trigger_id)
                for t in run.ticks_s
            ]
    fence, lost, state = next_fence(
        state, known_fence=req.known_fence, now_ms=now_ms, now_us=now_us
    )
    if lost:
        state = start_hold(state, now_ms=now_ms, ttl_ms=req.lease_ttl_ms, before_fence=fence - 1)
    hold_ms = hold_left_ms(state, now_ms)
    held = hold_ms > 0 and req.overlap is not Overlap.REPLACE
    state = grant(
        state, Lease(req.owner, fence, fire, trigger, now_ms + req.lease_ttl_ms, held=held)
    )
    records += [Record(t, Outcome.GRANTED, node, fence, trigger_id=trigger) for t in fire]
    return _Fired(
        state, Verdict.RUN, records, fences=(fence,), ticks_s=fire, hold_ms=hold_ms, data_lost=lost
    )


def _node_of(owner: str) -> str:
    return owner.partition(":")[0]
