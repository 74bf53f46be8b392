"""Real agent processes: decision answers lost on the wire, and Redis killed mid-tick.

Two ``cronrace run`` processes reach an AOF redis-server (``appendfsync always``) through a
proxy. First the proxy loses the answers of several decisions (decide.lua ran, the reply
never came back: the retry is answered ``replayed`` from the claim's memo); then
redis-server is SIGKILLed at each phase of a tick (claims in flight, decisions in flight,
runs starting, releases in flight) and restarted at once. The witness must see every tick
of the 1-second job run exactly once, no overlapping runs, and fences rising with ticks.
Before the decision was retried, each lost answer lost its tick.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from cronrace.stores.redis.scripts import script_sources
from tests.faults.proxy import FaultProxy
from tests.faults.witness import Witness, judge, sleep_until_fraction, start_node, stop_all
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

# Redis names a script by its SHA1 (EVALSHA): the proxy spots the decision by it.
DECIDE_SHA = hashlib.sha1(script_sources()["decide"].encode(), usedforsecurity=False)
DECIDE_SHA_HEX = DECIDE_SHA.hexdigest().encode()

#: When, after a tick, redis-server is killed: before the claims leave, with claims in
#: flight, with decisions in flight, as runs start and release.
KILL_PHASES_S = (0.0005, 0.002, 0.004, 0.008, 0.015, 0.03)


@pytest.mark.timeout(120)
def test_lost_decision_answers_and_redis_killed_mid_tick_lose_no_tick(
    fresh_redis: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    proxy = FaultProxy(fresh_redis.port).start()
    procs = [
        start_node(proxy.url, namespace, f"n{i}", witness, stderr_dir=tmp_path) for i in range(2)
    ]
    try:
        witness.wait_for(
            lambda evs: sum(e["job"] == "fast" for e in evs) >= 4,
            timeout_s=40,
            what="the fleet to run",
        )
        for cuts in range(1, 5):
            proxy.cut_after(DECIDE_SHA_HEX)
            deadline = time.monotonic() + 5
            while proxy.cuts < 1:
                assert time.monotonic() < deadline, f"decision {cuts} was never cut"
                time.sleep(0.01)
            time.sleep(0.5)
        for phase in KILL_PHASES_S:
            sleep_until_fraction(phase)
            fresh_redis.stop(kill=True)
            fresh_redis.start()
            time.sleep(0.6)
        time.sleep(2.5)
        t_end = time.time()
    finally:
        stop_all(procs)
        proxy.stop()
    evs = witness.events()
    first = min(e["tick"] for e in evs if e["job"] == "fast")
    fast = judge(evs, "fast", first_tick_s=first, last_tick_s=int(t_end) - 2)
    slow = judge(evs, "slow", first_tick_s=first, last_tick_s=first - 1)
    print(fast.summary())
    print(slow.summary())
    assert (fast.duplicates, fast.missed, fast.overlaps, fast.fence_disorder) == (
        [],
        [],
        [],
        [],
    ), fast.summary()
    assert (slow.duplicates, slow.overlaps, slow.fence_disorder) == ([], [], []), slow.summary()
