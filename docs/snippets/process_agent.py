"""A process of its own: one agent, one job with every policy spelt out.

Shown in docs/how-to/process.md; imported by tests/docs/test_snippets.py.
"""

from cronrace import Agent, RunContext

agent = Agent()  # settings from CRONRACE_* (store_url, node_id, namespace, ...)


@agent.job(
    "*/5 * * * * *", name="cleanup", timezone="UTC", overlap="skip", catchup="latest", lease_ttl=30
)
async def cleanup(ctx: RunContext) -> str:
    # ctx.job: "cleanup"; ctx.tick: the scheduled instant, an aware UTC datetime (ctx.tick_s:
    # epoch seconds); ctx.fence: an int, strictly increasing per job: pass it to what you
    # write; ctx.node_id: the node running it.
    return f"{ctx.job} at {ctx.tick:%H:%M:%S} under fence {ctx.fence} on {ctx.node_id}"


if __name__ == "__main__":  # `cronrace run module:agent` imports this file: no second agent
    agent.run_sync()  # blocks until SIGTERM/SIGINT; or `async with agent:` / `agent.stop()`
