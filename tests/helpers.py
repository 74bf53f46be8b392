"""Helpers for tests that run agents: wait for conditions with deadlines, record runs."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from cronrace import Agent, AgentSettings, RunContext


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]], *, timeout_s: float, what: str
) -> None:
    """Poll ``condition`` every 20 ms until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await anyio.sleep(0.02)


@dataclass
class Run:
    job: str
    tick_s: int
    node: str
    fence: int
    started_wall_s: float


@dataclass
class Recorder:
    """Collects every handler start, across the agents of one test."""

    runs: list[Run] = field(default_factory=list)

    def note(self, ctx: RunContext) -> None:
        self.runs.append(Run(ctx.job, ctx.tick_s, ctx.node_id, ctx.fence, time.time()))

    def ticks(self, job: str | None = None) -> list[int]:
        return [r.tick_s for r in self.runs if job is None or r.job == job]


def settings(url: str, namespace: str, node: str, **extra: object) -> AgentSettings:
    return AgentSettings(
        redis_url=url,
        namespace=namespace,
        node_id=node,
        heartbeat_s=0.5,
        shutdown_grace_s=2.0,
        **extra,  # type: ignore[arg-type]
    )


@asynccontextmanager
async def running(*agents: Agent) -> AsyncIterator[None]:
    """Run agents in a task group; stop them (gracefully) on exit."""
    async with anyio.create_task_group() as tg:
        for agent in agents:
            tg.start_soon(agent.run)
        await wait_for(lambda: all(a.ready for a in agents), timeout_s=10, what="agents ready")
        try:
            yield
        finally:
            for agent in agents:
                agent.stop()
