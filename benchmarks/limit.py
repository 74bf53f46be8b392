"""The physical limit of the same Redis, and the client-side baseline, in the same run.

- ``redis-benchmark`` sends ``SET bench:<random> x NX PX 60000`` (random keys, so every
  SET creates a key, as a won claim does) unpipelined and pipelined, with Redis's own CPU
  read around each run: the most claims per second this server can take on this machine.
- :mod:`benchmarks.rawclient` measures redis-py's CPU per pipelined ``SET NX PX`` and
  ``Store.claim``'s, on the fleet's event loop, for each batch size of the sweep.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.procs import REPO_ROOT
from benchmarks.server import REDIS_BENCHMARK, BenchServer, InfoSnapshot

CLIENTS = 50
PIPELINE = 100


def redis_benchmark(server: BenchServer, *, quick: bool) -> dict[str, Any]:
    """Run redis-benchmark unpipelined and pipelined; requests/s and Redis CPU per 1k SETs."""
    if REDIS_BENCHMARK is None:
        return {"available": False, "reason": "redis-benchmark is not installed"}
    out: dict[str, Any] = {"available": True, "clients": CLIENTS, "pipeline": PIPELINE}
    for name, pipeline, requests in (
        ("unpipelined", 1, 60_000 if quick else 150_000),
        ("pipelined", PIPELINE, 400_000 if quick else 1_500_000),
    ):
        server.flush()
        client = server.client()
        before = InfoSnapshot.take(client)
        done = subprocess.run(
            [
                REDIS_BENCHMARK,
                "-h",
                "127.0.0.1",
                "-p",
                str(server.port),
                "-c",
                str(CLIENTS),
                "-n",
                str(requests),
                "-r",
                "100000000",
                "-P",
                str(pipeline),
                "--csv",
                "SET",
                "bench:__rand_int__",
                "x",
                "NX",
                "PX",
                "60000",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        after = InfoSnapshot.take(client)
        rows = list(csv.DictReader(io.StringIO(done.stdout)))
        if done.returncode != 0 or not rows:
            return {"available": False, "reason": (done.stderr or done.stdout)[-300:]}
        wall_s, cpu_s, calls = before.delta(after)
        sets = calls.get("set", requests)
        out[f"{name}_rps"] = float(rows[-1]["rps"])
        out[f"{name}_p99_ms"] = float(rows[-1]["p99_latency_ms"])
        out[f"{name}_redis_cpu_ms_per_1k"] = round(cpu_s / sets * 1e6, 3)
        out[f"{name}_redis_cpu_s_per_s"] = round(cpu_s / wall_s, 3)
    server.flush()
    return out


def raw_client(
    server: BenchServer,
    *,
    loop: str,
    batches: list[int],
    quick: bool,
    paced: Sequence[tuple[int, int]] = (),
) -> dict[str, Any]:
    """CPU per pipelined SET NX PX: raw redis-py and Store.claim, per batch size."""
    config = {
        "redis_url": server.url,
        "loop": loop,
        "batches": batches,
        "repeats": 3,
        "seconds": 0.25 if quick else 0.8,
        "paced": [list(cell) for cell in paced],
        "paced_ticks": 4 if quick else 6,
    }
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.rawclient", json.dumps(config)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    server.flush()
    if done.returncode != 0:
        return {"error": done.stderr[-400:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
