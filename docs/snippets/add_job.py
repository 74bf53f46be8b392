"""Jobs added without a decorator, from data: the options are the decorator's keywords.

Shown in docs/how-to/process.md; imported by tests/docs/test_snippets.py.
"""

from cronrace import Agent, RunContext

agent = Agent()

#: Your own table of reports: a name and a schedule each.
REPORTS = {"daily-sales": "0 6 * * *", "weekly-stock": "0 7 * * mon"}


async def build_report(ctx: RunContext) -> str:
    return f"built {ctx.job} for {ctx.tick:%Y-%m-%d}"


for name, schedule in REPORTS.items():
    agent.add_job(build_report, schedule, name=name, overlap="skip", lease_ttl=300)
