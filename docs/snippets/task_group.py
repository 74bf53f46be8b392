"""An agent started inside an anyio task group, beside the service's own work.

Shown in docs/how-to/asyncio.md; run by tests/docs/test_snippets.py.
"""

import anyio

from cronrace import Agent, RunContext

agent = Agent()


@agent.job("@every 10s", name="flush-buffers")
async def flush_buffers(ctx: RunContext) -> None: ...


async def main(serve: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)  # returns once the agent is ready
        await serve.wait()  # the service's own work
        agent.stop()  # the graceful stop: no new ticks, runs in hand finish
