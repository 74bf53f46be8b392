"""The store comparison's tables and plot (benchmarks/stores.py runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.stores import STORES, _median

LABELS = (
    ("claims_per_s", "claims per second (the fleet's; N x J due)"),
    ("rtt_per_node_wake", "claim round trips per node wake-up"),
    (
        "tick_rtt_per_node_wake",
        "tick-path round trips per node wake-up (claim; a winner adds decide and end_run)",
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


def statements_table(result: dict[str, Any]) -> str:
    """postgres's execution time by statement, per cell: the median share over repeats."""
    lines = []
    for cell in result["cells"]:
        runs = [
            r
            for r in result["runs"]
            if r["store"] == "postgres"
            and (r["nodes"], r["jobs"]) == (cell["nodes"], cell["jobs"])
            and r.get("statements")
        ]
        if not runs:
            continue
        names = {item["statement"] for r in runs for item in r["statements"]}
        found = []
        for name in names:
            items = [i for r in runs for i in r["statements"] if i["statement"] == name]
            share = _median([i["share"] for i in items], digits=3) or 0.0
            per_call = _median([i["ms_per_call"] for i in items], digits=3)
            calls = _median([i["calls"] for i in items], digits=0)
            found.append((share, name, per_call, calls))
        if not lines:
            lines += [
                "| cell | statement | share of execution time | ms per call | calls |",
                "|---|---|---|---|---|",
            ]
        for share, name, per_call, calls in sorted(found, reverse=True)[:6]:
            lines.append(
                f"| {cell['nodes']} × {cell['jobs']:,} | `{name}` | {share:.0%} "
                f"| {_fmt(per_call)} | {int(calls or 0)} |"
            )
    return "\n".join(lines)
