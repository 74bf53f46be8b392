"""Real agent processes stopped by SIGTERM in the middle of a wake-up: a rolling deploy.

Each node talks to Redis through 15 ms of latency each way (tests/faults/netem.py), so a
wake-up's claims and decisions take ~60 ms. The test watches Redis for the claim of each
tick and signals the node that won it while its claim reply or its decision is still on
the wire: the worst moment for a deploy to stop a node.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from cronrace.stores.redis import Keys
from tests.faults.netem import ProxiedNodes
from tests.faults.witness import (
    Witness,
    decided_late_or_overlapping,
    judge,
    log_lines,
    run_records,
    sleep_until_fraction,
)
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

LATENCY_S = 0.015


def claim_winner(client: redis.Redis, keys: Keys, tick_s: int) -> str | None:
    """Poll Redis for the claim of ``fast`` at ``tick_s``; the winning node, or None."""
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        raw = client.get(keys.claim("fast", tick_s))
        if raw is not None:
            return raw.decode().rsplit(":", 1)[0]
        time.sleep(0.0005)
    return None


def restart_one_by_one(
    fleet: ProxiedNodes, redis_server: RedisServer, namespace: str, witness: Witness
) -> tuple[dict[int, str], list[int], int, int]:
    """Run three nodes and replace the winner of a tick, five times, mid-wake-up.

    Returns:
        The ticks whose winner got two signals (and which node that was), the ticks whose
        winner got one, and the first and last ticks the verdict covers.
    """
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys(namespace)
    started = itertools.count()
    for _ in range(3):
        fleet.add(f"r{next(started)}")
    fleet.wait_live()
    # Live is not yet running: a node beats before it plans its first tick, and a tick
    # before every node planned may belong to none (a loaded CI machine held all three
    # for 0.6 s there, and the verdict counted that tick missed). Judge from a tick
    # after the fleet ran one.
    witness.wait_for(
        lambda evs: any(e["job"] == "fast" for e in evs), timeout_s=10, what="a first run"
    )
    first_tick_s = int(time.time()) + 1
    graceful: list[int] = []
    forced: dict[int, str] = {}
    stopped: list[subprocess.Popen[bytes]] = []
    # "late": the claim is answered and the decision is on the wire.
    plan = [("now", 1), ("late", 1), ("late", 1), ("now", 2), ("late", 2)]
    while plan:
        # A deploy replaces nodes one by one: at least two others are up at each signal.
        fleet.wait_live(3)
        sleep_until_fraction(0.0)
        tick_s = round(time.time())
        winner = claim_winner(client, keys, tick_s)
        if winner not in fleet.procs:
            continue
        when, signals = plan.pop(0)
        victim = fleet.procs.pop(winner)
        if when == "late":
            time.sleep(2 * LATENCY_S)
        victim.send_signal(signal.SIGTERM)
        if signals == 2:
            time.sleep(0.003)  # two signals sent together may merge into one
            victim.send_signal(signal.SIGTERM)
            forced[tick_s] = winner
        else:
            graceful.append(tick_s)
        stopped.append(victim)
        fleet.add(f"r{next(started)}")
    assert [proc.wait(timeout=10) for proc in stopped] == [0] * len(stopped)
    last_tick_s = int(time.time())
    witness.wait_for(
        lambda evs: any(e["job"] == "fast" and e["tick"] > last_tick_s for e in evs),
        timeout_s=10,
        what="a tick after the last restart",
    )
    client.close()
    return forced, graceful, first_tick_s, last_tick_s


@pytest.mark.timeout(120)
def test_rolling_restart_with_sigterm_inside_the_wakeup_loses_no_tick(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    with ProxiedNodes(redis_server.port, namespace, witness, tmp_path, delay_s=LATENCY_S) as fleet:
        forced, graceful, first_tick_s, last_tick_s = restart_one_by_one(
            fleet, redis_server, namespace, witness
        )
    events = witness.events()
    records = run_records(redis_server.url, namespace, "fast")
    # A second signal gives up the tick its node had won but not started: allowed, and
    # only with a record saying so.
    ran = {e["tick"] for e in events if e["job"] == "fast" and e["event"] == "start"}
    given_up = {tick: node for tick, node in forced.items() if tick not in ran}
    excused = set(given_up) | decided_late_or_overlapping(records, events, "fast")
    fast = judge(
        events, "fast", first_tick_s=first_tick_s, last_tick_s=last_tick_s, excused=excused
    )
    slow = judge(events, "slow", first_tick_s=first_tick_s, last_tick_s=first_tick_s - 1)
    assert (fast.duplicates, fast.missed, fast.overlaps, fast.fence_disorder) == (
        [],
        [],
        [],
        [],
    ), f"{fast.summary()}; graceful stops at {graceful}, forced at {forced}\n" + log_lines(
        fleet.logs, [t - d for t in fast.missed + fast.duplicates for d in (0, 1)]
    )

    # Given up with its grant known: the stopping node's `cancelled` result. Given up
    # before its decision went out: the tick stayed above the cursor and the job's next
    # decision, on another node, covered it (a `missed` range under the catch-up policy).
    # Given up with the decision's answer on the wire (the store granted it, the node never
    # read it): its `granted` record stays, the lease runs out, and the job's next decision
    # records it `abandoned` (docs/design.md section 3; tests/fleet/test_decision_faults.py).
    def settled(tick: int, node: str) -> bool:
        return any(
            (r.outcome in ("cancelled", "abandoned") and r.tick_s == tick and r.node == node)
            or (r.outcome == "missed" and r.tick_s <= tick <= max(r.tick_s, r.last_tick_s))
            for r in records
        )

    unrecorded = [(tick, node) for tick, node in given_up.items() if not settled(tick, node)]
    around = [
        (r.tick_s, r.last_tick_s, r.node, r.outcome.value, r.fence)
        for r in records
        if any(abs(r.tick_s - tick) <= 2 for tick in given_up)
    ]
    assert unrecorded == [], f"a forced stop lost a won tick without a record: {unrecorded}" + (
        f"\n{around}\n" + log_lines(fleet.logs, [t for t, _n in unrecorded])
    )
    assert (slow.duplicates, slow.overlaps, slow.fence_disorder) == ([], [], []), slow.summary()
    # No lease was left behind to block a job but a forced stop's unread grant: every
    # other run's lease was released.
    abandoned = [(r.tick_s, r.node) for r in records if r.outcome == "abandoned"]
    assert [(t, n) for t, n in abandoned if given_up.get(t) != n] == [], abandoned
