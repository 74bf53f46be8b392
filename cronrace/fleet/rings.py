"""The rings of one process: each node's points, the recent rings and the pool they read.

Rings are pure values of their members, so every agent of a process may share them (a
real node has one agent; a benchmark's fleet process a hundred, README "What simulated
nodes share"). :func:`ring_of` is how a :class:`~cronrace.fleet.membership.Membership`
gets the ring of a new view; :class:`RingPool` holds the points the rings of a process read
in common.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from cronrace.fleet.racers import CHUNK, Ring, cached_points

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
#: The points of every node this process's agents counted live lately (RingPool): each
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


class RingPool:
    """The points of every node a process's views held lately, in chunks edited in place.

    A ring of any subset of its nodes reads these chunks and skips the others
    (:meth:`ring`). A node is spliced in once, when the pool first holds it; rings
    already made of the pool are not changed by that, since it is none of their members
    and their walks skip it. Splicing each view's own ring instead cost every agent a
    splice at every beat that read a join (about 150 of N x 160 / CHUNK chunks copied a
    node), the largest share of a forming 1,000-node fleet's CPU (issue 19). Nothing is
    ever taken out: a new pool is made when the nodes held but gone outnumber what a
    view may skip (:meth:`serves`).
    """

    def __init__(self, ring: Ring) -> None:
        """A pool of ``ring``'s points (copied: a pool's chunks are its own to edit)."""
        self.chunks = [(list(points), list(owners)) for points, owners in ring._chunks]
        self.firsts = list(ring._firsts)
        self.nodes: set[str] = set(ring.held)
        #: The most members of a ring it served: a view about as wide that it cannot serve
        #: finds it holding mostly nodes long gone (ring_of makes a new one then).
        self.widest = len(ring.members)

    def serves(self, members: frozenset[str]) -> bool:
        """Whether a ring of ``members`` may read this pool: at least a third of the nodes
        it holds once the new members are added (a walk skips the others: at most 3 x as
        long). A loaded fleet's views differ by hundreds of members, silent to some and not
        to others; a pool that served only views within a quarter of it was made anew at
        every other beat."""
        added = len(members - self.nodes)
        return 3 * len(members) >= len(self.nodes) + added

    def add(self, nodes: Iterable[str], cache: dict[str, list[int]] | None) -> bool:
        """Splice the points of ``nodes`` in; False (nothing added) when one ties a chunk's
        first point, whose side depends on node ids (the caller makes a new pool)."""
        firsts = self.firsts
        if not firsts:
            return False
        entries = []
        for node in set(nodes) - self.nodes:
            for point in cached_points(node, cache):
                c = bisect.bisect_left(firsts, point)
                if c < len(firsts) and firsts[c] == point:
                    return False
                entries.append((point, node))
        entries.sort()
        chunks = self.chunks
        for point, node in entries:
            c = max(0, bisect.bisect_right(firsts, point) - 1)
            points, owners = chunks[c]
            i = bisect.bisect_left(points, point)
            while i < len(points) and points[i] == point and owners[i] < node:
                i += 1  # ties in the order build's sort gives them: by node id
            points.insert(i, point)
            owners.insert(i, node)
            if i == 0:
                firsts[c] = point  # before the ring's first point
            if len(points) > 2 * CHUNK:
                # In place: every ring of the pool holds these very lists.
                half = len(points) // 2
                chunks[c : c + 1] = [(points[:half], owners[:half]), (points[half:], owners[half:])]
                firsts[c : c + 1] = [points[0], points[half]]
        self.nodes.update(node for _point, node in entries)
        return True

    def ring(self, members: frozenset[str]) -> Ring:
        """The ring of ``members`` (nodes this pool holds), reading the pool's chunks."""
        self.widest = max(self.widest, len(members))
        return Ring(members, self.chunks, self.firsts, 0, _pool=self)
