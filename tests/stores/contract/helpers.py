"""Small builders the behaviour suite shares: nodes, decision requests, reads of a job."""

from __future__ import annotations

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import (
    AcquireMode,
    AcquireReply,
    AcquireRequest,
    Claim,
    JobState,
    LeaseInfo,
    Owner,
)

#: Two nodes' processes (``<node_id>:<nonce>``).
N1, N2 = Owner("n1", "x"), Owner("n2", "y")

#: A claim outlives every attempt at its tick in these tests.
CLAIM_TTL_MS = 60_000


def request(
    tick: int = 100,
    *,
    job: str = "j",
    owner: Owner = N1,
    overlap: Overlap = Overlap.SKIP,
    mode: AcquireMode = AcquireMode.RUN,
    trigger_id: str | None = None,
    ttl_ms: int = 5000,
    mark: int | None = None,
    run: int | None = None,
    prior: int = 0,
    late_ok: bool = False,
) -> AcquireRequest:
    """The decision of one won claim: ``tick`` decided, marked and run unless told."""
    return AcquireRequest(
        job,
        tick,
        mark if mark is not None else tick,
        run if run is not None else tick,
        owner,
        ttl_ms,
        overlap,
        mode,
        trigger_id,
        prior_tick_s=prior,
        late_ok=late_ok,
    )


async def acquire(store: Store, req: AcquireRequest) -> AcquireReply:
    """Decide one request; its answer (an error fails the test)."""
    (reply,) = await store.acquire([req])
    assert isinstance(reply, AcquireReply), reply
    return reply


async def won(store: Store, req: AcquireRequest) -> AcquireReply:
    """Claim the request's tick (or trigger) for its owner, then decide it."""
    claim = Claim(req.job, req.decide_tick_s, CLAIM_TTL_MS, req.trigger_id)
    assert await store.claim([claim], req.owner) == [True]
    return await acquire(store, req)


async def state(store: Store, job: str = "j") -> JobState:
    """What the store knows of ``job``."""
    (found,) = await store.job_states([job])
    return found


async def lease(store: Store, job: str = "j") -> LeaseInfo | None:
    """The lease of ``job`` (None: nobody holds it)."""
    return (await state(store, job)).lease


async def watermark(store: Store, job: str = "j") -> int | None:
    """The newest decided tick of ``job``."""
    return (await store.watermarks([job]))[job]
