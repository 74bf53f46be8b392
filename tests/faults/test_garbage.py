"""Real agent processes: garbage of every wrong type written under every key of two jobs.

While two ``cronrace run`` processes fire a 1-second job and a 3-second-run job, the test
writes, once a second, one wrong type under each of the jobs' keys (lease, fence, cursor,
pending, state, history, outstanding triggers). Every script moves the key aside and goes
on: the witness must see no duplicate, no overlap, fences in order, and no tick of the
1-second job lost except where a garbled lease made new runs wait (nobody can tell whether
a run held it). Before, each of these stalled its job with WRONGTYPE until an operator
deleted the key.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from cronrace.stores.redis import Keys
from tests.faults.witness import (
    Witness,
    judge,
    log_lines,
    sleep_until_fraction,
    start_node,
    stop_all,
)
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

RIGHT_TYPES = {
    "lease": "hash",
    "fence": "int",
    "cursor": "int",
    "pending": "int",
    "triggers": "hash",
    "state": "hash",
    "runs": "stream",
}


def write_garbage(client: redis.Redis, key: str, kind: str) -> None:
    client.delete(key)
    if kind == "string":
        client.set(key, "garbage")
    elif kind == "list":
        client.rpush(key, "garbage")
    elif kind == "hash":
        client.hset(key, "garbage", "1")
    elif kind == "set":
        client.sadd(key, "garbage")
    elif kind == "zset":
        client.zadd(key, {"garbage": 1})
    else:
        client.xadd(key, {"garbage": "1"})


@pytest.mark.timeout(120)
def test_garbage_of_every_type_under_every_key_is_moved_aside_and_loses_no_tick(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    keys = Keys(namespace)
    client = redis.Redis.from_url(redis_server.url)
    procs = [
        start_node(redis_server.url, namespace, f"n{i}", witness, stderr_dir=tmp_path)
        for i in range(2)
    ]
    lease_garbled_s: list[int] = []
    try:
        witness.wait_for(
            lambda evs: sum(e["job"] == "slow" and e["event"] == "start" for e in evs) >= 1,
            timeout_s=40,
            what="the fleet to run",
        )
        for kind in ("string", "list", "hash", "set", "zset", "stream"):
            sleep_until_fraction(0.4)
            for name, right in RIGHT_TYPES.items():
                if kind != right and name != "lease":
                    for job in ("fast", "slow"):
                        write_garbage(client, getattr(keys, name)(job), kind)
            time.sleep(0.7)
        # A garbled lease: whoever held it loses it, and new runs wait one lease_ttl,
        # since nobody can tell whether a run held it.
        for kind in ("string", "hash"):
            sleep_until_fraction(0.4)
            for job in ("fast", "slow"):
                write_garbage(client, keys.lease(job), kind)
            lease_garbled_s.append(int(time.time()))
            time.sleep(1.7)
        time.sleep(2)
        t_end = time.time()
        alive = [proc.poll() is None for proc in procs]
        moved = client.keys(f"{namespace}:quarantine:*")
    finally:
        stop_all(procs)
        client.close()
    assert alive == [True, True]
    evs = witness.events()
    first = min(e["tick"] for e in evs if e["job"] == "fast")
    # The tick whose run held the garbled lease, and the next one (held back).
    held = {t for garbled in lease_garbled_s for t in range(garbled, garbled + 2)}
    fast = judge(evs, "fast", first_tick_s=first, last_tick_s=int(t_end) - 2, excused=held)
    slow = judge(evs, "slow", first_tick_s=first, last_tick_s=first - 1)
    print(fast.summary())
    print(slow.summary())
    print(f"{len(moved)} keys moved aside")
    assert (fast.duplicates, fast.missed, fast.overlaps, fast.fence_disorder) == (
        [],
        [],
        [],
        [],
    ), f"{fast.summary()}\n{log_lines(tmp_path, {t + d for t in fast.missed for d in (-1, 0, 1)})}"
    assert (slow.duplicates, slow.overlaps, slow.fence_disorder) == ([], [], []), slow.summary()
    # Garbage was there to move: at least each job's fence and cursor, six times over.
    assert len(moved) >= 2 * 2 * 6 + 2
    logs = "".join(path.read_text() for path in tmp_path.glob("n*.err"))
    assert keys.fence("fast") in logs, "the ERROR log names the full key"
    assert "Traceback" not in logs
