"""A won tick whose decision answer is lost is retried, and runs once with the granted fence.

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
from cronrace.protocol import DecideReply, DecideRequest
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import Recorder, history, memory_fleet, running

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000


def lose_answers(
    agent: Agent, how_many: int, *, expire_lease: bool = False
) -> list[list[DecideReply | Exception]]:
    """Make the agent's next ``how_many`` decisions run in the store but lose their answers.

    Answers to retries (replayed) are never lost, so each loss is another tick.

    With ``expire_lease`` the granted lease is gone before the answer is "lost", as if the
    outage had outlasted it.
    """
    store = agent.store
    decide = store.decide
    lost: list[list[DecideReply | Exception]] = []

    async def decide_then_drop(
        requests: Sequence[DecideRequest],
    ) -> list[DecideReply | Exception]:
        replies = await decide(requests)
        replayed = any(isinstance(r, DecideReply) and r.replayed for r in replies)
        if len(lost) < how_many and not replayed:
            lost.append(replies)
            if expire_lease:
                await store.client.delete(*[store.keys.lease(r.job) for r in requests])
            raise RedisUnavailableError("connection lost after the script ran (test fault)")
        return replies

    store.decide = decide_then_drop  # type: ignore[method-assign]
    return lost


async def test_a_lost_decision_answer_is_retried_and_the_tick_runs_once_with_its_fence() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    recorder = Recorder()
    agent = memory_agent(clock)
    agent.add_job(recorder.note, "* * * * * *", name="job", lease_ttl=5.0)
    async with running(agent):
        lost = lose_answers(agent, 2)
        await clock.advance(4.0)  # ticks 0..3; the answers of 0 and 1 are lost
        records = await history(agent, "job", first_s=T0, last_s=T0 + 3)
    granted = [r for replies in lost for r in replies if isinstance(r, DecideReply)]
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


async def test_a_grant_whose_lease_ran_out_before_its_answer_came_back_never_starts() -> None:
    """Its retry is answered the grant again (replayed) but not renewed: the lease is gone,
    so a run started now could overlap a newer grant. It never runs; the job's next
    decision records it abandoned, and the next tick runs."""
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[tuple[int, int]] = []
    agent = memory_agent(clock)

    def note(ctx: RunContext) -> None:
        ran.append((ctx.tick_s - T0, ctx.fence))

    agent.add_job(note, "* * * * * *", name="job", lease_ttl=5.0)
    async with running(agent):
        lost = lose_answers(agent, 1, expire_lease=True)
        await clock.advance(2.0)  # tick 0: granted, answer lost, lease gone; then tick 1
        records = await history(agent, "job", first_s=T0, last_s=T0 + 1)
    (first,) = lost[0]
    assert isinstance(first, DecideReply)
    assert [tick for tick, _fence in ran] == [1]
    assert [(r.tick_s - T0, r.outcome.value) for r in records] == [(0, "abandoned"), (1, "ok")]
    assert records[0].fence == first.fence


@pytest.mark.parametrize(
    ("catchup", "overlap", "late"),
    [
        ("all", "allow", ["ok"]),
        ("all", "queue_one", ["ok"]),
        ("all", "skip", ["ok"]),
        ("latest", "skip", ["missed"]),
    ],
)
async def test_a_won_tick_decided_after_the_next_tick_is_run_or_recorded_not_lost(
    catchup: str, overlap: str, late: list[str]
) -> None:
    """The winner of tick 3 sends its decision only after the other node decided tick 4.

    Its decision is held until then (a slow answer, or a claim reply read back after an
    outage). Tick 4's decision covers (2, 4]: tick 3 with it, by its catch-up policy (all:
    run late, with tick 4, under one grant; latest: missed). The held decision, when it
    comes, is answered ``covered`` and writes nothing: tick 3 is decided once.
    """
    clock = FakeClock(start_s=T0 - 0.5)
    recorder = Recorder()
    agents = memory_fleet(clock, 2)
    for agent in agents:
        agent.add_job(recorder.note, "* * * * * *", name="j", catchup=catchup, overlap=overlap)
    next_decided = anyio.Event()

    def hold_tick_3(agent: Agent) -> None:
        store = agent.store
        decide = store.decide

        async def held(requests: Sequence[DecideRequest]) -> list[DecideReply | Exception]:
            if any(r.tick_s == T0 + 3 and not r.trigger_id for r in requests):
                await next_decided.wait()  # this node's loop waits with it, as when slow
            replies = await decide(requests)
            if any(r.tick_s == T0 + 4 for r in requests):
                next_decided.set()
            return replies

        store.decide = held  # type: ignore[method-assign]

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
