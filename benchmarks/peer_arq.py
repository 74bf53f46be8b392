"""One peer process: arq workers running the same 1-second cron jobs, for comparison.

Runs in the peer's own virtual environment (arq pins ``redis<6``; see
:mod:`benchmarks.peer`), so it imports nothing from cronrace or the benchmarks package.
It speaks the same JSON-lines protocol as :mod:`benchmarks.worker`: ``ready``, ``tick``
events, ``window`` and ``stop`` commands, a result file with the run log.

Each simulated node is one ``arq.worker.Worker`` with default settings (poll every 0.5 s,
unique cron job ids), except ``microsecond=0`` so that arq's ticks fall on whole seconds
like cronrace's, and ``max_jobs`` raised to the number of jobs so that a tick's jobs are
not held back by the default limit of 10.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from arq import cron
from arq.connections import RedisSettings, create_pool
from arq.worker import Worker

RUN_LOG: list[tuple[int, int, int, float]] = []


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def make_handler(node_index: int) -> Any:
    async def handler(ctx: dict[str, Any]) -> None:
        started = time.time()
        name, tick_ms = str(ctx["job_id"]).rsplit(":", 1)
        RUN_LOG.append((int(name.rsplit(".j", 1)[1]), int(tick_ms) // 1000, node_index, started))

    handler.__qualname__ = f"bench_handler_{node_index}"
    return handler


async def make_worker(config: dict[str, Any], node_index: int) -> Worker:
    handler = make_handler(node_index)
    jobs = [
        cron(handler, name=f"{config['namespace']}.j{index:04d}", second=None, microsecond=0)
        for index in range(config["jobs"])
    ]
    queue_name = f"{config['namespace']}:queue"
    pool = await create_pool(
        RedisSettings(host="127.0.0.1", port=config["port"]), default_queue_name=queue_name
    )
    return Worker(
        cron_jobs=jobs,
        redis_pool=pool,
        queue_name=queue_name,
        handle_signals=False,
        max_jobs=max(10, config["jobs"]),
    )


async def read_commands(state: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            state["stop"].set()
            return
        command = json.loads(line)
        if command["cmd"] == "window":
            state["window"] = (int(command["t0"]), int(command["t1"]))
            state["window_set"].set()
        elif command["cmd"] == "stop":
            state["stop"].set()
            return


async def measure(state: dict[str, Any]) -> None:
    await state["window_set"].wait()
    t0, t1 = state["window"]
    for name, at in (("start", t0 - 0.5), ("end", t1 - 0.5)):
        await asyncio.sleep(max(0.0, at - time.time()))
        state["marks"][name] = {"wall": time.time(), "cpu": time.process_time()}


async def report_ticks(expected: int) -> None:
    last_wall, last_cpu = time.time(), time.process_time()
    next_report = math.floor(last_wall) + 1.5
    while True:
        await asyncio.sleep(max(0.0, next_report - time.time()))
        wall, cpu = time.time(), time.process_time()
        tick = int(next_report - 0.5) - 1
        runs = sum(1 for entry in RUN_LOG[-4 * expected - 10 :] if entry[1] == tick)
        emit(
            {
                "ev": "tick",
                "tick": tick,
                "runs_for_tick": runs,
                "cpu": round((cpu - last_cpu) / max(wall - last_wall, 1e-6), 3),
                "runs": len(RUN_LOG),
            }
        )
        last_wall, last_cpu = wall, cpu
        next_report = max(next_report + 1, math.floor(time.time()) + 0.5)


async def main(config: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {
        "window": None,
        "window_set": asyncio.Event(),
        "marks": {},
        "stop": asyncio.Event(),
    }
    started = time.monotonic()
    workers = [await make_worker(config, node) for node in config["nodes"]]
    mains = [asyncio.create_task(worker.main()) for worker in workers]
    emit({"ev": "ready", "startup_s": round(time.monotonic() - started, 3)})
    helpers = [
        asyncio.create_task(read_commands(state)),
        asyncio.create_task(measure(state)),
        asyncio.create_task(report_ticks(config["jobs"])),
    ]
    await state["stop"].wait()
    for task in [*helpers, *mains]:
        task.cancel()
    await asyncio.gather(*helpers, *mains, return_exceptions=True)
    await asyncio.gather(*(worker.close() for worker in workers), return_exceptions=True)
    return {"nodes": len(workers), "marks": state["marks"], "run_log": RUN_LOG}


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    cfg = json.loads(sys.argv[1])
    if cfg.get("loop") == "uvloop":
        import uvloop

        result = uvloop.run(main(cfg))
    else:
        result = asyncio.run(main(cfg))
    Path(cfg["result_path"]).write_text(json.dumps(result))
    emit({"ev": "done"})
