"""What the Redis keys hold: the spelling under the behaviour the contract suite checks.

The behaviour suite sees a store through its methods only; these tests pin what the
Redis store writes under its keys for the same steps (docs/design.md section 2): a claim's
expiry, a decision's answer kept under its claim, a claim left as its owner wrote it, the
queued tick taken by a hand-on, the lease and the cursor, the wipe hold's key.
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Overlap
from cronrace.stores.redis import Store
from cronrace.stores.values import Claim, Owner
from tests.stores.contract.helpers import CLAIM_TTL_MS, N1, N2, decide, end, request
from tests.stores.redis.backend import RedisBackend

A, B = Owner.parse("a:1"), Owner.parse("b:2")


async def test_a_claim_key_holds_its_winner_with_the_claim_ttl(store: Store) -> None:
    assert await store.claim([Claim("j", 100, 5000)], A) == [True]
    assert await store.client.get(store.keys.claim("j", 100)) == b"a:1"
    assert 4000 < await store.client.pttl(store.keys.claim("j", 100)) <= 5000
    trigger = Claim("j", 100, 5000, trigger_id="t1")
    assert await store.claim([trigger], B) == [True]
    assert await store.client.get(store.keys.trigger_claim("j", "t1")) == b"b:2"


async def test_a_decision_is_remembered_under_its_claim_for_the_claim_ttl(store: Store) -> None:
    assert await store.claim([Claim("j", 100, 5000)], N1) == [True]
    reply = await decide(store, request(100))
    value = await store.client.get(store.keys.claim("j", 100))
    # "<owner>\n" first: claim_each(read_back=True) takes it as decided.
    assert value == f"n1:x\n100\nrun\n{reply.fence}\n\n100\n0\n0".encode()
    assert 5000 < await store.client.pttl(store.keys.claim("j", 100)) <= CLAIM_TTL_MS


async def test_a_decision_under_another_owners_claim_leaves_it_as_written(
    store: Store,
) -> None:
    await store.claim([Claim("j", 200, 60_000)], N2)
    (mine,) = await store.decide([request(200)])
    assert getattr(mine, "answer", mine) == "lost"
    assert await store.client.get(store.keys.claim("j", 200)) == b"n2:y"


async def test_a_hand_on_takes_the_pending_tick(store: Store) -> None:
    first = await decide(store, request(100, overlap=Overlap.QUEUE_ONE))
    await decide(store, request(101, cursor=100, overlap=Overlap.QUEUE_ONE))
    assert await store.client.get(store.keys.pending("j")) == b"101"
    await store.end_run(end(first.fence))
    assert await store.client.get(store.keys.pending("j")) is None


async def test_a_lease_is_a_hash_with_an_expiry(store: Store) -> None:
    reply = await decide(store, request(101, fire=(100, 101)))
    lease = await store.client.hgetall(store.keys.lease("j"))
    assert lease[b"owner"] == b"n1:x"
    assert lease[b"fence"] == str(reply.fence).encode()
    assert lease[b"ticks"] == b"100 101"
    assert 0 < await store.client.pttl(store.keys.lease("j")) <= 5000
    assert await store.client.get(store.keys.fence("j")) == str(reply.fence).encode()
    assert await store.client.get(store.keys.cursor("j")) == b"101"
    assert await store.client.hget(store.keys.state("j"), "origin") == b"99"


async def test_a_brand_new_job_starts_no_hold(store: Store) -> None:
    await decide(store, request(100))
    assert await store.client.exists(store.keys.hold("j")) == 0


async def test_a_claim_lost_to_an_undecided_winner_starts_no_hold(
    store: Store, backend: RedisBackend
) -> None:
    other_node = await backend.node()
    assert await store.claim([Claim("j", 100, 5000)], N1) == [True]
    assert await other_node.claim([Claim("j", 100, 5000)], N2) == [False]
    await decide(other_node, request(101, owner=N2))
    assert await store.client.exists(store.keys.hold("j")) == 0


@pytest.mark.parametrize("overlap", list(Overlap))
async def test_a_wiped_job_keeps_its_hold_key_for_one_lease_ttl(
    store: Store, backend: RedisBackend, overlap: Overlap
) -> None:
    await decide(store, request(100, overlap=overlap))
    await backend.faults.wipe("j")
    await decide(store, request(101, cursor=100, overlap=overlap))
    assert 4000 < await store.client.pttl(store.keys.hold("j")) <= 5000


async def test_a_wipe_fault_erases_the_keys_a_restart_would(
    store: Store, backend: RedisBackend
) -> None:
    """The harness's wipe (tests/stores/harness.py) is what it says, spelled in keys."""
    await decide(store, request(100, overlap=Overlap.QUEUE_ONE))
    await decide(store, request(101, cursor=100, overlap=Overlap.QUEUE_ONE))
    await store.request_trigger("j")
    keys = store.keys
    erased = [
        keys.lease("j"),
        keys.fence("j"),
        keys.cursor("j"),
        keys.state("j"),
        keys.pending("j"),
        keys.triggers("j"),
    ]
    assert await store.client.exists(*erased) == len(erased)
    await backend.faults.wipe("j")
    assert await store.client.exists(*erased) == 0


async def test_a_start_finding_its_job_specs_stored_as_they_are_writes_none(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node of 10,000 jobs starting where the fleet published the same definitions
    wrote 10,001 commands at every start; it writes only the specs that differ."""
    specs = {"a": {"schedule": "@hourly"}, "b": {"schedule": "@daily", "timezone": "UTC"}}
    await store.register_jobs(specs)
    sent: list[tuple[str, str]] = []
    send = store._pipeline_repairing

    async def counting(commands, **kwargs):  # type: ignore[no-untyped-def]
        sent.extend((command.method, command.key) for command in commands)
        return await send(commands, **kwargs)

    monkeypatch.setattr(store, "_pipeline_repairing", counting)
    await store.register_jobs({"b": {"timezone": "UTC", "schedule": "@daily"}, "a": specs["a"]})
    assert sent == []
    await store.register_jobs({**specs, "b": {"schedule": "@weekly", "timezone": "UTC"}})
    assert ("hset", store.keys.state("b")) in sent
    assert ("hset", store.keys.state("a")) not in sent
    (b,) = await store.job_states(["b"])
    assert b.spec == {"schedule": "@weekly", "timezone": "UTC"}


async def test_job_specs_are_published_again_after_redis_lost_them(store: Store) -> None:
    await store.register_jobs({"a": {"schedule": "@hourly"}})
    await store.client.delete(store.keys.specs, store.keys.state("a"), store.keys.jobs)
    await store.register_jobs({"a": {"schedule": "@hourly"}})
    assert await store.known_jobs() == ["a"]
    (a,) = await store.job_states(["a"])
    assert a.spec == {"schedule": "@hourly"}


async def test_garbage_under_the_published_specs_is_moved_aside(store: Store) -> None:
    await store.client.set(store.keys.specs, "garbage")
    await store.register_jobs({"a": {"schedule": "@hourly"}})
    (a,) = await store.job_states(["a"])
    assert a.spec == {"schedule": "@hourly"}
    assert await store.client.type(store.keys.specs) == b"hash"
