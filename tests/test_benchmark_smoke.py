"""The benchmark harness keeps working: the quick mode's smallest cell runs and checks out.

Correctness only, never timing: the machine running the tests may be busy.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from cronrace.testing import RedisServer

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.redis


def test_smallest_quick_cell_fires_every_tick_once_and_losers_send_one_claim(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = dict(part.split("=", 1) for part in done.stdout.strip().splitlines()[-1].split())
    assert figures["duplicates"] == "0"
    assert figures["missed"] == "0"
    assert figures["claims_per_node_job_tick"] == "1.00"
    assert figures["rtt_per_node_wake"] == "1.00"
    with (tmp_path / "fleet.csv").open() as rows:
        (row,) = csv.DictReader(rows)
    assert row["status"] == "ok"
    assert float(row["loser_cmds_per_node_job_tick"]) == 1.0
    assert int(row["record_duplicates"]) == 0
    assert int(row["record_missed"]) == 0
    assert int(row["runs_in_window"]) == int(row["jobs"]) * int(row["ticks"])


@pytest.mark.postgres
def test_store_comparison_runs_on_postgres_with_pgbench_on_the_claim_statement(
    tmp_path: Path,
) -> None:
    """The PostgreSQL path of the store comparison: its own postgres, a 2 x 10 fleet, and
    pgbench running the store's claim statement (three seconds each)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fleet",
            "--store",
            "postgres",
            "--smoke",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = dict(part.split("=", 1) for part in done.stdout.strip().splitlines()[-1].split())
    assert figures["postgres_runs"] == "1/1"
    assert figures["postgres_duplicates"] == "0"
    assert figures["postgres_missed"] == "0"
    assert figures["postgres_claims_per_node_job_tick"] == "1.00"
    assert figures["postgres_rtt_per_node_wake"] == "1.00"
    with (tmp_path / "stores.csv").open() as rows:
        (row,) = csv.DictReader(rows)
    assert row["store"] == "postgres"
    assert row["status"] == "ok"
    assert int(row["record_duplicates"]) == 0
    assert int(row["record_missed"]) == 0
    assert int(row["runs_in_window"]) == int(row["jobs"]) * int(row["ticks"])
    result = json.loads((tmp_path / "stores.json").read_text())
    assert result["pgbench"]["available"], result["pgbench"]
    for batch in (1, 100):
        assert result["pgbench"][f"batch{batch}_claims_per_s"] > 0
        assert result["pgbench"][f"batch{batch}_server_cpu_ms_per_1k"] > 0


def _last_row(module: str, *args: str) -> dict[str, Any]:
    """Run ``python -m <module> <args>`` from the repository; its last line of JSON."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def test_work_against_n_runs_a_small_fleet_on_the_fake_clock_without_fault() -> None:
    row = _last_row(
        "benchmarks.work", *("--nodes", "3", "--jobs", "4", "--seconds", "3", "--warmup-s", "4")
    )
    assert (row["nodes"], row["duplicates"], row["missed"]) == (3, 0, 0)
    assert row["heap_jobs_per_node_mean"] < 4  # k = 2 of 3: no node plans every job


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_join_churn_starts_and_replaces_a_small_fleet_without_fault(how: str) -> None:
    row = _last_row(
        "benchmarks.join_churn",
        *("--nodes", "20", "--jobs", "6", "--join-s", "6", "--settle-s", "4"),
        *("--replace-s", "8", "--after-s", "3"),
        *(["--kill"] if how == "killed" else []),
    )
    assert (row["replaced"], row["replace_how"]) == (2, how)
    assert (row["duplicates"], row["missed"]) == (0, 0), row["missed_examples"]
    assert row["ticks_checked"] >= 6 * 15
    phases = row["phases"]
    assert [phases[p]["nodes_seen"] for p in ("joining", "replacing")] == [20, 22]
    # k = 2 of 20: about two claims a job-tick (the last joiners' first beats add a few).
    assert 2.0 <= phases["settled"]["claims_per_job_tick"] < 3
    for phase in phases.values():
        assert 0 < phase["longest_step"]["max_ms"] <= phase["most_in_one_instant"]["max_ms"]
    # Each step is charged to a node of the fleet (its tasks inherit it), none to the run.
    assert row["longest_steps"]
    assert {step["node"] for step in row["longest_steps"]} <= set(range(22))


def test_ring_views_measures_a_small_forming_fleet_and_its_window_turns() -> None:
    row = _last_row(
        "benchmarks.ring_views",
        *("--nodes", "40", "--agents", "5", "--jobs", "200"),
        *("--join-s", "10", "--heartbeat-s", "2"),
    )
    assert row["views"]["changes"] > 5  # the agents saw the fleet form and change
    assert row["views"]["ring_of_cpu_s"] > 0
    assert row["turns"]["turn_cpu_us"] > 0


def test_beat_cost_reads_every_member_of_a_small_fleet() -> None:
    row = _last_row("benchmarks.beat_cost", "--nodes", "5", "--beats", "3")
    assert row["members_seen"] == 6  # the five members and the probe
    assert row["probe_cpu_ms_per_beat"] > 0


def test_floor_spreads_runs_like_cronrace_and_runs_every_tick_once(
    redis_server: RedisServer, namespace: str
) -> None:
    from benchmarks.floor import floor_cell

    row = floor_cell(redis_server.url, namespace, 3, 6, 2, "asyncio")
    assert row["runs"] == 12  # 6 jobs x 2 measured ticks, once each
    client = redis.Redis.from_url(redis_server.url)
    try:
        owners = Counter(
            bytes(client.get(key) or b"").split(b"\n")[0]
            for key in client.scan_iter(f"{namespace}:claim:*")
        )
    finally:
        client.close()
    # Every node wins the jobs it is preferred for (two a tick), as cronrace's nodes do:
    # one node winning every claim would make the floor one pipeline cheaper per step.
    assert sorted(owners.values()) == [6, 6, 6]  # a warm-up tick and two measured


def test_work_leaves_a_full_collection_started_in_the_store_out_of_the_stores_figure() -> None:
    """``benchmarks.work`` subtracts full collections from the process's CPU once: one
    that starts while the embedded store handles a command must not be in the store's
    figure too (it was, and the nodes' figure fell by its length)."""
    script = """
import gc, json, anyio, fakeredis
from fakeredis._socket import _base
from benchmarks import work

heap = [[i] for i in range(300_000)]  # a full collection takes a while
process = _base.BaseFakeSocket._process_command

def collecting(self, fields):
    gc.collect(2)
    return process(self, fields)

_base.BaseFakeSocket._process_command = collecting
work._count_store_cpu()
work._count_full_gc()

async def main():
    client = fakeredis.FakeAsyncRedis()
    for _ in range(5):
        await client.set("k", "v")

anyio.run(main)
print(json.dumps({"store": work.STORE_CPU_S[0], "full_gc": work.FULL_GC[0], "n": len(heap)}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["full_gc"] > 0.01, row  # five full collections of a 300,000-list heap
    assert row["store"] < 0.5 * row["full_gc"], row
