"""A day of J one-second jobs on PostgreSQL, in compressed time: do the tables stay bounded?

``python -m benchmarks.tables`` starts its own postgres (benchmarks/pgserver.py) and
drives the PostgreSQL store as one agent node does, tick after tick: every tick it claims
every job's tick (claim.sql), decides the won claims (decide(): each decision's records
written with it), and ends each run with its record (end_runs(): the records pruned to
``history``); every ``heartbeat_s``
it beats (and exchanges fingerprints, forgetting nodes that left), pruning every
``PRUNE_EVERY_BEATS``-th beat (prune() in lib.sql), with the agent's own settings (the
claim TTL of tick/race.py, the heartbeat TTL, the job defaults).
A second node beats for the first minute and then dies without leaving: its membership
and fleet rows must go.

Time is compressed, honestly: the store's only clock is ``now_us()`` in SQL (claims'
expiries, leases, fences, pruning all read it), so this run replaces it, in its private
server only, with a clock the driver sets to each tick as it drives it. A tick then takes
as long as its statements take, not a second. Autovacuum runs as configured, on real
time: where the driver outruns real time it gets less time per simulated second than in
a real day (a harder test of the bytes); where it lags, more.

A whole day at full rate is 86.4 million claims, more than this machine drives in
minutes (about a thousand job ticks a second at load 11-17), so the run drives the first
``--full-s`` simulated seconds tick after tick (past every retention window: the claim
TTL, ``history`` records per job, the membership TTL), then a ``--burst-s`` burst of
consecutive ticks every ``--every-h`` hours to the end of the day, the clock jumping
between bursts as over a paused process (each jump's missed ticks recorded by the next
decision, as one missed range). Table rows, bytes (``pg_total_relation_size``)
and dead tuples are sampled every ``--sample-s`` simulated seconds; the run ends with the
growth after the plateau and a plot (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from cronrace.fleet.heartbeat import PRUNE_EVERY_BEATS, heartbeat_ttl_ms
from cronrace.model.job import JOB_DEFAULTS
from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import DecideReply, DecideRequest, Missed, Verdict
from cronrace.settings import AgentSettings
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.values import Claim, ClaimOutcome, Owner, RunEnd

START_S = 1_767_225_600  # 2026-01-01T00:00:00Z
DAY_S = 86_400
TABLES = ("claims", "jobs", "runs", "nodes", "fleet", "control", "fenced_values", "quarantine")
HEARTBEAT_S = 2.0
#: The agent's claim TTL for a job with the default catch-up window (tick/race.py).
CLAIM_TTL_MS = int(
    (JOB_DEFAULTS["catchup_window"] + AgentSettings.model_fields["skew_tolerance_s"].default + 1)
    * 1000
)

FAKE_CLOCK_SQL = """
CREATE TABLE IF NOT EXISTS {schema}.bench_clock (now_us bigint NOT NULL);
INSERT INTO {schema}.bench_clock SELECT 0 WHERE NOT EXISTS (SELECT FROM {schema}.bench_clock);
CREATE OR REPLACE FUNCTION {schema}.now_us() RETURNS bigint
LANGUAGE sql VOLATILE AS $$ SELECT now_us FROM {schema}.bench_clock $$;
"""


def fake_clock_sql(schema: str) -> str:
    """Replace ``schema``'s clock with one the driver sets (never on a shared schema)."""
    return FAKE_CLOCK_SQL.format(schema=f'"{schema}"')


def clock_setter(store: PostgresStore) -> Callable[[float], Awaitable[None]]:
    """A function that sets the fake clock of ``store``'s schema to a time in seconds."""
    schema = store.db.target.schema

    async def set_clock(now_s: float) -> None:
        async with store.db.connection("clock") as conn:
            await conn.execute(
                f'UPDATE "{schema}".bench_clock SET now_us = %s',  # noqa: S608 - checked name
                (int(now_s * 1_000_000),),
            )

    return set_clock


@dataclass
class Day:
    """What to drive: the fleet's shape and how much of the day."""

    jobs: int = 1000
    full_s: int = 1200
    hours: int = 24
    burst_s: int = 60
    every_h: int = 1
    sample_s: int = 60
    history: int = JOB_DEFAULTS["history"]
    claim_ttl_ms: int = CLAIM_TTL_MS
    lease_ttl_ms: int = int(JOB_DEFAULTS["lease_ttl"] * 1000)
    namespace: str = "day"


class SimulatedNode:
    """One node's store traffic for J one-second jobs, on the database's fake clock."""

    def __init__(
        self, store: PostgresStore, day: Day, set_clock: Callable[[float], Awaitable[None]]
    ) -> None:
        self.store = store
        self.day = day
        self.set_clock = set_clock
        self.owner = Owner.new("n0")
        self.jobs = [f"j{index:05d}" for index in range(day.jobs)]
        #: Heartbeats so far, per node: each prunes every PRUNE_EVERY_BEATS-th of its own.
        self.beats: dict[str, int] = {}
        self.last_tick: int | None = None
        self.ran = 0
        self.decisions: dict[str, int] = {}

    async def tick(self, tick_s: int) -> None:
        """Claim, decide, run and end every job's ``tick_s``; beat when it is time."""
        await self.set_clock(tick_s + 0.001)
        claims = [Claim(job, tick_s, self.day.claim_ttl_ms) for job in self.jobs]
        replies = await self.store.claim_each(claims, self.owner)
        won = [c.job for c, r in zip(claims, replies, strict=True) if r.outcome is ClaimOutcome.WON]
        cursor = self.last_tick
        missed: tuple[Missed, ...] = ()
        if cursor is not None and tick_s - cursor > 1:
            # Woken after a pause (catch-up latest): the ticks between are one missed range.
            missed = (Missed(cursor + 1, tick_s - 1, tick_s - cursor - 1),)
        requests = [
            DecideRequest(
                job=job,
                tick_s=tick_s,
                cursor_s=cursor,
                from_s=cursor if cursor is not None else tick_s - 1,
                fire_s=(tick_s,),
                missed=missed,
                owner=str(self.owner),
                overlap=Overlap.SKIP,
                lease_ttl_ms=self.day.lease_ttl_ms,
                claim_ttl_ms=self.day.claim_ttl_ms,
                history=self.day.history,
            )
            for job in won
        ]
        decided = await self.store.decide(requests)
        await self.set_clock(tick_s + 0.005)
        finished = []
        for request, reply in zip(requests, decided, strict=True):
            if not isinstance(reply, DecideReply):
                raise RuntimeError(f"decide failed for {request.job}: {reply}")  # noqa: TRY004
            key = str(reply.verdict or reply.answer)
            self.decisions[key] = self.decisions.get(key, 0) + 1
            if reply.verdict is not Verdict.RUN:
                continue
            record = RunRecord(
                job=request.job,
                tick_s=tick_s,
                node="n0",
                outcome=Outcome.OK,
                fence=reply.fence,
                started_ms=tick_s * 1000 + 2,
                finished_ms=tick_s * 1000 + 5,
            )
            ttl_ms = request.lease_ttl_ms
            finished.append(
                RunEnd(request.job, reply.fence, self.owner, ttl_ms, record, self.day.history)
            )
        for ended in await self.store.end_runs(finished):
            if isinstance(ended, Exception):
                raise ended
        self.ran += len(finished)
        self.last_tick = tick_s
        if tick_s % int(HEARTBEAT_S) == 0:
            await self.beat("n0", tick_s)

    async def beat(self, node: str, now_s: float) -> None:
        beats = self.beats.get(node, 0)
        prune = beats % PRUNE_EVERY_BEATS == 0
        await self.store.heartbeat(
            node,
            now_ms=int(now_s * 1000),
            ttl_ms=heartbeat_ttl_ms(HEARTBEAT_S),
            epoch_candidate=secrets.token_hex(8),
            prune=prune,
        )
        # The fleet exchange that follows each beat (fleet/definitions.py): publish, read
        # the live nodes', forget the rows of nodes that left the live set.
        reply = await self.store.fleet.exchange(
            node, f"fp-{node}", details=b"{}" if beats == 0 else None, now_ms=int(now_s * 1000)
        )
        if reply.dead:
            await self.store.fleet.forget(reply.dead)
        self.beats[node] = beats + 1


async def table_sizes(store: PostgresStore) -> dict[str, dict[str, int]]:
    """Rows of the namespace, bytes and dead tuples of each table (indexes included)."""
    out: dict[str, dict[str, int]] = {}
    schema = store.db.target.schema
    async with store.db.connection("sizes") as conn:
        for table in TABLES:
            cursor = await conn.execute(
                f'SELECT count(*) FROM "{schema}".{table} WHERE ns = %s',  # noqa: S608 - names checked
                (store.ns,),
            )
            rows = (await cursor.fetchone() or (0,))[0]
            cursor = await conn.execute(
                "SELECT pg_total_relation_size(c.oid), coalesce(s.n_dead_tup, 0) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE n.nspname = %s AND c.relname = %s",
                (schema, table),
            )
            size, dead = await cursor.fetchone() or (0, 0)
            out[table] = {"rows": int(rows), "bytes": int(size), "dead": int(dead)}
    return out


def plan_ticks(day: Day) -> list[tuple[str, list[int]]]:
    """The phases of the day: the full-rate start, then a burst at each later hour."""
    phases = [("full", list(range(START_S, START_S + day.full_s)))]
    first_hour = day.full_s // 3600 + 1
    for hour in range(first_hour, day.hours + 1):
        if hour % day.every_h and hour != day.hours:
            continue
        start = START_S + hour * 3600 - day.burst_s
        phases.append((f"hour {hour}", list(range(start, start + day.burst_s))))
    return phases


async def drive(
    url: str,
    day: Day,
    *,
    progress: Callable[[str, float], None] | None = None,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Drive the day against ``url`` (the fake clock installed); return samples and checks."""
    store = PostgresStore.from_url(url, day.namespace, max_connections=4, timeout_s=60.0)
    clock = PostgresStore.from_url(url, day.namespace, max_connections=1, timeout_s=60.0)
    set_clock = clock_setter(clock)
    node = SimulatedNode(store, day, set_clock)
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    phases = plan_ticks(day)
    total = sum(len(ticks) for _name, ticks in phases)
    done = 0
    try:
        await set_clock(START_S - 1)
        await node.beat("dies", START_S - 1)  # a member that beats for a minute, then dies
        for name, ticks in phases:
            for tick in ticks:
                await node.tick(tick)
                done += 1
                if tick - START_S < 60 and tick % int(HEARTBEAT_S) == 0:
                    await node.beat("dies", tick)
                last = tick == ticks[-1]
                if (tick - START_S) % day.sample_s == 0 or last:
                    sample = {
                        "sim_s": tick - START_S,
                        "phase": name,
                        "wall_s": round(time.monotonic() - started, 1),
                        "tables": await table_sizes(store),
                    }
                    samples.append(sample)
                    if on_sample is not None:
                        on_sample(sample)
                if progress is not None:
                    progress(f"{name}: simulated {(tick - START_S) / 3600:.2f} h", done / total)
    finally:
        await store.aclose()
        await clock.aclose()
    return {
        "day": day.__dict__,
        "samples": samples,
        "ticks_driven": total,
        "runs": node.ran,
        "decisions": node.decisions,
        "wall_s": round(time.monotonic() - started, 1),
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Each table's rows and bytes at the plateau and at the end, and what they bound."""
    day = result["day"]
    samples = result["samples"]
    # The plateau: once every window has passed (history records per job written, and the
    # claim TTL plus one prune period elapsed).
    settled_s = max(day["history"], day["claim_ttl_ms"] // 1000 + 40) + 60
    settled = [s for s in samples if s["sim_s"] >= settled_s]
    out: dict[str, Any] = {"settled_from_s": settled_s, "tables": {}}
    for table in TABLES:
        rows = [s["tables"][table]["rows"] for s in settled]
        size = [s["tables"][table]["bytes"] for s in settled]
        out["tables"][table] = {
            "rows_max": max((s["tables"][table]["rows"] for s in samples), default=0),
            "rows_settled_first": rows[0] if rows else None,
            "rows_settled_last": rows[-1] if rows else None,
            "rows_settled_max": max(rows, default=None),
            "bytes_settled_first": size[0] if size else None,
            "bytes_settled_last": size[-1] if size else None,
            "bytes_settled_max": max(size, default=None),
        }
    out["bounds"] = {
        # Live for the claim TTL, then up to one prune period (every tenth 2-s heartbeat).
        "claims": day["jobs"]
        * (day["claim_ttl_ms"] // 1000 + int(HEARTBEAT_S) * PRUNE_EVERY_BEATS + 2),
        "runs": day["jobs"] * day["history"],
        "nodes": 1,
    }
    return out


def plot(result: dict[str, Any], out_path: Path) -> Path:
    """Rows and MB of each table over the simulated day."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    hours = [s["sim_s"] / 3600 for s in samples]
    fig, (rows_ax, bytes_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    for table in ("claims", "runs", "jobs", "nodes"):
        rows_ax.plot(hours, [s["tables"][table]["rows"] for s in samples], ".-", label=table)
        bytes_ax.plot(
            hours, [s["tables"][table]["bytes"] / 1e6 for s in samples], ".-", label=table
        )
    jobs = result["day"]["jobs"]
    for ax, title, label in (
        (rows_ax, f"Rows ({jobs} one-second jobs, one node)", "rows"),
        (bytes_ax, "pg_total_relation_size", "MB"),
    ):
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel("simulated hours (every tick at first, then a burst every few hours)")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def markdown(result: dict[str, Any]) -> str:
    """The tables' rows and MB at each sample of the day (every 4th of the full-rate part)."""
    samples = result["samples"]
    full = [s for s in samples if s["phase"] == "full"]
    shown = full[::4] + ([full[-1]] if full and full[-1] not in full[::4] else [])
    shown += [s for s in samples if s["phase"] != "full"]
    head = "| simulated time | phase | " + " | ".join(
        f"{t} rows | {t} MB (dead rows)" for t in ("claims", "runs", "jobs", "nodes")
    )
    lines = [head + " |", "|---|---|" + "---|---|" * 4]
    for sample in shown:
        cells = []
        for table in ("claims", "runs", "jobs", "nodes"):
            size = sample["tables"][table]
            cells += [f"{size['rows']:,}", f"{size['bytes'] / 1e6:.1f} ({size['dead']:,})"]
        hours, rest = divmod(sample["sim_s"], 3600)
        lines.append(
            f"| {hours} h {rest // 60:02d} min {rest % 60:02d} s | {sample['phase']} | "
            + " | ".join(cells)
            + " |"
        )
    day = result["day"]
    return "\n".join(
        [
            f"{day['jobs']:,} one-second jobs on one node, claim TTL "
            f"{day['claim_ttl_ms'] / 1000:g} s, history {day['history']}; "
            f"{result['ticks_driven']:,} ticks driven "
            f"({result['runs']:,} runs) in {result['wall_s']:,} s of real time on PostgreSQL "
            f"{result.get('postgres', '?')}. The full-rate part ran every tick from 0 to "
            f"{day['full_s']} s; then a {day['burst_s']}-tick burst every {day['every_h']} h, "
            "the clock jumping between bursts. Bytes are `pg_total_relation_size` (indexes "
            "and not yet vacuumed space included); dead rows as `pg_stat_user_tables` counted "
            "them.",
            "",
            *lines,
        ]
    )


def run_day(day: Day, *, progress: Callable[[str, float], None] | None = None) -> dict[str, Any]:
    """Start a private postgres, install the fake clock, drive the day, stop it."""
    from benchmarks.pgserver import BenchPostgres

    with BenchPostgres() as server:
        server.execute(fake_clock_sql("cronrace"))
        result = anyio.run(lambda: drive(server.url, day, progress=progress, on_sample=_log))
        result["postgres"] = server.version
    result["summary"] = summarize(result)
    return result


def _log(sample: dict[str, Any]) -> None:
    parts = " ".join(
        f"{t}={v['rows']}/{v['bytes'] // 1024}k" for t, v in sample["tables"].items() if v["rows"]
    )
    sys.stderr.write(f"[{sample['wall_s']:>7.1f}s] sim {sample['sim_s']:>6}s {parts}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tables", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    # The defaults are the published run (24 minutes at load 11-17 on 2 cores; a few on a
    # quiet machine): every tick past every window, then a burst every 2 hours.
    parser.add_argument("--full-s", type=int, default=480, help="seconds driven tick by tick")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--burst-s", type=int, default=30)
    parser.add_argument("--every-h", type=int, default=2, help="a burst every this many hours")
    parser.add_argument(
        "--history",
        type=int,
        default=100,
        help="records kept per job (100, so that they reach their bound in 100 s; the "
        f"default of a job is {JOB_DEFAULTS['history']})",
    )
    parser.add_argument("--sample-s", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    parser.add_argument("--plot", action="store_true", help="draw tables_day.png beside the JSON")
    parser.add_argument(
        "--from-json", type=Path, help="run nothing: redraw the table and plot of a saved run"
    )
    parser.add_argument(
        "--publish", action="store_true", help="write its block of benchmarks/RESULTS.md"
    )
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(args.from_json.read_text())
        return _write(result, args.from_json.parent, plot_too=args.plot, publish=args.publish)
    day = Day(
        jobs=args.jobs,
        full_s=args.full_s,
        hours=args.hours,
        burst_s=args.burst_s,
        every_h=args.every_h,
        history=args.history,
        sample_s=args.sample_s,
    )
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True
    ) as bar:
        task = bar.add_task("starting postgres", total=1.0)
        result = run_day(
            day, progress=lambda text, done: bar.update(task, description=text, completed=done)
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tables_day.json").write_text(json.dumps(result, indent=1))
    return _write(result, args.out, plot_too=args.plot, publish=args.publish)


PUBLISH_BEGIN = "<!-- BEGIN GENERATED: python -m benchmarks.tables --publish -->"


def _write(result: dict[str, Any], out: Path, *, plot_too: bool, publish: bool) -> int:
    from benchmarks import report

    text = markdown(result)
    (out / "tables_day.md").write_text(text + "\n")
    if plot_too:
        plot(result, out / "tables_day.png")
    if publish:
        report.update_results_md(Path(__file__).parent / "RESULTS.md", text, begin=PUBLISH_BEGIN)
    sys.stdout.write(json.dumps(summarize(result)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
