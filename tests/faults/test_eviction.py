"""Real agent processes on a Redis that fills up: refusals, not an outage, and no tick lost.

Under ``noeviction`` a Redis at ``maxmemory`` refuses every write with ``OOM``. The test
sets ``maxmemory`` just above the memory in use and writes filler keys of its own until
Redis refuses the test itself: from then on every claim, decision, heartbeat and record of
the agents is refused too. Each agent must say so (not ready, naming the cause; the metric
``cronrace_redis_refusals_total{cause="out_of_memory"}``; one "not ready" line), and once
the filler is deleted it must be ready again and catch the ticks of the full seconds up
(``catchup = "all"``): none lost, none twice.

The other half: a Redis that may evict (``maxmemory`` with an ``allkeys-*`` policy) is named
at start-up by every agent, at ERROR, before it fires anything.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from cronrace.testing import free_port
from tests.faults.witness import Witness, judge, start_node, stop_all
from tests.redis_server import RedisServer
from tests.topology import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

JOBS = [f"extra{index:03d}" for index in range(3)]
ENV = {
    "FAULT_CODE_JOBS": "",
    "FAULT_EXTRA_JOBS": str(len(JOBS)),
    "FAULT_EXTRA_CATCHUP": "all",
    "CRONRACE_LOG_FORMAT": "text",
}
#: How long Redis stays full.
FULL_S = 4.0
FILLER_BYTES = 64 * 1024
FILLER_KEYS = 32  # 2 MB
HEADROOM_BYTES = 512 * 1024
OOM_REASON = "Redis is out of memory"


def fetch(port: int, path: str) -> tuple[int, str]:
    """GET a path of an agent's metrics address: (status, body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def oom_refusals(port: int) -> float:
    """The agent's ``cronrace_redis_refusals_total{cause="out_of_memory"}``, summed."""
    _status, body = fetch(port, "/metrics")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("cronrace_redis_refusals_total{") and 'cause="out_of_memory"' in line
    )


def started(witness: Witness) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {job: [] for job in JOBS}
    for event in witness.events():
        if event["event"] == "start" and event["job"] in out:
            out[event["job"]].append(event["tick"])
    return out


def fill(admin: redis.Redis) -> int:
    """Make Redis full under noeviction with the test's filler keys; the keys written.

    ``maxmemory`` ends just above the memory in use without the filler (half a megabyte
    above: the agents' claims and records of the seconds after it is freed fit) and well
    below the memory in use with it: Redis's own use moves by some 100 kB (client
    buffers), which must not let writes through while it is meant to be full.
    """
    used = int(admin.info("memory")["used_memory"])
    for index in range(FILLER_KEYS):
        admin.set(f"filler:{index}", b"x" * FILLER_BYTES)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", used + HEADROOM_BYTES)
    try:
        admin.set("filler:refused", b"x")
    except redis.exceptions.OutOfMemoryError:
        return FILLER_KEYS
    raise AssertionError("Redis took a write above maxmemory")


@pytest.mark.timeout(120)
def test_a_full_redis_is_a_refusal_and_no_tick_is_lost_when_memory_is_freed(
    namespace: str, witness: Witness, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    admin = redis.Redis.from_url(server.url)
    ports = [free_port() for _ in range(2)]
    procs = [
        start_node(
            server.url, namespace, f"e{i}", witness, env=ENV, stderr_dir=tmp_path, metrics_port=port
        )
        for i, port in enumerate(ports)
    ]
    try:
        first_s = wait_until(
            lambda: (
                all(started(witness).values()) and max(min(t) for t in started(witness).values())
            ),
            timeout_s=40,
            what="every job firing",
        )
        wait_until(
            lambda: all(fetch(port, "/readyz")[0] == 200 for port in ports),
            timeout_s=20,
            what="both agents ready",
        )
        filler = fill(admin)
        full_from_s = time.time()
        wait_until(
            lambda: all(
                fetch(port, "/readyz")[0] == 503 and OOM_REASON in fetch(port, "/readyz")[1]
                for port in ports
            ),
            timeout_s=15,
            what="both agents not ready, naming the full Redis",
        )
        assert all(oom_refusals(port) > 0 for port in ports)
        time.sleep(max(0.0, full_from_s + FULL_S - time.time()))  # Redis stays full a while
        full_s = (int(full_from_s), int(time.time()))
        admin.delete(*[f"filler:{index}" for index in range(filler)])
        wait_until(
            lambda: all(fetch(port, "/readyz")[0] == 200 for port in ports),
            timeout_s=20,
            what="both agents ready again",
        )
        freed_s = int(time.time())
        wait_until(
            lambda: all(max(t) >= freed_s + 3 for t in started(witness).values()),
            timeout_s=30,
            what="ticks after memory was freed",
        )
    finally:
        stop_all(procs)
        admin.close()
        server.stop()
    events = witness.events()
    verdicts = [
        judge(events, job, first_tick_s=first_s + 1, last_tick_s=freed_s + 2, leased=False)
        for job in JOBS
    ]
    logs = {p.stem: p.read_text(errors="replace") for p in sorted(tmp_path.glob("e*.err"))}
    not_ready = {
        node: sum("not ready:" in line and OOM_REASON in line for line in text.splitlines())
        for node, text in logs.items()
    }
    print(
        f"\nfull Redis: {filler} filler keys, full from {full_s[0]} to {full_s[1]}; "
        + "; ".join(v.summary() for v in verdicts)
        + f"; 'not ready' lines naming it: {not_ready}"
    )
    assert [v.duplicates for v in verdicts] == [[]] * len(JOBS)
    assert [v.missed for v in verdicts] == [[]] * len(JOBS)
    assert not_ready == {"e0": 1, "e1": 1}, not_ready
    assert all("Traceback" not in text for text in logs.values())


@pytest.mark.timeout(60)
def test_every_agent_names_an_evicting_redis_at_start_up(
    namespace: str, witness: Witness, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    admin = redis.Redis.from_url(server.url)
    admin.config_set("maxmemory", 256 * 1024 * 1024)
    admin.config_set("maxmemory-policy", "allkeys-lru")
    procs = [
        start_node(server.url, namespace, f"e{i}", witness, env=ENV, stderr_dir=tmp_path)
        for i in range(2)
    ]
    try:
        wait_until(lambda: all(started(witness).values()), timeout_s=40, what="every job firing")
        # Every job may fire on e0 alone while e1 is still starting (a loaded machine):
        # wait for each node's start-up check, then read what it said.
        wait_until(
            lambda: (
                all(
                    "EVICT" in (tmp_path / f"e{i}.err").read_text(errors="replace")
                    for i in range(2)
                    if (tmp_path / f"e{i}.err").exists()
                )
                and len(list(tmp_path.glob("e*.err"))) == 2
            ),
            timeout_s=40,
            what="each node's start-up check",
        )
    finally:
        stop_all(procs)
        admin.close()
        server.stop()
    for path in sorted(tmp_path.glob("e*.err")):
        lines = [line for line in path.read_text().splitlines() if "EVICT" in line]
        assert lines, f"{path.stem} did not name the evicting Redis"
        assert "ERROR" in lines[0], lines[0]
        assert "allkeys-lru" in lines[0], lines[0]
