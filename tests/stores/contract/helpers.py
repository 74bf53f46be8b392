"""Small builders the behaviour suite shares: nodes, decision requests, reads of a job.

The ticks of these tests are one second apart (100, 101, ...): a decision of tick T from
the cursor C fires T alone unless told, and the ticks of (C, T) it does not fire are one
``missed`` range, as the planner (``cronrace/protocol/plan.py``) makes them.
"""

from __future__ import annotations

from collections.abc import Sequence

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import DecideReply, DecideRequest, Missed, Record
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, JobState, LeaseInfo, Owner, RunEnd

#: Two nodes' processes (``<node_id>:<nonce>``).
N1, N2 = Owner("n1", "x"), Owner("n2", "y")

#: A claim outlives every attempt at its tick in these tests, and so does its answer.
CLAIM_TTL_MS = 60_000


def request(
    tick: int = 100,
    *,
    cursor: int | None = None,
    job: str = "j",
    owner: Owner = N1,
    overlap: Overlap = Overlap.SKIP,
    fire: Sequence[int] | None = None,
    trigger_id: str | None = None,
    ttl_ms: int = 5000,
    known_fence: int = 0,
    history: int = 0,
    trigger_window_ms: int = 0,
) -> DecideRequest:
    """The decision of ``tick`` from the expected ``cursor`` (None: the job has none yet).

    It fires ``fire`` (``tick`` alone unless told); the ticks of (cursor, tick] it does not
    fire are one ``missed`` range. A first decision starts just below the oldest tick it
    fires. A trigger's decision (``trigger_id``) fires its tick and leaves the cursor alone.
    """
    fire_s = (tick,) if fire is None else tuple(fire)
    from_s = cursor if cursor is not None else (fire_s[0] if fire_s else tick) - 1
    missed: tuple[Missed, ...] = ()
    if trigger_id is None:
        unfired = [t for t in range(from_s + 1, tick + 1) if t not in fire_s]
        if unfired:
            missed = (Missed(unfired[0], unfired[-1], len(unfired)),)
    return DecideRequest(
        job=job,
        tick_s=tick,
        cursor_s=cursor,
        from_s=from_s,
        fire_s=fire_s,
        missed=missed,
        owner=str(owner),
        overlap=overlap,
        lease_ttl_ms=ttl_ms,
        claim_ttl_ms=CLAIM_TTL_MS,
        known_fence=known_fence,
        trigger_window_ms=trigger_window_ms,
        trigger_id=trigger_id,
        history=history,
    )


async def decide(store: Store, req: DecideRequest) -> DecideReply:
    """Decide one request; its answer (an error fails the test)."""
    (reply,) = await store.decide([req])
    assert isinstance(reply, DecideReply), reply
    return reply


async def won(store: Store, req: DecideRequest) -> DecideReply:
    """Claim the request's tick (or trigger) for its owner, then decide it."""
    claim = Claim(req.job, req.tick_s, CLAIM_TTL_MS, req.trigger_id)
    assert await store.claim([claim], Owner.parse(req.owner)) == [True]
    return await decide(store, req)


def end(
    fence: int, *, job: str = "j", owner: Owner = N1, hand_on: bool = True, history: int = 10
) -> RunEnd:
    """The end of the run holding ``fence``, without a record of its own."""
    return RunEnd(job, fence, owner, 5000, None, history, hand_on)


async def state(store: Store, job: str = "j") -> JobState:
    """What the store knows of ``job``."""
    (found,) = await store.job_states([job])
    return found


async def lease(store: Store, job: str = "j") -> LeaseInfo | None:
    """The lease of ``job`` (None: nobody holds it)."""
    return (await state(store, job)).lease


async def cursor(store: Store, job: str = "j") -> int | None:
    """The cursor of ``job``: every tick up to it is decided."""
    return (await store.cursors([job]))[job]


def outcomes(records: Sequence[Record]) -> list[tuple[int, Outcome]]:
    """Each record's tick and outcome, in order."""
    return [(r.tick_s, r.outcome) for r in records]
