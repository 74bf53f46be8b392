"""What the ``cronrace`` command prints: rich tables for people, JSON for scripts.

Times are shown in UTC (``Z``) with a relative hint; JSON keeps epoch seconds and
milliseconds exactly as they are stored.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from cronrace.records import JobStatus, NodeInfo, RunRecord, utc_from_s
from cronrace.schedule import Schedule
from cronrace.sidecar import SidecarConfig

#: Piped output is not squeezed into 80 columns: lines are for grep, not for a terminal.
PIPE_WIDTH = 200


def console() -> Console:
    """A console on stdout; wide when stdout is not a terminal."""
    return Console(width=None if sys.stdout.isatty() else PIPE_WIDTH, highlight=False)


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


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
    """A tick as ``2024-05-01 12:00:05Z (in 3s)``, or ``-``."""
    if tick_s is None:
        return "-"
    return f"{utc_from_s(tick_s):%Y-%m-%d %H:%M:%S}Z ({relative(tick_s - now_s)})"


# -- validate ---------------------------------------------------------------------------


def print_config(config: SidecarConfig) -> None:
    """The jobs of a valid config file, with their next tick."""
    now_s = time.time()
    table = Table(title=f"{config.path}: ok, {len(config.jobs)} job(s)", title_justify="left")
    for column in ("job", "schedule", "zone", "overlap", "next tick", "target"):
        table.add_column(column)
    for spec in config.jobs:
        next_s = Schedule.parse(spec.schedule, spec.timezone).next_tick(int(now_s))
        table.add_row(
            spec.name,
            spec.schedule,
            spec.timezone,
            spec.overlap.value,
            when(next_s, now_s),
            spec.describe_target(),
        )
    console().print(table)


# -- status -----------------------------------------------------------------------------


def status_dict(row: JobStatus) -> dict[str, Any]:
    return asdict(row)


def print_status(rows: list[JobStatus], namespace: str, now_s: float) -> None:
    """The ``status`` table."""
    table = Table(title=f"jobs in namespace {namespace!r}", title_justify="left")
    columns = ("job", "schedule", "zone", "next tick", "last tick", "outcome", "lease")
    for column in columns:
        table.add_column(column)
    for column in ("paused", "skipped", "missed"):
        table.add_column(column, justify="right")
    for row in rows:
        lease = "-"
        if row.lease_owner is not None:
            lease = f"{row.lease_owner} (fence {row.lease_fence})"
        table.add_row(
            row.job,
            row.schedule,
            row.timezone,
            when(row.next_tick_s, now_s),
            when(row.last_tick_s, now_s),
            row.last_outcome or "-",
            lease,
            "yes" if row.paused else "no",
            str(row.skipped),
            str(row.missed),
        )
    if not rows:
        console().print(f"no jobs registered in namespace {namespace!r}")
        return
    console().print(table)


# -- history ----------------------------------------------------------------------------


def record_dict(record: RunRecord) -> dict[str, Any]:
    data = asdict(record)
    data["outcome"] = record.outcome.value
    data["duration_s"] = record.duration_s
    return data


def print_history(job: str, records: list[RunRecord]) -> None:
    """The ``history`` table."""
    if not records:
        console().print(f"no run records for {job!r} yet")
        return
    now_s = time.time()
    table = Table(title=f"history of {job!r}, newest first", title_justify="left")
    for column in ("tick", "outcome", "node", "fence", "duration", "trigger", "error / detail"):
        table.add_column(column, justify="right" if column in ("fence", "duration") else "left")
    for record in records:
        duration = record.duration_s
        note = record.error or ""
        if not note and record.detail is not None:
            note = orjson.dumps(record.detail, default=str).decode()
        if record.count > 1:
            note = f"{record.count} ticks {note}".strip()
        table.add_row(
            when(record.tick_s, now_s),
            record.outcome.value,
            record.node,
            str(record.fence) if record.fence else "-",
            f"{duration:.3f}s" if duration is not None else "-",
            record.trigger_id or "-",
            note[:120],
        )
    console().print(table)


# -- nodes ------------------------------------------------------------------------------


def node_dict(node: NodeInfo) -> dict[str, Any]:
    return asdict(node)


def print_nodes(rows: list[NodeInfo], namespace: str) -> None:
    """The ``nodes`` table."""
    if not rows:
        console().print(f"no live nodes in namespace {namespace!r}")
        return
    now_s = time.time()
    table = Table(title=f"live nodes in namespace {namespace!r}", title_justify="left")
    for column in ("node", "last heartbeat", "expires"):
        table.add_column(column)
    for node in rows:
        table.add_row(
            node.node_id,
            relative(node.last_seen_ms / 1000 - now_s),
            relative(node.expires_ms / 1000 - now_s),
        )
    console().print(table)
