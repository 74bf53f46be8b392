"""A process of its own: one agent, one job with every policy spelt out.

Shown in docs/how-to/process.md; imported by tests/docs/test_snippets.py.
"""

from cronrace import Agent, RunContext

agent = Agent()  # settings from CRONRACE_* (store_url, node_id, namespace, ...)


@agent.job(
    "*/5 * * * * *", name="cleanup", timezone="UTC", overlap="skip", catchup="latest", lease_ttl=30
)
async def cleanup(ctx: RunContext) -> None:
    ctx.job  # "cleanup"
    ctx.tick  # aware datetime in UTC: the scheduled instant (ctx.tick_s: epoch seconds)
    ctx.fence  # int, strictly increasing per job: pass it to what you write
    ctx.node_id  # str


if __name__ == "__main__":  # `cronrace run module:agent` imports this file: no second agent
    agent.run_sync()  # blocks until SIGTERM/SIGINT; or `async with agent:` / `agent.stop()`
