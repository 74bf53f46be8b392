"""racers = 2 of 6 real processes: both racers of a tick SIGKILLed at once, then a rolling
restart. Every tick fires once; the ticks the dead were racers for fire late, within the
bound (docs/design.md section 12)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from cronrace.fleet.membership import late_fire_bound_s
from cronrace.fleet.racers import Racers, Ring
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

HEARTBEAT_S = 0.5
NODES = [f"r{i}" for i in range(6)]
JOBS = ["extra000", "extra001", "extra002"]
ENV = {
    "CRONRACE_RACERS": "2",
    "FAULT_CODE_JOBS": "",
    "FAULT_EXTRA_JOBS": str(len(JOBS)),  # 1-second jobs, catchup all, queue_one
}
#: What a loaded 2-core machine adds to the bound: a heartbeat read that comes late, the
#: claim and decision round trips, the witness write.
SLACK_S = 0.6


def live(url: str, namespace: str) -> set[str]:
    client = redis.Redis.from_url(url)
    try:
        now_ms = int(time.time() * 1000)
        return {m.decode() for m in client.zrangebyscore(f"{namespace}:nodes", now_ms, "+inf")}
    finally:
        client.close()


def wait_live(
    url: str, namespace: str, nodes: set[str], timeout_s: float = 30, *, settle: bool = True
) -> None:
    deadline = time.monotonic() + timeout_s
    while not nodes <= live(url, namespace):
        assert time.monotonic() < deadline, f"nodes not up: {nodes - live(url, namespace)}"
        time.sleep(0.05)
    if settle:
        time.sleep(2 * HEARTBEAT_S)  # every node has read them with its heartbeat


@pytest.mark.timeout(120)
@pytest.mark.parametrize("groups", ["jobs", "1"])
def test_both_racers_killed_at_once_their_ticks_fire_late_once_and_a_rolling_restart_loses_none(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path, groups: str
) -> None:
    """Placed per job, and with every job in one group (``racer_groups = 1``): there the
    two racers killed were the racers of every job's ticks at once."""
    url = redis_server.url
    env = {**ENV, "CRONRACE_RACER_GROUPS": groups}
    placing = Racers.parse("2", groups)

    def start(node: str) -> subprocess.Popen[bytes]:
        return start_node(url, namespace, node, witness, env=env, stderr_dir=tmp_path)

    procs = {node: start(node) for node in NODES}
    killed_ticks: list[tuple[str, int, float]] = []  # job, tick, when its racers died
    try:
        wait_live(url, namespace, set(NODES))
        first_tick = int(time.time()) + 1
        live_nodes = list(NODES)
        for round_ in range(2):  # 6 nodes, then 4: both racers of a tick die at once
            tick = int(time.time()) + 2
            job = JOBS[round_ % len(JOBS)]
            racers = Ring.build(live_nodes).racers(placing.placed_as(job), tick, 2)
            sleep_until_fraction(0.85)  # 150 ms before a tick: no claim of it is out yet
            if int(time.time()) + 1 != tick:
                time.sleep(1.0)
            for node in racers:
                procs[node].send_signal(signal.SIGKILL)
            died_at = time.time()
            # In one group, they raced every job's tick: each fires late, within the bound.
            for each in JOBS if placing.groups == 1 else [job]:
                killed_ticks.append((each, tick, died_at))
            for node in racers:
                procs[node].wait()
                live_nodes.remove(node)
            time.sleep(late_fire_bound_s(HEARTBEAT_S) + SLACK_S)
        for node in set(NODES) - set(live_nodes):
            procs[node] = start(node)
        wait_live(url, namespace, set(NODES))
        # A rolling restart: each node stopped (SIGTERM) and started again in turn.
        for node in NODES:
            procs[node].send_signal(signal.SIGTERM)
            procs[node].wait(timeout=10)
            procs[node] = start(node)
            wait_live(url, namespace, {node}, settle=False)
        last_tick = int(time.time()) - 2
    finally:
        stop_all(procs.values())
    evs = witness.events()
    for job in JOBS:
        verdict = judge(evs, job, first_tick_s=first_tick, last_tick_s=last_tick)
        assert (verdict.duplicates, verdict.missed, verdict.fence_disorder) == ([], [], []), (
            verdict.summary() + "\n" + log_lines(tmp_path, verdict.missed)
        )
    # The nodes really raced as racers = 2 (they found the fleet alike), not all of them.
    for node in NODES:
        assert "racing among all of them" in (tmp_path / f"{node}.err").read_text(), node
    bound_s = late_fire_bound_s(HEARTBEAT_S)
    for job, tick, died_at in killed_ticks:
        start_wall = min(
            e["wall"]
            for e in evs
            if e["job"] == job and e["tick"] == tick and e["event"] == "start"
        )
        # The racers' last heartbeat was at most when they died: the bound runs from there.
        assert start_wall - died_at <= bound_s + SLACK_S, (job, tick, start_wall - tick)
        print(f"racers of {job}@{tick} killed: fired {start_wall - tick:.3f} s after its tick")
