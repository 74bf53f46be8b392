"""What a fleet process's agents pay for their views of a forming fleet, and for window turns.

``python -m benchmarks.ring_views`` runs two measurements in this process, on the fake
membership of a fleet forming (no store, no event loop), and prints one JSON line:

- ``views``: ``--agents`` agents of one process (100, as a ``benchmarks.scale`` fleet
  process holds) beat every ``--heartbeat-s`` at phases of their own while ``--nodes``
  nodes join over ``--join-s``, then 10 % are replaced. At each beat an agent asks for
  the ring of the members it reads (``rings.ring_of``, as ``Membership`` does) and,
  when it changed, its own arcs on it. Reported: CPU seconds in ``ring_of`` and in the arcs.
- ``turns``: one node of ``--jobs`` jobs in a ``--nodes``-member view turns every job's
  placement window once (``RacerShare.due_turns``, asking whether it races each): CPU per
  turn and per node-second.

It imports ``cronrace`` from wherever ``PYTHONPATH`` points, so the same file measures an
older checkout side by side (run it from that checkout's directory).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from cronrace.fleet import membership
from cronrace.fleet.membership import Membership
from cronrace.fleet.racers import PLACEMENT_WINDOW_S, Racers, Ring
from cronrace.tick.share import RacerShare

try:
    from cronrace.fleet import rings
except ImportError:  # an older checkout: the process's rings lived in membership.py
    rings = membership  # type: ignore[assignment]

START_S = 1_800_000_000
#: Each node's ring points, as the process caches them.
POINTS: dict[str, list[int]] = (
    rings.POINTS if hasattr(rings, "POINTS") else rings._POINTS  # type: ignore[attr-defined]
)


def views(nodes: int, agents: int, join_s: float, heartbeat_s: float) -> dict[str, float]:
    rng = random.Random(1)
    everyone = [f"n{i:04d}" for i in range(nodes)]
    join_at = {n: rng.uniform(0, join_s) for n in everyone}
    mine = rng.sample(everyone, agents)
    beats = sorted(
        (join_at[a] + i * heartbeat_s, a)
        for a in mine
        for i in range(int((join_s + 30) / heartbeat_s))
    )
    replaced = set(rng.sample(everyone, nodes // 10))
    after = [n for n in everyone if n not in replaced] + [f"x{i:04d}" for i in range(nodes // 10)]
    views_of = {a: Ring.build([]) for a in mine}
    ring_s = arcs_s = 0.0
    changes = 0
    for at_s, agent in beats:
        if at_s < join_s + 10:
            members = frozenset(n for n in everyone if join_at[n] <= at_s) | {agent}
        else:
            members = frozenset([*after, agent])
        t0 = time.process_time()
        ring = rings.ring_of(members, views_of[agent])
        t1 = time.process_time()
        if ring is not views_of[agent]:
            changes += 1
            if len(ring.members) > 2:
                ring.arcs(agent, 2, POINTS)
        t2 = time.process_time()
        ring_s += t1 - t0
        arcs_s += t2 - t1
        views_of[agent] = ring
    return {
        "beats": len(beats),
        "changes": changes,
        "ring_of_cpu_s": round(ring_s, 3),
        "arcs_cpu_s": round(arcs_s, 3),
    }


def turns(nodes: int, jobs: int) -> dict[str, float]:
    view = Membership("n0000", Racers(2), 5.0)
    view.ring = Ring.build([f"n{i:04d}" for i in range(nodes)], POINTS)
    share = RacerShare("n0000", view, {})
    share.track_all([f"job{i:05d}" for i in range(jobs)], START_S)
    t0 = time.process_time()
    for now_s in range(START_S, START_S + PLACEMENT_WINDOW_S):
        more = True
        while more:  # a chunk at a time, as the loop takes them
            _turned, more = share.due_turns(now_s)
    cpu_s = time.process_time() - t0
    return {
        "window_s": PLACEMENT_WINDOW_S,
        "turn_cpu_us": round(1e6 * cpu_s / jobs, 2),
        "turn_cpu_ms_per_node_s": round(1e3 * cpu_s / PLACEMENT_WINDOW_S, 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--join-s", type=float, default=60.0)
    parser.add_argument("--heartbeat-s", type=float, default=5.0)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    row = {
        "tag": args.tag,
        "cronrace": membership.__file__,
        "views": views(args.nodes, args.agents, args.join_s, args.heartbeat_s),
        "turns": turns(args.nodes, args.jobs),
    }
    sys.stdout.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
