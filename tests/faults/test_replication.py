"""claim_replicas: a won claim runs only once enough replicas confirm it (WAIT).

On the dense cursor a claim no replica confirmed is not decided: the job is claimed again
(backing off) and its ticks stay above the cursor, recorded by the decision that follows
once a claim is confirmed (under the catch-up policy). Nothing runs meanwhile.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from cronrace import Agent
from tests.helpers import running, settings, wait_for
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]


async def run_for_three_ticks(
    url: str, namespace: str, wait_ms: int
) -> tuple[list[int], list[str]]:
    ran: list[int] = []
    agent = Agent(
        settings=settings(url, namespace, "n0", claim_replicas=1, claim_replicas_timeout_ms=wait_ms)
    )
    agent.add_job(lambda ctx: ran.append(ctx.tick_s), "* * * * * *", name="job")
    async with running(agent):

        async def three_decisions() -> bool:
            return len(await agent.history("job", 10)) >= 3

        await wait_for(three_decisions, timeout_s=15, what="3 decisions")
        records = await agent.history("job", 10)
    return ran, [r.outcome.value for r in records]


@pytest.mark.timeout(60)
async def test_claims_unconfirmed_by_replicas_are_not_decided_and_nothing_runs(
    fresh_redis: RedisServer, namespace: str
) -> None:
    """No replica: every claim of the job is won and left unconfirmed (WAIT times out).
    Three ticks claimed so, none ran, and none was decided (no record, no cursor): the
    decision waits for a confirmed claim. (The watermark protocol recorded each such tick
    ``skipped:not_replicated``; the reference protocol has no such record.)"""
    ran: list[int] = []
    agent = Agent(
        settings=settings(
            fresh_redis.url, namespace, "n0", claim_replicas=1, claim_replicas_timeout_ms=200
        )
    )
    agent.add_job(lambda ctx: ran.append(ctx.tick_s), "* * * * * *", name="job")
    client = Redis.from_url(fresh_redis.url)
    claimed: set[bytes] = set()
    try:
        async with running(agent):

            async def three_ticks_claimed() -> bool:
                claimed.update(await client.keys(f"{namespace}:claim:{{job}}:*"))
                return len(claimed) >= 3

            await wait_for(three_ticks_claimed, timeout_s=20, what="3 ticks claimed")
            records = await agent.history("job", 10)
        cursor = await client.get(f"{namespace}:cursor:{{job}}")
    finally:
        await client.aclose()
    assert ran == []
    assert [r.outcome.value for r in records] == []
    assert cursor is None


@pytest.mark.timeout(60)
async def test_claims_confirmed_by_a_replica_run(
    fresh_redis: RedisServer, namespace: str, tmp_path: Path
) -> None:
    primary = Redis.from_url(fresh_redis.url)
    await primary.config_set("repl-diskless-sync-delay", 0)  # sync at once, not after 5 s
    await primary.aclose()
    replica = RedisServer(
        tmp_path / "replica",
        appendonly=False,
        extra_args=("--replicaof", "127.0.0.1", str(fresh_redis.port)),
    )
    with replica:
        client = Redis.from_url(fresh_redis.url)

        async def replica_online() -> bool:
            info = await client.info("replication")
            return "online" in str(info.get("slave0", ""))

        await wait_for(replica_online, timeout_s=15, what="the replica in sync")
        await client.aclose()
        # A generous WAIT: on a loaded 2-core machine a replica can lag 200 ms.
        ran, outcomes = await run_for_three_ticks(fresh_redis.url, namespace, 2000)
    assert len(ran) >= 3
    # One record per tick (a run's result in place of its `granted`); the newest run's
    # result may still be on its way.
    assert set(outcomes[1:]) == {"ok"}, outcomes
    assert outcomes[0] in ("ok", "granted"), outcomes
