"""The jobs that examples/testing/test_billing.py tests: how to lay out jobs to test them.

The jobs are defined by a function that takes the agent, rather than on a module-level
agent with decorators: the program passes its agent (below), and a test passes an agent on
a fake clock and an embedded store of its own (``cronrace.testing.memory_agent``).
"""

from __future__ import annotations

from cronrace import Agent, RunContext

#: Customers billed at each run (a real job would read them from its database).
CUSTOMERS = ("acme", "globex", "initech")


async def send_invoices(ctx: RunContext) -> dict[str, int | str]:
    """Bill every customer once for this tick, even if a stale run comes back later.

    The fenced write keeps the tick's batch only when this run's fence is the newest: a
    node that lost its lease (a long pause) and wakes up late writes nothing.
    """
    batch = f"invoices:{ctx.tick:%Y-%m-%d}"
    if not await ctx.fenced_set(batch, ",".join(CUSTOMERS)):
        return {"invoiced": 0, "batch": batch}
    return {"invoiced": len(CUSTOMERS), "batch": batch}


async def check_payments(ctx: RunContext) -> None:
    """Fail loudly: the agent records the run as ``error`` with this message."""
    raise ConnectionError("payment provider unreachable")


def define_jobs(agent: Agent) -> None:
    """Add this module's jobs to ``agent``."""
    # 09:00 on weekdays, Paris time, whatever the offset to UTC is that day.
    agent.add_job(send_invoices, "0 9 * * 1-5", name="send-invoices", timezone="Europe/Paris")
    agent.add_job(check_payments, "*/30 * * * *", name="check-payments")


agent = Agent()  # the program's agent: settings from CRONRACE_* (store_url, namespace, ...)
define_jobs(agent)
