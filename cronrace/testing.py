"""What users need to test their own jobs: a fake clock and an in-memory agent.

Example::

    from cronrace.testing import FakeClock, memory_agent, run_handler

    async def test_cleanup_deletes_old_rows():
        ctx_result = await run_handler(cleanup, job="cleanup", tick_s=1_700_000_000)

    async def test_job_fires_every_minute():
        clock = FakeClock(start_s=1_700_000_000)
        agent = memory_agent(clock)
        fired = []
        agent.add_job(lambda ctx: fired.append(ctx.tick_s), "* * * * *", name="minutely")
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run)
            await clock.advance(180)    # three minutes pass at once
            agent.stop()
        assert len(fired) == 3
"""

from __future__ import annotations

import heapq
import inspect
import itertools
import secrets
from typing import Any

import anyio

from cronrace.agent import Agent
from cronrace.config import AgentSettings
from cronrace.job import Handler, RunContext
from cronrace.store import Store

__all__ = ["FakeClock", "memory_agent", "run_handler"]


class FakeClock:
    """A clock that only moves when told to; sleepers wake as time passes them.

    ``time()`` is wall time (UTC epoch seconds) and ``monotonic()`` moves with it.
    """

    def __init__(self, start_s: float = 1_700_000_000.0) -> None:
        self._now_s = float(start_s)
        self._origin_s = float(start_s)
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self._now_s

    def monotonic(self) -> float:
        return self._now_s - self._origin_s

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        wake = anyio.Event()
        heapq.heappush(self._sleepers, (self._now_s + seconds, next(self._order), wake))
        await wake.wait()

    async def advance(self, seconds: float, *, step_s: float = 1.0) -> None:
        """Move time forward by ``seconds`` in steps, letting woken tasks run between them.

        Args:
            seconds: how far to move.
            step_s: the largest jump at once; tasks woken by one step run (on real time,
                briefly) before the next, as they would have while the time passed.
        """
        target = self._now_s + seconds
        while self._now_s < target:
            self._now_s = min(target, self._now_s + step_s)
            while self._sleepers and self._sleepers[0][0] <= self._now_s:
                heapq.heappop(self._sleepers)[2].set()
            await _settle()

    async def set_time(self, time_s: float) -> None:
        """Jump the wall clock to ``time_s`` (a step of the system clock), waking sleepers."""
        jump_s = max(0.0, time_s - self._now_s)
        await self.advance(jump_s, step_s=jump_s or 0.25)


async def _settle() -> None:
    # The embedded store answers on the event loop: give woken tasks a few real turns
    # (and a few real milliseconds) to claim, decide and run before time moves on.
    for _ in range(5):
        await anyio.sleep(0.002)


def memory_agent(clock: FakeClock | None = None, **settings: Any) -> Agent:
    """Return an agent on a fresh embedded store of its own, optionally on a fake clock.

    With a fake clock the agent schedules on it directly (``clock="local"``): the embedded
    store's own ``TIME`` follows the real clock and must not correct it.
    """
    options: dict[str, Any] = {
        "redis_url": f"memory://test-{secrets.token_hex(4)}",
        "node_id": "test-node",
        "clock": "local" if clock is not None else "redis",
        "shutdown_grace_s": 1.0,
        **settings,
    }
    return Agent(settings=AgentSettings(**options), clock=clock)


async def run_handler(
    handler: Handler,
    *,
    job: str = "job",
    tick_s: int = 1_700_000_000,
    fence: int = 1,
    node_id: str = "test-node",
    store: Store | None = None,
) -> Any:
    """Call a handler once with a real :class:`RunContext` and return what it returns.

    ``ctx.fenced_set`` writes to ``store``, by default a fresh embedded one.
    """
    the_store = store or Store.from_url(f"memory://test-{secrets.token_hex(4)}")
    ctx = RunContext(job=job, tick_s=tick_s, fence=fence, node_id=node_id, _store=the_store)
    try:
        if inspect.iscoroutinefunction(handler):
            return await handler(ctx)
        return await anyio.to_thread.run_sync(handler, ctx)
    finally:
        if store is None:
            await the_store.aclose()
