"""The quick-start agent: two jobs that fire within seconds on the embedded store.

Run it with ``cronrace run examples.hello:agent``; stop it with Ctrl-C.
"""

from cronrace import Agent, RunContext

agent = Agent()


@agent.job("*/2 * * * * *", name="hello")  # every 2 seconds (6 fields: seconds first)
async def hello(ctx: RunContext) -> None:
    print(f"hello from {ctx.node_id}: tick {ctx.tick:%H:%M:%S} fence {ctx.fence}", flush=True)


@agent.job("@every 5s", name="report", overlap="skip")
def report(ctx: RunContext) -> str:  # sync handlers run in a worker thread
    print(f"report for {ctx.tick:%H:%M:%S} (idempotency key {ctx.idempotency_key})", flush=True)
    return "written"
