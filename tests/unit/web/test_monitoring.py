"""Monitoring for an agent inside an application: an ASGI app to mount, a listener of its
own. Each endpoint answers a request (the mounted app through FastAPI, as in
examples/fastapi_app.py), and the status page's buttons work below a mount."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI

from cronrace import Agent, ConfigError
from cronrace.runtime.observer import Observer
from cronrace.web import monitoring_app, serve_monitoring
from cronrace.web.metrics import PrometheusObserver
from cronrace.web.monitoring import DEFAULT_ADDRESS


def new_agent() -> Agent:
    agent = Agent(store_url=f"memory://monitoring-{secrets.token_hex(4)}", node_id="web-1")

    @agent.job("@hourly", name="cleanup")
    async def cleanup(ctx: object) -> None:
        pass

    return agent


@asynccontextmanager
async def mounted(agent: Agent, *, actions: bool = False) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.mount("/cronrace", monitoring_app(agent, actions=actions))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app.test") as http:
        yield http


async def test_every_endpoint_answers_under_the_mount() -> None:
    agent = new_agent()
    async with mounted(agent) as http, agent:
        metrics = await http.get("/cronrace/metrics")
        assert metrics.status_code == 200
        assert 'cronrace_agent_info{namespace="cronrace",node="web-1"} 1.0' in metrics.text
        assert "cronrace_ready 1.0" in metrics.text
        healthz = await http.get("/cronrace/healthz")
        assert (healthz.status_code, healthz.text) == (200, "ok\n")
        readyz = await http.get("/cronrace/readyz")
        assert (readyz.status_code, readyz.text) == (200, "ready\n")
        page = await http.get("/cronrace/")
        assert page.status_code == 200, page.text
        assert page.headers["content-type"].startswith("text/html")
        assert "cleanup" in page.text
        assert "<form" not in page.text  # read-only unless asked
        view = (await http.get("/cronrace/status.json")).json()
        assert [job["job"] for job in view["jobs"]] == ["cleanup"]
        refused = await http.post("/cronrace/actions", data={"op": "pause", "job": "cleanup"})
        assert refused.status_code == 403
        assert (await http.get("/cronrace/nothing")).status_code == 404
        head = await http.head("/cronrace/healthz")
        assert (head.status_code, head.content) == (200, b"")


async def test_readyz_says_why_before_the_agent_runs() -> None:
    agent = new_agent()
    async with mounted(agent) as http:
        readyz = await http.get("/cronrace/readyz")
        assert readyz.status_code == 503
        assert readyz.text.startswith("not ready: ")
        page = await http.get("/cronrace/")
        assert page.status_code == 503
        assert "not running" in page.text


async def test_the_buttons_post_and_return_below_the_mount() -> None:
    agent = new_agent()
    async with mounted(agent, actions=True) as http, agent:
        page = (await http.get("/cronrace/")).text
        assert page.count('<form method="post" action="/cronrace/actions">') == 2
        token = page.split('name="token" value="', 1)[1].split('"', 1)[0]
        done = await http.post(
            "/cronrace/actions",
            data={"token": token, "op": "pause", "job": "cleanup"},
            headers={"Origin": "http://app.test", "Sec-Fetch-Site": "same-origin"},
        )
        assert done.status_code == 303, done.text
        assert done.headers["location"] == "/cronrace/?did=pause&job=cleanup"
        assert (await agent.jobs_status())[0].paused


async def test_a_listener_of_its_own_serves_the_same_endpoints() -> None:
    agent = new_agent()
    with serve_monitoring(agent, "127.0.0.1:0") as server:
        assert server.host == "127.0.0.1"
        async with agent, httpx.AsyncClient(base_url=server.url, timeout=5) as http:
            assert (await http.get("/healthz")).text == "ok\n"
            assert (await http.get("/readyz")).text == "ready\n"
            assert "cronrace_ready 1.0" in (await http.get("/metrics")).text
            assert "cleanup" in (await http.get("/")).text


def test_the_listener_binds_this_host_only_by_default() -> None:
    assert DEFAULT_ADDRESS == "127.0.0.1:9464"
    assert serve_monitoring.__defaults__ == (DEFAULT_ADDRESS,)


def test_the_default_observer_becomes_a_prometheus_one_and_a_foreign_one_is_refused() -> None:
    agent = new_agent()
    monitoring_app(agent)
    assert isinstance(agent.observer, PrometheusObserver)

    class Custom(Observer):
        pass

    other = Agent(store_url="memory://custom", node_id="n", observer=Custom())
    with pytest.raises(ConfigError, match="its observer is a Custom"):
        monitoring_app(other)


def test_a_bad_address_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"monitoring address 'nowhere': use host:port"):
        serve_monitoring(new_agent(), "nowhere")


async def test_set_up_after_start_is_refused() -> None:
    agent = new_agent()
    async with agent:
        with pytest.raises(RuntimeError, match="running already"):
            monitoring_app(agent)


async def test_served_alone_it_answers_the_lifespan_protocol() -> None:
    """Run as the whole app of an ASGI server (``uvicorn module:app``), not only mounted."""
    app = monitoring_app(new_agent())
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return incoming.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await app({"type": "lifespan"}, receive, send)  # type: ignore[arg-type]
    assert sent == [
        {"type": "lifespan.startup.complete"},
        {"type": "lifespan.shutdown.complete"},
    ]
