"""A Celery beat schedule moved to cronrace: the agent decides each tick once, Celery runs it.

Shown in docs/how-to/coming-from.md; imported by tests/docs/test_snippets.py. ``send_task``
is Celery's; here a stand-in records the call, so the snippet runs without a broker.
"""

from collections.abc import Callable
from typing import Any

from cronrace import Agent, RunContext

agent = Agent()

#: Celery beat's `beat_schedule`, as it was (the crontab written as a cron expression).
BEAT_SCHEDULE = {
    "refresh-catalogue": {"task": "shop.tasks.refresh_catalogue", "schedule": "*/30 * * * *"},
    "nightly-invoices": {"task": "billing.tasks.invoices", "schedule": "0 2 * * *"},
}

sent: list[tuple[str, dict[str, Any]]] = []


def send_task(name: str, **options: Any) -> None:
    """Stands for `celery_app.send_task` of your project: records the call."""
    sent.append((name, options))


def enqueue(task: str) -> Callable[[RunContext], None]:
    def handler(ctx: RunContext) -> None:
        # The fence and the tick travel with the task, so the worker can refuse a stale one.
        send_task(task, kwargs={"fence": ctx.fence, "tick_s": ctx.tick_s})

    return handler


for name, entry in BEAT_SCHEDULE.items():
    agent.add_job(enqueue(entry["task"]), entry["schedule"], name=name, catchup="latest")
