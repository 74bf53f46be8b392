"""Real agent processes on Redis Cluster through two operations a managed cluster performs.

- ``CLUSTER FAILOVER`` run on a replica: the coordinated, graceful failover of a
  maintenance (the replica catches up with its primary, which pauses its clients, then the
  two switch roles; no data is lost and no node is flagged failed).
- Scaling out: an empty primary joins (``CLUSTER MEET``) and the slots of jobs in flight
  are moved to it (``SETSLOT IMPORTING/MIGRATING``, ``MIGRATE`` in batches, ``SETSLOT
  NODE``). The agents' slot map does not name the new node until they re-read it, so the
  first ``ASK`` or ``MOVED`` to it points at a node redis-py has not met yet (issue 21 saw
  ``'NoneType' object has no attribute 'connection_kwargs'`` there).

Each with ``catchup = "all"``: every tick fires once (late is fine), as the witness saw.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.test_slot_migration import admin, migrate_slot, stop_everything
from tests.faults.witness import Verdict, Witness, judge, start_node
from tests.topology import ClusterSet, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.cluster]

JOBS = [f"extra{index:03d}" for index in range(24)]
#: Slots moved to the new primary.
MIGRATIONS = 2
ENV = {
    "FAULT_EXTRA_JOBS": str(len(JOBS)),
    "FAULT_EXTRA_OVERLAP": "allow",  # what is measured is the operation, not overlaps
    "CRONRACE_REDIS_TIMEOUT_S": "2",
    "CRONRACE_LOG_FORMAT": "text",
    "FAULT_CODE_JOBS": "",
}
#: Lines no node may log through either operation.
BAD_LINES = ("this tick will not run", "connection_kwargs", "Traceback")


def wait_steady(witness: Witness) -> int:
    """Wait until every job fired, then twice more; the first tick every job must have."""
    started_s = int(
        wait_until(
            lambda: witness.all_started_from(JOBS),
            timeout_s=40,
            what="every job firing",
        )
    )
    wait_until(lambda: witness.every_job_reached(JOBS, started_s + 2), timeout_s=30, what="steady")
    return started_s


def log_count(directory: Path) -> dict[str, int]:
    text = [p.read_text(errors="replace") for p in sorted(directory.glob("o*.err"))]
    return {phrase: sum(t.count(phrase) for t in text) for phrase in BAD_LINES}


def log_lines(directory: Path, job: str, ticks: list[int]) -> str:
    """The nodes' lines about ``job`` and ``ticks``, and every ERROR (for a failure)."""
    marks = [f"tick={tick}" for tick in ticks]
    lines = [
        f"{path.stem}: {line[:240]}"
        for path in sorted(directory.glob("o*.err"))
        for line in path.read_text(errors="replace").splitlines()
        if (f"job={job} " in line and any(m in line for m in marks)) or "ERROR" in line
    ]
    return "\n" + "\n".join(lines[-60:])


def verdicts_of(
    witness: Witness, first_s: int, last_s: int
) -> tuple[dict[str, Verdict], list[dict[str, Any]]]:
    events = witness.events()
    verdicts = {
        job: judge(events, job, first_tick_s=first_s, last_tick_s=last_s, leased=False)
        for job in JOBS
    }
    return verdicts, events


def latest_late_s(events: list[dict[str, Any]], since_s: float) -> float:
    """How late (s) the latest tick due from ``since_s`` on started."""
    return max(
        (e["wall"] - e["tick"] for e in events if e["event"] == "start" and e["tick"] >= since_s),
        default=0.0,
    )


def check(
    tmp_path: Path, name: str, verdicts: dict[str, Verdict], late_s: float, extra: str
) -> None:
    missed = {job: v.missed for job, v in verdicts.items() if v.missed}
    duplicates = {job: v.duplicates for job, v in verdicts.items() if v.duplicates}
    lines = log_count(tmp_path)
    print(
        f"\n{name}: {extra}; ticks lost={sum(map(len, missed.values()))} {missed}, "
        f"duplicates={duplicates}, latest tick {late_s:.1f} s late, log: {lines}"
    )
    first = next(iter(missed.items()), None)
    assert missed == {}, (missed, lines, first and log_lines(tmp_path, *first))
    assert duplicates == {}, duplicates
    assert lines == dict.fromkeys(BAD_LINES, 0), lines


@pytest.mark.timeout(120)
def test_cluster_failover_on_a_replica_loses_no_tick(
    tmp_path: Path, namespace: str, witness: Witness
) -> None:
    cluster = ClusterSet(tmp_path / "cluster", replicas=1, node_timeout_ms=2000).start()
    procs = [
        start_node(cluster.url, namespace, f"o{i}", witness, env=ENV, stderr_dir=tmp_path)
        for i in range(3)
    ]
    try:
        started_s = wait_steady(witness)
        old = cluster.primary_of(f"{{{JOBS[0]}}}")
        replica = cluster.replica_of(old)
        began = time.time()
        admin(replica.port).execute_command("CLUSTER", "FAILOVER")
        wait_until(
            lambda: cluster.serving(f"{{{JOBS[0]}}}") is replica and cluster.healthy(),
            timeout_s=20,
            what="the replica promoted",
        )
        switched_s = time.time() - began
        last_s = int(time.time()) + 3
        wait_until(lambda: witness.every_job_reached(JOBS, last_s), timeout_s=30, what="after")
    finally:
        stop_everything(procs, cluster)
    verdicts, events = verdicts_of(witness, started_s + 1, last_s)
    check(
        tmp_path,
        "CLUSTER FAILOVER",
        verdicts,
        latest_late_s(events, began - 1),
        f"{replica.port} promoted over {old.port} in {switched_s:.2f} s",
    )


@pytest.mark.timeout(120)
def test_slots_moved_to_a_new_primary_lose_no_tick(
    tmp_path: Path, namespace: str, witness: Witness
) -> None:
    cluster = ClusterSet(tmp_path / "cluster", replicas=0, node_timeout_ms=2000).start()
    probe = admin(cluster.nodes[0].port)
    slot_of = {job: int(probe.execute_command("CLUSTER", "KEYSLOT", f"{{{job}}}")) for job in JOBS}
    procs = [
        start_node(cluster.url, namespace, f"o{i}", witness, env=ENV, stderr_dir=tmp_path)
        for i in range(3)
    ]
    moves: list[dict[str, Any]] = []
    try:
        started_s = wait_steady(witness)
        began = time.time()
        new = cluster.add_node(tmp_path / "cluster" / "added")
        joined_s = time.time() - began
        for job in JOBS[:MIGRATIONS]:
            source = cluster.primary_of(f"{{{job}}}").port
            move_began = time.time()
            moved = migrate_slot(cluster, slot_of[job], source, new.port)
            moves.append({"job": job, "keys": moved, "s": round(time.time() - move_began, 2)})
        assert all(cluster.primary_of(f"{{{job}}}").port == new.port for job in JOBS[:MIGRATIONS])
        last_s = int(time.time()) + 3
        wait_until(lambda: witness.every_job_reached(JOBS, last_s), timeout_s=30, what="after")
    finally:
        stop_everything(procs, cluster)
    verdicts, events = verdicts_of(witness, started_s + 1, last_s)
    check(
        tmp_path,
        "new primary",
        verdicts,
        latest_late_s(events, began - 1),
        f"joined in {joined_s:.1f} s, {len(moves)} slots moved to it {moves}",
    )
