"""A won tick whose acquire answer is lost is retried, and runs once with the granted fence.

In-process agents with a fault hook in the store (the script runs, then the answer is
"lost"); tests/faults/test_acquire_outage.py does the same with real processes, a proxy
that cuts the connection, and a redis-server killed at each phase of a tick.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from cronrace import Agent, RunContext
from cronrace.errors import RedisUnavailableError
from cronrace.stores.values import AcquireReply, AcquireRequest
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import Recorder, history, memory_fleet, running

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000


def lose_answers(
    agent: Agent, how_many: int, *, expire_lease: bool = False
) -> list[list[AcquireReply | Exception]]:
    """Make the agent's next ``how_many`` acquires run in Redis but lose their answers.

    Answers to retries (replayed) are never lost, so each loss is another tick.

    With ``expire_lease`` the granted lease is gone before the answer is "lost", as if the
    outage had outlasted it.
    """
    store = agent.store
    acquire = store.acquire
    lost: list[list[AcquireReply | Exception]] = []

    async def acquire_then_drop(
        requests: Sequence[AcquireRequest],
    ) -> list[AcquireReply | Exception]:
        replies = await acquire(requests)
        replayed = any(isinstance(r, AcquireReply) and r.replayed for r in replies)
        if len(lost) < how_many and not replayed:
            lost.append(replies)
            if expire_lease:
                await store.client.delete(*[store.keys.lease(r.job) for r in requests])
            raise RedisUnavailableError("connection lost after the script ran (test fault)")
        return replies

    store.acquire = acquire_then_drop  # type: ignore[method-assign]
    return lost


async def test_a_lost_acquire_answer_is_retried_and_the_tick_runs_once_with_its_fence() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    recorder = Recorder()
    agent = memory_agent(clock)
    agent.add_job(recorder.note, "* * * * * *", name="job", lease_ttl=5.0)
    async with running(agent):
        lost = lose_answers(agent, 2)
        await clock.advance(4.0)  # ticks 0..3; the answers of 0 and 1 are lost
        records = await history(agent, "job", first_s=T0, last_s=T0 + 3)
    granted = [r for replies in lost for r in replies if isinstance(r, AcquireReply)]
    assert len(granted) == 2
    # Each lost grant was retried, answered the same fence, and ran once with it.
    assert [(run.tick_s - T0, run.fence) for run in recorder.runs[:2]] == [
        (0, granted[0].fence),
        (1, granted[1].fence),
    ]
    assert [t - T0 for t in recorder.ticks()] == [0, 1, 2, 3]
    assert [(r.tick_s - T0, r.outcome.value) for r in records] == [
        (0, "ok"),
        (1, "ok"),
        (2, "ok"),
        (3, "ok"),
    ]


async def test_a_lost_answer_whose_lease_ran_out_meanwhile_is_decided_again() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[tuple[int, int]] = []
    agent = memory_agent(clock)

    def note(ctx: RunContext) -> None:
        ran.append((ctx.tick_s - T0, ctx.fence))

    agent.add_job(note, "* * * * * *", name="job", lease_ttl=5.0)
    async with running(agent):
        lost = lose_answers(agent, 1, expire_lease=True)
        await clock.advance(1.0)  # tick 0: granted, answer lost, lease gone; retried
        records = await history(agent, "job", first_s=T0, last_s=T0)
    (first,) = lost[0]
    assert isinstance(first, AcquireReply)
    ((tick, fence),) = ran
    assert tick == 0
    assert fence > first.fence, "a new fence: the first grant never ran"
    assert sorted((r.outcome.value, r.fence) for r in records) == [
        ("abandoned", first.fence),
        ("ok", fence),
    ]


@pytest.mark.parametrize(
    ("catchup", "overlap", "late"),
    [
        ("all", "allow", ["ok"]),
        ("all", "queue_one", ["ok", "queued"]),  # queued behind tick 4's run, then run
        ("all", "skip", ["skipped:overlap"]),  # tick 4's run holds the lease
        ("latest", "skip", ["missed"]),
    ],
)
async def test_a_won_tick_decided_after_the_next_tick_is_run_or_recorded_not_lost(
    catchup: str, overlap: str, late: list[str]
) -> None:
    """The winner of tick 3 answers only after the other node decided tick 4.

    Its acquire is held until then (a slow answer, or a claim reply read back after an
    outage). Before, the tick was stale: never run, recorded only as stale, and nobody
    else had decided it. Now it is decided late by its catch-up and overlap policies.
    """
    clock = FakeClock(start_s=T0 - 0.5)
    recorder = Recorder()
    agents = memory_fleet(clock, 2)
    for agent in agents:
        agent.add_job(recorder.note, "* * * * * *", name="j", catchup=catchup, overlap=overlap)
    next_decided = anyio.Event()

    def hold_tick_3(agent: Agent) -> None:
        store = agent.store
        acquire = store.acquire

        async def held(requests: Sequence[AcquireRequest]) -> list[AcquireReply | Exception]:
            if any(r.decide_tick_s == T0 + 3 and not r.trigger_id for r in requests):
                await next_decided.wait()  # this node's loop waits with it, as when slow
            replies = await acquire(requests)
            if any(r.decide_tick_s == T0 + 4 for r in requests):
                next_decided.set()
            return replies

        store.acquire = held  # type: ignore[method-assign]

    async with running(*agents):
        for agent in agents:
            hold_tick_3(agent)
        await clock.advance(8.0)  # ticks 0..7
        records = await history(agents[0], "j", first_s=T0, last_s=T0 + 7)
    assert next_decided.is_set()
    outcomes: dict[int, list[str]] = {}
    for record in records:
        outcomes.setdefault(record.tick_s - T0, []).append(record.outcome.value)
    assert sorted(outcomes[3]) == late, outcomes
    assert sorted(t - T0 for t in recorder.ticks()) == [
        t for t in range(8) if t != 3 or "ok" in late
    ], "every other tick once; tick 3 once when it runs late"
    assert all(outcomes[t] == ["ok"] for t in range(8) if t != 3), outcomes
