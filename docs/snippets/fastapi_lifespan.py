"""The agent in a FastAPI app's lifespan: every replica of the app is a node.

Shown in README.md and docs/how-to/fastapi.md; run by tests/docs/test_snippets.py.
examples/fastapi_app.py is the same app with endpoints that show and trigger the jobs.
"""

from contextlib import asynccontextmanager

from fastapi import FastAPI

from cronrace import Agent, RunContext

agent = Agent()  # settings from CRONRACE_* (store_url, namespace, node_id, ...)


@agent.job("*/15 * * * *", name="expire-sessions", lease_ttl=60)
async def expire_sessions(ctx: RunContext) -> dict:
    ...  # the work; pass ctx.fence to what you write
    return {"expired": 0}


@asynccontextmanager
async def lifespan(app: FastAPI):
    async with agent:  # ready (or raising) before the first request is served
        yield  # leaving: no new ticks; runs in hand finish within the grace


app = FastAPI(lifespan=lifespan)
