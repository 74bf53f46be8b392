"""One heartbeat's cost against N: a node's beat and fleet exchange on a fleet of N members.

``python -m benchmarks.beat_cost --nodes 10,100,1000`` starts a private redis-server, makes
N members join (each beats and publishes its fingerprint once, as a starting node does),
then has one more node beat ``--beats`` times, each a heartbeat and a fleet exchange as an
agent sends them every ``heartbeat_s``, while the N members beat too (their expiries move,
as a live fleet's do). It prints, per N, the probe's client CPU per beat (the process's
CPU over its beats; the members' expiries are moved between them, outside the timing). A
fleet of N nodes spends N times this every ``heartbeat_s``.

It imports ``cronrace`` from wherever ``PYTHONPATH`` points, so the same file measures an
older checkout for a before/after pair (an older one reads every member at every beat, or
sends the exchange in a round trip of its own after the heartbeat).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from benchmarks.server import BenchServer
from cronrace.fleet.definitions import FleetDefinitions, NodeDetails
from cronrace.fleet.heartbeat import Heartbeat
from cronrace.fleet.membership import Membership
from cronrace.fleet.racers import Racers
from cronrace.runtime.clock import SystemClock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import Readiness
from cronrace.runtime.watchdog import LoopWatchdog
from cronrace.stores.redis import Store, changes

HEARTBEAT_S = 2.0


def _node(node_id: str, clock: SystemClock) -> tuple[Heartbeat, Membership]:
    membership = Membership(node_id, Racers.parse("2"), HEARTBEAT_S)
    readiness = Readiness(node_id, Observer(), LoopWatchdog(threshold_s=5), lambda: None)
    beat = Heartbeat(
        node_id=node_id,
        heartbeat_s=HEARTBEAT_S,
        clock=clock,
        observer=Observer(),
        readiness=readiness,
        jobs={},
        membership=membership,
    )
    return beat, membership


async def _beat(
    beat: Heartbeat, store: Store, fleet: FleetDefinitions, details: NodeDetails, live: Any
) -> None:
    """One heartbeat and fleet exchange, as the agent sends them: in one round trip where
    this checkout's heartbeat carries the exchange, else one after the other."""
    if hasattr(fleet, "request"):
        exchanged = await beat.beat(store, fleet.request(details))
        if exchanged is not None:
            await fleet.absorb(exchanged, int(time.time() * 1000), beat.membership.live)
        return
    await beat.beat(store)
    if "live" in inspect.signature(fleet.exchange).parameters:
        await fleet.exchange(details, int(time.time() * 1000), live)
    else:
        await fleet.exchange(details, int(time.time() * 1000))


async def _fall_behind(
    probe: Heartbeat, store: Store, members: list[Any], late_share: float, ttl_ms: int
) -> None:
    """A loaded fleet between two of the probe's beats: a share of the members beat late
    (each logged as joined again) and half of those still look silent, and the probe's own
    beat comes late too (its loop held up for 1.75 heartbeats), as in a saturated
    1,000-node cell (issue 19)."""
    now_ms = int(time.time() * 1000)
    behind_ms = int(1.75 * HEARTBEAT_S * 1000)
    late = members[: int(len(members) * late_share)]
    pipe = store.client.pipeline(transaction=False)
    for index, (beat, *_rest) in enumerate(late):
        expiry = now_ms + ttl_ms - (behind_ms if index % 2 else 0)
        pipe.zadd(store.keys.nodes, {beat.node_id: expiry})
        pipe.xadd(
            store.keys.fleet_log,
            changes.entry(beat.node_id, changes.JOIN, expiry),
            **changes.add_kwargs(),
        )
    await pipe.execute()
    probe._last_ok_ms = now_ms - behind_ms
    probe.membership._confirmed_ms = now_ms - behind_ms


async def one(url: str, nodes: int, beats: int, late_share: float = 0.0) -> dict[str, Any]:
    clock = SystemClock()
    store = Store.from_url(url, f"beat-{nodes}-{time.monotonic_ns()}")
    members = []
    try:
        for index in range(nodes):
            beat, membership = _node(f"m{index:05d}", clock)
            fleet = FleetDefinitions(store, beat.node_id, Observer())
            details = NodeDetails(beat.node_id, {}, (), False, {}, Racers.parse("2"))
            await _beat(beat, store, fleet, details, membership.live)
            members.append((beat, membership, fleet, details))
        probe, membership = _node("probe", clock)
        fleet = FleetDefinitions(store, "probe", Observer())
        details = NodeDetails("probe", {}, (), False, {}, Racers.parse("2"))
        await _beat(probe, store, fleet, details, membership.live)
        probe_cpu = 0.0
        ttl_ms = probe.ttl_ms
        for _ in range(beats):
            # The members beat between the probe's beats: a plain beat only moves their
            # expiry (written here for all of them in one command, outside the timing).
            now_ms = int(time.time() * 1000)
            await store.client.zadd(
                store.keys.nodes, {beat.node_id: now_ms + ttl_ms for beat, *_ in members}
            )
            if late_share:
                await _fall_behind(probe, store, members, late_share, ttl_ms)
            started = time.process_time()
            await _beat(probe, store, fleet, details, membership.live)
            probe_cpu += time.process_time() - started
            await anyio.sleep(0.05)
        return {
            "nodes": nodes,
            "beats": beats,
            "probe_cpu_ms_per_beat": round(probe_cpu / beats * 1000, 3),
            "fleet_cores_at_2s": round(probe_cpu / beats * nodes / HEARTBEAT_S, 3),
            "members_seen": len(membership.live),
            "late_share": late_share,
            "full_reads": getattr(probe, "full_reads", None),
            "full_reads_forced": probe.full_reads_forced,
        }
    finally:
        await store.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.beat_cost", description=__doc__)
    parser.add_argument("--nodes", default="10,100,1000")
    parser.add_argument("--beats", type=int, default=40)
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--late-share",
        type=float,
        default=0.0,
        help="a loaded fleet: this share of the members beat late between the probe's "
        "beats (logged as joined again, half of them still silent), the probe late too",
    )
    args = parser.parse_args(argv)
    import cronrace

    with BenchServer(Path(tempfile.mkdtemp(prefix="cronrace-beat-"))) as server:
        url = f"redis://127.0.0.1:{server.port}"
        for nodes in (int(n) for n in args.nodes.split(",")):
            row = anyio.run(one, url, nodes, args.beats, args.late_share)
            row["tag"] = args.tag
            row["cronrace"] = cronrace.__file__
            row["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
            sys.stdout.write(json.dumps(row) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
