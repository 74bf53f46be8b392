"""Garbage under a job's keys: every script and command moves it aside and goes on.

Each test runs on the embedded store, a real redis-server and a real Cluster. Before these
checks, each wrong type below made every tick of its job fail with WRONGTYPE, and the
failing script's earlier writes stayed (Redis does not roll a script back), so those ticks
vanished without a record. Garbage is spelled per store, so these tests are the Redis
store's own (with test_cursor_scripts.py: one wrong type under each key a script reads).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import (
    Answer,
    DecideReply,
    DecideRequest,
    Release,
    Renewal,
    RenewRequest,
    Verdict,
)
from cronrace.stores.redis import Store
from cronrace.stores.values import Claim, Owner, RunEnd, ScheduleChange
from tests.stores.contract import helpers
from tests.stores.redis.backend import RedisBackend
from tests.topology import keys_matching

Writer = Callable[[Any, str], Awaitable[Any]]

WRITERS: dict[str, Writer] = {
    "string": lambda client, key: client.set(key, "garbage"),
    "list": lambda client, key: client.rpush(key, "garbage"),
    "hash": lambda client, key: client.hset(key, "garbage", "1"),
    "set": lambda client, key: client.sadd(key, "garbage"),
    "zset": lambda client, key: client.zadd(key, {"garbage": 1}),
    "stream": lambda client, key: client.xadd(key, {"garbage": "1"}),
}

#: The keys decide.lua reads, what each must hold, and the name its report uses.
DECIDE_KEYS = {
    "lease": ("hash", "lease"),
    "fence": ("string", "fence"),
    "cursor": ("string", "cursor"),
    "pending": ("string", "pending"),
    "state": ("hash", "state"),
    "runs": ("stream", "runs"),
    "triggers": ("hash", "triggers"),
}

OWNER = Owner("n1", "x")


def wrong_types(right: str) -> list[str]:
    # A string is wrong for an integer key too when it is not an integer.
    return [t for t in WRITERS if t != right or right == "string"]


def cases(keys: dict[str, tuple[str, str]]) -> list[Any]:
    return [
        pytest.param(name, garbage, kind, id=f"{garbage}-under-{name}")
        for name, (right, kind) in keys.items()
        for garbage in wrong_types(right)
    ]


def request(
    tick: int, overlap: Overlap = Overlap.QUEUE_ONE, cursor: int | None = None
) -> DecideRequest:
    return helpers.request(tick, cursor=cursor, overlap=overlap, owner=OWNER)


async def decide(store: Store, req: DecideRequest) -> DecideReply:
    (reply,) = await store.decide([req])
    assert isinstance(reply, DecideReply), reply
    return reply


def moved_kinds(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The kinds of the keys the store reported moved aside (its ERROR logs)."""
    return sorted(getattr(r, "kind", "") for r in caplog.records if hasattr(r, "moved_to"))


async def assert_moved_aside(store: Store, garbage: str, moved_to: str) -> None:
    assert moved_to.startswith(store.keys.quarantine("j") + ":")
    assert (await store.client.type(moved_to)).decode() == garbage
    assert 0 < await store.client.pttl(moved_to) <= 7 * 24 * 3600 * 1000


@pytest.mark.parametrize("garbage", ["list", "hash", "set", "zset", "stream"])
async def test_every_key_holding_garbage_at_once_still_decides_once(
    store: Store, garbage: str, caplog: pytest.LogCaptureFixture
) -> None:
    for name in DECIDE_KEYS:
        await WRITERS[garbage](store.client, getattr(store.keys, name)("j"))
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        reply = await decide(store, request(100))
    assert (reply.answer, reply.verdict) == (Answer.DECIDED, Verdict.RUN)
    # A hash under the lease is garbage too: it has no integer fence.
    wrong = [kind for right, kind in DECIDE_KEYS.values() if right != garbage or kind == "lease"]
    assert moved_kinds(caplog) == sorted(wrong)
    assert await store.cursors(["j"]) == {"j": 100}
    assert [r.outcome for r in await store.history("j", 10)] == [Outcome.GRANTED]


RELEASE_KEYS = {
    "lease": ("hash", "lease"),
    "fence": ("string", "fence"),
    "pending": ("string", "pending"),
    "state": ("hash", "state"),
    "runs": ("stream", "runs"),
}


@pytest.mark.parametrize(("name", "garbage", "kind"), cases(RELEASE_KEYS))
async def test_a_run_end_moves_a_wrong_type_aside_and_writes_the_record(
    store: Store, name: str, garbage: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    granted = await decide(store, request(100))
    key = getattr(store.keys, name)("j")
    await store.client.delete(key)
    await WRITERS[garbage](store.client, key)
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=granted.fence)
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        reply = await store.end_run(RunEnd("j", granted.fence, OWNER, 5000, record, 10))
    assert moved_kinds(caplog) == [kind]
    (moved,) = await keys_matching(store.client, f"{store.keys.quarantine('j')}:{kind}:*")
    await assert_moved_aside(store, garbage, moved.decode())
    # Garbage under the lease took the lease with it; the run it mirrors in the state hash
    # still ends (as a lapsed run does), and garbage under the state leaves the lease.
    assert reply.decision is Release.RELEASED
    assert (await store.history("j", 10))[0] == record


@pytest.mark.parametrize("garbage", ["list", "hash", "string"])
async def test_fenced_set_moves_a_wrong_type_aside_and_writes(store: Store, garbage: str) -> None:
    target = f"{{{store.keys.ns}}}:out"
    await WRITERS[garbage](store.client, f"{target}:cronrace-fence")
    if garbage != "string":
        await WRITERS[garbage](store.client, target)
    assert await store.fenced_set(target, "v", 7)
    assert await store.client.get(target) == b"v"
    assert len(await keys_matching(store.client, f"{target}*:quarantine:*")) == (
        1 if garbage == "string" else 2
    )


@pytest.mark.parametrize(
    ("name", "garbage"),
    [("runs", g) for g in ("string", "list", "hash", "set", "zset")]
    + [("state", g) for g in ("string", "list", "set", "zset", "stream")],
)
async def test_records_are_written_past_garbage_and_other_jobs_lose_nothing(
    store: Store, name: str, garbage: str
) -> None:
    await WRITERS[garbage](store.client, getattr(store.keys, name)("j"))
    records = [
        RunRecord("j", 100, "n1", Outcome.MISSED, count=3),
        RunRecord("k", 100, "n1", Outcome.OK, fence=1),
    ]
    await store.record(records, history=10)
    assert [r.outcome for r in await store.history("j", 10)] == [Outcome.MISSED]
    assert [r.outcome for r in await store.history("k", 10)] == [Outcome.OK]
    assert await store.client.hget(store.keys.state("j"), "missed") == b"3"


@pytest.mark.parametrize("garbage", ["string", "list", "hash", "set", "zset"])
async def test_reads_survive_garbage_and_report_it(
    store: Store, garbage: str, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("runs", "lease", "state", "cursor", "fence"):
        key = getattr(store.keys, name)("j")
        right = {"runs": "stream", "lease": "hash", "state": "hash"}.get(name, "string")
        if garbage != right:
            await WRITERS[garbage](store.client, key)
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        assert (await store.history("j", 10)) == [] or garbage == "stream"
        (state,) = await store.job_states(["j"])
        cursors = await store.cursors(["j", "k"])
    assert state.job == "j"
    assert state.cursor_s is None
    assert state.lease is None
    assert cursors == {"j": None, "k": None}
    assert any(getattr(r, "key", "").startswith(store.keys.ns + ":") for r in caplog.records)


@pytest.mark.parametrize("garbage", ["string", "list", "set", "zset", "stream"])
async def test_registering_and_pausing_move_a_wrong_type_state_aside(
    store: Store, garbage: str
) -> None:
    await WRITERS[garbage](store.client, store.keys.state("j"))
    await WRITERS[garbage if garbage != "set" else "list"](store.client, store.keys.jobs)
    await store.register_jobs({"j": {"schedule": "* * * * *"}})
    assert await store.known_jobs() == ["j"]
    await store.client.delete(store.keys.state("j"))
    await WRITERS[garbage](store.client, store.keys.state("j"))
    await store.set_paused("j", True)
    assert await store.client.hget(store.keys.state("j"), "paused") == b"1"


@pytest.mark.parametrize("garbage", ["string", "list", "hash", "set", "stream"])
async def test_namespace_keys_holding_garbage_are_moved_aside(
    store: Store, garbage: str, backend: RedisBackend
) -> None:
    keys = store.keys
    for key, right in ((keys.nodes, "zset"), (keys.epoch, "string"), (keys.control, "stream")):
        if garbage != right:
            await WRITERS[garbage](store.client, key)
    beat = await store.heartbeat("n1", now_ms=1_000, ttl_ms=5_000, epoch_candidate="e1")
    assert beat.epoch == "e1"
    assert [n.node_id for n in await store.nodes(heartbeat_ttl_ms=5_000)] in ([], ["n1"])
    assert await store.client.zscore(keys.nodes, "n1") == 6_000
    if backend.name != "memory":
        # (fakeredis's XREAD raises AttributeError on a wrong type instead of WRONGTYPE)
        position = await store.control_position()
        assert await store.read_control(position, block_ms=1) == []
    trigger_id = await store.request_trigger("j")
    assert [f["id"] for _, f in await store.read_control("0", block_ms=1)] == [trigger_id]
    moved = await keys_matching(store.client, f"{keys.ns}:quarantine:*")
    assert len(moved) == 3 - (garbage in ("string", "stream"))


# -- garbage met by the decisions of a wiped job, and by readers --------------------------


async def test_garbage_fence_and_cursor_are_repaired_and_reported(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.client.set(store.keys.fence("j"), "not-a-number")
    await store.client.set(store.keys.cursor("j"), "{junk")
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        reply = await decide(store, request(100))
    assert reply.verdict is Verdict.RUN
    assert moved_kinds(caplog) == ["cursor", "fence"]
    assert reply.fence > 1_000_000_000_000


async def test_garbage_lease_is_dropped_and_reported(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.client.hset(store.keys.lease("j"), mapping={"owner": "x", "fence": "zz"})
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        reply = await decide(store, request(100))
    assert reply.verdict is Verdict.RUN
    assert moved_kinds(caplog) == ["lease"]


async def test_garbage_under_the_lease_holds_new_grants(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await decide(store, request(100, Overlap.SKIP))
    await store.client.delete(store.keys.lease("j"))
    await store.client.set(store.keys.lease("j"), "garbage")
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        reply = await decide(store, request(101, Overlap.SKIP, cursor=100))
    assert reply.verdict is Verdict.RUN
    assert moved_kinds(caplog) == ["lease"]
    assert not reply.data_lost
    assert reply.hold_ms > 4000


async def test_garbage_under_the_lease_met_by_a_renewal_holds_new_grants(store: Store) -> None:
    first = await decide(store, request(100, Overlap.SKIP))
    await store.client.delete(store.keys.lease("j"))
    await store.client.rpush(store.keys.lease("j"), "garbage")
    assert await store.renew_lease("j", RenewRequest(first.fence, 5000)) is Renewal.GONE
    reply = await decide(store, request(101, Overlap.SKIP, cursor=100))
    assert reply.hold_ms > 4000


async def test_history_skips_unreadable_records(store: Store) -> None:
    await store.client.xadd(store.keys.runs("j"), {"r": "not json"})
    await store.client.xadd(
        store.keys.runs("j"), {"r": '{"job": "j", "tick_s": 1, "node": "n", "outcome": "ok"}'}
    )
    records = await store.history("j", 10)
    assert [r.outcome.value for r in records] == ["ok"]


async def test_garbage_under_the_schedules_key_is_moved_aside_by_the_next_write(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.client.set(store.keys.schedules, "garbage")
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        assert (await store.schedules.read_all()).definitions == {}
        assert await store.schedules.version() == 0
        reply = await store.schedules.write(
            [ScheduleChange("add", "a", b'{"schedule":"* * * * *","handler":"h"}')]
        )
    assert reply.status == "ok"
    assert set((await store.schedules.read_all()).definitions) == {"a"}
    assert any("garbage" in record.getMessage() for record in caplog.records)


async def test_garbage_under_the_fleet_keys_leaves_the_exchange_working(store: Store) -> None:
    await store.client.set(store.keys.fleet_defs, "garbage")
    reply = await store.fleet.exchange("n1", "a b", details=b"{}", now_ms=0)
    assert reply.fingerprints == {}
    assert reply.schedules_version == 0


async def test_garbage_under_the_counter_read_with_a_claim_is_no_evidence(
    store: Store, backend: RedisBackend
) -> None:
    other_node = await backend.node()
    await store.client.set(store.keys.fence("j"), "garbage")
    assert await other_node.claim([Claim("j", 100, 5000)], Owner("n2", "y")) == [True]
    assert other_node.known_fence("j") == 0
    await store.client.delete(store.keys.fence("j"))
    await store.client.hset(store.keys.fence("j"), "a", "b")
    assert await other_node.claim([Claim("j", 101, 5000)], Owner("n2", "y")) == [True]
    assert other_node.known_fence("j") == 0
