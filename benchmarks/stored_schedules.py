"""Stored schedules at scale: 10,000 of them on 3 nodes, and how fast a change arrives.

Run ``python -m benchmarks.stored_schedules [--count 10000] [--nodes 3]`` (about a
minute). It starts a private redis-server (loopback, no persistence) and measures:

- writing the set: one ``apply`` of ``--count`` schedules (every definition checked, one
  script), and single ``add`` calls;
- memory per schedule in Redis (``MEMORY USAGE`` of the one hash that holds them) and in
  an agent (``tracemalloc`` around reading the set into a node: definitions, jobs,
  schedules);
- load time at start-up: one node reading and building the whole set, and ``--nodes``
  agents from ``run()`` until each races for every schedule;
- pick-up latency: from ``add``/``update`` returning until every running node has the
  change in its tick loop (the control-stream notice path), over ``--probes`` changes;
- claim load with ``racers = all`` (every node races every tick): claims per second and
  per node x tick over a window, the schedules being ``H * * * *`` (spread by H over the
  hour). ``racers = k`` (docs/design.md section 12) is not implemented in this code base yet,
  so it is not measured.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import anyio

from benchmarks.server import BenchServer
from cronrace import Agent, AgentSettings, RunContext
from cronrace.agent.schedule_sync import ScheduleSync
from cronrace.runtime.observer import Observer
from cronrace.specs.stored import ScheduleSpec
from cronrace.stores.redis import Store

NAMESPACE = "bench"


class ClaimCounter(Observer):
    """Counts the claims one node sends (won or lost)."""

    def __init__(self) -> None:
        self.sent = 0
        self.won = 0

    def claims(self, won: int, lost: int) -> None:
        self.sent += won + lost
        self.won += won


def agent(url: str, node: str, observer: Observer | None = None) -> Agent:
    settings = AgentSettings(
        redis_url=url,
        namespace=NAMESPACE,
        node_id=node,
        heartbeat_s=2.0,
        startup_timeout_s=60,
        redis_timeout_s=30,
    )
    made = Agent(settings=settings, observer=observer)

    @made.handler("report")
    async def report(ctx: RunContext) -> None:
        return None

    return made


def specs(count: int) -> list[ScheduleSpec]:
    return [
        ScheduleSpec(
            name=f"customer-{index:05d}.report",
            schedule="H * * * *",
            timezone="Europe/Berlin",
            handler="report",
            args={"customer": f"c{index:05d}", "format": "pdf"},
        )
        for index in range(count)
    ]


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms (n={len(ordered)})"
    )


async def main(count: int, nodes: int, probes: int, window_s: float) -> None:
    with tempfile.TemporaryDirectory() as directory, BenchServer(Path(directory)) as server:
        url = server.url
        print(f"redis-server {server.version}; {count} stored schedules; {nodes} nodes")
        ops = agent(url, "ops")
        wanted = specs(count)
        started = time.perf_counter()
        diff = await ops.schedules.apply(wanted)
        print(
            f"apply of {len(diff.added)} schedules (checked, one script): "
            f"{time.perf_counter() - started:.2f} s"
        )
        singles = []
        for index in range(100):
            started = time.perf_counter()
            await ops.schedules.add(f"single-{index}", "H * * * *", handler="report")
            singles.append(time.perf_counter() - started)
        print(f"single add (check, script, notice): {quantiles(singles)}")
        redis = server.client()
        used = int(redis.memory_usage(f"{NAMESPACE}:schedules", samples=0) or 0)
        total = count + len(singles)
        print(f"Redis: {used / 1e6:.2f} MB for {total} schedules = {used / total:.0f} B each")

        store = Store.from_url(url, NAMESPACE)
        await store.load_scripts()
        sync = ScheduleSync(store, "probe", ops.handlers, {}, None)
        started = time.perf_counter()
        await sync.reload("benchmark")
        load_s = time.perf_counter() - started
        print(f"one node reads and builds {len(sync.jobs)} schedules: {load_s:.2f} s")
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        sync = ScheduleSync(store, "probe", ops.handlers, {}, None)
        await sync.reload("benchmark")
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        print(
            f"agent memory (tracemalloc) for {len(sync.jobs)} schedules read: "
            f"{grown / 1e6:.1f} MB = {grown / len(sync.jobs) / 1000:.2f} kB each"
        )
        del sync
        await store.aclose()

        counters = [ClaimCounter() for _ in range(nodes)]
        fleet = [agent(url, f"node{index}", counters[index]) for index in range(nodes)]
        ready_after: dict[str, float] = {}
        async with anyio.create_task_group() as tg:
            started = time.perf_counter()
            for node in fleet:
                tg.start_soon(node.run)
            while len(ready_after) < nodes:
                for node in fleet:
                    racing = node.scheduler is not None and len(node.scheduler.next_tick) >= total
                    if racing and node.node_id not in ready_after:
                        ready_after[node.node_id] = time.perf_counter() - started
                await anyio.sleep(0.01)
            print(
                f"{nodes} agents from run() to racing for all {total} schedules: "
                + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in ready_after.items())
            )
            await anyio.sleep(2.5)  # a heartbeat: the fleet exchange has settled

            added, updated = [], []
            for index in range(probes):
                name = f"probe-{index}"
                started = time.perf_counter()
                await ops.schedules.add(name, "* * * * *", handler="report")
                added.append(
                    await _everywhere(fleet, lambda n, name=name: name in n.jobs) - started
                )
                started = time.perf_counter()
                await ops.schedules.update(name, schedule="*/7 * * * *")
                updated.append(
                    await _everywhere(
                        fleet, lambda n, name=name: n.jobs[name].schedule.expr == "*/7 * * * *"
                    )
                    - started
                )
            print(f"pick-up of an add on all {nodes} nodes: {quantiles(added)}")
            print(f"pick-up of an update on all {nodes} nodes: {quantiles(updated)}")

            sent = sum(counter.sent for counter in counters)
            won = sum(counter.won for counter in counters)
            await anyio.sleep(window_s)
            claims = sum(counter.sent for counter in counters) - sent
            ticks = sum(counter.won for counter in counters) - won  # each tick is won once
            print(
                f"claim load (racers = all) over {window_s:.0f} s: {claims} claims for "
                f"{ticks} ticks = {claims / max(ticks, 1):.2f} claims per tick "
                f"({claims / max(ticks, 1) / nodes:.2f} per node x tick)"
            )
            for node in fleet:
                node.stop()
        await ops.aclose()


async def _everywhere(fleet: list[Agent], seen: object) -> float:
    while True:
        if all(node.scheduler is not None and seen(node.scheduler) for node in fleet):  # type: ignore[operator]
            return time.perf_counter()
        await anyio.sleep(0.0005)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--window", type=float, default=30.0)
    options = parser.parse_args()
    anyio.run(main, options.count, options.nodes, options.probes, options.window)
