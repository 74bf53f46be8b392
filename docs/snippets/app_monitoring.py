"""Metrics, probes and the status page for an agent that lives in your own app.

Shown in docs/how-to/monitoring.md; run by tests/docs/test_snippets.py. The names come
from ``cronrace.web``, which ``cronrace run --metrics-address`` uses the same way.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from cronrace import Agent
from cronrace.web.metrics import PrometheusObserver
from cronrace.web.probes import MetricsServer

observer = PrometheusObserver()  # a registry of its own, with the process collectors
agent = Agent(observer=observer)


@asynccontextmanager
async def monitored(agent: Agent, address: tuple[str, int]) -> AsyncIterator[MetricsServer]:
    """Run the agent, serving /metrics, /healthz, /readyz and / on ``address``."""
    host, port = address
    server = MetricsServer.for_agent(agent, observer, host, port)  # status page included
    server.start()  # a daemon thread: it answers /healthz even while the loop is blocked
    try:
        async with agent:
            yield server
    finally:
        server.stop()
