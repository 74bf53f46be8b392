"""Helpers for tests that run agents: wait for conditions with deadlines, record runs."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import hiredis

from cronrace import Agent, AgentSettings, RunContext, RunRecord
from cronrace.model.policies import Outcome
from cronrace.testing import FakeClock, memory_agent


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
        store_url=url,
        namespace=namespace,
        node_id=node,
        heartbeat_s=0.5,
        shutdown_grace_s=2.0,
        **extra,  # type: ignore[arg-type]
    )


@asynccontextmanager
async def running(*agents: Agent) -> AsyncIterator[None]:
    """Run agents in a task group, each ready when entered; stop them (gracefully) on exit."""
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            for agent in agents:
                await tg.start(agent.run)
        try:
            yield
        finally:
            for agent in agents:
                agent.stop()


def memory_fleet(clock: FakeClock, size: int, *, prefix: str = "node", **extra: Any) -> list[Agent]:
    """``size`` agents on one fake clock and one embedded store: the nodes of one fleet.

    ``shutdown_grace_s`` is 0 unless given: the grace is real time, and a handler sleeping on
    the fake clock would only wait it out (tests read what they check before stopping).
    They beat every 2 s of fake time (the default) unless told: a lone agent on the fake
    clock beats every 60 s (memory_agent), and the nodes of a fleet would then keep the
    view they started with, each seeing only those that joined before it, for a minute.
    """
    options: dict[str, Any] = {
        "store_url": f"memory://fleet-{secrets.token_hex(4)}",
        "shutdown_grace_s": 0.0,
        "heartbeat_s": 2.0,
        **extra,
    }
    return [memory_agent(clock, node_id=f"{prefix}{i}", **options) for i in range(size)]


def memory_server(agent: Agent) -> Any:
    """The fakeredis server behind an agent's embedded store.

    Setting its ``connected`` to False makes every command fail to connect, as a Redis that
    went away does; True brings it back with its data.
    """
    return agent.store.client.connection_pool.connection_kwargs["server"]


async def history(
    agent: Agent, job: str, *, first_s: int, last_s: int, granted: bool = False
) -> list[RunRecord]:
    """The job's records of the ticks ``first_s..last_s``, oldest tick first.

    A run's tick has two records: the decision's ``granted``, then the run's result; the
    result alone is kept unless ``granted``.
    """
    records = await agent.history(job, 1000)
    return sorted(
        (
            r
            for r in records
            if first_s <= r.tick_s <= last_s and (granted or r.outcome is not Outcome.GRANTED)
        ),
        key=lambda r: (r.tick_s, r.outcome.value),
    )


def count_timers(monkeypatch: Any) -> list[int]:
    """Count the timers the running event loop schedules from now on (``[count]``)."""
    loop = asyncio.get_running_loop()
    calls = [0]
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    return calls


async def resp_commands(reader: asyncio.StreamReader) -> AsyncIterator[list[bytes]]:
    """The commands a client sends on ``reader``, parsed from RESP, until it closes (for
    stub servers that choose what to answer, and when)."""
    parser = hiredis.Reader()
    while data := await reader.read(65536):
        parser.feed(data)
        while (command := parser.gets()) is not False:
            yield command
