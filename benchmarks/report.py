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
    for module in ("redis", "uvloop", "anyio", "hiredis"):
        try:
            info[module] = __import__(module).__version__
        except (ImportError, AttributeError):
            info[module] = None
    return info


def git_commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


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
                f"{_fmt(row['fire_lag_p50_ms'], 1)} / {_fmt(row['fire_lag_p99_ms'], 1)} / "
                f"{_fmt(row['fire_lag_max_ms'], 1)}",
                _fmt(row["duplicates"]),
                _fmt(row["missed"]),
            ]
        )
    return _table(header, out)


def lag_table(rows: list[dict[str, Any]]) -> str:
    """Where the fire lag goes: wake-up, claim pipeline, acquire pipeline, handler start."""
    header = [
        "N × J",
        "processes",
        "wake-up lag p50 / p99",
        "claim pipeline p50 / p99",
        "acquire pipeline p50 / p99",
        "fire lag p50 / p99",
        "agent CPU (cores)",
        "Redis µs per EVALSHA acquire+release",
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
                f"{_fmt(row['acquire_rtt_p50_ms'], 1)} / {_fmt(row['acquire_rtt_p99_ms'], 1)}",
                f"{_fmt(row['fire_lag_p50_ms'], 1)} / {_fmt(row['fire_lag_p99_ms'], 1)}",
                _fmt(row["client_cpu_cores"], 3),
                _fmt(usec.get("evalsha"), 1),
            ]
        )
    return _table(header, out) + "\n\nAll times in ms, measured in the agents (wall clock)."


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
                f"{_fmt(row.get('agent_cpu_vs_paced_raw'), 2)}×",
                _fmt(row["redis_cpu_ms_per_1k_claims"], 1),
                _fmt(row["runs_in_window"]),
            ]
        )
    return _table(header, out)


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
                f"{_fmt(row['fire_lag_p50_ms'], 1)} / {_fmt(row['fire_lag_p99_ms'], 1)} / "
                f"{_fmt(row['fire_lag_max_ms'], 1)}",
                _fmt(row["duplicates"]),
                _fmt(row["missed"]),
            ]
        )
    return _table(header, out)


def chaos_table(rows: list[dict[str, Any]]) -> str:
    header = ["system", "N × J", "ticks", "paused", "duplicates", "missed", "outcomes"]
    out = []
    for row in rows:
        if row.get("status") != "ok":
            out.append(
                [row["system"], f"{row['nodes']} × {row['jobs']}", row.get("reason", "")] + [""] * 4
            )
            continue
        outcomes = row.get("record_outcomes")
        out.append(
            [
                row["system"],
                f"{row['nodes']} × {row['jobs']}",
                _fmt(row["ticks"]),
                f"{_fmt(row.get('paused_for_s'), 1)} s at tick +{_fmt(row.get('paused_at_s'), 1)}",
                _fmt(row["duplicates"]),
                _fmt(row["missed"]),
                json.dumps(outcomes) if outcomes else "–",
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
    out_dir: Path, fleet: list[dict[str, Any]], peers: list[dict[str, Any]], limit: dict[str, Any]
) -> list[Path]:
    """Draw the curves; returns the PNG files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    ok = sorted((r for r in fleet if r.get("status") == "ok"), key=lambda r: r["nodes_x_jobs"])
    over = [r for r in fleet if r.get("status") != "ok"]

    fig, left = plt.subplots(figsize=(8, 5))
    for jobs in sorted({r["jobs"] for r in ok}):
        sel = [r for r in ok if r["jobs"] == jobs]
        left.plot(
            [r["nodes_x_jobs"] for r in sel],
            [r["claims_per_s"] for r in sel],
            "o-",
            label=f"claims/s, J = {jobs}",
        )
    if over:
        left.plot(
            [r["nodes_x_jobs"] for r in over],
            [r["nodes_x_jobs"] for r in over],
            "rx",
            markersize=10,
            label="required claims/s, exceeds this machine",
        )
    for key, style in (("pipelined_rps", "--"), ("unpipelined_rps", ":")):
        if limit.get(key):
            left.axhline(
                limit[key],
                color="grey",
                linestyle=style,
                label=f"redis-benchmark SET NX PX, {key.split('_')[0]}",
            )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("N × J (claims per tick)")
    left.set_ylabel("claims per second")
    right = left.twinx()
    right.plot(
        [r["nodes_x_jobs"] for r in ok],
        [r["redis_cpu_s_per_s"] * 100 for r in ok],
        "k^",
        label="Redis CPU %",
    )
    right.set_ylabel("Redis CPU (% of one core)")
    right.set_yscale("log")
    handles = left.get_legend_handles_labels()
    extra = right.get_legend_handles_labels()
    left.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=7, loc="upper left")
    left.set_title("Claim load against N × J (1-second jobs)")
    fig.tight_layout()
    written.append(_save(fig, out_dir / "claims_and_redis_cpu.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    for key, style in (
        ("fire_lag_p50_ms", "o-"),
        ("fire_lag_p99_ms", "s-"),
        ("fire_lag_max_ms", "^:"),
    ):
        ax.plot(
            [r["nodes_x_jobs"] for r in ok],
            [r[key] for r in ok],
            style,
            label=key.replace("fire_lag_", "").replace("_ms", ""),
        )
    for r in ok:
        ax.annotate(
            f"{r['nodes']}×{r['jobs']}",
            (r["nodes_x_jobs"], r["fire_lag_p99_ms"]),
            fontsize=6,
            textcoords="offset points",
            xytext=(3, 3),
        )
    ax.axhline(5, color="grey", linestyle="--", label="target p99 at 10 × 100: 5 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N × J")
    ax.set_ylabel("fire lag: handler start − tick (ms)")
    ax.set_title("cronrace fire lag against N × J")
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, out_dir / "fire_lag.png"))

    pairs = _pairs(fleet, peers)
    if pairs:
        fig, (cmds, lag) = plt.subplots(1, 2, figsize=(10, 4.5))
        labels = [f"{n}×{j}" for (n, j), _ in pairs]
        xs = range(len(pairs))
        width = 0.38
        ours = [p[1][0] for p in pairs]
        theirs = [p[1][1] for p in pairs]
        cmds.bar(
            [x - width / 2 for x in xs],
            [r["redis_cmds_sent_per_tick"] for r in ours],
            width,
            label="cronrace (incl. background)",
        )
        cmds.bar(
            [x - width / 2 for x in xs],
            [r["tick_cmds_sent_per_tick"] for r in ours],
            width,
            label="cronrace tick path",
            color="tab:cyan",
        )
        cmds.bar(
            [x + width / 2 for x in xs],
            [r["redis_cmds_sent_per_tick"] for r in theirs],
            width,
            label="arq",
            color="tab:orange",
        )
        cmds.set_xticks(list(xs), labels)
        cmds.set_yscale("log")
        cmds.set_ylabel("Redis commands sent per tick")
        cmds.set_xlabel("N workers × J jobs")
        cmds.legend(fontsize=8)
        lag.bar(
            [x - width / 2 for x in xs],
            [r["fire_lag_p99_ms"] for r in ours],
            width,
            label="cronrace p99",
        )
        lag.bar(
            [x + width / 2 for x in xs],
            [r["fire_lag_p99_ms"] for r in theirs],
            width,
            label="arq p99",
            color="tab:orange",
        )
        lag.set_xticks(list(xs), labels)
        lag.set_yscale("log")
        lag.set_ylabel("fire lag p99 (ms)")
        lag.set_xlabel("N workers × J jobs")
        lag.legend(fontsize=8)
        fig.suptitle("cronrace vs arq cron on the same Redis")
        fig.tight_layout()
        written.append(_save(fig, out_dir / "cronrace_vs_arq.png"))
    return written


def _pairs(fleet: list[dict[str, Any]], peers: list[dict[str, Any]]) -> list[Any]:
    ours = {(r["nodes"], r["jobs"]): r for r in fleet if r.get("status") == "ok"}
    out = []
    for row in peers:
        key = (row["nodes"], row["jobs"])
        if row.get("status") == "ok" and key in ours:
            out.append((key, (ours[key], row)))
    return sorted(out)


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def update_results_md(path: Path, generated: str) -> None:
    """Replace the generated block of RESULTS.md, keeping the hand-written analysis."""
    block = f"{BEGIN}\n{generated.rstrip()}\n{END}"
    if path.exists():
        text = path.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            path.write_text(head + block + tail)
            return
        path.write_text(text.rstrip() + "\n\n" + block + "\n")
        return
    path.write_text(f"# cronrace benchmarks\n\n{block}\n")
