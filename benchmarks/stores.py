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
        "%(read_backs)s": f"array_fill(false, ARRAY[{batch}])",
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
    statements: bool = False,
    begin: Callable[[str], None],
    status: Status,
    done: Callable[[str], None],
) -> dict[str, Any]:
    """Every cell on every store, ``repeats`` times; the limits first."""
    out: dict[str, Any] = {"limit": {}, "pgbench": {}, "runs": [], "servers": {}}
    conf = STATEMENTS_CONF if statements else {}
    with BenchServer(workdir / "redis") as redis_server, BenchPostgres(conf) as pg_server:
        if statements:
            pg_server.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
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
                    if statements and store == "postgres":
                        pg_server.execute("SELECT pg_stat_statements_reset()")
                    row = run_cell(spec, contexts[store], status)
                    if statements and store == "postgres":
                        row["statements"] = statement_shares(pg_server)
                    row["repeat"] = repeat
                    out["runs"].append(row)
                    done(_summary(label, row))
    out["cells"] = aggregate(out["runs"], cells, stores)
    return out


#: pg_stat_statements, for --pg-statements (it costs the server a little: off by default).
STATEMENTS_CONF = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",
}


def statement_shares(server: BenchPostgres) -> list[dict[str, Any]]:
    """The server's execution time by statement over one cell (start-up and drain included):
    calls, ms per call and share of the total, biggest first."""
    rows = server.execute(
        "SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 70) "
        "FROM pg_stat_statements WHERE query NOT LIKE '%%pg_stat_statements%%' "
        "AND query NOT LIKE 'TRUNCATE%%' "  # the harness's flush between cells
        "ORDER BY total_exec_time DESC"
    )
    total = sum(float(r[1]) for r in rows) or 1.0
    return [
        {
            "statement": str(text),
            "calls": int(calls),
            "ms_per_call": round(float(ms) / max(1, int(calls)), 3),
            "share": round(float(ms) / total, 3),
        }
        for calls, ms, text in rows[:8]
    ]


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
