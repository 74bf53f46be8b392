"""Fleets of thousands: each node's work against N, the large cells, start-up and churn.

``python -m benchmarks.scale work-vs-n --tag after`` runs N x 1,000 one-second jobs at
``racers = 2`` for N in 10, 20, 50, 100, 200 (``--repeats`` of each, medians reported)
and writes ``benchmarks/results/scale_work_vs_n_<tag>.json``; ``plot`` draws every tag
found there side by side (``work_vs_n.png``). A cell the machine cannot drive is still
measured (``measure_saturated``): its client CPU is then what the saturated processes
spent, a floor of what the fleet would need, and the row says ``saturated``.

``cells`` runs the large cells (200 x 1,000 and 1,000 x 100 one-second, k = 2 and 3;
1,000 x 10,000 minutely spread by ``H``, k = 2); ``churn`` runs 1,000 nodes joining
within a minute and 10 % of them replaced at once, and reports each node's longest loop
stall. Simulated nodes share a fleet process only as independent agents: each has its
own heartbeat, membership view, heap, store connection and claims; what they share is
what agents of one process always share (the interpreter, ring points and the pool
they are read from, parsed schedules and job specs, pure functions of their inputs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.cells import SCHEDULE, CellSpec, Context, run_cell
from benchmarks.fleet import RESULTS_DIR, procs_for
from benchmarks.peer import uvloop_installed
from benchmarks.report import git_commit, machine
from benchmarks.server import BenchServer

WORK_VS_N_NODES = (10, 20, 50, 100, 200)
WORK_VS_N_JOBS = 1000
#: The figures a work-against-N row keeps, each a median over the repeats.
WORK_FIGURES = (
    "client_cpu_cores",
    "client_cpu_ms_per_node_s",
    "claims_per_job_tick",
    "fire_lag_p50_ms",
    "fire_lag_p99_ms",
    "redis_cpu_s_per_s",
    "memory_per_node_mb",
    "duplicates",
    "missed",
)


def _status(text: str, fraction: float) -> None:
    sys.stderr.write(f"\r{text[:110]:<110}")
    sys.stderr.flush()


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"repeats": len(rows)}
    for key in WORK_FIGURES:
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = round(statistics.median(values), 3) if values else None
        out[f"{key}_repeats"] = values
    out["saturated"] = sum(1 for r in rows if r.get("saturation_notes"))
    out["status"] = ",".join(sorted({str(r.get("status")) for r in rows}))
    return out


def work_vs_n(args: argparse.Namespace) -> dict[str, Any]:
    nodes_list = [int(n) for n in args.nodes.split(",")] if args.nodes else WORK_VS_N_NODES
    workdir = Path(tempfile.mkdtemp(prefix="cronrace-scale-"))
    loop = "uvloop" if uvloop_installed() else "asyncio"
    out: dict[str, Any] = {
        "tag": args.tag,
        "commit": git_commit(),
        "machine": machine(),
        "jobs": args.jobs,
        "racers": args.racers,
        "ticks": args.ticks,
        "rows": [],
    }
    with BenchServer(workdir / "redis") as server:
        ctx = Context(server=server, workdir=workdir, loop=loop)
        for nodes in nodes_list:
            rows = []
            for repeat in range(args.repeats):
                spec = CellSpec(
                    "cronrace",
                    nodes,
                    args.jobs,
                    ticks=args.ticks,
                    procs=procs_for(nodes, args.jobs),
                    racers=args.racers,
                    warmup_ticks=6,
                    measure_saturated=True,
                    startup_budget_s=240.0,
                )
                row = run_cell(spec, ctx, _status)
                rows.append(row)
                sys.stderr.write(
                    f"\n{nodes}x{args.jobs} k={args.racers} ({repeat + 1}): "
                    f"{json.dumps({k: row.get(k) for k in (*WORK_FIGURES, 'status')})}\n"
                )
            out["rows"].append({"nodes": nodes, **_median_row(rows), "raw": rows})
    out["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    return out


def merge(tag: str, inputs: list[Path]) -> dict[str, Any]:
    """Runs of one repeat each (so two versions can alternate cell by cell on a shared
    machine, whose load drifts) gathered into one result of medians per N."""
    runs = [json.loads(path.read_text()) for path in inputs]
    by_nodes: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        for row in run["rows"]:
            by_nodes.setdefault(row["nodes"], []).extend(row["raw"])
    first = runs[0]
    return {
        **{key: first[key] for key in ("commit", "machine", "jobs", "racers", "ticks")},
        "tag": tag,
        "loadavg": [run["machine"].get("loadavg_end") for run in runs],
        "rows": [
            {"nodes": nodes, **_median_row(rows), "raw": rows}
            for nodes, rows in sorted(by_nodes.items())
        ],
    }


#: The large cells (issue 19): (nodes, jobs, k, schedule, measured seconds).
LARGE_CELLS = {
    "200x1000:2": (200, 1000, "2", SCHEDULE, 10),
    "200x1000:3": (200, 1000, "3", SCHEDULE, 10),
    "1000x100:2": (1000, 100, "2", SCHEDULE, 10),
    "1000x100:3": (1000, 100, "3", SCHEDULE, 10),
    "1000x10000:2:H": (1000, 10000, "2", "H * * * * *", 120),
}
#: Start-up and churn: 1,000 nodes joining within a minute, then 10 % replaced at once.
CHURN = {"nodes": 1000, "jobs": 100, "racers": "2", "spread_s": 60.0, "share": 0.1}
CELL_FIGURES = (
    "status",
    "claims_per_job_tick",
    "client_cpu_ms_per_node_s",
    "client_cpu_cores",
    "fire_lag_p50_ms",
    "fire_lag_p99_ms",
    "runs_per_node_max",
    "runs_per_node_mean",
    "redis_cpu_s_per_s",
    "duplicates",
    "missed",
    # Which ticks were missed (seconds into the window: how many), and how late runs came.
    "missed_by_tick",
    "missed_skipped_overlap",
    "missed_unrecorded",
    "fleet_cpu_by_tick",
    # For the first few missed ticks: who holds the claim, and the records around it.
    "missed_detail",
    "late_runs_over_1s",
    "fire_lag_max_ms",
    "memory_per_node_mb",
    "startup_s",
    "startup_cpu_s",
    "startup_cpu_s_per_node",
    "startup_memory_per_node_mb",
    "startup_seeded",
    "heartbeat_s",
    "job_ticks",
    "saturation_notes",
    "reason",
    "loop_stall_ms_startup_max",
    "loop_stall_ms_window_max",
    "churned",
    # The heartbeats' cascade counters (late beats, full reads, reads of changes, reads
    # of changes that fell back to a full one), summed over the agents.
    "beats_before_window",
    "beats_in_window",
)


def _cell(name: str) -> tuple[int, int, str, str, int]:
    """A cell not in LARGE_CELLS, spelled alike: ``NxJ:k`` (one-second jobs, 10 s) or
    ``NxJ:k:H`` (minutely jobs spread by ``H``, 120 s: each job fires twice); a ``:gG``
    at the end (racer groups) is read by :func:`_groups`."""
    shape, racers, *spread = _groups(name)[0].split(":")
    nodes, _, jobs = shape.partition("x")
    if spread:
        return int(nodes), int(jobs), racers, LARGE_CELLS["1000x10000:2:H"][3], 120
    return int(nodes), int(jobs), racers, SCHEDULE, 10


def _groups(name: str) -> tuple[str, str]:
    """A cell's name without its ``:gG`` suffix, and its racer_groups ("jobs" without)."""
    base, _, last = name.rpartition(":")
    if base and last.startswith("g") and last[1:].isdigit():
        return base, last[1:]
    return name, "jobs"


def cells(args: argparse.Namespace) -> dict[str, Any]:
    if args.churn:
        shape, _, spread = args.churn.partition(":")
        nodes, _, jobs = shape.partition("x")
        CHURN.update(nodes=int(nodes), jobs=int(jobs), spread_s=float(spread or 60))
    names = args.only.split(",") if args.only else [*LARGE_CELLS, "churn"]
    workdir = Path(tempfile.mkdtemp(prefix="cronrace-scale-"))
    loop = "uvloop" if uvloop_installed() else "asyncio"
    out: dict[str, Any] = {"commit": git_commit(), "machine": machine(), "rows": []}
    with BenchServer(workdir / "redis") as server:
        ctx = Context(server=server, workdir=workdir, loop=loop)
        for name in names:
            churn = name == "churn"
            if churn:
                nodes, jobs, racers = CHURN["nodes"], CHURN["jobs"], CHURN["racers"]
                schedule, seconds = SCHEDULE, 20
            else:
                base, groups = _groups(name)
                nodes, jobs, racers, schedule, seconds = LARGE_CELLS.get(base) or _cell(name)
                seconds = args.window_s or seconds
            spec = CellSpec(
                "cronrace",
                nodes,
                jobs,
                ticks=seconds,
                procs=procs_for(nodes, jobs),
                racers=racers,
                racer_groups="jobs" if churn else groups,
                warmup_ticks=args.warmup_s,
                measure_saturated=True,
                startup_budget_s=args.startup_budget_s,
                schedule=schedule,
                # each process's agents, one by one
                start_spread_s=float(CHURN["spread_s"]) if churn else args.start_spread_s,
                replace_share=float(CHURN["share"]) if churn else 0.0,
                catchup="all" if churn else "latest",
                heartbeat_s=args.heartbeat_s,
            )
            row = run_cell(spec, ctx, _status)
            kept = {"cell": name, **{key: row.get(key) for key in CELL_FIGURES}}
            kept["start_spread_s"] = spec.start_spread_s
            kept["warmup_s"] = spec.warmup_ticks
            kept["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
            out["rows"].append(kept)
            sys.stderr.write(f"\n{json.dumps(kept)}\n")
    return out


def plot(results_dir: Path) -> Path:
    """Client CPU per node-second and for the fleet against N, one line per tag."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (per_node, fleet) = plt.subplots(1, 2, figsize=(11, 4.5))
    for path in sorted(results_dir.glob("scale_work_vs_n_*.json")):
        data = json.loads(path.read_text())
        rows = [r for r in data["rows"] if r.get("client_cpu_ms_per_node_s")]
        xs = [r["nodes"] for r in rows]
        label = f"{data['tag']} ({data['commit'][:7]})"
        per_node.plot(xs, [r["client_cpu_ms_per_node_s"] for r in rows], "o-", label=label)
        fleet.plot(xs, [r["client_cpu_cores"] for r in rows], "o-", label=label)
        saturated = [r for r in rows if r.get("saturated")]
        if saturated:
            fleet.plot(
                [r["nodes"] for r in saturated],
                [r["client_cpu_cores"] for r in saturated],
                "rx",
                markersize=10,
                label=f"{data['tag']}: saturated (a floor)",
            )
        if data["tag"] == "after" and rows:
            first = rows[0]
            ideal = [first["client_cpu_ms_per_node_s"] * first["nodes"] / r["nodes"] for r in rows]
            per_node.plot(xs, ideal, "k:", label="1/N from the first point")
    per_node.set_xscale("log")
    per_node.set_yscale("log")
    per_node.set_xlabel("nodes N")
    per_node.set_ylabel("client CPU per node, ms per second")
    per_node.set_title("Each node's work (1,000 one-second jobs, k = 2)")
    fleet.set_xscale("log")
    fleet.set_xlabel("nodes N")
    fleet.set_ylabel("client CPU of the whole fleet, cores")
    fleet.set_title("The fleet's work")
    for ax in (per_node, fleet):
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = results_dir / "work_vs_n.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_cells(results_dir: Path, cells_file: Path, attempts: list[Path]) -> Path:
    """The large cells (CPU got, share of job-ticks run) and the churn attempts (agents
    seeded, longest loop stall) side by side: ``<cells_file stem>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in json.loads(cells_file.read_text())["rows"] if r.get("job_ticks")]
    tries = []
    for path in attempts:
        data = json.loads(path.read_text())
        row = data["rows"][0]
        if row.get("startup_seeded") is None:
            continue  # no progress reported (an older harness)
        budget = str(row.get("reason", "")).split(" after ")[-1].split(" (")[0]
        label = f"{data['commit'][:7]}, heartbeat {row['heartbeat_s']:g} s\n"
        label += f"{budget}, load {row['loadavg'][0]}"
        tries.append((label, row))
    if tries:
        fig, (cells_ax, churn_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    else:
        fig, cells_ax = plt.subplots(figsize=(max(8.0, 1.3 * len(rows)), 4.5))
    xs = range(len(rows))
    cells_ax.bar(
        [x - 0.2 for x in xs],
        [r["client_cpu_cores"] for r in rows],
        0.4,
        label="client CPU got, cores",
    )
    cells_ax.bar(
        [x + 0.2 for x in xs],
        [1 - r["missed"] / r["job_ticks"] for r in rows],
        0.4,
        label="share of job-ticks run",
    )
    cells_ax.set_xticks(list(xs))
    cells_ax.set_xticklabels([f"{r['cell']}\nload {r['loadavg'][0]}" for r in rows], fontsize=8)
    driven = sum(1 for r in rows if r["missed"] == 0 and r["duplicates"] == 0)
    cells_ax.set_title(f"Large cells: {driven} of {len(rows)} driven (every job-tick run once)")
    axes = [cells_ax]
    if not tries:
        return _save(fig, axes, results_dir / f"{cells_file.stem}.png")
    xs = range(len(tries))
    churn_ax.bar(
        [x - 0.2 for x in xs],
        [r["startup_seeded"] / 1000 for _l, r in tries],
        0.4,
        label="agents seeded, of 1,000",
    )
    churn_ax.bar(
        [x + 0.2 for x in xs],
        [r["loop_stall_ms_startup_max"] / 30_000 for _l, r in tries],
        0.4,
        label="longest loop stall / 30 s",
    )
    churn_ax.set_xticks(list(xs))
    churn_ax.set_xticklabels([label for label, _r in tries], fontsize=7)
    churn_ax.set_title("Churn 1,000 x 100: agents seeded and longest stall at start-up")
    return _save(fig, [cells_ax, churn_ax], results_dir / f"{cells_file.stem}.png")


def plot_burst(out: Path, runs: list[Path]) -> Path:
    """Churn runs side by side: the fleet's cores second by second through the window,
    and the ticks missed each second (``fleet_cpu_by_tick``, ``missed_by_tick``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cpu_ax, missed_ax) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for path in runs:
        row = json.loads(path.read_text())["rows"][0]
        label = path.stem.removeprefix("scale_cells_")
        cpu = {int(s): v for s, v in (row.get("fleet_cpu_by_tick") or {}).items()}
        (line,) = cpu_ax.plot(sorted(cpu), [cpu[s] for s in sorted(cpu)], label=label)
        missed = {int(s): n for s, n in (row.get("missed_by_tick") or {}).items()}
        missed_ax.plot(
            sorted(missed),
            [missed[s] for s in sorted(missed)],
            "o-",
            color=line.get_color(),
            label=f"{label}: {sum(missed.values())}",
        )
    for ax in (cpu_ax, missed_ax):
        ax.axvline(5, color="grey", linestyle=":")  # replace_after_s: the replacement
    cpu_ax.set_ylabel("fleet CPU (cores)")
    cpu_ax.set_title("Churn 1,000 x 100: the replacement's burst, and the ticks skipped")
    cpu_ax.legend(fontsize=7)
    missed_ax.set_ylabel("job-ticks run nowhere")
    missed_ax.set_xlabel("seconds into the window (dotted: 10 % replaced)")
    name = f"scale_burst_{runs[0].stem.removeprefix('scale_cells_')}.png" if runs else "x.png"
    return _save(fig, [cpu_ax, missed_ax], out / name)


def _save(fig: Any, axes: list[Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    wvn = sub.add_parser("work-vs-n", help="client CPU against N at fixed J")
    wvn.add_argument("--tag", required=True, help="before / after: names the output file")
    wvn.add_argument("--nodes", help="comma-separated N (default 10,20,50,100,200)")
    wvn.add_argument("--jobs", type=int, default=WORK_VS_N_JOBS)
    wvn.add_argument("--racers", default="2")
    wvn.add_argument("--ticks", type=int, default=10)
    wvn.add_argument("--repeats", type=int, default=3)
    wvn.add_argument("--out", type=Path, default=RESULTS_DIR)
    lc = sub.add_parser("cells", help="the large cells: 200 x 1,000, 1,000 x 100, 1,000 x 10,000")
    lc.add_argument(
        "--only",
        help=f"comma-separated, of {', '.join(LARGE_CELLS)}, churn, or any NxJ:k[:H]; a "
        "':gG' at the end places the jobs' racers in G groups (racer_groups)",
    )
    lc.add_argument("--startup-budget-s", type=float, default=300.0)
    lc.add_argument(
        "--window-s", type=int, default=0, help="the measured window (default: the cell's)"
    )
    lc.add_argument(
        "--heartbeat-s",
        type=float,
        default=2.0,
        help="every agent's heartbeat_s (a setting of the cell, reported in its row)",
    )
    lc.add_argument(
        "--start-spread-s",
        type=float,
        default=0.0,
        help="start each fleet process's agents one by one over this long (the churn cell "
        "has its own); the window opens once all are ready",
    )
    lc.add_argument(
        "--warmup-s",
        type=int,
        default=8,
        help="seconds between the last agent ready and the measured window (a fleet that "
        "started at once settles meanwhile; the row says how long)",
    )
    lc.add_argument("--tag", default="", help="names the output file: scale_cells_<tag>.json")
    lc.add_argument(
        "--churn", metavar="NxJ:SPREAD_S", help="the churn cell's shape instead, e.g. 20x10:5"
    )
    lc.add_argument("--out", type=Path, default=RESULTS_DIR)
    mg = sub.add_parser(
        "merge",
        help="one tag's single-repeat runs (run interleaved with another tag's) into medians",
    )
    mg.add_argument("--tag", required=True)
    mg.add_argument("inputs", nargs="+", type=Path, help="scale_work_vs_n_*.json of one repeat")
    mg.add_argument("--out", type=Path, default=RESULTS_DIR)
    pl = sub.add_parser("plot", help="draw work_vs_n.png from every tag's results")
    pl.add_argument("--out", type=Path, default=RESULTS_DIR)
    pb = sub.add_parser("plot-burst", help="draw churn runs' CPU and misses second by second")
    pb.add_argument("runs", nargs="+", type=Path, help="churn rows (scale_cells_*.json)")
    pb.add_argument("--out", type=Path, default=RESULTS_DIR)
    pc = sub.add_parser("plot-cells", help="draw the large cells and the churn attempts")
    pc.add_argument("cells_file", type=Path, help="a scale_cells_*.json")
    pc.add_argument("attempts", nargs="*", type=Path, help="churn rows (scale_churn_*.json)")
    pc.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.what == "work-vs-n":
        out = work_vs_n(args)
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"scale_work_vs_n_{args.tag}.json"
        path.write_text(json.dumps(out, indent=1, default=str))
        sys.stdout.write(f"\nwrote {path}\n")
    elif args.what == "cells":
        out = cells(args)
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / (f"scale_cells_{args.tag}.json" if args.tag else "scale_cells.json")
        path.write_text(json.dumps(out, indent=1, default=str))
        sys.stdout.write(f"\nwrote {path}\n")
    elif args.what == "merge":
        path = args.out / f"scale_work_vs_n_{args.tag}.json"
        path.write_text(json.dumps(merge(args.tag, args.inputs), indent=1, default=str))
        sys.stdout.write(f"wrote {path}\n")
    elif args.what == "plot-burst":
        sys.stdout.write(f"wrote {plot_burst(args.out, args.runs)}\n")
    elif args.what == "plot-cells":
        sys.stdout.write(f"wrote {plot_cells(args.out, args.cells_file, args.attempts)}\n")
    elif args.what == "plot":
        sys.stdout.write(f"wrote {plot(args.out)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
