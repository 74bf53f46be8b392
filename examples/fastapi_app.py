"""A FastAPI app that runs its jobs itself: the agent lives in the app's lifespan.

Every replica of the app (every uvicorn worker, every pod) is a node: each tick runs on
exactly one of them. Run it with::

    CRONRACE_STORE_URL=redis://127.0.0.1:6379/0 uvicorn examples.fastapi_app:app

``GET /jobs`` shows the jobs of the fleet, ``GET /jobs/{name}/runs`` a job's newest
runs, ``POST /jobs/{name}/trigger`` asks the fleet for one run now. Without
``CRONRACE_STORE_URL`` the agent uses the embedded store (this process only).

Monitoring is mounted under ``/cronrace``, on the app's own port: ``/cronrace/metrics``
for Prometheus, ``/cronrace/healthz`` and ``/cronrace/readyz`` for the orchestrator's
probes, and the read-only status page at ``/cronrace/``. It is as reachable as the app:
keep it behind what guards the app's other internal routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException

from cronrace import Agent, RunContext, UnknownJobError
from cronrace.web import monitoring_app

agent = Agent()  # settings from CRONRACE_* (store_url, namespace, node_id, ...)


@agent.job("*/15 * * * *", name="expire-sessions", lease_ttl=60)
async def expire_sessions(ctx: RunContext) -> dict[str, Any]:
    """Delete expired sessions once every 15 minutes, on one replica."""
    # The real work would go here, e.g. `DELETE FROM sessions WHERE expires_at < now()`;
    # pass ctx.fence to what you write to refuse a run that lost its lease.
    return {"expired": 0, "tick": ctx.tick.isoformat(), "node": ctx.node_id}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with agent:  # ready (or raising) before the first request is served
        yield
    # Leaving: no new ticks; runs in hand finish within CRONRACE_SHUTDOWN_GRACE_S.


app = FastAPI(lifespan=lifespan)
# Before the agent starts (the lifespan): the page and the metrics register agent services.
app.mount("/cronrace", monitoring_app(agent))


@app.get("/jobs")
async def jobs() -> list[dict[str, Any]]:
    return [
        {"job": row.job, "schedule": row.schedule, "last_outcome": row.last_outcome}
        for row in await agent.jobs_status()
    ]


@app.get("/jobs/{name}/runs")
async def runs(name: str, limit: int = 10) -> list[dict[str, Any]]:
    try:
        records = await agent.history(name, limit)
    except UnknownJobError as exc:
        raise HTTPException(404, str(exc)) from None
    return [
        {"tick_s": r.tick_s, "outcome": r.outcome, "node": r.node, "detail": r.detail}
        for r in records
    ]


@app.post("/jobs/{name}/trigger", status_code=202)
async def trigger(name: str) -> dict[str, str]:
    try:
        return {"trigger_id": await agent.trigger(name)}
    except UnknownJobError as exc:
        raise HTTPException(404, str(exc)) from None
