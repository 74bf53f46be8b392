"""Stored schedules with real agent processes on a real redis-server, changed from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from cronrace import Agent
from tests.faults.witness import ROOT, Witness, judge, sleep_until_fraction, start_node, stop_all
from tests.helpers import settings
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

#: Only stored schedules run: the app's jobs from code stay off.
NO_CODE_JOBS = {"FAULT_CODE_JOBS": ""}
HEARTBEAT_S = 0.5
#: A change reaches every node within a heartbeat; a loaded 2-core machine adds to that.
PICKUP_S = HEARTBEAT_S + 1.0


def cronrace(url: str, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRONRACE_STORE_URL": url, "CRONRACE_NAMESPACE": namespace}
    return subprocess.run(
        [sys.executable, "-m", "cronrace", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def starts(witness: Witness, job: str) -> list[dict[str, object]]:
    return [e for e in witness.events() if e["job"] == job and e["event"] == "start"]


def wait_nodes(url: str, namespace: str, count: int) -> None:
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 20
    try:
        while client.zcount(f"{namespace}:nodes", int(time.time() * 1000), "+inf") < count:
            assert time.monotonic() < deadline, f"{count} nodes never registered"
            time.sleep(0.05)
    finally:
        client.close()


def operate(url: str, namespace: str, operation: Any) -> Any:
    """Run ``operation(agent)`` with an operator agent (quicker than a CLI process)."""

    async def main() -> Any:
        agent = Agent(settings=settings(url, namespace, "operator"))
        try:
            return await operation(agent)
        finally:
            await agent.aclose()

    return anyio.run(main)


@pytest.mark.timeout(120)
def test_stored_schedule_from_the_cli_runs_once_per_tick_across_its_changes(
    fresh_redis: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    url = fresh_redis.url
    procs = [
        start_node(url, namespace, f"s{i}", witness, env=NO_CODE_JOBS, stderr_dir=tmp_path)
        for i in range(3)
    ]
    try:
        wait_nodes(url, namespace, 3)
        sleep_until_fraction(0.2)
        added = cronrace(
            url, namespace, "schedules", "add", "beat", "* * * * * *", "--handler", "note"
        )
        t_added = time.time()
        assert added.returncode == 0, added.stderr
        witness.wait_for(lambda evs: len(starts(witness, "beat")) >= 4, timeout_s=10, what="4 runs")
        first_tick = min(int(e["tick"]) for e in starts(witness, "beat"))  # type: ignore[call-overload]
        # Picked up by the notice (or at worst the next heartbeat), then its next tick;
        # PICKUP_S allows for a loaded test machine.
        assert first_tick <= t_added + PICKUP_S + 1

        sleep_until_fraction(0.3)
        updated = cronrace(
            url, namespace, "schedules", "update", "beat", "--schedule", "*/2 * * * * *"
        )
        assert updated.returncode == 0, updated.stderr
        t_updated = time.time()
        time.sleep(4.0)  # leaves an even second after the pick-up allowance
        every_second = judge(
            witness.events(), "beat", first_tick_s=first_tick, last_tick_s=int(t_added) + 3
        )
        assert (every_second.duplicates, every_second.missed) == ([], []), every_second.summary()
        after = [
            int(e["tick"]) for e in starts(witness, "beat") if int(e["tick"]) > t_updated + PICKUP_S
        ]  # type: ignore[call-overload]
        assert after, "the updated schedule did not fire"
        assert all(tick % 2 == 0 for tick in after), after

        operate(url, namespace, lambda agent: agent.pause("beat"))
        t_paused = time.time()
        operate(
            url, namespace, lambda agent: agent.schedules.update("beat", schedule="* * * * * *")
        )
        time.sleep(2.0)
        assert not [e for e in starts(witness, "beat") if int(e["tick"]) > t_paused + 0.5]  # type: ignore[call-overload]
        operate(url, namespace, lambda agent: agent.resume("beat"))

        # A fourth node joins later, and then the first three leave: it picked the set up.
        procs.append(
            start_node(url, namespace, "s3", witness, env=NO_CODE_JOBS, stderr_dir=tmp_path)
        )
        wait_nodes(url, namespace, 4)
        stop_all(procs[:3])
        t_alone = time.time()
        witness.wait_for(
            lambda evs: any(
                e["node"] == "s3" and e["tick"] > t_alone for e in starts(witness, "beat")
            ),
            timeout_s=10,
            what="the late node running the stored schedule alone",
        )

        removed = cronrace(url, namespace, "schedules", "rm", "beat")
        assert removed.returncode == 0, removed.stderr
        t_removed = time.time()
        time.sleep(PICKUP_S + 2.0)
        assert not [e for e in starts(witness, "beat") if int(e["tick"]) > t_removed + PICKUP_S]  # type: ignore[call-overload]

        # After a wipe, stored schedules are gone with the data: the node stops firing them
        # (documented), until they are applied again.
        operate(
            url,
            namespace,
            lambda agent: agent.schedules.add("wiped", "* * * * * *", handler="note"),
        )
        witness.wait_for(
            lambda evs: len(starts(witness, "wiped")) >= 2, timeout_s=10, what="2 runs"
        )
        redis.Redis.from_url(url).flushall()
        t_wiped = time.time()
        time.sleep(2.0 + PICKUP_S)
        late = [e for e in starts(witness, "wiped") if int(e["tick"]) > t_wiped + 1 + PICKUP_S]  # type: ignore[call-overload]
        assert late == []
    finally:
        stop_all(procs)
    log = (tmp_path / "s3.err").read_text()
    assert "the store lost its data" in log
    assert "stored schedule no longer fires" in log
    evs = witness.events()
    for job in ("beat", "wiped"):
        verdict = judge(evs, job, first_tick_s=0, last_tick_s=-1)
        assert verdict.duplicates == [], verdict.summary()
        assert verdict.fence_disorder == [], verdict.summary()


def _disagreement_logs(logs: Path, node: str) -> list[dict[str, Any]]:
    """The node's JSON log lines saying the live nodes define a job differently."""
    lines = [
        json.loads(line)
        for line in (logs / f"{node}.err").read_text().splitlines()
        if line.startswith("{") and line.endswith("}")
    ]
    return [
        line
        for line in lines
        if line.get("msg", "").startswith("live nodes define this job differently")
    ]


@pytest.mark.timeout(60)
def test_two_nodes_defining_a_job_differently_both_report_it(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    url = redis_server.url
    procs = [
        start_node(
            url,
            namespace,
            f"d{i}",
            witness,
            env={**NO_CODE_JOBS, "FAULT_DRIFT_SCHEDULE": schedule, "CRONRACE_LOG_FORMAT": "json"},
            stderr_dir=tmp_path,
        )
        for i, schedule in enumerate(["*/2 * * * * *", "*/3 * * * * *"])
    ]
    try:
        wait_nodes(url, namespace, 2)
        deadline = time.monotonic() + 20
        while True:
            rows = {row.job: row for row in operate(url, namespace, lambda a: a.jobs_status())}
            if "drifting" in rows and rows["drifting"].problem:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.2)
        shown = cronrace(url, namespace, "status")
        # The store shows the difference once both have published; the node that
        # published first finds it at its next heartbeat, which a loaded machine delays.
        deadline = time.monotonic() + 10
        while not all(_disagreement_logs(tmp_path, node) for node in ("d0", "d1")):
            assert time.monotonic() < deadline, "a node did not log the difference"
            time.sleep(0.1)
    finally:
        stop_all(procs)
    problem = rows["drifting"].problem
    assert problem == (
        "live nodes define it differently: d0: '*/2 * * * * *' UTC; d1: '*/3 * * * * *' UTC"
    )
    assert f"problem: drifting: {problem}" in " ".join(shown.stdout.split())
    for node in ("d0", "d1"):
        errors = _disagreement_logs(tmp_path, node)
        assert len(errors) == 1, f"{node}: {errors}"
        assert errors[0]["job"] == "drifting"
        assert errors[0]["nodes"] == ["d0", "d1"]
    print(shown.stdout)
