"""Before and after the dense cursor (issue 39), side by side, repeated.

``python -m benchmarks.cursor_ab --before DIR --after DIR`` runs the same cells with two
checkouts of cronrace, each with its own ``.venv`` (``pip install -e '.[test,bench]'``):
``--before`` the watermark protocol (branch ``main`` before issue 39), ``--after`` the
dense cursor. Each repeat runs both, one right after the other, the side that goes first
alternating (the machine is shared and its load drifts: a ratio is worth something only
between two runs measured next to each other). Per repeat and side, in that checkout's
own harness and code:

1. ``python -m benchmarks.fleet --quick --cells 5x1,10x100 --floor 1x100 --racers
   10x100:2`` (no peer, chaos or limit): 1-second jobs; 5 x 1 gives a winner's round
   trips per run (one job: nothing batched), 10 x 100 the claims, the client and Redis
   CPU and the fire lag, the floor cell the winner's path CPU per run, and 10 x 100 at
   racers = 2 the claims per job-tick of 1-second jobs (which never recheck);
2. the recheck cell: ``RECHECK_NODES`` x ``RECHECK_JOBS`` minutely jobs (``H * * * * *``,
   spread over the minute) at racers = 2 for ``RECHECK_TICKS`` 1-second ticks: a job
   whose period is longer than ``undecided_claim_s`` (3 s) has its tick claimed again by
   the next in line after a lost claim, so its claims per job-tick include the rechecks.

The figures are medians of the repeats, and the ratio after / before the median of each
repeat's ratio. It writes ``ab.json``, ``ab.md`` (the table) and ``ab.png`` (the plot)
to ``--out``. The side runs (``side`` sub-command) import the benchmark harness of the
checkout they run in (their working directory), not this file's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FLEET_ARGS = (
    "--quick",
    *("--cells", "5x1,10x100"),
    *("--floor", "1x100"),
    *("--racers", "10x100:2"),
    *("--no-peer", "--no-chaos", "--no-limit"),
)
RECHECK_NODES = 10
RECHECK_JOBS = 300
RECHECK_TICKS = 60
RECHECK_SCHEDULE = "H * * * * *"
#: Store phases of a winner's work after its claim: the old protocol's names and the new.
WINNER_PHASES = ("acquire", "finish", "decide", "end", "record")

#: (key, label, unit, digits): the figures of the table and the plot, in order.
FIGURES = (
    ("claims_per_node_job_tick", "claims per node-job-tick (10 × 100)", "", 2),
    ("loser_cmds_per_node_job_tick", "loser commands per node-job-tick (10 × 100)", "", 2),
    ("winner_rtt_per_run", "winner round trips per run (5 × 1)", "", 2),
    ("winner_cmds_per_run", "winner commands per run, after the claim (5 × 1)", "", 2),
    ("decide_rtt_p50_ms", "decide pipeline p50, ms (10 × 100)", "ms", 1),
    ("client_cpu_us_per_run", "client CPU per run, µs (10 × 100, whole fleet)", "µs", 0),
    ("winner_path_cpu_us_per_run", "winner path CPU per run, µs (1 × 100)", "µs", 0),
    ("floor_cpu_us_per_run", "bare redis-py floor CPU per run, µs (1 × 100)", "µs", 0),
    ("store_cpu_ms_per_1k_claims", "store CPU per 1,000 claims, ms (10 × 100)", "ms", 1),
    ("store_cpu_ms_per_1k_claims_1job", "store CPU per 1,000 claims, ms (5 × 1)", "ms", 1),
    ("redis_usec_per_evalsha", "Redis µs per EVALSHA (10 × 100)", "µs", 1),
    ("fire_lag_p50_ms", "fire lag p50, ms (10 × 100)", "ms", 1),
    ("fire_lag_p99_ms", "fire lag p99, ms (10 × 100)", "ms", 1),
    ("racers2_claims_per_job_tick", "claims per job-tick, racers = 2, 1-s jobs (10 × 100)", "", 2),
    (
        "recheck_claims_per_job_tick",
        f"claims per job-tick, racers = 2, minutely ({RECHECK_NODES} × {RECHECK_JOBS})",
        "",
        2,
    ),
    ("recheck_cpu_us_per_run", "client CPU per run, µs, minutely racers = 2", "µs", 0),
    ("duplicates", "duplicate runs (every cell)", "", 0),
    ("missed", "missed ticks (every cell)", "", 0),
)


# -- a side: one checkout's harness, run in its own directory -------------------------------


def side(out: Path) -> int:
    """Run the fleet cells and the recheck cell with the checkout in the working directory."""
    sys.path.insert(0, os.getcwd())  # that checkout's benchmarks package, not this file's
    out.mkdir(parents=True, exist_ok=True)
    fleet_out = out / "fleet"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet", *FLEET_ARGS, "--out", str(fleet_out)],
        capture_output=True,
        text=True,
        check=False,
    )
    (out / "fleet.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        return 1
    (out / "recheck.json").write_text(json.dumps(_recheck_cell(), default=str))
    return 0


def _recheck_cell() -> dict[str, Any]:
    from benchmarks.cells import CellSpec, Context, run_cell
    from benchmarks.peer import uvloop_installed
    from benchmarks.server import BenchServer

    workdir = Path(tempfile.mkdtemp(prefix="cronrace-ab-"))
    loop = "uvloop" if uvloop_installed() else "asyncio"
    with BenchServer(workdir / "redis") as server:
        ctx = Context(server=server, workdir=workdir, loop=loop)
        spec = CellSpec(
            "cronrace",
            RECHECK_NODES,
            RECHECK_JOBS,
            ticks=RECHECK_TICKS,
            procs=1,
            racers="2",
            warmup_ticks=6,
            schedule=RECHECK_SCHEDULE,
        )
        row: dict[str, Any] = run_cell(spec, ctx, lambda _text, _fraction: None)
    return row


# -- the figures of one side's run ----------------------------------------------------------


def figures(side_dir: Path) -> dict[str, Any]:
    """The figures of the table from one side's ``results.json`` and ``recheck.json``."""
    result = json.loads((side_dir / "fleet" / "results.json").read_text())
    recheck = json.loads((side_dir / "recheck.json").read_text())
    rows = {(r["nodes"], r["jobs"]): r for r in result["fleet"] if r.get("status") == "ok"}
    one, big = rows.get((5, 1)), rows.get((10, 100))
    racers = [r for r in result.get("racers", []) if r.get("status") == "ok"]
    floor = (result.get("floor") or {}).get("cells") or [{}]
    out: dict[str, Any] = {"commit": result.get("commit")}
    if big is not None:
        out.update(
            claims_per_node_job_tick=big["claims_per_node_job_tick"],
            loser_cmds_per_node_job_tick=big["loser_cmds_per_node_job_tick"],
            decide_rtt_p50_ms=big.get("decide_rtt_p50_ms", big.get("acquire_rtt_p50_ms")),
            client_cpu_us_per_run=big["agent_cpu_us_per_run"],
            store_cpu_ms_per_1k_claims=big["redis_cpu_ms_per_1k_claims"],
            redis_usec_per_evalsha=big["redis_usec_per_call"].get("evalsha"),
            fire_lag_p50_ms=big["fire_lag_p50_ms"],
            fire_lag_p99_ms=big["fire_lag_p99_ms"],
            rtt_by_phase_per_tick_10x100=big["rtt_by_phase_per_tick"],
        )
    if one is not None and one["runs_in_window"]:
        phases = one["rtt_by_phase_per_tick"]
        runs_per_tick = one["runs_in_window"] / one["ticks"]
        winner = sum(phases.get(p, 0) for p in WINNER_PHASES)
        out.update(
            # The winner's claim is one round trip; the rest of its phases are its own.
            winner_rtt_per_run=round(1 + winner / runs_per_tick, 3),
            winner_cmds_per_run=one["winner_cmds_per_job_tick"],
            store_cpu_ms_per_1k_claims_1job=one["redis_cpu_ms_per_1k_claims"],
            rtt_by_phase_per_tick_5x1=phases,
            redis_cmds_by_command_5x1=one["redis_cmds_by_command"],
        )
    out.update(
        winner_path_cpu_us_per_run=floor[0].get("winner_path_cpu_us_per_run"),
        floor_cpu_us_per_run=floor[0].get("floor_cpu_us_per_run"),
        cronrace_cpu_us_per_run_1x100=floor[0].get("cronrace_cpu_us_per_run"),
    )
    if racers:
        out["racers2_claims_per_job_tick"] = racers[0]["claims_per_job_tick"]
    if recheck.get("status") == "ok":
        out.update(
            recheck_claims_per_job_tick=recheck["claims_per_job_tick"],
            recheck_cpu_us_per_run=recheck["agent_cpu_us_per_run"],
            recheck_fire_lag_p99_ms=recheck["fire_lag_p99_ms"],
            recheck_rtt_by_phase_per_tick=recheck["rtt_by_phase_per_tick"],
            recheck_job_ticks=recheck["job_ticks"],
        )
    else:
        out["recheck_status"] = f"{recheck.get('status')}: {recheck.get('reason')}"
    cells = [*rows.values(), *racers, recheck]
    out["duplicates"] = sum(int(r.get("duplicates") or 0) for r in cells)
    out["missed"] = sum(int(r.get("missed") or 0) for r in cells)
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(repeats: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians of each side's figures, and the median of the repeats' after/before ratios."""
    table = {}
    for key, *_rest in FIGURES:
        before = [r["before"][key] for r in repeats if r["before"].get(key) is not None]
        after = [r["after"][key] for r in repeats if r["after"].get(key) is not None]
        ratios = [
            r["after"][key] / r["before"][key]
            for r in repeats
            if r["after"].get(key) is not None and r["before"].get(key)
        ]
        table[key] = {
            "before": _median(before),
            "after": _median(after),
            "before_repeats": before,
            "after_repeats": after,
            "ratio": _median(ratios),
        }
    return table


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def markdown(table: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        "| figure | before (`main`) | after (dense cursor) | after / before |",
        "|---|---:|---:|---:|",
    ]
    for key, label, _unit, digits in FIGURES:
        row = table[key]
        ratio = "–" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(
            f"| {label} | {_fmt(row['before'], digits)} | {_fmt(row['after'], digits)} | {ratio} |"
        )
    lines += [
        "",
        f"Medians of {meta['repeats']} repeats; before `{meta['before_commit']}`, after "
        f"`{meta['after_commit']}`; load average {meta['load_start']} at start, "
        f"{meta['load_end']} at end; {meta['wall_s']:.0f} s wall.",
    ]
    return "\n".join(lines) + "\n"


def plot(table: dict[str, Any], path: Path) -> Path:
    """One small panel per figure: before and after (the repeats as dots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [f for f in FIGURES if f[0] not in ("duplicates", "missed")]
    cols = 4
    rows = -(-len(shown) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows))
    for ax, (key, label, _unit, _digits) in zip(axes.flat, shown, strict=False):
        row = table[key]
        values = [row["before"] or 0, row["after"] or 0]
        ax.bar([0, 1], values, color=["#8c8c8c", "#1f77b4"], width=0.6)
        for x, side_key in ((0, "before_repeats"), (1, "after_repeats")):
            ax.plot([x] * len(row[side_key]), row[side_key], "k.", markersize=4)
        ax.set_xticks([0, 1], ["before", "after"])
        ratio = "" if row["ratio"] is None else f"  (×{row['ratio']:.2f})"
        ax.set_title(label + ratio, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shown) :]:
        ax.axis("off")
    fig.suptitle("cronrace before and after the dense cursor (issue 39): medians, repeats as dots")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- the orchestrator -------------------------------------------------------------------


def _commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def run_side(checkout: Path, out: Path) -> None:
    python = checkout / ".venv" / "bin" / "python"
    started = time.time()
    done = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "side", "--out", str(out)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the side run in {checkout} failed: {done.stderr[-2000:]}")
    print(f"  {checkout}: {time.time() - started:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cursor_ab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("side", help="run one side's cells in the working directory")
    one.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before", type=Path, help="checkout of the old protocol")
    parser.add_argument("--after", type=Path, help="checkout of the dense cursor")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "ab")
    parser.add_argument(
        "--from-dir", action="store_true", help="run nothing: summarize --out's side runs"
    )
    args = parser.parse_args(argv)
    if args.command == "side":
        return side(args.out)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    load_start = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    started = time.time()
    if not args.from_dir:
        if args.before is None or args.after is None:
            parser.error("--before and --after are required")
        for repeat in range(args.repeats):
            order = ("before", "after") if repeat % 2 == 0 else ("after", "before")
            print(f"repeat {repeat + 1}/{args.repeats}: {' then '.join(order)}", flush=True)
            for name in order:
                checkout = args.before if name == "before" else args.after
                run_side(checkout.resolve(), (out / f"r{repeat}-{name}").resolve())
    repeats = []
    for repeat in range(args.repeats):
        sides = {name: out / f"r{repeat}-{name}" for name in ("before", "after")}
        if all((d / "recheck.json").exists() for d in sides.values()):
            repeats.append({name: figures(d) for name, d in sides.items()})
    table = summarize(repeats)
    meta = {
        "repeats": len(repeats),
        "before_commit": repeats[0]["before"]["commit"] if repeats else None,
        "after_commit": repeats[0]["after"]["commit"] if repeats else None,
        "load_start": load_start,
        "load_end": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "wall_s": time.time() - started,
    }
    (out / "ab.json").write_text(
        json.dumps({"meta": meta, "table": table, "repeats": repeats}, indent=1, default=str)
    )
    text = markdown(table, meta)
    (out / "ab.md").write_text(text)
    plot(table, out / "ab.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
