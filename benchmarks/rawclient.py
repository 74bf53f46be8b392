"""Client-side baseline: CPU per ``SET NX PX`` for raw redis-py and for ``Store.claim``.

Run by :mod:`benchmarks.fleet` as ``python -m benchmarks.rawclient CONFIG_JSON`` on the
same server and event loop as the fleet; prints one JSON document. For each batch size
(the J of the fleet: one pipeline per wake-up holds one claim per due job) it runs, in
turn and repeated, two loops as fast as they go:

- ``raw``: a plain ``redis.asyncio.Redis`` pipeline of B ``SET key x NX PX 60000``;
- ``store``: ``cronrace.stores.redis.Store.claim`` with B claims, on the client the agent uses.

and reports the median process CPU per SET, and SETs per second. A hot loop is the best
case for any client; a fleet wakes once a second. So for the losers-only cells it also
runs ``paced``: N raw clients each sending one pipeline of J SETs at every whole second,
the fleet's traffic shape without the agent.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
import time
from typing import Any

import anyio
import redis.asyncio as aioredis

from cronrace.stores.redis import Store
from cronrace.stores.values import Claim

TTL_MS = 60_000


async def _raw(
    client: aioredis.Redis, batch: int, seconds: float, counter: Any
) -> tuple[int, float]:
    sets = 0
    cpu0, deadline = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            pipe.set(f"raw:{next(counter)}", "x", nx=True, px=TTL_MS)
        await pipe.execute()
        sets += batch
    return sets, time.process_time() - cpu0


async def _store(store: Store, batch: int, seconds: float, counter: Any) -> tuple[int, float]:
    sets = 0
    names = [f"j{index:04d}" for index in range(batch)]
    cpu0, deadline = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        tick = next(counter)
        await store.claim([Claim(name, tick, TTL_MS) for name in names], "bench:nonce")
        sets += batch
    return sets, time.process_time() - cpu0


async def _paced(url: str, nodes: int, jobs: int, ticks: int, counter: Any) -> dict[str, Any]:
    clients = [aioredis.Redis.from_url(url) for _ in range(nodes)]

    async def one(client: aioredis.Redis) -> None:
        pipe = client.pipeline(transaction=False)
        for _ in range(jobs):
            pipe.set(f"paced:{next(counter)}", "x", nx=True, px=TTL_MS)
        await pipe.execute()

    try:
        for client in clients:
            await client.ping()
        await anyio.sleep(math.ceil(time.time()) - time.time())
        cpu0 = time.process_time()
        for _tick in range(ticks):
            async with anyio.create_task_group() as tg:
                for client in clients:
                    tg.start_soon(one, client)
            await anyio.sleep(math.ceil(time.time()) - time.time())
        cpu_s = time.process_time() - cpu0
    finally:
        for client in clients:
            await client.aclose()
    return {
        "kind": "paced",
        "nodes": nodes,
        "batch": jobs,
        "cpu_us_per_set": cpu_s / (nodes * jobs * ticks) * 1e6,
        "ticks": ticks,
    }


async def measure(config: dict[str, Any]) -> dict[str, Any]:
    raw = aioredis.Redis.from_url(config["redis_url"])
    store = Store.from_url(config["redis_url"], "rawbench")
    counter = itertools.count()
    samples: dict[str, list[tuple[float, float]]] = {}
    try:
        await raw.ping()
        await store.client.ping()
        for _repeat in range(config["repeats"]):
            for batch in config["batches"]:
                seconds = config["seconds"]
                for kind in ("raw", "store"):
                    if kind == "raw":
                        sets, cpu_s = await _raw(raw, batch, seconds, counter)
                    else:
                        sets, cpu_s = await _store(store, batch, seconds, counter)
                    samples.setdefault(f"{kind}:{batch}", []).append(
                        (cpu_s / sets * 1e6, sets / seconds)
                    )
    finally:
        await raw.aclose()
        await store.aclose()
    out: dict[str, Any] = {}
    for nodes, jobs in config.get("paced", []):
        out[f"paced:{nodes}x{jobs}"] = await _paced(
            config["redis_url"], nodes, jobs, config.get("paced_ticks", 5), counter
        )
    for key, values in samples.items():
        kind, batch = key.split(":")
        out[key] = {
            "kind": kind,
            "batch": int(batch),
            "cpu_us_per_set": statistics.median(v[0] for v in values),
            "sets_per_s": statistics.median(v[1] for v in values),
            "repeats": len(values),
        }
    return out


def main() -> None:
    config = json.loads(sys.argv[1])
    use_uvloop = config.get("loop") == "uvloop"
    result = anyio.run(
        measure, config, backend="asyncio", backend_options={"use_uvloop": use_uvloop}
    )
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
