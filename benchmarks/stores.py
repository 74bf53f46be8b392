"""Redis and PostgreSQL side by side: the same fleets, one run, one machine.

``python -m benchmarks.fleet --store both`` (or ``--store postgres``) runs this instead of
the Redis sweep. It starts its own redis-server (benchmarks/server.py) and its own
postgres (benchmarks/pgserver.py), both on free loopback ports, and:

1. the limits: ``redis-benchmark`` ``SET NX PX`` (unpipelined and pipelined by 100) and
   ``pgbench`` running the store's own claim statement (sql/statements/claim.sql, the very
   text the agents send) with one claim and with 100 claims a statement, the server's CPU
   read around each (``INFO`` for Redis, ``/proc`` for postgres);
2. the fleets: N real agents x J one-second jobs (benchmarks/cells.py) on each store, for
   each cell, ``--repeats`` times, the two stores alternating first so that drift in the
   machine's load falls on both; figures are medians of the repeats, and each ratio
   (PostgreSQL over Redis) is the median of the repeats' ratios, each taken side by side.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import limit as limits
from benchmarks.cells import CellSpec, Context, run_cell
from benchmarks.pgserver import PGBENCH, BenchPostgres
from benchmarks.server import BenchServer
from cronrace.stores.postgres.queries import Statements
from tests.postgres_server import PASSWORD, SUPERUSER

CELLS = ((5, 100), (10, 1000))
SMOKE_CELLS = ((2, 10),)
STORES = ("redis", "postgres")
#: What each cell reports, medians of the repeats (and the PostgreSQL / Redis ratio).
FIGURES = (
    "claims_per_s",
    "rtt_per_node_wake",
    "tick_rtt_per_node_wake",
    "background_rtt_per_node_s",
    "agent_cpu_us_per_claim",
    "agent_cpu_us_per_run",
    "fire_lag_p50_ms",
    "fire_lag_p99_ms",
    "server_cpu_ms_per_1k_claims",
    "client_cpu_cores",
)
PGBENCH_CLIENTS = 50
BATCHES = (1, 100)

Status = Callable[[str, float], None]


def claim_script(batch: int) -> str:
    """A pgbench script: the store's claim statement, ``batch`` new claims per transaction.

    The parameters the store binds become pgbench expressions: one random tick for the
    whole batch (so every claim inserts a row, as redis-benchmark's random keys create
    one), ``batch`` job names, the agent's claim TTL, no witness, no read-back.
    """
    statement = Statements("cronrace")["claim"]
    jobs = "{" + ",".join(f"j{index:04d}" for index in range(batch)) + "}"
    values = {
        "%(ns)s": "'pgbench'",
        "%(owner)s": "'pgbench:' || :client_id",
        "%(jobs)s": f"'{jobs}'",
        "%(ticks)s": f"array_fill(:tick::bigint, ARRAY[{batch}])",
        "%(triggers)s": f"array_fill(''::text, ARRAY[{batch}])",
        "%(ttls_ms)s": f"array_fill(306000::bigint, ARRAY[{batch}])",
        "%(witnesses)s": f"array_fill(NULL::bigint, ARRAY[{batch}])",
        "%(read_back)s": "false",
    }
    for name, value in values.items():
        statement = statement.replace(name, value)
    if "%(" in statement:
        raise RuntimeError(f"claim.sql has a parameter this script does not bind: {statement}")
    return f"\\set tick random(1, 2000000000)\n{statement};\n"


def pgbench_limit(server: BenchPostgres, *, seconds: float) -> dict[str, Any]:
    """Claims per second and server CPU per 1,000 claims of the claim statement alone."""
    if PGBENCH is None:
        return {"available": False, "reason": "pgbench is not installed"}
    out: dict[str, Any] = {"available": True, "clients": PGBENCH_CLIENTS}
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    for batch in BATCHES:
        server.flush()
        with tempfile.NamedTemporaryFile("w", suffix=".pgbench", delete=False) as script:
            script.write(claim_script(batch))
        before = server.snapshot()
        done = subprocess.run(
            [
                PGBENCH,
                "-h",
                "127.0.0.1",
                "-p",
                str(server.port),
                "-U",
                SUPERUSER,
                "-n",
                "-M",
                "extended",
                "-c",
                str(PGBENCH_CLIENTS),
                "-j",
                "2",
                "-T",
                str(max(1, round(seconds))),
                "-f",
                script.name,
                "postgres",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 120,
            env=env,
        )
        after = server.snapshot()
        Path(script.name).unlink()
        tps = _tps(done.stdout)
        if done.returncode != 0 or not tps:
            return {"available": False, "reason": (done.stderr or done.stdout)[-300:]}
        wall_s, cpu_s, _ = before.delta(after)
        claims = tps * batch * wall_s
        out[f"batch{batch}_statements_per_s"] = round(tps, 1)
        out[f"batch{batch}_claims_per_s"] = round(tps * batch, 1)
        out[f"batch{batch}_server_cpu_ms_per_1k"] = round(cpu_s / claims * 1e6, 3)
        out[f"batch{batch}_server_cpu_s_per_s"] = round(cpu_s / wall_s, 3)
        out[f"batch{batch}_latency_ms"] = _latency(done.stdout)
    server.flush()
    return out


def _tps(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    return None


def _latency(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("latency average = "):
            return float(line.split()[3])
    return None


def run_stores(
    cells: list[tuple[int, int]],
    *,
    stores: tuple[str, ...],
    repeats: int,
    ticks: int,
    quick: bool,
    limit: bool,
    limit_s: float,
    workdir: Path,
    loop: str,
    begin: Callable[[str], None],
    status: Status,
    done: Callable[[str], None],
) -> dict[str, Any]:
    """Every cell on every store, ``repeats`` times; the limits first."""
    out: dict[str, Any] = {"limit": {}, "pgbench": {}, "runs": [], "servers": {}}
    with BenchServer(workdir / "redis") as redis_server, BenchPostgres() as pg_server:
        out["servers"] = {"redis": redis_server.version, "postgres": pg_server.version}
        contexts = {
            "redis": Context(server=redis_server, workdir=workdir / "redis-cells", loop=loop),
            "postgres": Context(
                server=pg_server,  # type: ignore[arg-type]
                workdir=workdir / "pg-cells",
                loop=loop,
                store="postgres",
            ),
        }
        if limit and "redis" in stores:
            begin("limit: redis-benchmark SET NX PX")
            out["limit"] = limits.redis_benchmark(redis_server, quick=quick)
            done(f"redis-benchmark: {out['limit']}")
        if limit and "postgres" in stores:
            begin("limit: pgbench with the claim statement")
            out["pgbench"] = pgbench_limit(pg_server, seconds=limit_s)
            done(f"pgbench: {out['pgbench']}")
        for repeat in range(repeats):
            order = stores if repeat % 2 == 0 else tuple(reversed(stores))
            for nodes, jobs in cells:
                for store in order:
                    spec = CellSpec(
                        "cronrace",
                        nodes,
                        jobs,
                        ticks=ticks,
                        procs=2 if nodes * jobs >= 5000 else 1,
                        measure_saturated=True,
                    )
                    label = f"{store} {spec.label} (repeat {repeat + 1}/{repeats})"
                    begin(label)
                    row = run_cell(spec, contexts[store], status)
                    row["repeat"] = repeat
                    out["runs"].append(row)
                    done(_summary(label, row))
    out["cells"] = aggregate(out["runs"], cells, stores)
    return out


def _summary(label: str, row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        return f"[yellow]{label}: {row.get('status')}[/] {row.get('reason', '')}"
    return (
        f"{label}: {row.get('claims_per_s')} claims/s, p99 lag {row.get('fire_lag_p99_ms')} ms, "
        f"server {row.get('server_cpu_ms_per_1k_claims')} ms/1k claims, "
        f"dup {row['duplicates']} missed {row['missed']}"
    )


def aggregate(
    runs: list[dict[str, Any]], cells: list[tuple[int, int]], stores: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Per cell: each store's medians, and PostgreSQL / Redis as the median of the repeats'
    ratios (each repeat measured both, one right after the other)."""
    out = []
    for nodes, jobs in cells:
        cell: dict[str, Any] = {"nodes": nodes, "jobs": jobs}
        mine = [r for r in runs if (r["nodes"], r["jobs"]) == (nodes, jobs)]
        for store in stores:
            ok = [r for r in mine if r["store"] == store and r.get("status") == "ok"]
            cell[store] = {
                "repeats": len(ok),
                "failed": [r.get("reason", r.get("status")) for r in mine if r["store"] == store]
                if len(ok) < len([r for r in mine if r["store"] == store])
                else [],
                "duplicates": sum(r["duplicates"] for r in ok),
                "missed": sum(r["missed"] for r in ok),
                **{key: _median([r.get(key) for r in ok]) for key in FIGURES},
            }
        if set(STORES) <= set(stores):
            ratios: dict[str, float | None] = {}
            for key in FIGURES:
                per_repeat = []
                for repeat in sorted({r["repeat"] for r in mine}):
                    pair = {
                        r["store"]: r.get(key)
                        for r in mine
                        if r["repeat"] == repeat and r.get("status") == "ok"
                    }
                    if pair.get("redis") and pair.get("postgres") is not None:
                        per_repeat.append(pair["postgres"] / pair["redis"])
                ratios[key] = _median(per_repeat, digits=2)
            cell["postgres_over_redis"] = ratios
        out.append(cell)
    return out


def _median(values: list[Any], digits: int = 2) -> float | None:
    found = [float(v) for v in values if v is not None]
    return round(statistics.median(found), digits) if found else None


def headline(result: dict[str, Any]) -> str:
    """One line of key=value figures (the smoke test reads it)."""
    rows = [r for r in result["runs"] if r.get("status") == "ok"]
    parts = []
    for store in sorted({r["store"] for r in result["runs"]}):
        mine = [r for r in rows if r["store"] == store]
        claims = [r["claims_per_node_job_tick"] for r in mine]
        rtts = [r["rtt_per_node_wake"] for r in mine if r.get("rtt_per_node_wake") is not None]
        worst = max(claims, key=lambda v: abs(v - 1)) if claims else None
        parts += [
            f"{store}_runs={len(mine)}/{len([r for r in result['runs'] if r['store'] == store])}",
            f"{store}_claims_per_node_job_tick={_num(worst)}",
            f"{store}_rtt_per_node_wake={_num(max(rtts, default=None))}",
            f"{store}_duplicates={sum(r['duplicates'] for r in mine)}",
            f"{store}_missed={sum(r['missed'] for r in mine)}",
        ]
    return " ".join(parts)


def _num(value: float | None) -> str:
    return "nan" if value is None else f"{value:.2f}"


LABELS = (
    ("claims_per_s", "claims per second (the fleet's; N x J due)"),
    ("rtt_per_node_wake", "claim round trips per node wake-up"),
    (
        "tick_rtt_per_node_wake",
        "tick-path round trips per node wake-up (claim; a winner adds decide and release)",
    ),
    ("background_rtt_per_node_s", "background round trips per node-second (heartbeat, control)"),
    ("agent_cpu_us_per_claim", "agent CPU per claim, µs"),
    ("agent_cpu_us_per_run", "agent CPU per run, µs"),
    ("fire_lag_p50_ms", "fire lag p50, ms"),
    ("fire_lag_p99_ms", "fire lag p99, ms"),
    ("server_cpu_ms_per_1k_claims", "server CPU per 1,000 claims, ms"),
    ("client_cpu_cores", "fleet processes' CPU, cores"),
)


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and value >= 100:
        return f"{value:,.0f}"
    return f"{value:g}" if isinstance(value, int) else f"{value:.2f}"


def fleet_table(result: dict[str, Any]) -> str:
    """Each figure of each cell: Redis, PostgreSQL and their ratio, side by side."""
    cells = result["cells"]
    header = ["figure"]
    for cell in cells:
        shape = f"{cell['nodes']} × {cell['jobs']:,}"
        header += [f"{shape} Redis", f"{shape} PostgreSQL", "PG / Redis"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label in LABELS:
        row = [label]
        for cell in cells:
            ratio = cell.get("postgres_over_redis", {}).get(key)
            row += [
                _fmt(cell.get("redis", {}).get(key)),
                _fmt(cell.get("postgres", {}).get(key)),
                f"{ratio:.2f}×" if ratio is not None else "–",
            ]
        lines.append("| " + " | ".join(row) + " |")
    row = ["duplicates / missed (all repeats)"]
    for cell in cells:
        for store in STORES:
            figures = cell.get(store, {})
            row.append(f"{figures.get('duplicates', '–')} / {figures.get('missed', '–')}")
        row.append("")
    lines.append("| " + " | ".join(row) + " |")
    row = ["repeats measured"]
    for cell in cells:
        row += [str(cell.get(store, {}).get("repeats", 0)) for store in STORES] + [""]
    lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def limit_table(result: dict[str, Any]) -> str:
    """The servers' own limits: redis-benchmark's SET NX PX beside pgbench's claim.sql."""
    redis_limit, pg = result.get("limit", {}), result.get("pgbench", {})
    if not redis_limit.get("available") and not pg.get("available"):
        return "(not measured in this run)"
    lines = [
        "| claims per request | Redis: claims/s | Redis: CPU ms per 1k | PostgreSQL: claims/s "
        "| PostgreSQL: CPU ms per 1k | PostgreSQL: statements/s | PG / Redis claims/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for batch, name in ((1, "unpipelined"), (100, "pipelined")):
        redis_rps = redis_limit.get(f"{name}_rps")
        pg_rps = pg.get(f"batch{batch}_claims_per_s")
        ratio = f"{pg_rps / redis_rps:.3f}×" if redis_rps and pg_rps else "–"
        lines.append(
            f"| {batch} | {_fmt(redis_rps)} "
            f"| {_fmt(redis_limit.get(f'{name}_redis_cpu_ms_per_1k'))} "
            f"| {_fmt(pg_rps)} | {_fmt(pg.get(f'batch{batch}_server_cpu_ms_per_1k'))} "
            f"| {_fmt(pg.get(f'batch{batch}_statements_per_s'))} | {ratio} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> Path:
    """Four panels, Redis beside PostgreSQL: the limits, server CPU, fire lag, agent CPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 4.2))
    colours = {"redis": "tab:red", "postgres": "tab:blue"}
    names = {"redis": "Redis", "postgres": "PostgreSQL"}
    redis_limit, pg = result.get("limit", {}), result.get("pgbench", {})
    limit_values = {
        "redis": [redis_limit.get("unpipelined_rps"), redis_limit.get("pipelined_rps")],
        "postgres": [pg.get("batch1_claims_per_s"), pg.get("batch100_claims_per_s")],
    }
    cells = result["cells"]
    shapes = [f"{c['nodes']}×{c['jobs']}" for c in cells]
    panels = (
        (
            axes[0],
            ["1 / request", "100 / request"],
            lambda s: limit_values[s],
            "claims/s",
            True,
            "The server's limit (redis-benchmark, pgbench)",
        ),
        (
            axes[1],
            shapes,
            lambda s: [c.get(s, {}).get("server_cpu_ms_per_1k_claims") for c in cells],
            "ms",
            False,
            "Server CPU per 1,000 claims (fleets)",
        ),
        (
            axes[2],
            shapes,
            lambda s: [c.get(s, {}).get("fire_lag_p99_ms") for c in cells],
            "ms",
            True,
            "Fire lag p99",
        ),
        (
            axes[3],
            shapes,
            lambda s: [c.get(s, {}).get("agent_cpu_us_per_claim") for c in cells],
            "µs",
            False,
            "Agent CPU per claim",
        ),
    )
    for ax, groups, values, unit, log, title in panels:
        width = 0.38
        for offset, store in ((-width / 2, "redis"), (width / 2, "postgres")):
            found = values(store)
            xs = [i + offset for i in range(len(groups))]
            ax.bar(xs, [v or 0 for v in found], width, color=colours[store], label=names[store])
            for x, value in zip(xs, found, strict=True):
                if value is None:  # nothing measured (no run in the window): say so
                    ax.annotate(
                        "none",
                        (x, 0),
                        xycoords=("data", "axes fraction"),
                        xytext=(0, 4),
                        textcoords="offset points",
                        ha="center",
                        fontsize=8,
                        color=colours[store],
                    )
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups)
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
