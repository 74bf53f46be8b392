"""The rings of one process: each node's points, the recent rings and the pool they read.

Rings are pure values of their members, so every agent of a process may share them (a
real node has one agent; a benchmark's fleet process a hundred, README "What simulated
nodes share"). :func:`ring_of` is how a :class:`~cronrace.fleet.membership.Membership`
gets the ring of a new view.
"""

from __future__ import annotations

from cronrace.fleet.racers import Ring, RingPool

#: Each node's ring points, shared by every agent of the process (they are a pure function
#: of the node id): a process simulating 100 agents of a 200-node fleet hashes 32,000
#: points, not 3,200,000. Cleared when it outgrows every view by far.
POINTS: dict[str, list[int]] = {}
POINTS_MAX_NODES = 20_000
#: The last rings built in this process, by member set (a ring is a pure function of its
#: members and never changes): agents of one process that see the same members share one
#: ring.
_RINGS: dict[frozenset[str], Ring] = {}
_RINGS_KEPT = 8
#: The points of every node this process's agents counted live lately (racers.py): each
#: view reads them with the nodes it does not count live skipped, so a node is spliced in
#: once per process when it is first seen, not once per agent. At N = 1,000 a ring is
#: 160,000 points; while a thousand nodes join, each agent of a process reads a different
#: member set at each beat, and splicing each agent's own ring then was the largest share
#: of a forming fleet's CPU (issue 19).
_POOL: list[RingPool] = []
#: False: every view is spliced from the asking agent's own ring, nothing shared between
#: agents (``benchmarks.join_churn --own-rings``: what each node costs alone).
_SHARED = True


def ring_of(members: frozenset[str], old: Ring) -> Ring:
    """The ring of ``members``: a recent one of this process, or one reading this
    process's pool of points (grown by the new members; a new pool, spliced from the
    nearest ring at hand, when the pool holds too many nodes gone)."""
    if not _SHARED:
        return old.with_members(members, POINTS)
    ring = _RINGS.get(members)
    if ring is not None:
        _RINGS[members] = _RINGS.pop(members)  # most recently used last
        return ring
    if len(POINTS) > POINTS_MAX_NODES:  # members come and go: memory stays bounded
        POINTS.clear()
    pool = _POOL[0] if _POOL else None
    if pool is not None and pool.serves(members) and pool.add(members, POINTS):
        ring = pool.ring(members)
    elif pool is not None and 4 * len(members) < 3 * pool.widest:
        # A view of far fewer nodes than the pool serves (a node before its first exchange
        # races among itself alone; a node cut off from most of the fleet): a ring of its
        # own. The others' views still read the pool: one such view at each start made
        # every other agent splice the fleet in again.
        ring = Ring.build(members, POINTS)
    else:
        # No pool yet, or one holding mostly nodes long gone (a view as wide as those it
        # served cannot read it): a new one.
        base = min(
            (r for r in (old, *_RINGS.values()) if r._pool is None),
            key=lambda r: r.splice_cost(members),
            default=Ring.build([]),
        )
        pool = RingPool(base.with_members(members, POINTS))
        _POOL[:] = [pool]
        ring = pool.ring(members)
    _RINGS[members] = ring
    while len(_RINGS) > _RINGS_KEPT:
        del _RINGS[next(iter(_RINGS))]
    return ring
