"""Every Lua script, the same test body on fakeredis and on a real redis-server."""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.stores.redis import Store
from cronrace.stores.values import AcquireRequest, Claim, Owner


def request(
    job: str = "j",
    tick: int = 100,
    *,
    overlap: str = "skip",
    mode: str = "run",
    owner: str = "n1:x",
    ttl_ms: int = 5000,
    mark: int | None = None,
) -> AcquireRequest:
    return AcquireRequest(
        job, tick, mark if mark is not None else tick, tick, owner, ttl_ms, overlap, mode
    )


async def acquire_one(store: Store, req: AcquireRequest):  # type: ignore[no-untyped-def]
    (reply,) = await store.acquire([req])
    assert not isinstance(reply, Exception), reply
    return reply


async def test_claim_is_won_by_exactly_one_node(store: Store) -> None:
    claims = [Claim("j", 100, 5000), Claim("k", 100, 5000)]
    assert await store.claim(claims, "a:1") == [True, True]
    assert await store.claim(claims, "b:1") == [False, False]
    assert await store.client.pttl(store.keys.claim("j", 100)) > 4000


async def test_resolve_claims_finds_a_claim_whose_reply_was_lost(store: Store) -> None:
    await store.claim([Claim("j", 100, 5000)], "a:1")
    # Node a retries after an error: the read-back says it had won.
    assert await store.resolve_claims([Claim("j", 100, 5000)], "a:1") == [True]
    assert await store.resolve_claims([Claim("j", 100, 5000)], "b:1") == [False]
    assert await store.resolve_claims([Claim("j", 101, 5000)], "b:1") == [True]


async def test_acquire_grants_fence_and_advances_watermark(store: Store) -> None:
    reply = await acquire_one(store, request(tick=100))
    assert reply.decision == "run"
    assert reply.fence > 1_000_000_000_000  # seeded from the server clock in ms
    assert reply.prev_watermark_s is None
    assert await store.client.get(store.keys.last("j")) == b"100"
    lease = await store.client.hgetall(store.keys.lease("j"))
    assert lease[b"owner"] == b"n1:x"
    assert lease[b"fence"] == str(reply.fence).encode()
    assert 0 < await store.client.pttl(store.keys.lease("j")) <= 5000


async def test_acquire_refuses_tick_at_or_below_watermark(store: Store) -> None:
    await acquire_one(store, request(tick=100))
    stale = await acquire_one(store, request(tick=100))
    assert stale.decision == "stale"
    assert stale.prev_watermark_s == 100
    older = await acquire_one(store, request(tick=99))
    assert older.decision == "stale"


async def test_skip_overlap_records_holder_and_runs_nothing(store: Store) -> None:
    first = await acquire_one(store, request(tick=100))
    second = await acquire_one(store, request(tick=101, owner="n2:y"))
    assert second.decision == "skipped:overlap"
    assert second.holder_fence == first.fence
    assert second.holder_owner == Owner("n1", "x")
    assert await store.client.hget(store.keys.state("j"), "skipped_overlap") == b"1"


async def test_queue_one_keeps_only_the_newest_waiting_tick(store: Store) -> None:
    first = await acquire_one(store, request(tick=100, overlap="queue_one"))
    assert (await acquire_one(store, request(tick=101, overlap="queue_one"))).decision == "queued"
    newer = await acquire_one(store, request(tick=102, overlap="queue_one"))
    assert newer.decision == "queued"
    assert newer.superseded_tick_s == 101
    reply = await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    assert reply.decision == "run"
    assert reply.tick_s == 102
    assert reply.fence > first.fence
    assert await store.client.get(store.keys.pending("j")) is None


async def test_replace_takes_the_lease_and_the_old_fence_can_no_longer_renew(store: Store) -> None:
    first = await acquire_one(store, request(tick=100, overlap="replace"))
    second = await acquire_one(store, request(tick=101, overlap="replace", owner="n2:y"))
    assert second.decision == "run"
    assert second.fence > first.fence
    assert await store.renew("j", first.fence, 5000) == -1
    assert await store.renew("j", second.fence, 5000) == 1
    refused = await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    assert refused.decision == "not_owner"


async def test_allow_gives_each_run_a_distinct_increasing_fence_without_a_lease(
    store: Store,
) -> None:
    fences = [
        (await acquire_one(store, request(tick=t, overlap="allow"))).fence for t in (100, 101, 102)
    ]
    assert fences == sorted(set(fences))
    assert await store.client.exists(store.keys.lease("j")) == 0


async def test_release_deletes_the_lease_only_for_its_fence(store: Store) -> None:
    first = await acquire_one(store, request(tick=100))
    assert (
        await store.release("j", first.fence + 1, owner="n1:x", lease_ttl_ms=5000)
    ).decision == "not_owner"
    assert (
        await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    ).decision == "released"
    assert await store.client.exists(store.keys.lease("j")) == 0
    assert await store.renew("j", first.fence, 5000) == 0


async def test_a_queued_catch_up_never_waits_with_a_tick_already_decided(store: Store) -> None:
    # Node A runs the backlog 101..103 under one lease; node B, whose own backlog is
    # 101..104, finds the lease held: 104 must wait, not 101 (which A runs already).
    first = await acquire_one(
        store, AcquireRequest("j", 103, 103, 101, "n1:x", 5000, "queue_one", "run")
    )
    queued = await acquire_one(
        store, AcquireRequest("j", 104, 104, 101, "n2:y", 5000, "queue_one", "run")
    )
    assert queued.decision == "queued"
    reply = await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    assert (reply.decision, reply.tick_s) == ("run", 104)


async def test_release_can_continue_a_catch_up_under_the_same_lease(store: Store) -> None:
    first = await acquire_one(store, request(tick=100))
    reply = await store.release(
        "j", first.fence, owner="n1:x", lease_ttl_ms=5000, continue_tick_s=101
    )
    assert (reply.decision, reply.tick_s) == ("run", 101)
    assert reply.fence > first.fence


async def test_expired_lease_is_reported_abandoned_by_the_next_acquirer(store: Store) -> None:
    first = await acquire_one(store, request(tick=100))
    await store.client.delete(store.keys.lease("j"))  # as if its TTL ran out
    second = await acquire_one(store, request(tick=101, owner="n2:y"))
    assert second.decision == "run"
    assert (second.abandoned_tick_s, second.abandoned_fence) == (100, first.fence)
    assert second.abandoned_owner == Owner("n1", "x")


async def test_fence_survives_a_wiped_counter(store: Store) -> None:
    first = await acquire_one(store, request(tick=100))
    await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    await store.client.delete(store.keys.fence("j"), store.keys.last("j"))
    second = await acquire_one(store, request(tick=100))
    assert second.fence > first.fence


async def test_a_counter_behind_its_last_grants_never_hands_out_a_fence_again(
    store: Store,
) -> None:
    # A promoted replica may lack the last grants: its counter is behind them. A node that
    # never saw those fences (known 0) must still get a higher one.
    first = await acquire_one(store, request(tick=100))
    await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    await store.client.set(store.keys.fence("j"), first.fence - 1_000)
    fresh = Store(store.client, store.keys.ns)
    second = await acquire_one(fresh, request(tick=101))
    assert second.fence > first.fence


async def test_every_fence_is_at_least_the_server_time_in_microseconds(store: Store) -> None:
    await store.client.set(store.keys.fence("j"), 5)
    seconds, micros = await store.client.time()
    reply = await acquire_one(store, request(tick=100))
    assert reply.fence >= int(seconds) * 1_000_000 + int(micros)
    released = await store.release(
        "j", reply.fence, owner="n1:x", lease_ttl_ms=5000, continue_tick_s=101
    )
    assert released.fence > reply.fence


async def test_garbage_fence_and_watermark_are_repaired_and_reported(store: Store) -> None:
    await store.client.set(store.keys.fence("j"), "not-a-number")
    await store.client.set(store.keys.last("j"), "{junk")
    reply = await acquire_one(store, request(tick=100))
    assert reply.decision == "run"
    assert set(reply.warnings) == {"fence", "watermark"}
    assert reply.fence > 1_000_000_000_000


async def test_garbage_lease_is_dropped_and_reported(store: Store) -> None:
    await store.client.hset(store.keys.lease("j"), mapping={"owner": "x", "fence": "zz"})
    reply = await acquire_one(store, request(tick=100))
    assert reply.decision == "run"
    assert "lease" in reply.warnings


async def test_paused_job_records_skip_but_still_advances_watermark(store: Store) -> None:
    await store.set_paused("j", True)
    reply = await acquire_one(store, request(tick=100))
    assert reply.decision == "skipped:paused"
    assert await store.client.get(store.keys.last("j")) == b"100"
    await store.set_paused("j", False)
    assert (await acquire_one(store, request(tick=101))).decision == "run"


async def test_trigger_leaves_the_watermark_alone(store: Store) -> None:
    await acquire_one(store, request(tick=100, mode="mark"))
    reply = await acquire_one(store, request(tick=50, mode="trigger"))
    assert reply.decision == "run"
    assert await store.client.get(store.keys.last("j")) == b"100"


async def test_mark_mode_decides_without_running(store: Store) -> None:
    reply = await acquire_one(store, request(tick=100, mode="mark", mark=130))
    assert reply.decision == "marked"
    assert await store.client.get(store.keys.last("j")) == b"130"
    assert await store.client.exists(store.keys.lease("j")) == 0


async def test_fenced_set_refuses_a_lower_fence(store: Store) -> None:
    assert await store.fenced_set("target", "from-5", 5)
    assert await store.fenced_set("target", "from-7", 7)
    assert not await store.fenced_set("target", "from-6", 6)
    assert await store.client.get("target") == b"from-7"
    assert await store.fenced_set("target", "again-7", 7)


async def test_noscript_is_handled_by_reloading_also_in_pipelines(store: Store) -> None:
    await store.client.script_flush()
    replies = await store.acquire([request(job="a", tick=100), request(job="b", tick=100)])
    assert [getattr(r, "decision", r) for r in replies] == ["run", "run"]
    await store.client.script_flush()
    assert await store.renew("a", replies[0].fence, 5000) == 1  # type: ignore[union-attr]


async def test_history_skips_unreadable_records(store: Store) -> None:
    await store.client.xadd(store.keys.runs("j"), {"r": "not json"})
    await store.client.xadd(
        store.keys.runs("j"), {"r": '{"job": "j", "tick_s": 1, "node": "n", "outcome": "ok"}'}
    )
    records = await store.history("j", 10)
    assert [r.outcome.value for r in records] == ["ok"]


@pytest.mark.parametrize("paused", [True, False])
async def test_job_states_report_lease_pause_and_counters(store: Store, paused: bool) -> None:
    reply = await acquire_one(store, request(tick=100))
    await store.set_paused("j", paused)
    (state,) = await store.job_states(["j"])
    assert state.watermark_s == 100
    assert state.lease is not None
    assert state.lease.fence == reply.fence
    assert state.paused is paused


async def test_release_appends_the_record_once_even_when_retried(store: Store) -> None:
    first = await acquire_one(store, request(tick=100))
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=first.fence)
    done = await store.finish(
        record, history=10, release_fence=first.fence, owner="n1:x", lease_ttl_ms=5000
    )
    assert done is not None
    assert done.decision == "released"
    # A retry after a lost reply: the fence no longer matches, nothing is appended twice.
    again = await store.finish(
        record, history=10, release_fence=first.fence, owner="n1:x", lease_ttl_ms=5000, retried=True
    )
    assert again is not None
    assert again.decision == "not_owner"
    assert [r.fence for r in await store.history("j", 10)] == [first.fence]


async def test_record_of_a_run_whose_lease_moved_on_is_still_written(store: Store) -> None:
    first = await acquire_one(store, request(tick=100, overlap="replace"))
    await acquire_one(store, request(tick=101, overlap="replace", owner="n2:y"))
    record = RunRecord("j", 100, "n1", Outcome.LEASE_LOST, fence=first.fence)
    reply = await store.finish(
        record, history=10, release_fence=first.fence, owner="n1:x", lease_ttl_ms=5000
    )
    assert reply is not None
    assert reply.decision == "not_owner"
    assert [r.outcome for r in await store.history("j", 10)] == [Outcome.LEASE_LOST]
