"""Real agent processes on Redis Cluster: one primary killed, its replica takes over.

Three shards with one replica each (``cluster-node-timeout 1000``), three ``cronrace run``
processes with 50 extra 1-second jobs (``catchup="all"``) whose slots cover every shard.
One primary is killed; until its replica is promoted its jobs cannot be claimed, and while
the cluster marks it failed every shard refuses commands (``cluster-require-full-coverage
yes``, the default). Every tick must still fire once its shard is back.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.faults.witness import Verdict, Witness, judge, start_node, stop_all
from tests.topology import ClusterSet, client, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.cluster]

JOBS = [f"extra{index:03d}" for index in range(50)]


def replica_promoted(cluster: ClusterSet, dead_port: int) -> bool:
    live = [node for node in cluster.nodes if node.process is not None]
    for node in live:
        if client(node.port).cluster("info")["cluster_state"] != "ok":
            return False
    return len(cluster.primaries()) == 3 and dead_port not in {n.port for n in cluster.primaries()}


@pytest.mark.timeout(90)
def test_a_killed_cluster_primary_costs_no_tick_and_healthy_shards_no_duplicate(
    tmp_path: Path, namespace: str, witness: Witness
) -> None:
    cluster = ClusterSet(tmp_path / "cluster", node_timeout_ms=1000).start()
    shard = {job: cluster.primary_of(f"{{{job}}}").port for job in JOBS}
    assert len(set(shard.values())) == 3, "the jobs' slots must cover every shard"
    env = {
        "FAULT_EXTRA_JOBS": str(len(JOBS)),
        # Runs never wait for each other: what is measured is the failover, not the
        # overlap policy (queue_one keeps one waiting tick and drops older ones).
        "FAULT_EXTRA_OVERLAP": "allow",
        "CRONRACE_REDIS_TIMEOUT_S": "1",
    }
    procs = [
        start_node(cluster.url, namespace, f"c{i}", witness, env=env, stderr_dir=tmp_path)
        for i in range(3)
    ]
    try:
        # Every job fired (the agents take a few seconds to start), then twice more.
        started_s = wait_until(
            lambda: witness.all_started_from(JOBS),
            timeout_s=30,
            what="every job firing",
        )
        wait_until(
            lambda: witness.every_job_reached(JOBS, started_s + 2),
            timeout_s=30,
            what="steady state",
        )
        dead_port = shard[JOBS[0]]
        victim = next(node for node in cluster.nodes if node.port == dead_port)
        assert victim.process is not None
        killed_s = time.time()
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait()
        victim.process = None
        wait_until(lambda: replica_promoted(cluster, dead_port), timeout_s=30, what="promotion")
        promoted_s = time.time()
        caught_up_s = int(promoted_s) + 2
        wait_until(
            lambda: witness.every_job_reached(JOBS, caught_up_s), timeout_s=30, what="the catch-up"
        )
    finally:
        stop_all(procs)
        cluster.stop()
    events = witness.events()
    (tmp_path / "events.json").write_text(json.dumps(events))  # read after a failure
    verdicts = {
        job: judge(events, job, first_tick_s=started_s + 1, last_tick_s=caught_up_s, leased=False)
        for job in JOBS
    }
    dead_jobs = [job for job in JOBS if shard[job] == dead_port]
    healthy_jobs = [job for job in JOBS if shard[job] != dead_port]
    report(events, verdicts, dead_jobs, healthy_jobs, killed_s, promoted_s)
    for job, verdict in verdicts.items():
        # overlap="allow": a late catch-up run may hold a higher fence than a newer tick's
        # run, but no fence is ever handed out twice, through the failover too.
        fences = [e["fence"] for e in events if e["job"] == job and e["event"] == "start"]
        assert len(fences) == len(set(fences)), verdict.summary()
        # catchup="all" fires every tick
        assert verdict.missed == [], verdict.summary() + agent_log(tmp_path, job, verdict.missed)
    for job in healthy_jobs:
        assert verdicts[job].duplicates == [], verdicts[job].summary()
    # On the killed shard a claim written but not yet replicated can be lost with it, and
    # its tick won again: only ticks in flight at the kill.
    for job in dead_jobs:
        assert all(abs(tick - killed_s) <= 2 for tick in verdicts[job].duplicates)


def agent_log(directory: Path, job: str, ticks: list[int]) -> str:
    """The agents' log lines about ``job`` around ``ticks`` (for a failure's message)."""
    marks = [str(tick) for tick in ticks] + [f"job={job} "]
    lines = []
    for path in sorted(directory.glob("c*.err")):
        for line in path.read_text(errors="replace").splitlines():
            if (any(mark in line for mark in marks[:-1]) and marks[-1] in line) or (
                "ERROR" in line and "claims failed" not in line
            ):
                lines.append(f"{path.stem}: {line[:220]}")
    return "\n" + "\n".join(lines[-60:])


def report(
    events: list[dict[str, Any]],
    verdicts: dict[str, Verdict],
    dead_jobs: list[str],
    healthy_jobs: list[str],
    killed_s: float,
    promoted_s: float,
) -> None:
    """Print the figures the README quotes (shown with -s, and on failure)."""

    def starts(jobs: list[str]) -> list[dict[str, Any]]:
        return [e for e in events if e["job"] in jobs and e["event"] == "start"]

    def first_fire_after(jobs: list[str]) -> float:
        return min(e["wall"] for e in starts(jobs) if e["wall"] > killed_s) - killed_s

    def latest(jobs: list[str]) -> float:
        """How late the latest tick due after the kill started."""
        return max(e["wall"] - e["tick"] for e in starts(jobs) if e["tick"] >= killed_s - 1)

    duplicates = Counter({job: len(v.duplicates) for job, v in verdicts.items() if v.duplicates})
    print(
        f"\nCluster: {len(verdicts)} jobs ({len(dead_jobs)} on the killed shard), "
        f"{sum(len(v.ticks) for v in verdicts.values())} ticks, "
        f"duplicates={dict(duplicates)}, missed={sum(len(v.missed) for v in verdicts.values())}, "
        f"replica promoted {promoted_s - killed_s:.1f} s after the kill; first fire after the "
        f"kill: killed shard {first_fire_after(dead_jobs):.1f} s, healthy shards "
        f"{first_fire_after(healthy_jobs):.1f} s; latest tick: killed shard "
        f"{latest(dead_jobs):.1f} s late, healthy shards {latest(healthy_jobs):.1f} s late"
    )
