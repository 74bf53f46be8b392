"""What operators read and control: job states, registered jobs, pause, history, nodes."""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.stores.contract import Store
from tests.stores.contract.helpers import N1, decide, request, state


@pytest.mark.parametrize("paused", [True, False])
async def test_job_states_report_lease_pause_and_counters(store: Store, paused: bool) -> None:
    reply = await decide(store, request(tick=100))
    await store.set_paused("j", paused)
    (job,) = await store.job_states(["j"])
    assert job.cursor_s == 100
    assert job.lease is not None
    assert job.lease.fence == reply.fence
    assert job.paused is paused
    await decide(store, request(tick=101, cursor=100))  # skipped (overlap, or paused)
    counter = "skipped_paused" if paused else "skipped_overlap"
    assert (await state(store)).counters == {counter: 1}


async def test_a_job_nothing_happened_to_reads_as_empty(store: Store) -> None:
    (job,) = await store.job_states(["never"])
    assert (job.job, job.cursor_s, job.lease, job.paused) == ("never", None, None, False)
    assert (job.counters, job.spec, job.last_fence) == ({}, {}, None)
    assert await store.history("never", 10) == []
    assert await store.histories(["never"], 10) == {"never": []}
    assert await store.cursors(["never"]) == {"never": None}


async def test_registered_jobs_are_listed_with_their_definitions(store: Store) -> None:
    assert await store.known_jobs() == []
    await store.register_jobs({"b": {"schedule": "* * * * *", "timezone": "UTC"}})
    await store.register_jobs({"a": {"schedule": "@hourly"}, "b": {"schedule": "@daily"}})
    assert await store.known_jobs() == ["a", "b"]
    a, b = await store.job_states(["a", "b"])
    assert a.spec == {"schedule": "@hourly"}
    assert b.spec == {"schedule": "@daily", "timezone": "UTC"}
    await store.register_jobs({})
    assert await store.known_jobs() == ["a", "b"]


async def test_pause_and_resume_are_seen_by_every_node(store: Store) -> None:
    await store.set_paused("j", True)
    assert (await state(store)).paused
    await store.set_paused("j", True)
    await store.set_paused("j", False)
    assert not (await state(store)).paused
    await store.set_paused("j", False)  # resuming a running job changes nothing
    assert not (await state(store)).paused


async def test_history_reads_newest_first_per_job(store: Store) -> None:
    j = [RunRecord("j", tick, "n1", Outcome.OK, fence=tick) for tick in (1, 2, 3)]
    k = [RunRecord("k", 1, "n2", Outcome.ERROR, error="boom")]
    await store.record([j[0], k[0], j[1], j[2]], history=10)
    assert await store.history("j", 10) == j[::-1]
    assert await store.history("j", 2) == [j[2], j[1]]
    assert await store.histories(["j", "k"], 1) == {"j": [j[2]], "k": k}
    assert all(record.record_id for record in await store.history("j", 10))


async def test_nodes_lists_live_heartbeats_newest_first(store: Store) -> None:
    beat = await store.heartbeat("n1", now_ms=0, ttl_ms=1, epoch_candidate="e")
    now_ms = int(beat.server_time_s * 1000)
    await store.heartbeat("old", now_ms=now_ms, ttl_ms=60_000, epoch_candidate="e")
    await store.heartbeat("new", now_ms=now_ms + 1000, ttl_ms=60_000, epoch_candidate="e")
    await store.heartbeat("gone", now_ms=now_ms - 120_000, ttl_ms=60_000, epoch_candidate="e")
    nodes = await store.nodes(heartbeat_ttl_ms=60_000)
    assert [node.node_id for node in nodes] == ["new", "old"]
    assert nodes[0].expires_ms == now_ms + 61_000
    assert nodes[0].last_seen_ms == now_ms + 1000
    await store.leave("new")
    assert [node.node_id for node in await store.nodes(heartbeat_ttl_ms=60_000)] == ["old"]


async def test_ping_answers(store: Store) -> None:
    assert await store.ping()


async def test_job_states_read_many_jobs_at_once(store: Store) -> None:
    await decide(store, request(100, job="a"))
    await decide(store, request(200, job="b"))
    states = await store.job_states(["a", "b", "c"])
    assert [(s.job, s.cursor_s) for s in states] == [("a", 100), ("b", 200), ("c", None)]
    assert [s.lease.owner if s.lease else None for s in states] == [N1, N1, None]
