"""Real agent processes on a fresh namespace: lost claims are no evidence of a fence.

A node that loses a claim does not know whether the winner's decision has reached Redis
(on a loaded machine it may be seconds behind), nor whether the winner is still alive. It
used to take the lost claim as evidence that the job had a fence; when it won the next
tick and found no counter, it called that data loss: CRITICAL "Redis lost this job's
data", new runs held for a lease_ttl, and ticks missed behind the hold, though nothing had
been wiped (66 jobs of 600 so held, 198 job-ticks missed, with 27 agents started at once).

Here the winners that never decide are made reproducible: before the agents start, the
test claims the job's next ticks under an owner that is not alive (a winner that died
between its claim and its decision, or whose decision is still on the wire). The agents
lose those claims and win the tick after. Nothing was wiped, so nothing may be held.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from cronrace.model.records import one_per_tick
from tests.faults.witness import Witness, judge, run_records, start_node, stop_all
from tests.redis_server import RedisServer
from tests.topology import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

#: Ticks the ghost claims at most; the agents start within them.
GHOST_TICKS = 40
#: Ticks the agents race after they started while the ghost holds them.
LOST_TICKS = 3


def false_wipe_lines(directory: Path) -> list[str]:
    return [
        f"{path.stem}: {line[:200]}"
        for path in sorted(directory.glob("*.err"))
        for line in path.read_text(errors="replace").splitlines()
        if "lost this job's data" in line or "holding a new run" in line
    ]


@pytest.mark.timeout(90)
def test_claims_lost_to_an_undecided_winner_are_no_wipe(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    ghost = redis.Redis.from_url(redis_server.url)
    first_s = int(time.time()) + 1
    for tick in range(first_s, first_s + GHOST_TICKS):
        ghost.set(f"{namespace}:claim:{{fast}}:{tick}", "ghost:000000", nx=True, px=60_000)
    env = {"FAULT_CODE_JOBS": "fast", "CRONRACE_LOG_FORMAT": "text"}
    procs = [
        start_node(redis_server.url, namespace, f"n{i}", witness, env=env, stderr_dir=tmp_path)
        for i in range(3)
    ]
    try:
        wait_until(
            lambda: (
                all("agent started" in p.read_text() for p in tmp_path.glob("*.err"))
                and len(list(tmp_path.glob("*.err"))) == len(procs)
            ),
            timeout_s=40,
            what="the agents started",
        )
        # The agents lose LOST_TICKS more claims, then the ghost's claims end.
        free_s = int(time.time()) + LOST_TICKS
        freed = range(free_s, first_s + GHOST_TICKS)
        ghost.delete(*(f"{namespace}:claim:{{fast}}:{tick}" for tick in freed))
        ghost.close()
        end_s = free_s + 5
        witness.wait_for(
            lambda evs: any(e["job"] == "fast" and e["tick"] >= end_s for e in evs),
            timeout_s=40,
            what="the fast job running past the ghost's ticks",
        )
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, "fast", first_tick_s=free_s, last_tick_s=end_s)
    records = run_records(redis_server.url, namespace, "fast")
    # One record per tick as a reader sees it: a run's result in place of its `granted`.
    held = [r for r in one_per_tick(records) if r.tick_s >= free_s and r.outcome != "ok"]
    lines = false_wipe_lines(tmp_path)
    print(verdict.summary(), f"not ok: {[(r.tick_s, r.outcome) for r in held]}", *lines, sep="\n")
    assert lines == [], "\n".join(lines)
    assert (verdict.duplicates, verdict.missed) == ([], []), verdict.summary()
    assert held == [], held
