"""Stored schedules: a handler the schedules may name, and schedules made at runtime.

Shown in docs/how-to/stored-schedules.md; run by tests/docs/test_snippets.py.
"""

from cronrace import Agent, RunContext

agent = Agent()


@agent.handler("send_report")  # what stored schedules may name, on this agent
async def send_report(ctx: RunContext) -> str:
    customer = ctx.args["customer"]  # the schedule's args (JSON values)
    return f"report for {customer}"


async def manage_schedules(agent: Agent) -> None:
    # From any process on the same store and namespace (a web app, a script, the CLI):
    await agent.schedules.add(
        "report-acme",
        "H 9 * * mon-fri",
        handler="send_report",
        args={"customer": "acme"},
        timezone="Europe/Berlin",
        overlap="skip",
        catchup="latest",
        lease_ttl=60,
    )
    await agent.schedules.update("report-acme", schedule="H 8 * * mon-fri")  # others kept
    spec = await agent.schedules.get("report-acme")  # a ScheduleSpec (pydantic model)
    assert spec.schedule == "H 8 * * mon-fri"
    assert [s.name for s in await agent.schedules.list()] == ["report-acme"]
    await agent.schedules.remove("report-acme")
