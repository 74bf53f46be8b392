"""Who races for a tick: k of N live nodes, chosen the same way on every node; pure.

With ``racers = k`` only k nodes send a claim for each (job, tick), so claim load is k·J
per tick instead of N·J (docs/design.md section 12). Every node must pick the same k from the
same membership without talking, the k must rotate with the tick (so runs spread), and a
node joining or leaving must move few (job, tick) pairs to other candidates (so views
that differ for a heartbeat disagree about few ticks).

The scheme is a consistent-hash ring (Karger et al.) with :data:`POINTS_PER_NODE` points
per node. A (job, tick) hashes to a point on the ring; its preference order is the order
in which distinct nodes first appear walking clockwise from there, and the first k race.
Why a ring and not plain rendezvous hashing: rendezvous ranks all N nodes per key, O(N)
hashes per (job, tick), so O(J·N) per node per tick (200,000 blake2b calls per second
at 200 nodes x 1,000 one-second jobs). The ring costs one hash and one binary search,
O(log N), plus a walk of about k points (expected k·N/(N-k+1) steps), so choosing is
O(J log N) per node per tick. The ring is rebuilt only when membership changes (the
heartbeat's read), from point hashes cached per node.

Both schemes share the property the scheduler relies on: the preference order of a key
over a subset of nodes is the order over the full set with the others left out. So a
node that is among the first k in a view that lists too many nodes (dead ones not yet
expired) is also among the first k in any smaller view that still lists it: views that
differ only by members others do not know yet never leave a tick without a racer.

Placement windows. A node must not have to look at every job's every tick to learn that
it races none of them (docs/design.md section 12, "work, not only claims"), so a job's racers
are placed per *window* of :data:`PLACEMENT_WINDOW_S` rather than per tick: the key of a
tick is ``key_point(job, placement_start_s(job, tick))``, the same for every tick of the
window. Each job's windows are offset by a hash of its name, so the jobs' windows turn
one by one over the window (about J / 3,600 turns a second) instead of all at once. Within
a window the k racers take turns being first (:meth:`Ring.first_racer`), so one job's
runs still spread over its racers; across the fleet, runs spread because jobs do.
:meth:`Ring.arcs` tells which keys a node's points decide, so a membership change finds
the jobs it moves without placing every job again (fleet/placement.py).

Racer groups. Placed one by one, the jobs cover every node once k·J/period exceeds N, and
each node then pays a tick's round trips every period for its few jobs. With
``racer_groups = G`` a job is placed by its group's name (:meth:`Racers.placed_as`), so
the jobs of a group share their racers and windows, and at most k·G nodes race in an
hour. Everything downstream takes that name where it took the job's.

Hashes are blake2b (never Python's ``hash()``, which is salted per process).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from cronrace.fleet.racer_setting import Racers as Racers  # re-exported: the setting
from cronrace.fleet.racer_setting import hash64 as _hash64

#: Points per node on the ring. The share of ticks a node is preferred for has a
#: coefficient of variation of about 1/sqrt(points): 1/sqrt(160) ≈ 8 %, so the busiest of
#: 5 nodes is about 1.1 x the mean (tested below 1.25). More points cost memory and build
#: time (N = 1,000: 160,000 points, about 0.4 s on the shared 2-core machine, paid when a
#: node is first seen; later rebuilds only sort).
POINTS_PER_NODE = 160


#: How long one placement of a job's racers lasts (an hour). Every node turns every job's
#: window once per window, whatever it races: a node of a fleet with 10,000 jobs turns
#: about 2.8 a second (17 with 600 s windows, 0.22 ms of CPU a second per node at 13 µs
#: each, a fifth of a core for a 1,000-node fleet: more than the ticks it races, issue 19).
#: Within a window the k racers take turns (:meth:`Ring.first_racer`), so a job's runs still
#: spread over them; across the fleet runs spread because jobs do.
PLACEMENT_WINDOW_S = 3600


#: Ring positions are 64-bit: arithmetic on them wraps modulo this.
_RING_SIZE = 1 << 64


def key_point(job: str, tick_s: int) -> int:
    """Return the ring position of one (job, tick): a stable 64-bit hash."""
    return _hash64(f"{job}\x00{tick_s}".encode())


@functools.lru_cache(maxsize=1 << 16)
def window_offset_s(job: str) -> int:
    """Where in the period a job's placement windows start: a stable hash of its name."""
    return _hash64(f"{job}\x00window".encode()) % PLACEMENT_WINDOW_S


def placement_start_s(job: str, tick_s: int) -> int:
    """The first second of the placement window holding ``tick_s`` (its key's tick)."""
    return tick_s - (tick_s - window_offset_s(job)) % PLACEMENT_WINDOW_S


def first_of(racers: tuple[str, ...], tick_s: int) -> str | None:
    """Which of a window's racers claims ``tick_s`` at once: they take turns."""
    if not racers:
        return None
    # A multiplicative mix, not tick % k: a minutely job's ticks are all even.
    return racers[((tick_s * 0x9E3779B1) >> 16) % len(racers)]


def _node_points(node: str) -> list[int]:
    return [_hash64(f"{node}\x00{i}".encode()) for i in range(POINTS_PER_NODE)]


def cached_points(node: str, cache: dict[str, list[int]] | None) -> list[int]:
    """A node's ring points, from ``cache`` when it holds them (else hashed, and kept there)."""
    points = cache.get(node) if cache is not None else None
    if points is None:
        points = _node_points(node)
        if cache is not None:
            cache[node] = points
    return points


def _keeps_absent(held: int, added: int, removed: int) -> bool:
    """Whether nodes gone from a ring's members stay in its chunks, skipped: while they are
    at most a quarter of the nodes held; past that they are spliced out."""
    return 4 * removed <= held + added


#: Points per chunk of a ring. A ring is a sorted list of chunks; a splice copies only the
#: chunks it touches (a join of 160 points touches about 150 of N x 160 / CHUNK) and shares
#: the others with the ring it came from, instead of copying all N x 160 points.
CHUNK = 64


class _Pool(Protocol):
    """What a ring reads of the pool whose chunks it shares
    (:class:`~cronrace.fleet.rings.RingPool`): the nodes whose points they hold."""

    nodes: set[str]


@dataclass(slots=True, eq=False)
class Ring:
    """A consistent-hash ring over one membership view.

    Build one with :meth:`build`; it never changes afterwards (a new view is a new ring),
    so a scheduler can keep the previous one to compare with. Its points are held in
    sorted chunks of about :data:`CHUNK`, which rings derived from one another share;
    two rings are equal when they hold the same members and the same points in order.

    A ring may also hold the points of a few nodes that are not members (``_absent``):
    walks skip them. A node's preference order over fewer members is its order over more
    with the others left out (the module's docstring), so a member gone silent costs a
    new ring sharing every chunk, not a splice of its 160 points; one back costs nothing
    more. At N = 600 a loaded simulated fleet's views lost and regained whole processes'
    agents at every beat, and their splices were a third of its CPU (issue 19).
    """

    members: frozenset[str]
    #: Each chunk's points and their owners, in ring order; no chunk is empty.
    _chunks: list[tuple[list[int], list[str]]] = field(repr=False)
    #: Each chunk's first point.
    _firsts: list[int] = field(repr=False)
    _size: int = field(repr=False)
    #: Nodes whose points the chunks hold although they are not members (walks skip them).
    _absent: frozenset[str] = field(default=frozenset(), repr=False)
    #: The pool whose chunks these are, when they are a
    #: :class:`~cronrace.fleet.rings.RingPool`'s (edited in place as it grows: they may
    #: hold the points of any node it holds; walks skip all but the members).
    _pool: _Pool | None = field(default=None, repr=False)
    #: :meth:`arcs` already found, by (node, k): a ring never changes, so neither do they
    #: (agents of one process that share a ring share them).
    _arcs: dict[tuple[str, int], list[tuple[int, int]] | None] = field(
        default_factory=dict, repr=False
    )
    #: The same arcs sorted by their ends, as (ends, starts), for :meth:`decides`.
    _bounds: dict[tuple[str, int], tuple[list[int], list[int]] | None] = field(
        default_factory=dict, repr=False
    )

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ring):
            return NotImplemented
        return self.members == other.members and self._flat() == other._flat()

    def _flat(self) -> tuple[list[int], list[str]]:
        points: list[int] = []
        owners: list[str] = []
        for chunk_points, chunk_owners in self._chunks:
            points += chunk_points
            owners += chunk_owners
        if self.sparse:
            kept = [i for i, owner in enumerate(owners) if owner in self.members]
            return [points[i] for i in kept], [owners[i] for i in kept]
        return points, owners

    @property
    def sparse(self) -> bool:
        """Whether the chunks may hold points of nodes that are not members."""
        return bool(self._absent) or self._pool is not None

    @property
    def held(self) -> frozenset[str]:
        """The nodes whose points the ring holds: its members and the absent."""
        if self._pool is not None:
            return frozenset(self._pool.nodes)
        return self.members | self._absent if self._absent else self.members

    @classmethod
    def _of(cls, members: frozenset[str], points: list[int], owners: list[str]) -> Ring:
        chunks = [
            (points[i : i + CHUNK], owners[i : i + CHUNK]) for i in range(0, len(points), CHUNK)
        ]
        return cls(members, chunks, [chunk[0][0] for chunk in chunks], len(points))

    @classmethod
    def build(cls, members: Iterable[str], cache: dict[str, list[int]] | None = None) -> Ring:
        """Build the ring of ``members``; ``cache`` keeps each node's point hashes across
        rebuilds (pass the same dict every time: only new nodes are hashed)."""
        nodes = frozenset(members)
        points: list[int] = []
        owners: list[str] = []
        # Nodes in id order and a stable sort by point alone: ties (a 64-bit collision)
        # keep that order, so every node orders them alike. Sorting indices by an int key
        # is about 3 x faster than sorting (point, node) tuples (N = 1,000: 160,000 points).
        for node in sorted(nodes):
            node_points = cached_points(node, cache)
            points += node_points
            owners += [node] * len(node_points)
        order = sorted(range(len(points)), key=points.__getitem__)
        return cls._of(nodes, [points[i] for i in order], [owners[i] for i in order])

    def splice_cost(self, members: frozenset[str]) -> int:
        """How many nodes' points :meth:`with_members` would splice in or out (or hash and
        sort, for a build) to make the ring of ``members`` from this one."""
        held = self.held
        added, removed = members - held, held - members
        if not held or 2 * len(added) > len(members):
            return len(members)
        if _keeps_absent(len(held), len(added), len(removed)):
            return len(added)
        return len(added) + len(removed)

    def with_members(
        self, members: Iterable[str], cache: dict[str, list[int]] | None = None
    ) -> Ring:
        """Return the ring of ``members``, derived from this one when few changed.

        The same ring :meth:`build` makes, for less: only the chunks holding points of the
        nodes that left or joined are copied and edited (binary searches and list
        inserts), the others are shared. At N = 1,000 (160,000 points) building costs
        about 0.2 s of event-loop time, copying every point a few ms, and one join spliced
        into its ~150 chunks a fraction of a ms.
        """
        nodes = frozenset(members)
        if nodes == self.members:
            return self
        if self._pool is not None:
            # A pool's chunks are edited in place as it grows: a ring sharing them that
            # is not the pool's own would meet points it does not skip.
            return Ring.build(nodes, cache)
        held = self.held
        added, removed = nodes - held, held - nodes
        # Members gone (silent, mostly back soon) stay in the chunks, skipped.
        absent = removed if _keeps_absent(len(held), len(added), len(removed)) else frozenset()
        if not added and (absent or not removed):
            return Ring(nodes, self._chunks, self._firsts, self._size, _absent=absent)
        if not held or 2 * len(added) > len(nodes):
            return Ring.build(nodes, cache)
        firsts = self._firsts
        drops: dict[int, list[int]] = {}
        for node in removed - absent:
            for point in cached_points(node, cache):
                c, i = self._index(point, node)
                drops.setdefault(c, []).append(i)
        inserts: dict[int, list[tuple[int, str]]] = {}
        for node in added:
            for point in cached_points(node, cache):
                c = bisect.bisect_left(firsts, point)
                if c < len(firsts) and firsts[c] == point:
                    # A 64-bit collision at a chunk's edge: which chunk it goes to depends
                    # on node ids; the build's order is certain.
                    return Ring.build(nodes, cache)
                inserts.setdefault(max(0, c - 1), []).append((point, node))
        chunks = list(self._chunks)
        new_firsts = list(firsts)
        size = self._size
        reshape = False
        for c in sorted(drops.keys() | inserts.keys()):
            points, owners = list(chunks[c][0]), list(chunks[c][1])
            for i in sorted(drops.get(c, ()), reverse=True):
                del points[i]
                del owners[i]
            for point, node in sorted(inserts.get(c, ())):
                i = bisect.bisect_left(points, point)
                while i < len(points) and points[i] == point and owners[i] < node:
                    i += 1  # ties in the order build's sort gives them: by node id
                points.insert(i, point)
                owners.insert(i, node)
            size += len(points) - len(chunks[c][0])
            chunks[c] = (points, owners)
            if points:
                new_firsts[c] = points[0]
            reshape = reshape or not points or len(points) > 2 * CHUNK
        if not reshape:
            return Ring(nodes, chunks, new_firsts, size, _absent=absent)
        out: list[tuple[list[int], list[str]]] = []
        for points, owners in chunks:
            if len(points) > 2 * CHUNK:
                out += [
                    (points[i : i + CHUNK], owners[i : i + CHUNK])
                    for i in range(0, len(points), CHUNK)
                ]
            elif points:
                out.append((points, owners))
        return Ring(nodes, out, [points[0] for points, _owners in out], size, _absent=absent)

    def _locate(self, point: int) -> tuple[int, int]:
        """Where the first point at or after ``point`` is: (chunk, offset), wrapping."""
        c = bisect.bisect_left(self._firsts, point) - 1
        if c < 0:
            return 0, 0
        i = bisect.bisect_left(self._chunks[c][0], point)
        if i == len(self._chunks[c][0]):
            return (c + 1) % len(self._chunks), 0
        return c, i

    def _index(self, point: int, node: str) -> tuple[int, int]:
        """Where ``node``'s ``point`` is: (chunk, offset)."""
        c, i = self._locate(point)
        chunks = self._chunks
        while chunks[c][1][i] != node:
            i += 1
            if i == len(chunks[c][1]):
                c, i = (c + 1) % len(chunks), 0
        return c, i

    def candidates(self, job: str, tick_s: int, k: int) -> tuple[str, ...]:
        """Return the first ``k`` nodes for one (job, tick), most preferred first.

        All members when there are at most k of them (still in preference order).
        """
        return self.candidates_at(key_point(job, tick_s), k)

    def candidates_at(self, key: int, k: int) -> tuple[str, ...]:
        """The first ``k`` distinct members walking clockwise from ring position ``key``."""
        if not self.members:
            return ()
        want = min(k, len(self.members))
        c, i = self._locate(key)
        chunks = self._chunks
        members = self.members
        found: list[str] = []
        while True:
            for node in chunks[c][1][i:]:
                if node not in found and node in members:
                    found.append(node)
                    if len(found) == want:
                        return tuple(found)
            c, i = (c + 1) % len(chunks), 0

    def preferred(self, job: str, tick_s: int) -> str | None:
        """Return the one node preferred for a (job, tick): its first candidate."""
        if not self.members:
            return None
        if self.sparse:
            return self.candidates(job, tick_s, 1)[0]
        c, i = self._locate(key_point(job, tick_s))
        return self._chunks[c][1][i]

    def races(self, node: str, job: str, tick_s: int, k: int | None) -> bool:
        """Whether ``node`` is among the racers of a (job, tick) (``k is None``: all)."""
        if k is None or k >= len(self.members) or node not in self.members:
            # A node always races for what its own view cannot place: all mode, a view of
            # at most k nodes, or a view that does not list it yet (before its first read).
            return True
        return node in self.racers(job, tick_s, k)

    def racers(self, job: str, tick_s: int, k: int) -> tuple[str, ...]:
        """The k nodes that race for one (job, tick): its placement window's candidates."""
        return self.candidates(job, placement_start_s(job, tick_s), k)

    def first_racer(self, job: str, tick_s: int, k: int) -> str | None:
        """The racer that claims a (job, tick) at once: the window's racers take turns."""
        return first_of(self.racers(job, tick_s, k), tick_s)

    def arcs(
        self, node: str, k: int, cache: dict[str, list[int]] | None = None
    ) -> list[tuple[int, int]] | None:
        """The key ranges whose first k distinct nodes include ``node`` (a member).

        Each range is ``(lo, hi]`` on the ring, wrapping past 2**64 when ``lo >= hi``;
        None means every key (the ring has at most k distinct nodes). A key's candidates
        are found walking clockwise from it, so ``node``'s point q decides the keys from
        which fewer than k other nodes come before q: walking counter-clockwise from q
        until k others have been seen (or another point of ``node``, whose own range takes
        over) bounds them. About k points walked per point, O(points x k) in all.
        """
        if (node, k) not in self._arcs:
            self._arcs[(node, k)] = self._find_arcs(node, k, cache)
        arcs = self._arcs[(node, k)]
        return None if arcs is None else list(arcs)

    def decides(
        self, node: str, k: int, key: int, cache: dict[str, list[int]] | None = None
    ) -> bool:
        """Whether ``node`` (a member) is among the first k nodes of ring position ``key``:
        whether one of its :meth:`arcs` holds it.

        The same answer as looking for ``node`` among the key's candidates, for a binary
        search among the node's own points instead of a walk of the ring: a window's turn
        asks it of every job (racers.py), and the ring's walk was most of a turn's cost.
        """
        if (node, k) not in self._bounds:
            arcs = self.arcs(node, k, cache)
            if arcs is not None:
                arcs.sort(key=lambda arc: arc[1])
            self._bounds[(node, k)] = (
                None if arcs is None else ([hi for _lo, hi in arcs], [lo for lo, _hi in arcs])
            )
        bounds = self._bounds[(node, k)]
        if bounds is None:
            return True
        his, los = bounds
        i = bisect.bisect_left(his, key)  # the arc ending at or after the key, wrapping
        if i == len(his):
            i = 0
        lo, hi = los[i], his[i]
        if lo == hi:  # the whole ring but its one point: never with 160 points a node
            return True
        # (lo, hi] on the ring: the key's distance past lo at most the arc's length.
        return 0 < (key - lo) % _RING_SIZE <= (hi - lo) % _RING_SIZE

    def _find_arcs(
        self, node: str, k: int, cache: dict[str, list[int]] | None
    ) -> list[tuple[int, int]] | None:
        if len(self.members - {node}) < k:
            return None
        chunks = self._chunks
        members = self.members
        out: list[tuple[int, int]] = []
        for point in cached_points(node, cache):
            c, j = self._index(point, node)
            seen: set[str] = set()
            while True:
                j -= 1
                while j < 0:
                    c = (c - 1) % len(chunks)
                    j = len(chunks[c][1]) - 1
                owner = chunks[c][1][j]
                if owner == node:
                    break
                if owner not in members:
                    continue
                seen.add(owner)
                if len(seen) == k:
                    break
            out.append((chunks[c][0][j], point))
        return out
