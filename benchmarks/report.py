"""What a run leaves behind: CSV, markdown tables, PNG plots, and RESULTS.md.

RESULTS.md keeps whatever is written outside its generated block (the analysis), and the
block between the markers is replaced by each published run.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

BEGIN = "<!-- BEGIN GENERATED: python -m benchmarks.fleet --publish -->"
END = "<!-- END GENERATED -->"


def machine() -> dict[str, Any]:
    """What this run ran on."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    for package in ("redis", "uvloop", "anyio", "hiredis"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    return info


def git_commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


def changed_between(first: str, last: str, path: str) -> bool:
    """Whether ``path`` differs between two commits (True when git cannot tell)."""
    done = subprocess.run(
        ["git", "diff", "--quiet", first, last, "--", path], capture_output=True, check=False
    )
    return done.returncode != 0


def write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    key: json.dumps(value) if isinstance(value, dict | list) else value
                    for key, value in row.items()
                }
            )


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fleet_table(rows: list[dict[str, Any]]) -> str:
    """The headline table: one line per cronrace sweep cell."""
    header = [
        "N × J",
        "claims/s",
        "claim cmds per node·job·tick (losers)",
        "tick-path cmds sent/tick (bound N·J+3·J)",
        "background cmds/tick",
        "Redis cmds executed/tick",
        "claim RTT per node wake-up",
        "Redis CPU ms per 1k claims",
        "agent CPU µs per claim (× raw)",
        "fire lag p50 / p99 / max ms",
        "dup",
        "missed",
    ]
    out = []
    for row in rows:
        cell = f"{row['nodes']} × {row['jobs']}"
        if row.get("status") != "ok":
            reason = row.get("reason", "")
            out.append([cell, f"**{row.get('status')}**: {reason}"] + [""] * (len(header) - 2))
            continue
        out.append(
            [
                cell,
                _fmt(row["claims_per_s"], 0),
                f"{_fmt(row['claims_per_node_job_tick'], 3)} "
                f"({_fmt(row['loser_cmds_per_node_job_tick'], 3)})",
                f"{_fmt(row['tick_cmds_sent_per_tick'], 1)} ({_fmt(row['tick_cmds_bound'])})",
                _fmt(row["background_cmds_per_tick"], 1),
                _fmt(row["redis_cmds_executed_per_tick"], 1),
                _fmt(row["rtt_per_node_wake"], 2),
                _fmt(row["redis_cpu_ms_per_1k_claims"], 1),
                f"{_fmt(row['agent_cpu_us_per_claim'], 0)} ({_fmt(row['agent_cpu_vs_raw'], 1)}×)",
                _fire_lag(row),
                _fmt(row["duplicates"]),
                _fmt(row["missed"]),
            ]
        )
    return _table(header, out)


def _fire_lag(row: dict[str, Any]) -> str:
    """Fire lag as ``p50 / p99 / max`` in milliseconds."""
    return (
        f"{_fmt(row['fire_lag_p50_ms'], 1)} / {_fmt(row['fire_lag_p99_ms'], 1)} / "
        f"{_fmt(row['fire_lag_max_ms'], 1)}"
    )


def lag_table(rows: list[dict[str, Any]]) -> str:
    """Where the fire lag goes: wake-up, claim pipeline, decide pipeline, handler start.

    Rows of runs before the dense cursor (issue 39) name the decision ``acquire``: their
    ``acquire_rtt_*`` figures fill the decide column (the same step: the winner's second
    round trip)."""
    header = [
        "N × J",
        "processes",
        "wake-up lag p50 / p99",
        "claim pipeline p50 / p99",
        "decide pipeline p50 / p99",
        "fire lag p50 / p99",
        "agent CPU (cores)",
        "Redis µs per EVALSHA decide+end_run",
    ]
    out = []
    for row in rows:
        if row.get("status") != "ok":
            continue
        usec = row.get("redis_usec_per_call", {})
        out.append(
            [
                f"{row['nodes']} × {row['jobs']}",
                _fmt(row["procs"]),
                f"{_fmt(row['wake_lag_p50_ms'], 1)} / {_fmt(row['wake_lag_p99_ms'], 1)}",
                f"{_fmt(row['claim_rtt_p50_ms'], 1)} / {_fmt(row['claim_rtt_p99_ms'], 1)}",
                f"{_fmt(_decide_rtt(row, 50), 1)} / {_fmt(_decide_rtt(row, 99), 1)}",
                f"{_fmt(row['fire_lag_p50_ms'], 1)} / {_fmt(row['fire_lag_p99_ms'], 1)}",
                _fmt(row["client_cpu_cores"], 3),
                _fmt(usec.get("evalsha"), 1),
            ]
        )
    return _table(header, out) + "\n\nAll times in ms, measured in the agents (wall clock)."


def _decide_rtt(row: dict[str, Any], pct: int) -> Any:
    """The decide pipeline's percentile (``acquire`` in rows of the old protocol)."""
    return row.get(f"decide_rtt_p{pct}_ms", row.get(f"acquire_rtt_p{pct}_ms"))


def losers_table(rows: list[dict[str, Any]]) -> str:
    """Losers-only cells: the claim path's CPU against raw redis-py at the same batch."""
    header = [
        "N × J",
        "claims/s",
        "claim cmds per node·job·tick",
        "agent CPU µs per claim",
        "raw redis-py µs per SET (B = J)",
        "Store.claim µs per SET (B = J)",
        "agent ÷ raw",
        "raw redis-py µs per SET, paced like the fleet",
        "agent ÷ paced raw",
        "Redis CPU ms per 1k claims",
        "runs (must be 0)",
    ]
    out = []
    for row in rows:
        cell = f"{row['nodes']} × {row['jobs']}"
        if row.get("status") != "ok":
            out.append(
                [cell, f"**{row.get('status')}**: {row.get('reason', '')}"]
                + [""] * (len(header) - 2)
            )
            continue
        out.append(
            [
                cell,
                _fmt(row["claims_per_s"], 0),
                _fmt(row["claims_per_node_job_tick"], 3),
                _fmt(row["agent_cpu_us_per_claim"], 1),
                _fmt(row["raw_cpu_us_per_set"], 1),
                _fmt(row["store_claim_cpu_us_per_set"], 1),
                f"{_fmt(row['agent_cpu_vs_raw'], 2)}×",
                _fmt(row.get("paced_raw_cpu_us_per_set"), 1),
                f"{_fmt(row.get('agent_cpu_vs_paced_raw'), 2)}× "
                f"({', '.join(_fmt(v, 2) for v in row.get('agent_cpu_vs_paced_raw_repeats', []))})",
                _fmt(row["redis_cpu_ms_per_1k_claims"], 1),
                _fmt(row["runs_in_window"]),
            ]
        )
    return _table(header, out)


def racers_table(rows: list[dict[str, Any]]) -> str:
    """racers = k cells beside racers = all, and the churn cell."""
    header = [
        "cell",
        "racers",
        "claims per job-tick",
        "Redis cmds per tick (sent / executed)",
        "fire lag p50 / p99 ms",
        "runs per node max / mean",
        "duplicates / missed",
        "late runs (> 1 s)",
    ]
    out = []
    for r in rows:
        cell = f"{r['nodes']} × {r['jobs']}" + (" churn" if r.get("kind") == "churn" else "")
        if r.get("status") != "ok":
            out.append(
                [
                    cell,
                    str(r.get("racers")),
                    r.get("status", "?"),
                    str(r.get("reason", ""))[:120],
                    "",
                    "",
                    "",
                    "",
                ]
            )
            continue
        out.append(
            [
                cell,
                str(r.get("racers")),
                _fmt(r.get("claims_per_job_tick")),
                f"{_fmt(r.get('redis_cmds_sent_per_tick'), 0)} / "
                f"{_fmt(r.get('redis_cmds_executed_per_tick'), 0)}",
                f"{_fmt(r.get('fire_lag_p50_ms'), 0)} / {_fmt(r.get('fire_lag_p99_ms'), 0)}",
                f"{r.get('runs_per_node_max', '–')} / {_fmt(r.get('runs_per_node_mean'), 1)}"
                f" ({_fmt(r.get('spread_max_over_mean'))})",
                f"{r['duplicates']} / {r['missed']}",
                str(r.get("late_runs_over_1s", "–")),
            ]
        )
    return _table(header, out) if out else "(not run)"


def floor_table(floor: dict[str, Any]) -> str:
    """cronrace's winner path against bare redis-py doing the same work."""
    header = [
        "N × J",
        "floor CPU µs per run",
        "cronrace CPU µs per run (process)",
        "of which background",
        "winner's path µs per run",
        "winner's path over floor",
        "process over floor",
        "fire lag p99 over floor",
        "repeats",
    ]
    rows = [
        [
            f"{c['nodes']} × {c['jobs']}",
            _fmt(c.get("floor_cpu_us_per_run"), 1),
            _fmt(c.get("cronrace_cpu_us_per_run"), 1),
            _fmt(c.get("background_cpu_us_per_run"), 1),
            _fmt(c.get("winner_path_cpu_us_per_run"), 1),
            _fmt(c.get("cpu_over_floor")),
            _fmt(c.get("process_cpu_over_floor")),
            _fmt(c.get("lag_p99_over_floor")),
            str(len(c.get("repeats", []))),
        ]
        for c in floor.get("cells", [])
    ]
    return _table(header, rows) if rows else "(not run)"


def racers_plot(out_dir: Path, rows: list[dict[str, Any]]) -> Path:
    """Claims per tick against N, for all, k = 2 and k = 3 (one line per setting and J)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok" and r.get("kind", "sweep") == "sweep"]
    fig, ax = plt.subplots(figsize=(7, 5))
    styles = {"all": "o-", "2": "s--", "3": "^:"}
    for racers, style in styles.items():
        for jobs in sorted({r["jobs"] for r in ok}):
            sel = sorted(
                (r for r in ok if str(r.get("racers", "all")) == racers and r["jobs"] == jobs),
                key=lambda r: r["nodes"],
            )
            if not sel:
                continue
            ax.plot(
                [r["nodes"] for r in sel],
                [r["claims_per_job_tick"] * jobs for r in sel],
                style,
                label=f"racers = {racers}, J = {jobs}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes N")
    ax.set_ylabel("claims per tick (all jobs)")
    ax.set_title("Claims per tick against N: all nodes race, or k of them")
    ax.legend(fontsize=8)
    return _save(plt, fig, out_dir / "racers_claims.png")


def peer_table(rows: list[dict[str, Any]]) -> str:
    header = [
        "system",
        "N × J",
        "cmds sent/tick",
        "cmds executed/tick",
        "Redis CPU (cores)",
        "client CPU µs per job·tick",
        "fire lag p50 / p99 / max ms",
        "dup",
        "missed",
    ]
    out = []
    for row in rows:
        cell = f"{row['nodes']} × {row['jobs']}"
        if row.get("status") != "ok":
            out.append(
                [row["system"], cell, f"**{row.get('status')}**: {row.get('reason', '')}"]
                + [""] * (len(header) - 3)
            )
            continue
        out.append(
            [
                row["system"],
                cell,
                _fmt(row["redis_cmds_sent_per_tick"], 1),
                _fmt(row["redis_cmds_executed_per_tick"], 1),
                _fmt(row["redis_cpu_s_per_s"], 4),
                _fmt(row["client_cpu_us_per_job_tick"], 0),
                _fire_lag(row),
                _fmt(row["duplicates"]),
                _fmt(row["missed"]),
            ]
        )
    return _table(header, out)


def chaos_table(rows: list[dict[str, Any]]) -> str:
    header = [
        "system",
        "N × J",
        "ticks",
        "paused",
        "duplicates",
        "where (tick offset: count)",
        "extra runs started (s after tick)",
        "missed",
        "run records",
    ]
    out = []
    for row in rows:
        cell = f"{row['nodes']} × {row['jobs']}"
        if row.get("status") != "ok":
            out.append([row["system"], cell, row.get("reason", "")] + [""] * (len(header) - 3))
            continue
        outcomes = row.get("record_outcomes")
        where = ", ".join(f"{k}: {v}" for k, v in row.get("duplicates_by_tick", {}).items())
        extra = " – ".join(str(v) for v in row.get("duplicate_extra_run_lag_s", []))
        out.append(
            [
                row["system"],
                cell,
                _fmt(row["ticks"]),
                f"{_fmt(row.get('paused_for_s'), 1)} s at tick +{_fmt(row.get('paused_at_s'), 1)}",
                _fmt(row["duplicates"]),
                where or "–",
                extra or "–",
                _fmt(row["missed"]),
                json.dumps(outcomes) if outcomes else "– (arq keeps none)",
            ]
        )
    return _table(header, out)


def limit_table(limit: dict[str, Any], raw: dict[str, Any]) -> str:
    lines = []
    if limit.get("available"):
        lines.append(
            _table(
                [
                    "redis-benchmark SET NX PX (random keys)",
                    "requests/s",
                    "p99 ms",
                    "Redis CPU ms per 1k SETs",
                ],
                [
                    [
                        name if pipe == 1 else f"{name} (-P {limit['pipeline']})",
                        _fmt(limit[f"{name}_rps"], 0),
                        _fmt(limit[f"{name}_p99_ms"], 2),
                        _fmt(limit[f"{name}_redis_cpu_ms_per_1k"], 1),
                    ]
                    for name, pipe in (("unpipelined", 1), ("pipelined", limit["pipeline"]))
                ],
            )
        )
    else:
        lines.append(f"redis-benchmark unavailable: {limit.get('reason')}")
    if raw and "error" not in raw:
        batches = sorted({value["batch"] for value in raw.values()})
        lines.append("")
        lines.append(
            _table(
                ["pipeline of B SET NX PX", *[f"B = {b}" for b in batches]],
                [
                    ["raw redis-py, CPU µs per SET"]
                    + [_fmt(raw[f"raw:{b}"]["cpu_us_per_set"], 1) for b in batches],
                    ["cronrace Store.claim, CPU µs per SET"]
                    + [_fmt(raw[f"store:{b}"]["cpu_us_per_set"], 1) for b in batches],
                ],
            )
        )
    elif raw:
        lines.append(f"raw client baseline failed: {raw['error']}")
    return "\n".join(lines)


def can_plot() -> bool:
    """Whether matplotlib (the ``bench`` extra) is installed."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def plots(
    out_dir: Path,
    fleet: list[dict[str, Any]],
    peers: list[dict[str, Any]],
    limit: dict[str, Any],
    chaos: list[dict[str, Any]],
) -> list[Path]:
    """Draw the curves; returns the PNG files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = sorted((r for r in fleet if r.get("status") == "ok"), key=lambda r: r["nodes_x_jobs"])
    over = [r for r in fleet if r.get("status") != "ok"]
    job_counts = sorted({r["jobs"] for r in ok})
    colours = dict(
        zip(job_counts, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=False)
    )
    written = [
        _claims_plot(plt, out_dir, ok, over, job_counts, colours, limit),
        _lag_plot(plt, out_dir, ok, job_counts, colours),
    ]
    pairs = _pairs(fleet, peers)
    if pairs:
        written.append(_peer_plot(plt, out_dir, pairs, chaos))
    return written


def _claims_plot(
    plt: Any,
    out_dir: Path,
    ok: list[dict[str, Any]],
    over: list[dict[str, Any]],
    job_counts: list[int],
    colours: dict[int, str],
    limit: dict[str, Any],
) -> Path:
    fig, (claims, cpu) = plt.subplots(1, 2, figsize=(12, 5))
    for jobs in job_counts:
        sel = [r for r in ok if r["jobs"] == jobs]
        xs = [r["nodes_x_jobs"] for r in sel]
        claims.plot(
            xs, [r["claims_per_s"] for r in sel], "o-", color=colours[jobs], label=f"J = {jobs}"
        )
        cpu.plot(
            xs,
            [r["redis_cpu_ms_per_1k_claims"] for r in sel],
            "o-",
            color=colours[jobs],
            label=f"J = {jobs}",
        )
    if over:
        claims.plot(
            [r["nodes_x_jobs"] for r in over],
            [r["nodes_x_jobs"] for r in over],
            "kx",
            markersize=10,
            label="needed, exceeds this 2-core machine",
        )
    for name, style in (("pipelined", "--"), ("unpipelined", ":")):
        if limit.get(f"{name}_rps"):
            claims.axhline(
                limit[f"{name}_rps"],
                color="grey",
                linestyle=style,
                label=f"redis-benchmark SET NX PX, {name}",
            )
            cpu.axhline(
                limit[f"{name}_redis_cpu_ms_per_1k"],
                color="grey",
                linestyle=style,
                label=f"redis-benchmark SET NX PX, {name}",
            )
    for ax, title, ylabel in (
        (claims, "Claims per second", "claims per second"),
        (cpu, "Redis CPU per 1,000 claims (incl. winners' scripts)", "Redis CPU ms per 1k claims"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N × J (claims per tick)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle("cronrace claim load on one redis-server, 1-second jobs")
    fig.tight_layout()
    return _save(plt, fig, out_dir / "claims_and_redis_cpu.png")


def _lag_plot(
    plt: Any,
    out_dir: Path,
    ok: list[dict[str, Any]],
    job_counts: list[int],
    colours: dict[int, str],
) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    for jobs in job_counts:
        sel = [r for r in ok if r["jobs"] == jobs]
        xs = [r["nodes_x_jobs"] for r in sel]
        ax.plot(
            xs,
            [r["fire_lag_p99_ms"] for r in sel],
            "s-",
            color=colours[jobs],
            label=f"p99, J = {jobs}",
        )
        ax.plot(
            xs,
            [r["fire_lag_p50_ms"] for r in sel],
            "o--",
            color=colours[jobs],
            alpha=0.6,
            label=f"p50, J = {jobs}",
        )
        for r in sel:
            ax.annotate(
                f"{r['nodes']}×{r['jobs']}",
                (r["nodes_x_jobs"], r["fire_lag_p99_ms"]),
                fontsize=6,
                textcoords="offset points",
                xytext=(3, 3),
            )
    ax.axhline(5, color="grey", linestyle=":", label="target: p99 5 ms at 10 × 100")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N × J (claims per tick)")
    ax.set_ylabel("fire lag: handler start − tick (ms)")
    ax.set_title("cronrace fire lag (simulated agents share fleet processes)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return _save(plt, fig, out_dir / "fire_lag.png")


def _peer_plot(plt: Any, out_dir: Path, pairs: list[Any], chaos: list[dict[str, Any]]) -> Path:
    fig, (cmds, lag, dups) = plt.subplots(
        1, 3, figsize=(14, 4.5), gridspec_kw={"width_ratios": [3, 3, 1.4]}
    )
    labels = [f"{n}×{j}" for (n, j), _ in pairs]
    xs = list(range(len(pairs)))
    width = 0.38
    ours = [p[1][0] for p in pairs]
    theirs = [p[1][1] for p in pairs]
    left = [x - width / 2 for x in xs]
    right = [x + width / 2 for x in xs]
    cmds.bar(
        left,
        [r["redis_cmds_sent_per_tick"] for r in ours],
        width,
        label="cronrace, with per-node background",
        color="tab:blue",
    )
    cmds.bar(
        left,
        [r["tick_cmds_sent_per_tick"] for r in ours],
        width,
        label="cronrace, tick path only",
        color="tab:cyan",
    )
    cmds.bar(
        right,
        [r["redis_cmds_sent_per_tick"] for r in theirs],
        width,
        label="arq",
        color="tab:orange",
    )
    cmds.set_ylabel("Redis commands sent per tick")
    lag.bar(
        left, [r["fire_lag_p99_ms"] for r in ours], width, label="cronrace p99", color="tab:blue"
    )
    lag.bar(
        right, [r["fire_lag_p99_ms"] for r in theirs], width, label="arq p99", color="tab:orange"
    )
    lag.set_ylabel("fire lag p99 (ms)")
    for ax in (cmds, lag):
        ax.set_xticks(xs, labels)
        ax.set_yscale("log")
        ax.set_xlabel("N workers × J jobs")
        ax.legend(fontsize=7)
    done = [r for r in chaos if "duplicates" in r]
    if done:
        dups.bar(
            [r["system"] for r in done],
            [r["duplicates"] for r in done],
            color=["tab:blue" if r["system"] == "cronrace" else "tab:orange" for r in done],
        )
        for index, r in enumerate(done):
            dups.annotate(
                str(r["duplicates"]),
                (index, r["duplicates"]),
                ha="center",
                textcoords="offset points",
                xytext=(0, 3),
            )
        first = done[0]
        dups.set_title(
            f"duplicates, {first['nodes']}×{first['jobs']}, staggered starts,\n"
            f"one node paused 3 s, {first['ticks']} ticks",
            fontsize=8,
        )
    fig.suptitle("cronrace vs arq cron jobs on the same Redis")
    fig.tight_layout()
    return _save(plt, fig, out_dir / "cronrace_vs_arq.png")


def _pairs(fleet: list[dict[str, Any]], peers: list[dict[str, Any]]) -> list[Any]:
    ours = {(r["nodes"], r["jobs"]): r for r in fleet if r.get("status") == "ok"}
    out = []
    for row in peers:
        key = (row["nodes"], row["jobs"])
        if row.get("status") == "ok" and key in ours:
            out.append((key, (ours[key], row)))
    return sorted(out)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def update_results_md(path: Path, generated: str, begin: str = BEGIN) -> None:
    """Replace a generated block of RESULTS.md (the one opened by ``begin``), keeping the
    hand-written analysis and the other blocks."""
    block = f"{begin}\n{generated.rstrip()}\n{END}"
    if path.exists():
        text = path.read_text()
        if begin in text and END in text.split(begin, 1)[-1]:
            head, rest = text.split(begin, 1)
            tail = rest.split(END, 1)[1]
            path.write_text(head + block + tail)
            return
        path.write_text(text.rstrip() + "\n\n" + block + "\n")
        return
    path.write_text(f"# cronrace benchmarks\n\n{block}\n")
