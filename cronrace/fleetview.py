"""One look at a fleet: its jobs, its live nodes and its latest runs.

``cronrace status`` prints it and the status page renders it, so the two always agree.
It is read through an :class:`~cronrace.Agent` (one with no jobs is enough), from any
process on the same Redis and namespace.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cronrace.records import JobStatus, NodeInfo, RunRecord, utc_from_s

if TYPE_CHECKING:
    from cronrace.agent import Agent


@dataclass(frozen=True, slots=True)
class FleetView:
    """What a namespace looks like at one instant.

    Attributes:
        namespace: the fleet's namespace.
        now_s: when the view was taken (the agent's clock, epoch seconds).
        jobs: every job any node registered, by name.
        nodes: the live nodes, newest heartbeat first.
        runs: the latest run records across jobs, newest tick first.
    """

    namespace: str
    now_s: float
    jobs: tuple[JobStatus, ...]
    nodes: tuple[NodeInfo, ...]
    runs: tuple[RunRecord, ...] = ()

    @property
    def registered(self) -> bool:
        """Whether any agent ever registered here (jobs) or is alive now (nodes)."""
        return bool(self.jobs or self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """The view as JSON-ready data (epoch seconds and milliseconds as stored)."""
        runs = []
        for record in self.runs:
            data = asdict(record)
            data["outcome"] = record.outcome.value
            data["duration_s"] = record.duration_s
            runs.append(data)
        return {
            "namespace": self.namespace,
            "now_s": self.now_s,
            "jobs": [asdict(job) for job in self.jobs],
            "nodes": [asdict(node) for node in self.nodes],
            "runs": runs,
        }


async def look(agent: Agent, *, runs: int = 0, runs_per_job: int = 5) -> FleetView:
    """Read the fleet's view through ``agent``.

    Args:
        agent: any agent of the namespace (the CLI uses one without jobs).
        runs: how many of the latest run records to include (0: none).
        runs_per_job: how many records to read per job to find them.
    """
    jobs = await agent.jobs_status()
    nodes = await agent.nodes()
    latest: list[RunRecord] = []
    if runs:
        for job in jobs:
            latest.extend(await agent.history(job.job, runs_per_job))
        latest.sort(key=lambda record: (record.tick_s, record.finished_ms), reverse=True)
    return FleetView(
        namespace=agent.settings.namespace,
        now_s=agent.clock.time(),
        jobs=tuple(jobs),
        nodes=tuple(nodes),
        runs=tuple(latest[:runs]),
    )


# -- how people read times ------------------------------------------------------------


def relative(delta_s: float) -> str:
    """``in 3s`` or ``12s ago``; minutes, hours and days when longer."""
    amount = abs(delta_s)
    if amount < 60:
        text = f"{amount:.0f}s" if amount >= 10 else f"{amount:.1f}s"
    elif amount < 3600:
        text = f"{amount / 60:.0f}m"
    elif amount < 86400:
        text = f"{amount / 3600:.1f}h"
    else:
        text = f"{amount / 86400:.1f}d"
    return f"in {text}" if delta_s > 0 else f"{text} ago"


def when(tick_s: int | None, now_s: float) -> str:
    """A tick as ``2024-05-01 12:00:05Z (in 3s)``; today's without the date; or ``-``."""
    if tick_s is None:
        return "-"
    at = utc_from_s(tick_s)
    today = datetime.fromtimestamp(now_s, tz=UTC).date() == at.date()
    shown = f"{at:%H:%M:%S}Z" if today else f"{at:%Y-%m-%d %H:%M:%S}Z"
    return f"{shown} ({relative(tick_s - now_s)})"
