"""The README's app examples, run for real on a real redis-server: each starts, fires a
job, and stops on SIGTERM (or at the end of its lifespan) with nothing left behind."""

from __future__ import annotations

import asyncio
import importlib
import signal
import socket
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from cronrace import OperatorClient, RunRecord
from cronrace.errors import NoLiveNodeError, UnknownJobError
from cronrace.testing import RedisServer, free_port
from tests.examples.apps import EXAMPLES, ROOT, fleet, fleet_env, lifespan, started
from tests.helpers import wait_for

pytestmark = pytest.mark.redis


async def one_run(client: OperatorClient, job: str, trigger_id: str) -> RunRecord:
    """The record of a trigger, once its run is over."""
    found: list[RunRecord] = []

    async def over() -> bool:
        found[:] = [r for r in await client.history(job, 20) if r.trigger_id == trigger_id]
        return bool(found) and found[0].outcome not in ("queued", "granted")

    await wait_for(over, timeout_s=20, what=f"the run of trigger {trigger_id}")
    return found[0]


async def trigger_when_live(client: OperatorClient, job: str) -> str:
    """Trigger ``job`` as soon as a node of the fleet is live to see it."""
    trigger_id: list[str] = []

    async def accepted() -> bool:
        try:
            trigger_id.append(await client.trigger(job))
        except (UnknownJobError, NoLiveNodeError):  # no node has registered it yet
            return False
        return True

    await wait_for(accepted, timeout_s=30, what=f"a live node to trigger {job}")
    return trigger_id[0]


async def no_node_left(client: OperatorClient) -> None:
    """A node that stopped gracefully left the live set on its way out."""
    assert [node.node_id for node in await client.nodes()] == []


# -- FastAPI ------------------------------------------------------------------------------


@pytest.fixture
def fastapi_example(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """``examples.fastapi_app`` imported afresh, its agent built from this test's env."""
    for key, value in fleet_env(redis_server.url, namespace, "web-1").items():
        if key.startswith("CRONRACE_"):
            monkeypatch.setenv(key, value)
    sys.modules.pop("examples.fastapi_app", None)
    yield importlib.import_module("examples.fastapi_app")
    sys.modules.pop("examples.fastapi_app", None)


async def test_fastapi_lifespan_runs_the_agent_and_leaves_no_task(
    fastapi_example: ModuleType, redis_server: RedisServer, namespace: str
) -> None:
    app, agent = fastapi_example.app, fastapi_example.agent
    before = asyncio.all_tasks()
    async with lifespan(app):
        assert agent.ready  # the startup completed once the agent was ready
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            answer = await http.post("/jobs/expire-sessions/trigger")
            assert answer.status_code == 202, answer.text
            trigger_id = answer.json()["trigger_id"]
            async with fleet(redis_server.url, namespace) as client:
                record = await one_run(client, "expire-sessions", trigger_id)
            assert (record.outcome, record.node) == ("ok", "web-1")
            runs = (await http.get("/jobs/expire-sessions/runs")).json()
            assert runs[0]["detail"]["node"] == "web-1"
            assert (await http.get("/jobs/nope/runs")).status_code == 404
            [job] = (await http.get("/jobs")).json()
            assert (job["job"], job["schedule"]) == ("expire-sessions", "*/15 * * * *")
            # The mounted monitoring: every endpoint on the app's own port.
            assert (await http.get("/cronrace/healthz")).text == "ok\n"
            assert (await http.get("/cronrace/readyz")).text == "ready\n"
            metrics = (await http.get("/cronrace/metrics")).text
            assert 'cronrace_runs_total{job="expire-sessions",outcome="ok"} 1.0' in metrics
            assert "expire-sessions" in (await http.get("/cronrace/")).text
    assert not agent.ready
    assert asyncio.all_tasks() == before  # the lifespan's shutdown waited for everything
    async with fleet(redis_server.url, namespace) as client:
        await no_node_left(client)


async def test_fastapi_app_under_uvicorn_fires_a_job_and_stops_on_sigterm(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    argv = ["-m", "uvicorn", "examples.fastapi_app:app", "--host", "127.0.0.1"]
    env = fleet_env(redis_server.url, namespace, "web-uvicorn")
    with started([*argv, "--port", str(port)], cwd=ROOT, env=env, logs=tmp_path) as web:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:

            async def serving() -> bool:
                try:
                    return (await http.get("/jobs")).status_code == 200
                except httpx.TransportError:  # not listening yet
                    assert web.popen.poll() is None, web.stderr()
                    return False

            await wait_for(serving, timeout_s=30, what="uvicorn to serve the app")
            assert (await http.get("/cronrace/readyz")).text == "ready\n"
            answer = await http.post("/jobs/expire-sessions/trigger")
            assert answer.status_code == 202, answer.text
            async with fleet(redis_server.url, namespace) as client:
                record = await one_run(client, "expire-sessions", answer.json()["trigger_id"])
                assert (record.outcome, record.node) == ("ok", "web-uvicorn")
                # After its graceful shutdown, uvicorn (0.29 on) exits by the signal it got.
                assert web.terminate() in (0, -signal.SIGTERM), web.stderr()
                await no_node_left(client)
    assert "Application shutdown complete" in web.stderr()


# -- a plain asyncio service -----------------------------------------------------------------


async def test_asyncio_service_serves_fires_and_stops_on_sigterm(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    env = fleet_env(redis_server.url, namespace, "service-1")
    script = str(EXAMPLES / "asyncio_service.py")
    with started([script, "--port", str(port)], cwd=ROOT, env=env, logs=tmp_path) as service:
        await wait_for(
            lambda: "compact: tick" in service.stdout() or service.popen.poll() is not None,
            timeout_s=30,
            what="the compact job to fire (every 2 s)",
        )
        assert "on service-1" in service.stdout(), service.stderr()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"ping\n")
            assert conn.recv(16) == b"ping\n"  # the service's own work goes on beside it
        assert service.terminate() == 0, service.stderr()
    assert service.stdout().rstrip().endswith("stopped")
    async with fleet(redis_server.url, namespace) as client:
        await no_node_left(client)
        assert {r.outcome for r in await client.history("compact", 50)} == {"ok"}


# -- Django ---------------------------------------------------------------------------------


async def test_django_management_command_runs_the_jobs_with_the_orm(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    site = EXAMPLES / "django_site"
    database = tmp_path / "digests.sqlite3"
    env = {**fleet_env(redis_server.url, namespace, "django-1"), "DIGESTS_DB": str(database)}
    with started(["manage.py", "migrate"], cwd=site, env=env, logs=tmp_path / "migrate") as m:
        assert m.popen.wait(60) == 0, m.stderr()
    with started(["manage.py", "cronrace"], cwd=site, env=env, logs=tmp_path / "agent") as agent:
        async with fleet(redis_server.url, namespace) as client:
            trigger_id = await trigger_when_live(client, "send-digest")
            record = await one_run(client, "send-digest", trigger_id)
            assert (record.outcome, record.node) == ("ok", "django-1"), agent.stderr()
            assert agent.terminate() == 0, agent.stderr()
            await no_node_left(client)
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT tick_s, fence, node FROM digests_digest").fetchall()
    assert rows == [(record.tick_s, record.fence, "django-1")]
    assert record.detail == "digest 1 sent"
