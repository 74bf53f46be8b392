"""After a wipe a live run writes its lost lease back (re-asserts it); nodes say they did.

A wipe erases the lease of a run that goes on. The run's node, once it knows (the epoch
changed, or its renewal found the job's data gone), renews with its owner and tick, and
the store writes the lease back: a decision then meets a live run, as before the wipe. A
grant made during the wipe hold has not started its handler: a re-asserting older run
takes the lease from it, and that grant must not start. Once it starts (its first renewal
says so), nothing takes it. Each node's word that it re-asserted its leases for an epoch
rides on the heartbeat, so that holds can end once every node has given it.
"""

from __future__ import annotations

import time

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireDecision, Renewal
from tests.stores.contract import helpers
from tests.stores.contract.helpers import N1, N2, acquire
from tests.stores.harness import Backend


async def test_a_live_run_writes_back_the_lease_a_wipe_took(store: Store, backend: Backend) -> None:
    run = await acquire(store, helpers.request(100))
    await backend.faults.wipe("j")
    assert await store.renew("j", run.fence, 5000) is Renewal.GONE  # without its owner
    answer = await store.renew("j", run.fence, 5000, owner=N1, tick_s=100)
    assert answer is Renewal.REASSERTED
    held = await helpers.lease(store)
    assert held is not None
    assert (held.fence, held.owner, held.tick_s) == (run.fence, N1, 100)
    assert await store.renew("j", run.fence, 5000, owner=N1, tick_s=100) is Renewal.RENEWED
    # A decision meets the live run, with no hold: the counter was raised to its fence.
    met = await acquire(store, helpers.request(101, owner=N2))
    assert (met.decision, met.holder_fence, met.data_lost) == (
        AcquireDecision.SKIPPED_OVERLAP,
        run.fence,
        False,
    )
    await store.release("j", run.fence, owner=N1, lease_ttl_ms=5000)
    later = await acquire(store, helpers.request(102, owner=N2))
    assert (later.decision, later.hold_ms) == (AcquireDecision.RUN, 0)
    assert later.fence > run.fence


async def test_a_released_or_expired_lease_is_not_written_back(
    store: Store, backend: Backend
) -> None:
    run = await acquire(store, helpers.request(100))
    await store.release("j", run.fence, owner=N1, lease_ttl_ms=5000)
    assert await store.renew("j", run.fence, 5000, owner=N1, tick_s=100) is Renewal.GONE
    second = await acquire(store, helpers.request(101))
    await backend.faults.expire_lease("j")
    assert await store.renew("j", second.fence, 5000, owner=N1, tick_s=101) is Renewal.GONE


async def test_a_grant_of_the_hold_gives_its_lease_back_to_a_re_asserting_older_run(
    store: Store, backend: Backend
) -> None:
    older = await acquire(store, helpers.request(100))
    await backend.faults.wipe("j")
    held = await acquire(store, helpers.request(101, owner=N2))  # the wipe is seen here
    assert (held.decision, held.data_lost) == (AcquireDecision.RUN, True)
    assert held.hold_ms > 0
    answer = await store.renew("j", older.fence, 5000, owner=N1, tick_s=100)
    assert answer is Renewal.REASSERTED
    # The held grant learns it lost the lease before it starts its handler.
    assert await store.renew("j", held.fence, 5000, owner=N2, tick_s=101) is Renewal.TAKEN
    holder = await helpers.lease(store)
    assert holder is not None
    assert holder.fence == older.fence


async def test_a_started_grant_of_the_hold_keeps_its_lease(store: Store, backend: Backend) -> None:
    older = await acquire(store, helpers.request(100))
    await backend.faults.wipe("j")
    held = await acquire(store, helpers.request(101, owner=N2))
    assert held.hold_ms > 0
    starting = await store.renew("j", held.fence, 5000, owner=N2, tick_s=101, starting=True)
    assert starting is Renewal.RENEWED
    assert await store.renew("j", older.fence, 5000, owner=N1, tick_s=100) is Renewal.TAKEN
    holder = await helpers.lease(store)
    assert holder is not None
    assert holder.fence == held.fence


async def test_a_replacing_grant_of_the_hold_is_never_taken_back(
    store: Store, backend: Backend
) -> None:
    older = await acquire(store, helpers.request(100, overlap=Overlap.REPLACE))
    await backend.faults.wipe("j")
    held = await acquire(store, helpers.request(101, owner=N2, overlap=Overlap.REPLACE))
    assert held.hold_ms > 0
    assert await store.renew("j", older.fence, 5000, owner=N1, tick_s=100) is Renewal.TAKEN


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
