"""What differs between deployments, behind the same Store: shards, Sentinel, fence keys."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import ClusterNode
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

from cronrace.errors import RedisUnavailableError, StoreError
from cronrace.protocol import Verdict
from cronrace.stores.redis import Store
from cronrace.stores.redis.keys import fence_key, hash_tag
from cronrace.stores.values import Claim, ClaimOutcome
from tests.helpers import count_timers
from tests.stores.contract.helpers import N1, request
from tests.topology import ClusterSet, SentinelSet, client

pytestmark = pytest.mark.redis

JOBS = [f"job{index}" for index in range(60)]


@pytest.fixture
async def cluster_store(redis_cluster: ClusterSet, namespace: str) -> AsyncIterator[Store]:
    store = Store.from_url(redis_cluster.url, namespace, timeout_s=2)
    await store.load_scripts()
    yield store
    await store.aclose()


def shard_of(store: Store, key: str) -> str:
    return str(store.client.get_node_from_key(key).name)


@pytest.mark.cluster
async def test_a_wake_up_sends_one_claim_pipeline_per_shard(
    cluster_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: Counter[str] = Counter()
    original = ClusterNode.execute_pipeline

    async def counting(node: ClusterNode, commands: list[Any]) -> bool:
        sent[node.name] += 1
        return await original(node, commands)

    claims = [Claim(job, 100, 5000) for job in JOBS]
    await cluster_store.client.initialize()
    shards = {shard_of(cluster_store, cluster_store.keys.claim(job, 100)) for job in JOBS}
    monkeypatch.setattr(ClusterNode, "execute_pipeline", counting)
    replies = await cluster_store.claim_each(claims, "a:1", wait_replicas=1, wait_ms=500)
    assert {reply.outcome for reply in replies} == {ClaimOutcome.WON}
    assert len(shards) == 3
    assert sent == dict.fromkeys(shards, 1)  # one round trip per shard, WAIT included


@pytest.mark.cluster
async def test_a_shard_that_does_not_answer_costs_only_its_own_jobs(
    cluster_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await cluster_store.client.initialize()
    dead = shard_of(cluster_store, cluster_store.keys.claim(JOBS[0], 100))
    original = ClusterNode.execute_pipeline

    async def dead_shard(node: ClusterNode, commands: list[Any]) -> bool:
        if node.name == dead:
            raise RedisConnectionError(f"Error 111 connecting to {node.name}")
        return await original(node, commands)

    monkeypatch.setattr(ClusterNode, "execute_pipeline", dead_shard)
    replies = await cluster_store.claim_each([Claim(job, 100, 5000) for job in JOBS], N1)
    on_dead = [shard_of(cluster_store, cluster_store.keys.claim(j, 100)) == dead for j in JOBS]
    assert [r.outcome for r in replies] == [
        ClaimOutcome.UNKNOWN if dead_job else ClaimOutcome.WON for dead_job in on_dead
    ]
    decided = await cluster_store.decide([request(job=job, tick=100) for job in JOBS])
    for reply, dead_job in zip(decided, on_dead, strict=True):
        assert isinstance(reply, RedisUnavailableError) == dead_job
        assert dead_job or getattr(reply, "verdict", reply) is Verdict.RUN
    monkeypatch.setattr(ClusterNode, "execute_pipeline", original)
    # Back again: the ambiguous claims are read back and found unwritten, so won now; the
    # others were decided and are not won again, read back or not.
    claims = [
        Claim(job, 100, 5000, read_back=dead) for job, dead in zip(JOBS, on_dead, strict=True)
    ]
    again = await cluster_store.claim_each(claims, N1)
    assert [r.outcome for r in again] == [
        ClaimOutcome.WON if dead_job else ClaimOutcome.LOST for dead_job in on_dead
    ]
    read = await cluster_store.claim_each(
        [Claim(job, 100, 5000) for job in JOBS], N1, read_back=True
    )
    assert [r.outcome for r in read] == [r.outcome for r in again]  # undecided: still won


@pytest.mark.cluster
async def test_claim_replicas_waits_on_each_shard_that_holds_a_claim(
    cluster_store: Store, redis_cluster: ClusterSet
) -> None:
    key = cluster_store.keys.claim(JOBS[0], 200)
    stalled = redis_cluster.replica_of(redis_cluster.primary_of(key))
    assert stalled.process is not None
    on_stalled = [
        redis_cluster.primary_of(cluster_store.keys.claim(job, 200)).port
        == redis_cluster.primary_of(key).port
        for job in JOBS
    ]
    os.kill(stalled.process.pid, signal.SIGSTOP)
    try:
        replies = await cluster_store.claim_each(
            [Claim(job, 200, 5000) for job in JOBS], "a:1", wait_replicas=1, wait_ms=200
        )
    finally:
        os.kill(stalled.process.pid, signal.SIGCONT)
    assert [r.outcome for r in replies] == [
        ClaimOutcome.NOT_REPLICATED if stalled_job else ClaimOutcome.WON
        for stalled_job in on_stalled
    ]
    assert {r.acked for r, s in zip(replies, on_stalled, strict=True) if not s} == {1}


@pytest.mark.parametrize(
    ("key", "tag"),
    [
        ("plain", None),
        ("{reports}:latest", "reports"),
        ("a{b", None),
        ("{}x", None),
        ("x{y}z", "y"),
    ],
)
def test_hash_tags_follow_the_cluster_rule(key: str, tag: str | None) -> None:
    assert hash_tag(key) == tag


def test_the_fence_key_shares_its_target_key_slot_and_prefix() -> None:
    assert fence_key("{reports}:latest") == "{reports}:latest:cronrace-fence"
    assert fence_key("orders:1") == "orders:1{orders:1}:cronrace-fence"
    for key in ("{reports}:latest", "orders:1"):
        assert key_slot(fence_key(key).encode()) == key_slot(key.encode())
    for bad in ("weird}key", "a{b", "{}x"):
        with pytest.raises(StoreError, match="no hash tag"):
            fence_key(bad)


@pytest.mark.cluster
async def test_fenced_set_works_on_keys_with_and_without_hash_tags(cluster_store: Store) -> None:
    for key in ("plain-target", "{reports}:latest"):
        assert await cluster_store.fenced_set(key, "from-7", 7)
        assert not await cluster_store.fenced_set(key, "from-6", 6)
        assert await cluster_store.client.get(key) == b"from-7"


# -- Sentinel -------------------------------------------------------------------------


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    deployment = SentinelSet(tmp_path, sentinels=1)
    try:
        yield deployment.start()
    finally:
        deployment.stop()


@pytest.mark.slow
async def test_a_sentinel_store_follows_the_primary_within_a_heartbeat(
    sentinels: SentinelSet, namespace: str
) -> None:
    store = Store.from_url(sentinels.url, namespace, timeout_s=2)
    try:
        await store.load_scripts()
        old = sentinels.primary_port()
        assert await store.claim([Claim("j", 100, 60_000)], N1) == [True]
        sentinels.failover()
        new = sentinels.wait_for_new_primary(old)
        # The old primary stays writable for seconds after SENTINEL FAILOVER; the heartbeat
        # asks the sentinels and drops connections to it.
        await store.heartbeat("n1", now_ms=0, ttl_ms=1000, epoch_candidate="e")
        assert await store.claim([Claim("j", 101, 60_000)], N1) == [True]
        assert client(new).get(store.keys.claim("j", 101)) == str(N1)
        replies = await store.decide([request(tick=101)])
        assert getattr(replies[0], "verdict", replies[0]) is Verdict.RUN
    finally:
        await store.aclose()


async def test_a_sentinel_stores_pipeline_takes_one_read_timer_as_one_primarys_does(
    sentinels: SentinelSet, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py's own Sentinel connection scheduled a timer for every reply: 200 claims,
    # 200 timers (stores/redis/readtimer.py).
    store = Store.from_url(sentinels.url, namespace, timeout_s=2)
    try:
        await store.load_scripts()
        timers = count_timers(monkeypatch)
        claims = [Claim(f"j{index}", 100, 60_000) for index in range(200)]
        assert await store.claim(claims, N1) == [True] * 200
        assert timers[0] <= 3, timers  # the pool's wait, the send, the reads: one each
    finally:
        await store.aclose()
