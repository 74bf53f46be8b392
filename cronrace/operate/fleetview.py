"""One look at a fleet: its jobs, its live nodes and its latest runs.

``cronrace status`` prints it and the status page renders it, so the two always agree.
It is read through an :class:`~cronrace.operate.client.OperatorClient` (the CLI's own, or a
running agent's ``agent.operator``), from any process on the same Redis and namespace,
in a fixed number of round trips however many jobs there are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cronrace.model.records import JobStatus, NodeInfo, RunRecord, utc_from_s

if TYPE_CHECKING:
    from cronrace.operate.client import OperatorClient


@dataclass(frozen=True, slots=True)
class FleetView:
    """What a namespace looks like at one instant.

    Attributes:
        namespace: the fleet's namespace.
        now_s: when the view was taken (the agent's clock, epoch seconds).
        jobs: every job any node registered, by name.
        nodes: the live nodes, newest heartbeat first.
        runs: the latest run records across jobs, newest tick first.
        histories: each job's newest run records, newest tick first (the status page's
            timeline; empty unless asked for).
    """

    namespace: str
    now_s: float
    jobs: tuple[JobStatus, ...]
    nodes: tuple[NodeInfo, ...]
    runs: tuple[RunRecord, ...] = ()
    histories: Mapping[str, tuple[RunRecord, ...]] = field(default_factory=dict)

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


async def look(
    client: OperatorClient, *, runs: int = 0, runs_per_job: int = 5, history: int = 0
) -> FleetView:
    """Read the fleet's view through ``client``.

    Args:
        client: an operator client of the namespace (``agent.operator`` for an agent).
        runs: how many of the latest run records to include (0: none).
        runs_per_job: how many records of each job may be among them.
        history: how many of each job's newest records to include (0: none); read in the
            same round trip as the latest runs.
    """
    jobs = await client.jobs_status()
    nodes = await client.nodes()
    latest: list[RunRecord] = []
    found: dict[str, list[RunRecord]] = {}
    if runs or history:
        found = await client.latest_runs([job.job for job in jobs], max(runs_per_job, history))
    if runs:
        latest = [record for records in found.values() for record in records[:runs_per_job]]
        latest.sort(key=lambda record: (record.tick_s, record.finished_ms), reverse=True)
    return FleetView(
        namespace=client.settings.namespace,
        now_s=client.clock.time(),
        jobs=tuple(jobs),
        nodes=tuple(nodes),
        runs=tuple(latest[:runs]),
        histories={job: tuple(records[:history]) for job, records in found.items()}
        if history
        else {},
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
