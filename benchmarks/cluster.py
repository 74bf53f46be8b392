"""The cluster cell: one fleet on a three-shard Redis Cluster beside one primary.

``python -m benchmarks.cluster`` runs the same cell (default 10 nodes x 1000 one-second
jobs) on one private redis-server and on a private Redis Cluster of three primaries, and
shows what sharding changes: claims and Redis CPU per shard beside the single primary's,
claims per node x job x tick (still one), round trips per wake-up (one per shard), fire
lag, duplicates and misses. ``--publish`` writes ``benchmarks/results/cluster.json`` and
the cluster section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from benchmarks import report
from benchmarks.cells import CellSpec, Context, run_cell
from benchmarks.peer import uvloop_installed
from benchmarks.server import BenchServer, InfoSnapshot
from cronrace.testing import RedisServer, free_port

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_MD = BENCH_DIR / "RESULTS.md"
REDIS_CLI = shutil.which("redis-cli")
BEGIN, END = "<!-- cluster cell: begin -->", "<!-- cluster cell: end -->"


class BenchCluster:
    """A private Redis Cluster of ``shards`` primaries (no replicas, no persistence).

    The same interface as :class:`~benchmarks.server.BenchServer` for a cell: ``url``,
    ``port``, ``client()``, ``flush()``, ``snapshot()`` (the sum of the primaries, each
    kept under ``shards``).
    """

    def __init__(self, directory: Path, shards: int = 3) -> None:
        self.nodes = [
            RedisServer(
                directory / f"node{index}",
                appendonly=False,
                extra_args=(
                    "--maxclients",
                    "10000",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    str(free_port()),
                ),
            )
            for index in range(shards)
        ]
        self.version = ""

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    def start(self) -> BenchCluster:
        if REDIS_CLI is None:
            raise RuntimeError("redis-cli is not installed (Debian: apt-get install redis)")
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while not all(self._node(n).cluster("info")["cluster_state"] == "ok" for n in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the benchmark cluster did not come up in 30 s")
            time.sleep(0.1)
        self.version = str(self._node(self.nodes[0]).info("server")["redis_version"])
        return self

    def _node(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=node.port, decode_responses=True)

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.port, decode_responses=True)

    def flush(self) -> None:
        for node in self.nodes:
            self._node(node).flushall()

    def snapshot(self) -> InfoSnapshot:
        return InfoSnapshot.combine(
            {f"127.0.0.1:{node.port}": InfoSnapshot.take(self._node(node)) for node in self.nodes}
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> BenchCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(nodes: int, jobs: int, ticks: int, workdir: Path) -> dict[str, Any]:
    """The cell on one primary, then on the cluster; both rows and the machine."""
    loop = "uvloop" if uvloop_installed() else "asyncio"
    out: dict[str, Any] = {"machine": report.machine(), "commit": report.git_commit(), "rows": []}
    procs = 2 if nodes * jobs >= 5000 else 1
    for name, deployment in (("primary", BenchServer), ("cluster", BenchCluster)):
        with deployment(workdir / name) as server:
            ctx = Context(server=server, workdir=workdir / name, loop=loop)  # type: ignore[arg-type]
            spec = CellSpec("cronrace", nodes, jobs, ticks=ticks, procs=procs)
            row = run_cell(spec, ctx, lambda text, _fraction: print(f"\r{text:70.70}", end=""))
            print()
            out["rows"].append({"deployment": name, **row})
    out["commit_end"] = report.git_commit()
    return out


def table(out: dict[str, Any]) -> str:
    """The cell on both deployments, and the cluster's shards, as markdown."""
    lines = [
        "| deployment | claims/s | claims per node × job × tick | round trips per wake-up "
        "| Redis CPU (cores) | fire lag p50 / p99 ms | duplicates | missed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shards: list[str] = []
    for row in out["rows"]:
        if row.get("status") != "ok":
            lines.append(f"| {row['deployment']} | {row.get('status')}: {row.get('reason', '')} |")
            continue
        lines.append(
            f"| {row['deployment']} | {row['claims_per_s']:,.0f} | "
            f"{row['claims_per_node_job_tick']} | {row['rtt_per_node_wake']} | "
            f"{row['redis_cpu_s_per_s']} | {row['fire_lag_p50_ms']} / {row['fire_lag_p99_ms']} | "
            f"{row['duplicates']} | {row['missed']} |"
        )
        for shard, figures in row.get("shards", {}).items():
            shards.append(
                f"| {shard} | {figures['sets_per_s']:,.0f} | {figures['cmds_per_tick']:,.0f} "
                f"| {figures['redis_cpu_s_per_s']} |"
            )
    if shards:
        lines += [
            "",
            "| cluster shard | SET calls/s (claims and script writes) | commands per tick "
            "| Redis CPU (cores) |",
        ]
        lines += ["|---|---|---|---|", *shards]
    return "\n".join(lines)


def publish(out: dict[str, Any], text: str) -> None:
    """Write the JSON and replace the cluster section of RESULTS.md."""
    results = BENCH_DIR / "results"
    results.mkdir(exist_ok=True)
    (results / "cluster.json").write_text(json.dumps(out, indent=1, default=str))
    row = out["rows"][0]
    section = (
        f"{BEGIN}\n## The cluster cell\n\n"
        f"`python -m benchmarks.cluster --publish` on `{out['commit']}`: "
        f"{row['nodes']} nodes × {row['jobs']} one-second jobs, {row.get('ticks', '?')} "
        "measured ticks, on one primary and on a Redis Cluster of three primaries (no "
        "replicas, no persistence), each on this machine's loopback.\n\n"
        f"{text}\n{END}\n"
    )
    current = RESULTS_MD.read_text()
    if BEGIN in current:
        head, _, rest = current.partition(BEGIN)
        current = head + section + rest.partition(END)[2].lstrip("\n")
    else:
        current = current.rstrip("\n") + "\n\n" + section
    RESULTS_MD.write_text(current)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__)
    parser.add_argument("--cell", default="10x1000", help="nodes x jobs, e.g. 10x1000")
    parser.add_argument("--ticks", type=int, default=10, help="measured ticks")
    parser.add_argument("--publish", action="store_true", help="write results and RESULTS.md")
    args = parser.parse_args(argv)
    nodes, _, jobs = args.cell.lower().partition("x")
    with tempfile.TemporaryDirectory(prefix="cronrace-cluster-bench-") as tmp:
        out = run(int(nodes), int(jobs), args.ticks, Path(tmp))
    text = table(out)
    print(text)
    if args.publish:
        publish(out, text)
    return 0 if all(row.get("status") == "ok" for row in out["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
