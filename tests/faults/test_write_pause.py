"""Real agent processes through ``CLIENT PAUSE <ms> WRITE``, twice.

What a managed Redis does before a maintenance failover: writes wait (the clients are not
refused, their commands are held) while reads go on. Claims, decisions and releases all
wait behind the pause and are then served in an order nobody chose. Every tick of a
``catchup = "all"`` job must still fire once, late at most, and a tick may be skipped for
overlap only while the run it met was really running: not behind a release that the pause
held back (it was, before: the tick after the pause recorded ``skipped:overlap`` against
a run that had ended, and one pause in two lost a tick with no claim, record or log line).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from tests.faults.witness import (
    Witness,
    decided_late_or_overlapping,
    judge,
    run_records,
    sleep_until_fraction,
    start_node,
    stop_all,
)
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

PAUSE_MS = 3000
PAUSES = 2
JOBS = [f"extra{index:03d}" for index in range(4)]


@pytest.mark.timeout(120)
def test_write_pauses_lose_no_tick(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    env = {
        "FAULT_CODE_JOBS": "",
        "FAULT_EXTRA_JOBS": str(len(JOBS)),
        "FAULT_EXTRA_OVERLAP": "skip",
        "FAULT_EXTRA_LEASE_S": "2",
        "CRONRACE_LOG_FORMAT": "text",
    }
    procs = [
        start_node(redis_server.url, namespace, f"p{i}", witness, env=env, stderr_dir=tmp_path)
        for i in range(3)
    ]
    admin = redis.Redis.from_url(redis_server.url)
    paused_s: list[float] = []
    try:
        witness.wait_for(
            lambda evs: {e["job"] for e in evs} >= set(JOBS), timeout_s=40, what="every job"
        )
        first_s = int(time.time()) + 1
        for _ in range(PAUSES):
            time.sleep(2)
            sleep_until_fraction(0.3)
            admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
            paused_s.append(time.time())
            time.sleep(PAUSE_MS / 1000 + 3)
        last_s = int(time.time()) - 2
        witness.wait_for(
            lambda evs: all(any(e["job"] == j and e["tick"] >= last_s for e in evs) for j in JOBS),
            timeout_s=30,
            what="every job past the pauses",
        )
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
        stop_all(procs)
    events = witness.events()
    lost: dict[str, list[int]] = {}
    skipped: dict[str, list[int]] = {}
    for job in JOBS:
        records = run_records(redis_server.url, namespace, job)
        # Skipped for overlap only while the run it met was alive when Redis decided: its
        # end may come a moment before the decision's answer reaches the node (0.5 s on a
        # loaded machine), not a pause's length before it.
        excused = decided_late_or_overlapping(records, events, job, release_slack_s=0.5)
        verdict = judge(events, job, first_tick_s=first_s, last_tick_s=last_s, excused=excused)
        assert verdict.duplicates == [], verdict.summary()
        if verdict.missed:
            lost[job] = verdict.missed
        skipped[job] = [
            r.tick_s
            for r in records
            if r.outcome == "skipped:overlap" and first_s <= r.tick_s <= last_s
        ]
    print(f"\nwrite pauses of {PAUSE_MS} ms x {PAUSES}: lost={lost}, skipped:overlap={skipped}")
    assert lost == {}, (lost, skipped)
