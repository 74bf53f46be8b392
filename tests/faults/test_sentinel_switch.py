"""Real agent processes leave the old primary when the sentinels announce the switch.

After ``SENTINEL FAILOVER`` the old primary stays writable for about ten seconds, until
Sentinel converts it into a replica: an agent still writing there can win a tick that
another agent wins again on the new primary (a tick fired twice with ``claim_replicas =
0``). The heartbeat asks the sentinels where the primary is every ``heartbeat_s``; the
sentinels announce the switch at once (``+switch-master``), and the agents follow that.
Measured here: how long after the promotion the old primary still took the agents' writes
(claims, decisions), with the default two-second heartbeat.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.faults.witness import Witness, start_node, stop_all
from tests.topology import SentinelSet, client

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def agent_writes(port: int) -> int:
    """Claims and decisions the server on ``port`` has run so far."""
    stats = client(port).info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("set", "evalsha"))


@pytest.mark.timeout(120)
def test_agents_leave_the_old_primary_when_the_switch_is_announced(
    tmp_path: Path, namespace: str, witness: Witness
) -> None:
    sentinels = SentinelSet(tmp_path / "redis", down_after_ms=1000, failover_timeout_ms=2000)
    sentinels.start()
    env = {"CRONRACE_HEARTBEAT_S": "2", "CRONRACE_LOG_FORMAT": "text"}
    procs = [
        start_node(sentinels.url, namespace, f"w{i}", witness, env=env, stderr_dir=tmp_path)
        for i in range(3)
    ]
    try:
        witness.wait_for(
            lambda evs: sum(e["event"] == "start" for e in evs) >= 3, timeout_s=40, what="runs"
        )
        old = sentinels.primary_port()
        sentinels.failover()
        sentinels.wait_for_new_primary(old)
        promoted_s = time.time()
        last_write_s, seen = promoted_s, agent_writes(old)
        while time.time() < promoted_s + 4:  # Sentinel converts it after about ten seconds
            now = agent_writes(old)
            if now != seen:
                last_write_s, seen = time.time(), now
            time.sleep(0.01)
    finally:
        stop_all(procs)
        sentinels.stop()
    window_s = last_write_s - promoted_s
    print(
        f"\nSENTINEL FAILOVER: the old primary took agents' writes {window_s:.3f} s after "
        "the promotion was visible"
    )
    assert window_s < 0.5, window_s
