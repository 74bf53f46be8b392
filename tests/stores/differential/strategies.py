"""Hypothesis strategies for the differential tests: one job's state and a request to it.

Every strategy draws a case whose times are RELATIVE: milliseconds and microseconds from
an instant ``now`` not known yet (a store's clock is real: the test reads it just before
the call). :meth:`Case.place` puts a case at ``now``, giving the reference's state and
request in absolute times. Ticks are absolute (a grid of ``PERIOD_S`` from ``BASE_S``):
nothing compares a tick with the clock.

Margins. Every expiry drawn (a claim's, a lease's, the wipe hold's, a trigger's window)
lies at least 1.5 s from ``now``, at ``k * 1000 + 500`` ms from it, while every expiry a
call computes is ``now + ttl`` with a ttl a whole number of seconds: a comparison made a
few milliseconds after ``now`` has the same outcome as one made at ``now``, and an expiry
the store did not move never matches one it should have set (see ``codec.py``).

Fences. A drawn fence counter is either far above the clock in microseconds
(``FENCE_ABOVE_US`` + a few: the next fence is the counter + 1, exactly), or far below it
(the next fence is floored at the clock: ``now_us + 1`` in the reference, the store's own
clock within the call in the store; ``codec.py`` compares such a fence within the call's
elapsed microseconds). Drawn fences of leases, runs and memos follow the counter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from cronrace.model.policies import Catchup, Outcome, Overlap
from cronrace.protocol import (
    Answer,
    Claim,
    DecideReply,
    DecideRequest,
    JobState,
    Lease,
    Missed,
    Pending,
    Record,
    ReleaseRequest,
    RenewRequest,
    Verdict,
    plan,
    trigger_key,
)
from cronrace.protocol.values import ClaimKey

#: The schedule's grid: ticks are BASE_S + PERIOD_S * i.
BASE_S = 1_800_000_000
PERIOD_S = 60
#: Owners "<node>:<nonce>": two processes of one node, and another node.
OWNERS = ("n1:a", "n1:b", "n2:c")
TRIGGER_IDS = ("t1", "t2", "t3")
#: Drawn fence counters above the clock start this far above it (µs).
FENCE_ABOVE_US = 10**9
#: Drawn fence counters below the clock lie about this far below it (µs).
FENCE_BELOW_US = -(10**10)
#: Lifetimes a call sets (whole seconds, see the module docstring).
LEASE_TTLS_MS = (3000, 10000, 30000)
CLAIM_TTLS_MS = (5000, 60000)
TRIGGER_WINDOWS_MS = (0, 10000, 60000)


def tick(i: int) -> int:
    """The ``i``-th tick of the grid."""
    return BASE_S + PERIOD_S * i


def _future_ms() -> st.SearchStrategy[int]:
    """A relative expiry still to come: 1.5 s to 60.5 s ahead."""
    return st.integers(1, 60).map(lambda k: k * 1000 + 500)


def _past_ms() -> st.SearchStrategy[int]:
    """A relative instant gone: 1.5 s to 180.5 s ago."""
    return st.integers(1, 180).map(lambda k: -(k * 1000 + 500))


@dataclass(frozen=True, slots=True)
class Case:
    """A state and a request with relative times (see the module docstring).

    Attributes:
        state: the job's state, times relative to ``now`` (0).
        request: a :class:`DecideRequest`, :class:`RenewRequest` or :class:`ReleaseRequest`.
    """

    state: JobState
    request: Any

    def place(self, now_ms: int, now_us: int) -> tuple[JobState, Any]:
        """The state and request at ``now`` (absolute times, as the reference takes them)."""
        return shift_state(self.state, now_ms, now_us), shift_request(self.request, now_ms, now_us)


def _fence(value: int, now_us: int) -> int:
    return value + now_us if value else 0


def _lease(lease: Lease | None, now_ms: int, now_us: int) -> Lease | None:
    if lease is None:
        return None
    expires = lease.expires_ms + now_ms if lease.expires_ms else 0
    return replace(lease, fence=lease.fence + now_us, expires_ms=expires)


def _memo(memo: DecideReply | None, now_us: int) -> DecideReply | None:
    if memo is None:
        return None
    fences = tuple(f + now_us for f in memo.fences)
    return replace(memo, fence=_fence(memo.fence, now_us), fences=fences)


def shift_state(state: JobState, now_ms: int, now_us: int) -> JobState:
    """``state`` with its relative times and fences placed at ``now``."""
    claims = tuple(
        (k, Claim(c.owner, c.expires_ms + now_ms, _memo(c.memo, now_us))) for k, c in state.claims
    )
    return replace(
        state,
        fence=None if state.fence is None else state.fence + now_us,
        lease=_lease(state.lease, now_ms, now_us),
        run=_lease(state.run, now_ms, now_us),
        hold_until_ms=state.hold_until_ms + now_ms if state.hold_until_ms else 0,
        hold_fence=_fence(state.hold_fence, now_us),
        claims=claims,
        triggers=tuple((t, at + now_ms) for t, at in state.triggers),
        history=tuple(replace(r, fence=_fence(r.fence, now_us)) for r in state.history),
    )


def shift_request(request: Any, now_ms: int, now_us: int) -> Any:
    """``request`` with its relative fences placed at ``now`` (its times are lifetimes)."""
    del now_ms  # requests carry durations only
    if isinstance(request, DecideRequest):
        return replace(request, known_fence=_fence(request.known_fence, now_us))
    if isinstance(request, RenewRequest):
        return replace(request, fence=request.fence + now_us)
    if isinstance(request, ReleaseRequest):
        record = request.record
        if record is not None:
            record = replace(record, fence=_fence(record.fence, now_us))
        return replace(request, fence=request.fence + now_us, record=record)
    raise TypeError(f"not a request: {request!r}")


# -- the state ----------------------------------------------------------------------------


@st.composite
def _memos(draw: st.DrawFn, cursor_s: int | None, counter: int) -> DecideReply:
    """A decided claim's remembered answer (relative fences): a grant half the time, its
    fence the one given (the lease's, or the counter), or another."""
    verdict = draw(st.sampled_from([Verdict.RUN] * len(Verdict) + list(Verdict)))
    fence, fences, ticks = 0, (), ()  # type: tuple[int, tuple[int, ...], tuple[int, ...]]
    if verdict is Verdict.RUN:
        fence = draw(st.sampled_from((counter, counter, counter - 1, counter + 3)))
        ticks = tuple(tick(i) for i in range(draw(st.integers(1, 2))))
        if draw(st.booleans()):  # granted under allow: one fence per tick
            fences = tuple(fence + i for i in range(len(ticks)))
    return DecideReply(
        Answer.DECIDED,
        cursor_s=cursor_s,
        verdict=verdict,
        fence=fence,
        fences=fences,
        ticks_s=ticks,
        hold_ms=draw(st.sampled_from((0, 0, 2500))),
        data_lost=draw(st.booleans()),
    )


@st.composite
def _history(draw: st.DrawFn) -> tuple[Record, ...]:
    records = draw(
        st.lists(
            st.builds(
                Record,
                tick_s=st.integers(-3, 3).map(tick),
                outcome=st.sampled_from(list(Outcome)),
                node=st.sampled_from(("n1", "n2")),
                fence=st.sampled_from((0, FENCE_BELOW_US)),
                count=st.integers(1, 3),
                last_s=st.sampled_from((0, tick(5))),
                trigger_id=st.sampled_from((None, "t9")),
            ),
            max_size=2,
        )
    )
    return tuple(records)


@st.composite
def states(
    draw: st.DrawFn,
    leases: tuple[str, ...] = ("live", "live", "none", "ran_out"),
    holding: bool | None = None,
    wiped: bool = False,
) -> JobState:
    """A job's state, relative times: everything the stores keep for one job.

    The claims are drawn with the request (:func:`decide_cases`), which decides whose
    they are; here only those no request names (an older tick's, a trigger's).
    """
    cursor = draw(st.one_of(st.none(), st.integers(-2, 4).map(tick)))
    origin = None
    if cursor is not None or draw(st.integers(0, 9)) == 0:
        origin = draw(st.sampled_from((None, tick(-10), tick(-3))))
    above = FENCE_ABOVE_US + draw(st.integers(0, 5))
    counter = draw(st.sampled_from((FENCE_BELOW_US, above, FENCE_BELOW_US, above, None)))
    if wiped:  # the store lost the counter (and, drawn apart, the lease)
        counter = None
    base = counter if counter is not None else FENCE_BELOW_US
    hold = draw(st.booleans()) if holding is None else holding
    hold_until = draw(_future_ms()) if hold else 0
    # Runs granted before the loss hold fences up to it; a grant of the hold, above it.
    hold_fence = base - draw(st.integers(0, 2)) if hold else 0
    lease = run = None
    kind = draw(st.sampled_from(leases))
    if kind != "none":
        lease = Lease(
            draw(st.sampled_from(OWNERS)),
            base - draw(st.integers(0, 2)),
            tuple(tick(i) for i in draw(st.sampled_from(((0,), (0, 1), (-1, 0, 1))))),
            draw(st.sampled_from((None, None, "t9"))),
            draw(_future_ms()),
            held=bool(hold_until) and draw(st.booleans()),
            reasserted=draw(st.booleans()),
        )
        run = replace(lease, expires_ms=0, held=False, reasserted=False)
        if kind == "ran_out":
            lease = None
    pending = None
    if draw(st.booleans()):
        pending = Pending(tick(draw(st.integers(-1, 2))), draw(st.sampled_from((None, "t8"))))
    triggers = sorted(
        draw(
            st.dictionaries(
                st.sampled_from(TRIGGER_IDS),
                st.one_of(_past_ms(), st.integers(1, 5).map(lambda k: -k * 20000 - 500)),
                max_size=3,
            )
        ).items(),
        key=lambda t: (t[1], t[0]),
    )
    return JobState(
        cursor_s=cursor,
        origin_s=origin,
        fence=counter,
        lease=lease,
        run=run,
        pending=pending,
        paused=draw(st.integers(0, 3)) == 3,
        hold_until_ms=hold_until,
        hold_fence=hold_fence,
        triggers=tuple(triggers),
        history=draw(_history()),
    )


@st.composite
def _claims(
    draw: st.DrawFn, state: JobState, key: ClaimKey, owner: str, replay: bool = False
) -> tuple[tuple[ClaimKey, Claim], ...]:
    """The claims: the request's own key (won, decided by this owner, another's, gone),
    and a few others; with ``replay``, decided by this owner half the time."""
    counter = state.fence if state.fence is not None else FENCE_BELOW_US
    if state.lease is not None and draw(st.integers(0, 3)) > 0:
        counter = state.lease.fence  # a memo of the grant that holds the lease
    found: dict[ClaimKey, Claim] = {}
    fates = ("won", "won", "won", "decided", "other", "gone")
    mine = draw(st.sampled_from(fates + ("decided",) * 6 if replay else fates))
    if mine == "won":
        found[key] = Claim(owner, draw(_future_ms()))
    elif mine == "decided":
        found[key] = Claim(owner, draw(_future_ms()), draw(_memos(state.cursor_s, counter)))
    elif mine == "other":
        other = draw(st.sampled_from([o for o in OWNERS if o != owner]))
        memo = draw(st.one_of(st.none(), _memos(state.cursor_s, counter)))
        found[key] = Claim(other, draw(_future_ms()), memo)
    for _ in range(draw(st.integers(0, 2))):
        extra: ClaimKey = draw(
            st.one_of(st.integers(-2, 3).map(tick), st.sampled_from(TRIGGER_IDS).map(trigger_key))
        )
        if extra != key:
            memo = draw(st.one_of(st.none(), _memos(state.cursor_s, counter)))
            found[extra] = Claim(draw(st.sampled_from(OWNERS)), draw(_future_ms()), memo)
    return tuple(sorted(found.items(), key=lambda kc: str(kc[0])))


# -- requests -----------------------------------------------------------------------------


@st.composite
def _plan(draw: st.DrawFn, from_s: int, tick_s: int) -> tuple[tuple[int, ...], tuple[Missed, ...]]:
    """What the planner fires of (from_s, tick_s] and what it counts missed."""
    due = list(range(from_s + PERIOD_S, tick_s + 1, PERIOD_S))
    if not due:  # off the grid (a wrong cursor): a range the caller planned nonetheless
        due = [tick_s]
    expired = draw(st.integers(0, len(due)))
    old, window = due[:expired], due[expired:]
    return plan(
        draw(st.sampled_from((Catchup.ALL, *Catchup))),
        due_s=window,
        on_time=draw(st.booleans()),
        expired=Missed(old[0], old[-1], len(old)) if old else None,
        max_catchup=draw(st.integers(1, 3)),
    )


def _known_fence(state: JobState) -> st.SearchStrategy[int]:
    """What the caller knows: nothing, the counter, more (the store lost some), less."""
    counter = state.fence if state.fence is not None else FENCE_BELOW_US
    return st.sampled_from((0, 0, counter, counter + 7, counter - 7, FENCE_ABOVE_US + 50))


def decide_cases() -> st.SearchStrategy[Case]:
    """A decision: a tick (cursor expected right, wrong, or unknown) or a manual trigger;
    a quarter of them against a live run (the overlap policies, catch-ups behind it), and
    a quarter replays (the answer remembered under the claim, its grant's lease held or
    not)."""
    live = states(leases=("live",))
    return st.one_of(
        _decide_cases(states()),
        _decide_cases(states()),
        _decide_cases(live, busy=True),
        _decide_cases(live, replay=True),
    )


@st.composite
def _decide_cases(
    draw: st.DrawFn,
    job_states: st.SearchStrategy[JobState],
    busy: bool = False,
    replay: bool = False,
) -> Case:
    state = draw(job_states)
    owner = draw(st.sampled_from(OWNERS))
    trigger_id = None
    if draw(st.integers(0, 4)) == 0:
        outstanding = [t for t, _at in state.triggers]
        if not outstanding and draw(st.integers(0, 3)) < 3:  # an operator posted one
            state = replace(state, triggers=(("t1", draw(_past_ms())),))
            outstanding = ["t1"]
        if outstanding and draw(st.integers(0, 3)) < 3:
            trigger_id = draw(st.sampled_from(outstanding))
        else:
            trigger_id = draw(st.sampled_from(TRIGGER_IDS))
        tick_s = tick(draw(st.integers(0, 3)))
        expected, from_s = state.cursor_s, tick_s - PERIOD_S
        fire: tuple[int, ...] = (tick_s,)
        missed: tuple[Missed, ...] = ()
    else:
        guess = draw(st.sampled_from(("right", "right", "right", "wrong", "none")))
        if guess == "right":
            expected = state.cursor_s
        elif guess == "wrong":
            expected = tick(draw(st.integers(-3, 5)))
        else:
            expected = None
        from_s = expected if expected is not None else tick(draw(st.integers(-4, 3)))
        tick_s = from_s + PERIOD_S * draw(st.integers(1, 4))
        if draw(st.integers(0, 4)) == 0:  # at or below the cursor, or anywhere
            at_cursor = state.cursor_s is not None and draw(st.booleans())
            tick_s = tick(draw(st.integers(-3, 4)))
            if at_cursor and state.cursor_s is not None:
                tick_s = state.cursor_s
        fire, missed = draw(_plan(from_s, tick_s))
        if busy and draw(st.integers(0, 3)) > 0:  # a catch-up's ticks behind the run
            fire = tuple(t for t in (tick_s - 2 * PERIOD_S, tick_s - PERIOD_S) if t > from_s)
            fire, missed = (*fire, tick_s), ()
    request = DecideRequest(
        job="j",
        tick_s=tick_s,
        cursor_s=expected,
        from_s=from_s,
        fire_s=fire,
        missed=missed,
        owner=owner,
        overlap=draw(st.sampled_from(list(Overlap))),
        lease_ttl_ms=draw(st.sampled_from(LEASE_TTLS_MS)),
        claim_ttl_ms=draw(st.sampled_from(CLAIM_TTLS_MS)),
        known_fence=draw(_known_fence(state)),
        trigger_window_ms=draw(st.sampled_from(TRIGGER_WINDOWS_MS)),
        trigger_id=trigger_id,
    )
    claims = draw(_claims(state, request.claim_key, owner, replay=replay))
    return Case(replace(state, claims=claims), request)


def _run_fence(draw: st.DrawFn, state: JobState) -> int:
    """A run's fence: the lease's (the holder), or another (a run replaced, or gone)."""
    choices = []
    if state.lease is not None:
        choices += [state.lease.fence] * 4 + [state.lease.fence + 1]
        choices += [state.lease.fence - 1] * 2  # an older run: re-asserting, or replaced
    choices += [FENCE_BELOW_US - 1, FENCE_ABOVE_US + 9]
    if state.run is not None:
        choices.append(state.run.fence)
    return draw(st.sampled_from(choices))


def renew_cases() -> st.SearchStrategy[Case]:
    """A renewal: by the holder, by a replaced run, by a run re-asserting after a wipe; a
    third of them during a wipe hold, against a live lease (held, re-asserted or not), and
    a third after a wipe took the counter and the lease."""
    return st.one_of(
        _renew_cases(states(leases=("live", "live", "none", "ran_out"))),
        _renew_cases(states(leases=("live",), holding=True)),
        _renew_cases(states(leases=("none", "ran_out"), wiped=True)),
    )


@st.composite
def _renew_cases(draw: st.DrawFn, job_states: st.SearchStrategy[JobState]) -> Case:
    state = draw(job_states)
    owner = draw(st.sampled_from((None, *OWNERS)))
    request = RenewRequest(
        fence=_run_fence(draw, state),
        ttl_ms=draw(st.sampled_from(LEASE_TTLS_MS)),
        owner=owner,
        tick_s=tick(draw(st.integers(-1, 2))) if owner is not None else 0,
        starting=draw(st.booleans()),
        trigger_id=draw(st.sampled_from((None, None, "t7"))) if owner is not None else None,
    )
    return Case(state, request)


@st.composite
def release_cases(draw: st.DrawFn) -> Case:
    """A run's end: its record, then hand-on (catch-up ``all``, a queued tick) or release."""
    state = draw(states(leases=("live", "live", "live", "none", "ran_out")))
    fence = _run_fence(draw, state)
    owner = draw(st.sampled_from(OWNERS))
    record = None
    if draw(st.integers(0, 3)) > 0:
        ran = state.lease.ticks_s[0] if state.lease is not None else tick(0)
        outcome = draw(st.sampled_from((Outcome.OK, Outcome.ERROR, Outcome.CANCELLED)))
        record = Record(ran, outcome, owner.partition(":")[0], fence, trigger_id=None)
    request = ReleaseRequest(
        fence=fence,
        owner=owner,
        lease_ttl_ms=draw(st.sampled_from(LEASE_TTLS_MS)),
        record=record,
        hand_on=draw(st.booleans()),
    )
    return Case(state, request)
