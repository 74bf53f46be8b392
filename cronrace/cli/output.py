"""What the ``cronrace`` command prints: tables for people, JSON for scripts.

Tables fit the terminal (80 columns is the test) without cutting a job name, an outcome
or a node id: columns are left out by priority instead, and ``--wide`` shows them all
(see :mod:`cronrace.cli.table`). Times are shown in UTC (``Z``) with a relative hint;
JSON keeps epoch seconds and milliseconds exactly as they are stored.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import orjson

from cronrace.cli.table import Col, Fitted, fit
from cronrace.model.records import JobStatus, NodeInfo, RunRecord
from cronrace.operate.fleetview import relative, when
from cronrace.timing.schedule import Schedule

if TYPE_CHECKING:
    from cronrace.sidecar.service import SidecarConfig

#: Piped output is not squeezed into a terminal: lines are for grep.
PIPE_WIDTH = 200
#: Free text (errors, outputs) longer than this is shortened in tables; --wide shows it all.
NOTE_CHARS = 200


def terminal_width(wide: bool) -> int | None:
    """The width tables must fit: the terminal's, 200 when piped, None for ``--wide``."""
    if wide:
        return None
    if not sys.stdout.isatty():
        return PIPE_WIDTH
    return shutil.get_terminal_size((80, 24)).columns


def _print(fitted: Fitted) -> None:
    from rich.console import Console  # rich only for a command that prints a table

    console = Console(width=max(fitted.width, 20), highlight=False, soft_wrap=False)
    with console.capture() as captured:
        console.print(fitted.table)
    # rich pads every line to the table's width: trailing blanks are noise in a pipe.
    lines = [line.rstrip() for line in captured.get().splitlines()]
    sys.stdout.write("\n".join(lines) + "\n")
    if (note := fitted.note()) is not None:
        say(note, fitted.width)


def print_table(fitted: Fitted) -> None:
    """Print a fitted table (and the note on the columns left out)."""
    _print(fitted)


def say(text: str, width: int | None = None) -> None:
    """Print a sentence, wrapped at spaces to ``width`` (names are never broken)."""
    if width is not None:
        text = textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)
    sys.stdout.write(text + "\n")


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


# -- validate ---------------------------------------------------------------------------


#: How many upcoming ticks ``validate`` shows per job, so one can see what a schedule means.
NEXT_TICKS = 3


def next_ticks(name: str, schedule: str, timezone: str, now_s: float) -> list[int]:
    """The next few ticks of a (checked) schedule, UTC epoch seconds."""
    parsed = Schedule.parse(schedule, timezone, job=name)
    return parsed.ticks_between(int(now_s), 2**62, NEXT_TICKS)


def local_times(ticks_s: Sequence[int], timezone: str) -> str:
    """Ticks as local times of ``timezone``, one a line: ``Mon 2026-03-30 09:00:00 CEST``."""
    zone = ZoneInfo(timezone)
    return "\n".join(f"{datetime.fromtimestamp(t, zone):%a %Y-%m-%d %H:%M:%S %Z}" for t in ticks_s)


def config_dict(config: SidecarConfig, now_s: float) -> dict[str, Any]:
    jobs = []
    for spec in config.jobs:
        target = spec.target_kind
        ticks = next_ticks(spec.name, spec.schedule, spec.timezone, now_s)
        jobs.append(
            {
                "job": spec.name,
                "schedule": spec.schedule,
                "timezone": spec.timezone,
                "overlap": spec.overlap.value,
                "catchup": spec.catchup.value,
                "next_tick_s": ticks[0],
                "next_ticks_s": ticks,
                "target": target,
                target: getattr(spec, target).model_dump(mode="json"),
            }
        )
    if any(spec.http is not None for spec in config.jobs):
        for job, spec in zip(jobs, config.jobs, strict=True):
            if spec.http is not None:
                job["http"]["url"] = spec.http.safe_url
    return {"file": str(config.path), "ok": True, "jobs": jobs}


def print_config(config: SidecarConfig, width: int | None) -> None:
    """The jobs of a valid config file, then their next ticks in each job's zone."""
    now_s = time.time()
    cols = (
        Col("job"),
        Col("schedule", 1, whole=True),
        Col("zone", 3),
        Col("overlap", 4),
        Col("target", 2, text=True),
    )
    rows = [
        (spec.name, spec.schedule, spec.timezone, spec.overlap.value, spec.describe_target())
        for spec in config.jobs
    ]
    _print(fit(f"{config.path}: ok, {len(config.jobs)} job(s)", cols, rows, width))
    # What an expression means is easiest seen in when it fires: a table of its own, so
    # that long job names and schedules never push it out of an 80-column terminal.
    ticks = [
        (
            spec.name,
            local_times(next_ticks(spec.name, spec.schedule, spec.timezone, now_s), spec.timezone),
        )
        for spec in config.jobs
    ]
    sys.stdout.write("\n")
    _print(fit(None, (Col("job"), Col("next ticks, in the job's zone", whole=True)), ticks, width))


# -- status -----------------------------------------------------------------------------


def status_dict(row: JobStatus) -> dict[str, Any]:
    return asdict(row)


STATUS_COLUMNS = (
    Col("job"),
    Col("schedule", 3, whole=True),
    Col("zone", 8),
    Col("next tick", 1),
    Col("last tick", 4),
    Col("outcome"),
    Col("lease", 2),
    Col("paused", 5),
    Col("skipped", 6, right=True),
    Col("missed", 7, right=True),
)


def status_rows(rows: Sequence[JobStatus], now_s: float) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for row in rows:
        lease = "-"
        if row.lease_owner is not None:
            lease = f"{row.lease_owner} (fence {row.lease_fence})"
        out.append(
            (
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
        )
    return out


def print_status(
    rows: list[JobStatus],
    nodes: list[NodeInfo],
    namespace: str,
    now_s: float,
    width: int | None,
) -> None:
    """The ``status`` table, and a line on the live nodes under it."""
    title = f"jobs in namespace {namespace!r}"
    _print(fit(title, STATUS_COLUMNS, status_rows(rows, now_s), width))
    # Problems get lines of their own: a table column would be the first left out at 80.
    for row in rows:
        if row.problem:
            say(f"problem: {row.job}: {row.problem}", width)
    stored = sum(row.source == "stored" for row in rows)
    if stored:
        say(f"{stored} of these are stored schedules (cronrace schedules ls)", width)
    if nodes:
        names = ", ".join(node.node_id for node in nodes)
        say(f"{len(nodes)} live node(s): {names}", width)
        say(racers_line(nodes), width)
    else:
        say("no live node: nothing fires these jobs until an agent starts", width)


# -- history ----------------------------------------------------------------------------


def record_dict(record: RunRecord) -> dict[str, Any]:
    data = asdict(record)
    data["outcome"] = record.outcome.value
    data["duration_s"] = record.duration_s
    return data


HISTORY_COLUMNS = (
    Col("tick"),
    Col("outcome"),
    Col("node"),
    Col("fence", 2, right=True),
    Col("duration", 3, right=True),
    Col("trigger", 4),
    Col("error / detail", 1, text=True),
)


def _note(record: RunRecord, wide: bool) -> str:
    note = record.error or ""
    if not note and record.detail is not None:
        note = orjson.dumps(record.detail, default=str).decode()
    if record.count > 1:
        note = f"{record.count} ticks {note}".strip()
    if not wide and len(note) > NOTE_CHARS:
        note = f"{note[:NOTE_CHARS]}... (+{len(note) - NOTE_CHARS} chars: --wide or --json)"
    return note


def history_rows(records: Sequence[RunRecord], now_s: float, wide: bool) -> list[tuple[str, ...]]:
    return [
        (
            when(record.tick_s, now_s),
            record.outcome.value,
            record.node,
            str(record.fence) if record.fence else "-",
            f"{record.duration_s:.3f}s" if record.duration_s is not None else "-",
            record.trigger_id or "-",
            _note(record, wide),
        )
        for record in records
    ]


def print_history(job: str, records: list[RunRecord], width: int | None) -> None:
    """The ``history`` table, newest tick first."""
    if not records:
        say(f"no run records for {job!r} yet")
        return
    rows = history_rows(records, time.time(), wide=width is None)
    _print(fit(f"history of {job!r}, newest tick first", HISTORY_COLUMNS, rows, width))


def print_run(record: RunRecord, width: int | None) -> None:
    """One run (``trigger --wait``) as a one-row history table."""
    rows = history_rows([record], time.time(), wide=width is None)
    _print(fit(f"run of {record.job!r}", HISTORY_COLUMNS, rows, width))


# -- nodes ------------------------------------------------------------------------------


def node_dict(node: NodeInfo) -> dict[str, Any]:
    return asdict(node)


NODE_COLUMNS = (Col("node"), Col("last heartbeat", 1), Col("expires", 2), Col("racers", 3))


def racers_line(nodes: list[NodeInfo]) -> str:
    """How many of the live nodes race for each tick, or how their settings disagree."""
    settings = {node.racers for node in nodes if node.racers != "?"}
    if len(settings) > 1:
        each = ", ".join(f"{node.node_id}={node.racers}" for node in nodes)
        return f"racers: the nodes disagree ({each}); each races by its own setting"
    setting = next(iter(settings), "all")
    if setting == "all":
        return f"racers: all {len(nodes)} live node(s) race for each tick"
    count, _, grouped = setting.partition(" in ")  # "2" or "2 in 8 groups" (racers.py)
    k = min(int(count), len(nodes))
    if grouped:
        return (
            f"racers: {k} of {len(nodes)} live node(s) race for each tick, chosen per group "
            f"of jobs ({grouped}) and hour-long window"
        )
    return (
        f"racers: {k} of {len(nodes)} live node(s) race for each tick, "
        "chosen per job and hour-long window"
    )


def print_nodes(rows: list[NodeInfo], namespace: str, width: int | None) -> None:
    """The ``nodes`` table."""
    if not rows:
        say(f"no live nodes in namespace {namespace!r}")
        return
    now_s = time.time()
    cells = [
        (
            node.node_id,
            relative(node.last_seen_ms / 1000 - now_s),
            relative(node.expires_ms / 1000 - now_s),
            node.racers,
        )
        for node in rows
    ]
    _print(fit(f"live nodes in namespace {namespace!r}", NODE_COLUMNS, cells, width))
    say(racers_line(rows), width)
