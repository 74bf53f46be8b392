"""The CLI end to end: three sidecar processes on a real redis-server, operated by `cronrace`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from cronrace.cli.main import app
from tests.redis_server import RedisServer, free_port
from tests.sidecar.conftest import ROOT, DemoApp, cronrace, wait_until

CONFIG = """
[agent]
store_url = "{url}"
namespace = "{namespace}"
heartbeat_s = 0.3
shutdown_grace_s = 2
log_format = "json"

[[jobs]]
name = "ping"
schedule = "@every 1s"
[jobs.http]
url = "{app}/jobs/ping"
timeout_s = 5

[[jobs]]
name = "report"
schedule = "*/2 * * * * *"
# A trigger follows the overlap policy: under "skip" one landing while the scheduled run's
# program is still running would be recorded skipped:overlap, and the test would race it.
overlap = "allow"
[jobs.command]
argv = ["{python}", "-c", "import os; print('report fence', os.environ['CRONRACE_FENCE'])"]

[[jobs]]
name = "hand-off"
schedule = "@every 1s"
overlap = "allow"
[jobs.stream]
key = "{namespace}:work"
"""

NODES = ("node-a", "node-b", "node-c")


@pytest.fixture
def fleet(
    redis_server: RedisServer, namespace: str, demo_app: DemoApp, tmp_path: Path
) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """Three `cronrace run --config` processes sharing one config file."""
    config = tmp_path / "cronrace.toml"
    config.write_text(
        CONFIG.format(
            url=redis_server.url, namespace=namespace, app=demo_app.url, python=sys.executable
        )
    )
    processes = []
    for node in NODES:
        env = {
            **os.environ,
            "CRONRACE_NODE_ID": node,  # the environment overrides the file
            "CRONRACE_METRICS_ADDRESS": f"127.0.0.1:{free_port()}",
        }
        with (tmp_path / f"{node}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "cronrace", "run", "--config", str(config)],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        yield config, processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str) -> Done:
    """Run a ``cronrace`` command in this process (its coverage counts); see also cronrace()."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Done(result.exit_code, result.stdout, result.stderr)


def cli_json(config: Path, *args: str) -> Any:
    done = cli(*args, "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def outcomes(config: Path, job: str, limit: int = 50) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = cli_json(config, "history", job, "--limit", str(limit))
    return records


@pytest.mark.redis
@pytest.mark.slow
def test_cli_operates_three_sidecars(
    fleet: tuple[Path, list[subprocess.Popen[bytes]]],
    demo_app: DemoApp,
    redis_server: RedisServer,
    namespace: str,
    tmp_path: Path,
) -> None:
    config, processes = fleet

    # nodes: all three register heartbeats.
    wait_until(
        lambda: sorted(n["node_id"] for n in cli_json(config, "nodes")) == list(NODES),
        # Three interpreters importing the CLI and the store: ~1 s each when quiet, but a full
        # run on a loaded 2-core machine took over 20 s once (load 15). Start-up, not behaviour.
        timeout_s=60,
        what="three live nodes",
    )
    table = cronrace("nodes", "--config", str(config))
    assert table.returncode == 0
    assert all(node in table.stdout for node in NODES)
    assert "last heartbeat" in table.stdout

    # Every target runs, each tick on exactly one node.
    def ok_count(job: str) -> int:
        return sum(r["outcome"] == "ok" for r in outcomes(config, job))

    wait_until(
        lambda: ok_count("ping") >= 3 and ok_count("report") >= 1 and ok_count("hand-off") >= 2,
        timeout_s=20,
        what="runs of all three jobs",
    )

    # status: a table with the schedule, zone and last outcome of each job.
    rows = {row["job"]: row for row in cli_json(config, "status")}
    assert set(rows) == {"ping", "report", "hand-off"}
    assert (rows["ping"]["schedule"], rows["ping"]["timezone"]) == ("@every 1s", "UTC")
    assert rows["ping"]["paused"] is False
    table = cli("status", "--config", str(config))
    assert table.returncode == 0
    for text in ("ping", "*/2 * * * * *", "UTC", "next tick", "lease", "skipped", "missed"):
        assert text in table.stdout

    # pause: ticks are recorded skipped:paused on every node, and the app is not called.
    done = cli("pause", "ping", "--config", str(config))
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "paused ping: every node records its ticks as skipped:paused",
    )
    assert cli_json(config, "pause", "ping") == {"job": "ping", "paused": True}
    wait_until(
        lambda: [r["outcome"] for r in outcomes(config, "ping", 2)] == ["skipped:paused"] * 2,
        timeout_s=10,
        what="two paused ticks",
    )
    paused_tick = outcomes(config, "ping", 2)[1]["tick_s"]
    assert [c for c in demo_app.calls("ping") if c["tick"] >= paused_tick] == []
    assert {row["job"]: row for row in cli_json(config, "status")}["ping"]["paused"] is True

    # resume: runs again.
    assert cli("resume", "ping", "--config", str(config)).returncode == 0
    wait_until(
        lambda: outcomes(config, "ping", 1)[0]["outcome"] == "ok",
        timeout_s=10,
        what="ping running again",
    )

    # trigger --wait: one immediate run, found again by its trigger id.
    done = cli("trigger", "report", "--wait", "--timeout", "10", "--config", str(config))
    assert done.returncode == 0, done.stderr
    announced, *table = done.stdout.strip().splitlines()
    trigger_id = announced.removeprefix("triggered report: trigger id ")
    assert trigger_id != announced
    assert table[0] == "run of 'report'"
    assert " ok " in table[3]
    done = cli("trigger", "report", "--wait", "--timeout", "10", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["outcome"] == "ok"
    assert record["trigger_id"] != trigger_id
    assert record["detail"]["output"] == f"report fence {record['fence']}"

    # history: newest first, as a table or JSON.
    assert len(outcomes(config, "ping", 5)) == 5
    table = cli("history", "ping", "--limit", "3", "--config", str(config))
    assert table.returncode == 0
    assert "newest tick first" in table.stdout
    assert "ok" in table.stdout

    unknown = cli("history", "nope", "--config", str(config))
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == f"cronrace: job 'nope': no such job in namespace {namespace!r}"

    # Exactly once: the app saw each tick once, with fences rising with the ticks.
    calls = demo_app.calls("ping")
    assert max(Counter(c["tick"] for c in calls).values()) == 1
    assert {c["result"] for c in calls} == {"done"}
    by_tick = sorted(calls, key=lambda c: c["tick"])
    assert [c["fence"] for c in by_tick] == sorted(c["fence"] for c in calls)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        entries = [fields for _id, fields in client.xrange(f"{namespace}:work")]
    finally:
        client.close()
    assert len(entries) == len({e["tick"] for e in entries}) >= 2

    # SIGTERM: every node stops gracefully (exit 0) and leaves the live set.
    # (How long the exits take is not asserted: on a loaded machine interpreter shutdown
    # alone took over 6 s; tests/fleet/test_shutdown.py pins what the grace does.)
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        assert process.wait(timeout=30) == 0
    assert cli_json(config, "nodes") == []

    # One JSON line per decision, with job, tick, node, fence, outcome, duration.
    # Any node may have won every tick, so read all three logs.
    lines = [
        json.loads(line)
        for node in NODES
        for line in (tmp_path / f"{node}.log").read_text().splitlines()
    ]
    finished = [line for line in lines if line["msg"] == "run finished"]
    assert finished
    assert {"job", "tick", "node", "fence", "outcome", "duration_ms"} <= set(finished[0])
