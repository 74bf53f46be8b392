"""Fences, grants and the running lease: renewal and release (docs/design.md section 4).

A fence is never reused, not even after the store lost the job's data: a missing counter
is seeded from the store's clock in microseconds, and every new fence is at least that
clock and above every fence the caller has seen (``known_fence``). A counter found missing
although the caller knows a fence, or behind one it knows, means the store lost the job's
data: new grants then wait one ``lease_ttl`` (the wipe hold), because runs granted before
the loss may still be alive, and such a run writes its lease back at its next renewal
(re-asserted). A grant made during the hold is ``held``: unstarted, it yields its lease to a
re-asserting run.
"""

from __future__ import annotations

from dataclasses import replace

from cronrace.model.policies import Outcome
from cronrace.protocol.values import (
    JobState,
    Lease,
    Record,
    Release,
    ReleaseReply,
    ReleaseRequest,
    Renewal,
    RenewRequest,
)


def next_fence(
    state: JobState, *, known_fence: int, now_ms: int, now_us: int
) -> tuple[int, bool, JobState]:
    """Hand out a new fence; say whether the counter shows the job's data was lost.

    Returns:
        The fence, whether the store lost the counter (missing although ``known_fence``
        is set, or behind it), and the state with the counter at the new fence.
    """
    counter = state.fence
    lost = False
    if counter is None:
        lost = known_fence > 0
        live = state.live_lease(now_ms)
        counter = max(now_us, live.fence if live is not None else 0, known_fence)
    elif counter < known_fence:
        lost = True
        counter = known_fence
    fence = max(counter, now_us) + 1
    return fence, lost, replace(state, fence=fence)


def hold_left_ms(state: JobState, now_ms: int) -> int:
    """How long new grants must still wait (0: no hold)."""
    return max(0, state.hold_until_ms - now_ms)


def start_hold(state: JobState, *, now_ms: int, ttl_ms: int, before_fence: int) -> JobState:
    """Hold new grants for ``ttl_ms`` from now (never shortening a hold).

    ``before_fence`` is the highest fence a run granted before the loss can hold: such a
    run may write its lost lease back during the hold; a grant made since (a fence above
    it) may not, so a held grant never takes the lease back from an older run that
    re-asserted it.
    """
    holding = state.hold_until_ms > now_ms
    return replace(
        state,
        hold_until_ms=max(state.hold_until_ms, now_ms + ttl_ms),
        hold_fence=max(state.hold_fence, before_fence) if holding else before_fence,
    )


def fence_floor(state: JobState, *, known_fence: int, now_ms: int, now_us: int) -> int:
    """The highest fence handed out so far, as far as this state and the caller can tell:
    the counter, the live lease's fence, the caller's, and the clock's floor."""
    live = state.live_lease(now_ms)
    return max(state.fence or 0, live.fence if live is not None else 0, known_fence, now_us)


def as_run(lease: Lease) -> Lease:
    """The grant as the state remembers it past its lease: no expiry, no flags."""
    return replace(lease, expires_ms=0, held=False, reasserted=False)


def grant(state: JobState, lease: Lease) -> JobState:
    """Write ``lease`` and remember its run."""
    return replace(state, lease=lease, run=as_run(lease))


def renew(
    state: JobState, req: RenewRequest, *, now_ms: int, now_us: int
) -> tuple[Renewal, JobState]:
    """Extend the lease held with ``req.fence``; write it back when the store lost it.

    A lease is re-asserted (given ``owner``) when the store lost it under a live run: no
    lease and no counter (nothing was granted since the loss: every grant seeds it); or,
    during the wipe hold, by a run granted before the loss (its fence at most the hold's
    ``hold_fence``) when there is no lease, or the lease is a held grant (not started), or
    a lease re-asserted with a lower fence (the run holding the highest fence is the newest
    grant the store had made). A grant made during the hold never re-asserts. The counter
    is raised to the re-asserted fence, so fences still only rise.
    The grant it displaces gets its result here, as a decision's sweep or ``replace``
    would write it: ``lease_lost`` (its lease was live: a held grant, or a lower re-asserted
    run), or ``abandoned`` (its lease had run out); without it, a grant made during the hold
    and displaced would keep its ``granted`` record with no result, ever (the exhaustive
    checker, tests/model/explore.py).
    """
    lease = state.live_lease(now_ms)
    if lease is not None and lease.fence == req.fence:
        held = lease.held and not req.starting
        return Renewal.RENEWED, replace(
            state, lease=replace(lease, expires_ms=now_ms + req.ttl_ms, held=held)
        )
    before = hold_left_ms(state, now_ms) > 0 and req.fence <= state.hold_fence
    if req.owner and (
        (lease is None and (state.fence is None or before))
        or (
            lease is not None
            and before
            and (lease.held or (lease.reasserted and lease.fence < req.fence))
        )
    ):
        back = Lease(
            req.owner,
            req.fence,
            (req.tick_s,),
            req.trigger_id,
            expires_ms=now_ms + req.ttl_ms,
            reasserted=True,
        )
        state = grant(state, back).appended(_displaced(state.run, req.fence, live=lease))
        if (state.fence or 0) < req.fence:
            state = replace(state, fence=max(req.fence, now_us))
        return Renewal.REASSERTED, state
    return (Renewal.GONE if lease is None else Renewal.TAKEN), state


def _displaced(run: Lease | None, fence: int, *, live: Lease | None) -> tuple[Record, ...]:
    """The records of the grant a re-asserted lease replaces (none: no grant, or its own)."""
    if run is None or run.fence == fence:
        return ()
    outcome = Outcome.LEASE_LOST if live is not None else Outcome.ABANDONED
    node = run.owner.partition(":")[0]
    return tuple(
        Record(t, outcome, node, run.fence, trigger_id=run.trigger_id) for t in run.ticks_s
    )


def release(
    state: JobState, req: ReleaseRequest, *, now_ms: int, now_us: int
) -> tuple[ReleaseReply, JobState]:
    """End the run holding ``req.fence``: append its record, then hand on or release.

    Only the holder of the fence writes: a retry whose first attempt went through answers
    ``not_owner`` and writes nothing, so a run's record is written once. The holder is the
    live lease's fence, or, once that lease ran out, the run's while no decision has
    recorded it ``abandoned`` yet (a run that lost its lease says how it ended: one result
    record, whichever comes first). The grant's next tick (catch-up ``all``), else the
    queued one, is handed on with a new fence; a caller that stops instead (``hand_on``
    False) has them recorded ``cancelled``.
    """
    lease = state.live_lease(now_ms)
    if lease is None and state.run is not None and state.run.fence == req.fence:
        lease = state.run  # lapsed, not yet recorded abandoned: still this run's to end
    if lease is None or lease.fence != req.fence:
        return ReleaseReply(Release.NOT_OWNER), state
    records: tuple[Record, ...] = (req.record,) if req.record is not None else ()
    rest, pending = lease.ticks_s[1:], state.pending
    if req.hand_on and (rest or pending is not None):
        if rest:
            ticks, trigger_id = rest, None
        else:
            assert pending is not None
            ticks, trigger_id = (pending.tick_s,), pending.trigger_id
            state = replace(state, pending=None)
        fence, _lost, state = next_fence(state, known_fence=0, now_ms=now_ms, now_us=now_us)
        hold_ms = hold_left_ms(state, now_ms)
        state = grant(
            state,
            Lease(req.owner, fence, ticks, trigger_id, now_ms + req.lease_ttl_ms, held=hold_ms > 0),
        )
        reply = ReleaseReply(Release.HANDED_ON, fence, ticks[0], trigger_id, hold_ms, records)
        return reply, state.appended(records)
    node = req.owner.partition(":")[0]
    if not req.hand_on:
        records += tuple(Record(t, Outcome.CANCELLED, node, lease.fence) for t in rest)
        if pending is not None:
            records += (
                Record(pending.tick_s, Outcome.CANCELLED, node, 0, trigger_id=pending.trigger_id),
            )
            state = replace(state, pending=None)
    state = replace(state, lease=None, run=None)
    return ReleaseReply(Release.RELEASED, records=records), state.appended(records)
