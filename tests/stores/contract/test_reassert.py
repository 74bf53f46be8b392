"""After a wipe a live run writes its lost lease back (re-asserts it); nodes say they did.

A wipe erases the lease of a run that goes on. The run's node, once it knows (the epoch
changed, or its renewal found the job's data gone), renews with its owner and tick, and
the store writes the lease back: a decision then meets a live run, as before the wipe. A
grant made during the wipe hold has not started its handler: a re-asserting older run
takes the lease from it, and that grant must not start. Once it starts (its first renewal
says so), nothing takes it. During the hold, a re-asserting run with a higher fence
replaces a lease re-asserted with a lower one. Each node's word that it re-asserted its
leases for an epoch rides on the heartbeat, so that holds can end once every node has
given it.
"""

from __future__ import annotations

import time

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import Release, Renewal, RenewRequest, Verdict
from cronrace.stores.contract import Store
from cronrace.stores.values import Owner
from tests.stores.contract.helpers import N1, N2, decide, end, lease, request
from tests.stores.harness import Backend


def renewal(
    fence: int, owner: Owner | None = None, tick_s: int = 0, *, starting: bool = False
) -> RenewRequest:
    """A renewal of ``fence``; with ``owner``, one that writes the lease back if lost."""
    return RenewRequest(
        fence, 5000, None if owner is None else str(owner), tick_s, starting=starting
    )


async def test_a_live_run_writes_back_the_lease_a_wipe_took(store: Store, backend: Backend) -> None:
    run = await decide(store, request(100))
    await backend.faults.wipe("j")
    assert await store.renew_lease("j", renewal(run.fence)) is Renewal.GONE  # without its owner
    answer = await store.renew_lease("j", renewal(run.fence, N1, 100))
    assert answer is Renewal.REASSERTED
    held = await lease(store)
    assert held is not None
    assert (held.fence, held.owner, held.tick_s) == (run.fence, N1, 100)
    assert await store.renew_lease("j", renewal(run.fence, N1, 100)) is Renewal.RENEWED
    # A decision meets the live run; it finds the cursor gone and records the loss.
    met = await decide(store, request(101, cursor=100, owner=N2))
    assert (met.verdict, met.data_lost) == (Verdict.SKIPPED_OVERLAP, True)
    assert [(r.tick_s, r.outcome) for r in met.records] == [
        (100, Outcome.DATA_LOST),
        (101, Outcome.SKIPPED_OVERLAP),
    ]
    assert (await store.end_run(end(run.fence))).decision is Release.RELEASED
    later = await decide(store, request(102, cursor=101, owner=N2))
    assert later.verdict is Verdict.RUN
    assert later.fence > run.fence  # the counter was raised to the re-asserted fence


async def test_a_released_or_expired_lease_is_not_written_back(
    store: Store, backend: Backend
) -> None:
    run = await decide(store, request(100))
    await store.end_run(end(run.fence))
    assert await store.renew_lease("j", renewal(run.fence, N1, 100)) is Renewal.GONE
    second = await decide(store, request(101, cursor=100))
    await backend.faults.expire_lease("j")
    assert await store.renew_lease("j", renewal(second.fence, N1, 101)) is Renewal.GONE


async def test_a_grant_of_the_hold_gives_its_lease_back_to_a_re_asserting_older_run(
    store: Store, backend: Backend
) -> None:
    older = await decide(store, request(100))
    await backend.faults.wipe("j")
    held = await decide(store, request(101, cursor=100, owner=N2))  # the wipe is seen here
    assert (held.verdict, held.data_lost) == (Verdict.RUN, True)
    assert held.hold_ms > 0
    answer = await store.renew_lease("j", renewal(older.fence, N1, 100))
    assert answer is Renewal.REASSERTED
    holder = await lease(store)
    assert holder is not None
    assert holder.fence == older.fence
    # The held grant learns it lost the lease as it starts its handler.
    starting = renewal(held.fence, N2, 101, starting=True)
    assert await store.renew_lease("j", starting) is Renewal.TAKEN


async def test_a_started_grant_of_the_hold_keeps_its_lease(store: Store, backend: Backend) -> None:
    older = await decide(store, request(100))
    await backend.faults.wipe("j")
    held = await decide(store, request(101, cursor=100, owner=N2))
    assert held.hold_ms > 0
    starting = renewal(held.fence, N2, 101, starting=True)
    assert await store.renew_lease("j", starting) is Renewal.RENEWED
    assert await store.renew_lease("j", renewal(older.fence, N1, 100)) is Renewal.TAKEN
    holder = await lease(store)
    assert holder is not None
    assert holder.fence == held.fence


async def test_a_replacing_grant_of_the_hold_is_never_taken_back(
    store: Store, backend: Backend
) -> None:
    older = await decide(store, request(100, overlap=Overlap.REPLACE))
    await backend.faults.wipe("j")
    held = await decide(store, request(101, cursor=100, owner=N2, overlap=Overlap.REPLACE))
    assert held.hold_ms > 0
    assert await store.renew_lease("j", renewal(older.fence, N1, 100)) is Renewal.TAKEN


async def test_during_the_hold_the_higher_re_asserted_fence_keeps_the_lease(
    store: Store, backend: Backend
) -> None:
    """Two runs alive at the wipe (a replaced one not yet told): whichever re-asserts first,
    the newer grant (the higher fence) ends up holding the lease."""
    replaced = await decide(store, request(100, overlap=Overlap.REPLACE))
    newer = await decide(store, request(101, cursor=100, overlap=Overlap.REPLACE, owner=N2))
    await backend.faults.wipe("j")
    held = await decide(store, request(102, cursor=101))  # starts the hold: a held grant
    assert held.hold_ms > 0
    assert await store.renew_lease("j", renewal(replaced.fence, N1, 100)) is Renewal.REASSERTED
    assert await store.renew_lease("j", renewal(newer.fence, N2, 101)) is Renewal.REASSERTED
    assert await store.renew_lease("j", renewal(replaced.fence, N1, 100)) is Renewal.TAKEN
    holder = await lease(store)
    assert holder is not None
    assert (holder.fence, holder.owner) == (newer.fence, N2)


async def test_each_member_says_which_epoch_it_re_asserted_its_leases_for(
    store: Store, backend: Backend
) -> None:
    other = await backend.node()
    beat = {
        "now_ms": int(time.time() * 1000),
        "ttl_ms": 60_000,
        "epoch_candidate": "e1",
        "read_asserted": True,
    }
    said = await store.heartbeat("n1", **{**beat, "read_asserted": False}, asserted_epoch="e1")  # type: ignore[arg-type]
    assert said.asserted == {}  # read only when asked for (while a wipe is waited out)
    reply = await other.heartbeat("n2", **beat)  # type: ignore[arg-type]
    assert reply.asserted == {"n1": "e1", "n2": ""}
    reply = await other.heartbeat("n2", **beat, asserted_epoch="e1")  # type: ignore[arg-type]
    assert reply.asserted == {"n1": "e1", "n2": "e1"}
    await store.leave("n1")
    reply = await other.heartbeat("n2", **beat, asserted_epoch="e1")  # type: ignore[arg-type]
    assert reply.asserted == {"n2": "e1"}
