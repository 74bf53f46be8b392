"""/metrics, /healthz and /readyz scraped over HTTP while Redis is up, down, and back."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from cronrace.errors import ConfigError
from cronrace.model.policies import Outcome
from cronrace.sidecar.service import Sidecar
from cronrace.web.metrics import PrometheusObserver
from cronrace.web.probes import MetricsServer
from tests.helpers import wait_for
from tests.redis_server import RedisServer, free_port

CONFIG = """
[agent]
store_url = "{url}"
namespace = "metrics"
node_id = "node-m"
heartbeat_s = 0.2
redis_timeout_s = 1
shutdown_grace_s = 1
metrics_address = "127.0.0.1:{port}"

[[jobs]]
name = "work"
schedule = "@every 1s"
lease_ttl = 0.6
[jobs.command]
argv = ["{python}", "-c", "import time; time.sleep(0.4)"]

[[jobs]]
name = "hand-off"
schedule = "@every 1s"
[jobs.stream]
key = "metrics:queue"
"""


async def _status(http: httpx.AsyncClient, path: str) -> int:
    try:
        return (await http.get(path)).status_code
    except httpx.HTTPError:
        return 0


@pytest.mark.redis
async def test_probes_and_metrics_follow_redis_up_down_and_back(
    fresh_redis: RedisServer, tmp_path: Path
) -> None:
    port = free_port()
    path = tmp_path / "cronrace.toml"
    path.write_text(CONFIG.format(url=fresh_redis.url, port=port, python=sys.executable))
    sidecar = Sidecar.from_file(path)
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2) as http,
    ):
        tg.start_soon(sidecar.run)

        async def metrics() -> str:
            response = await http.get("/metrics")
            assert response.status_code == 200
            return response.text

        async def ready_is(code: int) -> bool:
            return await _status(http, "/readyz") == code

        await wait_for(lambda: ready_is(200), timeout_s=10, what="/readyz 200")
        assert await _status(http, "/healthz") == 200

        async def work_renewed_and_done() -> bool:
            text = await metrics()
            return (
                'cronrace_runs_total{job="work",outcome="ok"}' in text
                and 'cronrace_lease_renewals_total{job="work",result="ok"}' in text
                and 'cronrace_runs_total{job="hand-off",outcome="ok"}' in text
            )

        await wait_for(work_renewed_and_done, timeout_s=15, what="runs and renewals counted")
        text = await metrics()
        for name in (
            'cronrace_claims_total{result="won"}',
            'cronrace_fire_lag_seconds_bucket{job="work",le="0.5"}',
            'cronrace_run_duration_seconds_count{job="work"}',
            'cronrace_run_interval_ratio_bucket{job="work",le="1.0"}',
            'cronrace_last_run_interval_ratio{job="work"}',
            "cronrace_ready 1.0",
            'cronrace_agent_info{namespace="metrics",node="node-m"} 1.0',
            "process_cpu_seconds_total",
        ):
            assert name in text, name

        await anyio.to_thread.run_sync(fresh_redis.stop)
        await wait_for(lambda: ready_is(503), timeout_s=10, what="/readyz 503 with Redis down")
        assert await _status(http, "/healthz") == 200
        down = await metrics()
        assert "cronrace_ready 0.0" in down
        assert 'cronrace_redis_errors_total{operation="heartbeat"}' in down

        await anyio.to_thread.run_sync(fresh_redis.start)
        await wait_for(lambda: ready_is(200), timeout_s=15, what="/readyz 200 after Redis is back")
        assert "cronrace_ready 1.0" in await metrics()
        sidecar.stop()
    async with httpx.AsyncClient(timeout=1) as after:  # the endpoint goes with the agent
        with pytest.raises(httpx.ConnectError):
            await after.get(f"http://127.0.0.1:{port}/healthz")


def test_observer_counts_decisions_by_reason_and_keeps_registries_apart() -> None:
    first, second = PrometheusObserver(), PrometheusObserver()
    first.decision("backup", Outcome.SKIPPED_OVERLAP)
    first.decision("backup", Outcome.MISSED, 4)
    first.decision("backup", Outcome.QUEUED)
    first.decision("backup", Outcome.ABANDONED)
    first.claims(won=1, lost=2)
    first.claims_taken_over(3)
    first.run_started("backup", 0.01)
    first.run_finished("backup", Outcome.LEASE_LOST, 2.0, 0.5)
    first.record_dropped("backup", Outcome.LEASE_LOST)
    sample = first.registry.get_sample_value
    assert sample("cronrace_skipped_ticks_total", {"job": "backup", "reason": "overlap"}) == 1
    assert sample("cronrace_skipped_ticks_total", {"job": "backup", "reason": "missed"}) == 4
    assert sample("cronrace_queued_ticks_total", {"job": "backup"}) == 1
    assert sample("cronrace_runs_total", {"job": "backup", "outcome": "abandoned"}) == 1
    assert sample("cronrace_runs_total", {"job": "backup", "outcome": "lease_lost"}) == 1
    assert sample("cronrace_lease_losses_total", {"job": "backup"}) == 1
    dropped = {"job": "backup", "outcome": "lease_lost"}
    assert sample("cronrace_records_dropped_total", dropped) == 1
    assert sample("cronrace_claims_total", {"result": "lost"}) == 2
    assert sample("cronrace_claims_total", {"result": "taken_over"}) == 3
    assert sample("cronrace_running_runs") == 0
    assert second.registry.get_sample_value("cronrace_claims_total", {"result": "lost"}) is None


class _Probes:
    def __init__(self) -> None:
        self.dead: str | None = None
        self.not_ready: str | None = "Redis unreachable"

    def liveness_problem(self) -> str | None:
        return self.dead

    def readiness_problem(self) -> str | None:
        return self.not_ready


def test_probe_server_answers_404_elsewhere_and_follows_readiness() -> None:
    probes = _Probes()
    server = MetricsServer("127.0.0.1", 0, PrometheusObserver().registry, probes)
    server.start()
    try:
        answer = httpx.get(f"{server.url}/readyz")
        assert (answer.status_code, answer.text) == (503, "not ready: Redis unreachable\n")
        probes.not_ready = None
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        probes.dead = "event loop blocked for 9.0s"
        answer = httpx.get(f"{server.url}/healthz")
        assert answer.status_code == 503
        assert answer.text == "not alive: event loop blocked for 9.0s\n"
        assert httpx.get(f"{server.url}/").status_code == 404
        assert httpx.get(f"{server.url}/metrics").headers["content-type"].startswith("text/plain")
    finally:
        server.stop()


def test_metrics_address_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = tmp_path / "c.toml"
        path.write_text(
            f'[agent]\nstore_url = "memory://"\nmetrics_address = "127.0.0.1:{port}"\n'
            "[[jobs]]\nname='x'\nschedule='@hourly'\n[jobs.stream]\nkey='q'\n"
        )
        sidecar = Sidecar.from_file(path)
        with pytest.raises(ConfigError) as caught:
            sidecar.start_metrics()
    assert str(caught.value) == (
        f"agent: metrics_address '127.0.0.1:{port}': cannot listen: Address already in use"
    )
