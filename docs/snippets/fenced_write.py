"""A handler whose write is refused when a newer run of its job wrote first.

Shown in docs/how-to/fencing.md; run by tests/docs/test_snippets.py.
"""

from cronrace import Agent, RunContext

agent = Agent()


@agent.job("*/10 * * * *", name="publish-prices")
async def publish_prices(ctx: RunContext) -> str:
    prices = '{"eur": 1.0}'  # whatever the run computed
    # A compare-and-set on the agent's own store: refused (False) when a run with a higher
    # fence already wrote the key, e.g. after this run was paused past its lease.
    written = await ctx.fenced_set("prices:latest", prices)
    return "written" if written else "refused: a newer run wrote first"
