"""Real agent processes: redis-server restarted without persistence under a running handler.

The restart wipes everything: the lease of the run in progress, the fence counter, the
cursors, the claims. The first decision after it must see the wipe (the store has no cursor
where its node expected one: a ``data_lost`` record) and hold every new grant of the job
for one lease_ttl, so the run started before the wipe is cancelled (its renewal finds no
lease) before any new run starts. Before that hold, 1 to 3 restarts in 4 let a new run
start while the old one was still running.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

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

WIPES = 4


def fresh_slow_run(events: list[dict[str, Any]]) -> bool:
    """Whether a run of the slow job started this second and has not ended."""
    ended = {e["fence"] for e in events if e["job"] == "slow" and e["event"] != "start"}
    return any(
        e["job"] == "slow"
        and e["event"] == "start"
        and e["fence"] not in ended
        and int(e["wall"]) == int(time.time())
        and time.time() % 1 < 0.8
        for e in events
    )


def on_time_slow_run(events: list[dict[str, Any]]) -> bool:
    """Whether a run of the slow job started within 0.15 s of this second's tick."""
    now = time.time()
    return now % 1 < 0.25 and any(
        e["job"] == "slow"
        and e["event"] == "start"
        and e["tick"] == int(now)
        and e["wall"] - e["tick"] < 0.15
        for e in events
    )


@pytest.mark.timeout(180)
def test_redis_restarted_without_persistence_never_lets_runs_overlap(
    namespace: str, witness: Witness, tmp_path: Path
) -> None:
    redis = RedisServer(tmp_path / "redis", appendonly=False).start()
    # 1.5 s runs under a 0.9 s lease: renewed every 0.3 s, so each wipe meets a live run.
    env = {"FAULT_SLOW_S": "1.5"}
    procs = [
        start_node(redis.url, namespace, f"n{i}", witness, env=env, stderr_dir=tmp_path)
        for i in range(2)
    ]
    wiped_s: list[int] = []
    try:
        for _ in range(WIPES):
            witness.wait_for(fresh_slow_run, timeout_s=40, what="a slow run starting")
            # Just after its renewal at +0.9 s, before the next tick: the next renewal
            # (+1.2 s) would be the first to notice the wipe, after the next tick's grant.
            sleep_until_fraction(0.95)
            redis.stop(kill=True)
            redis.start()
            wiped_s.append(int(time.time()))
        witness.wait_for(
            lambda evs: sum(e["job"] == "slow" and e["event"] == "start" for e in evs) >= WIPES + 2,
            timeout_s=40,
            what="slow runs after the last wipe",
        )
        t_end = time.time()
    finally:
        stop_all(procs)
        redis.stop()
    evs = witness.events()
    slow = judge(evs, "slow", first_tick_s=0, last_tick_s=-1)
    first = min(e["tick"] for e in evs if e["job"] == "fast")
    # The hold may push a tick or two of the 1-second job out (skipped: the held run is
    # alive); outside those, every tick runs.
    held = {t for wiped in wiped_s for t in range(wiped, wiped + 3)}
    fast = judge(evs, "fast", first_tick_s=first, last_tick_s=int(t_end) - 2, excused=held)
    print(slow.summary())
    print(fast.summary())
    assert (slow.duplicates, slow.overlaps, slow.fence_disorder) == ([], [], []), slow.summary()
    assert (fast.duplicates, fast.missed, fast.overlaps, fast.fence_disorder) == (
        [],
        [],
        [],
        [],
    ), fast.summary()


@pytest.mark.timeout(180)
def test_a_wipe_under_running_handlers_costs_a_heartbeat_not_a_lease(
    namespace: str, witness: Witness, tmp_path: Path
) -> None:
    """Redis restarted without persistence while a 0.5 s run of a 1-second job goes on.

    The run's node re-asserts its lease when it sees the new epoch, and says so with its
    next heartbeat; new runs wait until both nodes have said so, not a whole lease_ttl.
    With a 4 s lease, ``catchup = "all"`` and ``overlap = "queue_one"``, the hold used to
    push a run 4 s out, and the ticks behind it replaced each other in the queue.
    """
    redis = RedisServer(tmp_path / "redis", appendonly=False).start()
    env = {
        "FAULT_CODE_JOBS": "slow",
        "FAULT_SLOW_S": "0.5",
        "FAULT_SLOW_LEASE_S": "4",
        "FAULT_SLOW_CATCHUP": "all",
        # A run that starts late (a loaded machine) makes the next tick wait, not skip.
        "FAULT_SLOW_OVERLAP": "queue_one",
    }
    procs = [
        start_node(redis.url, namespace, f"n{i}", witness, env=env, stderr_dir=tmp_path)
        for i in range(2)
    ]
    wiped_s: list[int] = []
    try:
        first = witness.wait_for(fresh_slow_run, timeout_s=40, what="a slow run starting")
        first_s = min(e["tick"] for e in first if e["job"] == "slow")
        for _ in range(WIPES):
            # A run that started on time and goes on, and no tick queued behind it (a
            # queued tick lives only in Redis: a wipe takes it, held or not).
            witness.wait_for(on_time_slow_run, timeout_s=40, what="a slow run on time")
            sleep_until_fraction(0.3)
            redis.stop(kill=True)
            redis.start()
            wiped_s.append(int(time.time()))
            time.sleep(6)  # more than the 4 s lease: each wipe is judged on its own
        last_s = int(time.time()) - 2
    finally:
        stop_all(procs)
        redis.stop()
    evs = witness.events()
    verdict = judge(evs, "slow", first_tick_s=first_s + 1, last_tick_s=last_s)
    lost_per_wipe = [
        len([t for t in verdict.missed if wiped <= t < wiped + 6]) for wiped in wiped_s
    ]
    print(f"\n{verdict.summary()}; ticks lost per wipe: {lost_per_wipe}")
    assert verdict.duplicates == [], verdict.summary()
    assert verdict.overlaps == [], verdict.summary()
    assert verdict.fence_disorder == [], verdict.summary()
    assert verdict.missed == [], (verdict.summary(), log_lines(tmp_path, verdict.missed))
