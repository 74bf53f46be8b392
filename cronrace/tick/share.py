"""racers = k: which jobs this node keeps in its heap, window by window.

A node's work must follow the ticks it races, not every job's every tick (docs/design.md
section 12). So a job's racers are placed per window (fleet/racers.py) and a node keeps in
its heap only the jobs it races in their current window. Three things bring a job into
the heap: the start (every job is placed once), its window's turn (each job's windows
start at their own second of the period: a few jobs a second turn, never all at once),
and a membership change that makes this node one of its racers (found through the key
index and this node's own arcs on the new ring, fleet/placement.py, without placing every
job again). A job leaves the heap when its next tick is raced by others: the loop does
not push it back.

Nothing here remembers ticks: a tick whose racers died is above the job's cursor, and the
job's next decision covers it. A node that becomes a racer of a job claims the job's
newest due tick once (the loop), so that decision comes at once rather than at the job's
next tick. A change is queued here and its moved jobs are re-homed by the loop a chunk at
a time (:data:`CHANGE_CHUNK` jobs per turn of the loop), so even a change that moves
every job (the first view of a large fleet) never holds the loop for long.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cronrace.fleet.membership import Membership
from cronrace.fleet.placement import KeyIndex
from cronrace.fleet.racers import PLACEMENT_WINDOW_S, POINTS_PER_NODE, Ring, placement_start_s
from cronrace.model.job import Job

log = logging.getLogger("cronrace.tick.share")

#: Jobs re-homed per turn of the loop after a membership change: at ~3 µs each, a few
#: milliseconds of event-loop time at once, however many jobs the change moved.
CHANGE_CHUNK = 500
#: Finding the jobs this node races after a change (its own arcs, placement.py) walks
#: about k ring points per point of its own; re-homing every job costs about one placement
#: each. Past this many ring points per job of this node, every job is re-homed instead.
ARC_POINTS_PER_JOB = 4


@dataclass(frozen=True, slots=True)
class Change:
    """One change of this node's racing members, as the heartbeat read it."""

    before: Ring
    after: Ring


class RacerShare:
    """The k-of-N bookkeeping of one scheduler (inert with ``racers = all``)."""

    def __init__(self, node_id: str, membership: Membership, jobs: Mapping[str, Job]) -> None:
        self.node_id = node_id
        self.membership = membership
        self.jobs = jobs  # the scheduler's own dict: jobs added at runtime are seen here
        self.index = KeyIndex(membership.racers.placed_as)
        #: (start of a job's next window, job): when to place it again.
        self._turns: list[tuple[int, str]] = []
        self._window: dict[str, int] = {}
        self._work: deque[tuple[Change, list[str]]] = deque()

    @property
    def k(self) -> int | None:
        return self.membership.k

    def placed_as(self, name: str) -> str:
        """The name a job's racers are placed by: its own, or its group's (racers.py)."""
        return self.membership.racers.placed_as(name)

    def races(self, name: str, tick_s: int) -> bool:
        """Whether this node races one (job, tick) in its current view."""
        return self.membership.racers_of(name, tick_s) is None

    # -- windows -----------------------------------------------------------------------

    def track(self, name: str, now_s: int) -> None:
        """Place a job (at the start, or added at runtime) in its current window."""
        if self.k is None:
            return
        start_s = placement_start_s(self.placed_as(name), now_s)
        self._window[name] = start_s
        self.index.put(name, start_s)
        heapq.heappush(self._turns, (start_s + PLACEMENT_WINDOW_S, name))

    def track_all(self, names: Iterable[str], now_s: int) -> None:
        """Place every job at the start in its current window (:meth:`track`, at once)."""
        if self.k is None:
            return
        placed = []
        for name in names:
            start_s = placement_start_s(self.placed_as(name), now_s)
            self._window[name] = start_s
            placed.append((name, start_s))
            self._turns.append((start_s + PLACEMENT_WINDOW_S, name))
        heapq.heapify(self._turns)
        self.index.put_all(placed)

    def raced_now(self) -> set[str] | None:
        """The tracked jobs this node races in their current windows, as its view stands
        (its own arcs, placement.py); None: every job (``racers = all``, or a view of at
        most k members, or one that does not list this node yet)."""
        k = self.k
        ring = self.membership.ring
        if k is None or self.node_id not in ring.members:
            return None
        return self.index.raced_by(ring, self.node_id, k, self.membership.point_cache)

    def forget(self, name: str) -> None:
        """A job removed at runtime: its window, key and remembered ticks go."""
        self._window.pop(name, None)
        self.index.drop(name)

    def next_turn_s(self) -> float:
        return self._turns[0][0] if self._turns else math.inf

    def due_turns(
        self, now: float, limit: int = CHANGE_CHUNK
    ) -> tuple[list[tuple[int, str]], bool]:
        """Turn the windows that have begun, at most ``limit``: (its start, job) for each
        job this node races in its new window, and whether more have begun.

        At most ``limit`` a call, as a change's re-homing is: with ``racer_groups`` a
        group's jobs turn at one second (10,000 jobs in 4 groups: 37 ms at once).

        Every node turns every job once a window; whether it races the new one is asked of
        its own arcs on its view with the key just indexed (:meth:`Ring.decides`, a binary
        search), not by walking the ring: with the index's insert that walk was most of a
        turn's 13 µs, paid for every job a node does not race too.
        """
        turned: list[tuple[int, str]] = []
        me, k, ring = self.node_id, self.k, self.membership.ring
        # A view of at most k members, or one without this node (before its first read),
        # races every job: the walk says so (Membership.races).
        arcs_k = k if k is not None and me in ring.members and k < len(ring.members) else None
        cache = self.membership.point_cache
        count = 0
        while self._turns and self._turns[0][0] <= now and count < limit:
            count += 1
            start_s, name = heapq.heappop(self._turns)
            if self._window.get(name) != start_s - PLACEMENT_WINDOW_S:
                continue  # a job removed or placed again meanwhile: its own entry counts
            self._window[name] = start_s
            key = self.index.put(name, start_s)
            heapq.heappush(self._turns, (start_s + PLACEMENT_WINDOW_S, name))
            if (
                ring.decides(me, arcs_k, key, cache)
                if arcs_k is not None
                else self.races(name, start_s)
            ):
                turned.append((start_s, name))
        return turned, bool(self._turns) and self._turns[0][0] <= now

    # -- membership changes --------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Whether a change still has jobs to re-home."""
        return bool(self._work)

    def changed(self, before: Ring, after: Ring, last_beat_ms: int) -> None:
        """Queue the jobs a change of the racing members moved (the membership's hook;
        ``last_beat_ms`` is not needed: the cursor, not a memory of ticks, covers what
        the leavers left)."""
        del last_beat_ms
        k = self.k
        if k is None:
            return
        change = Change(before, after)
        # Only the jobs this node races on the new ring can need it: one it stopped racing
        # leaves the heap at its next tick (the loop asks the ring then), and one whose
        # racers changed among others is theirs. About k·J/N jobs however many members
        # changed: a beat of a 1,000-node start-up that read hundreds of joins looked at
        # every job again before (the arcs of every node that changed).
        if POINTS_PER_NODE * k > ARC_POINTS_PER_JOB * len(self.index):
            mine = None  # a few jobs: cheaper to look at every one again
        else:
            mine = self.index.raced_by(after, self.node_id, k, self.membership.point_cache)
        names = self.index.names() if mine is None else sorted(mine)
        if names:
            self._work.append((change, names))

    def take(self, limit: int = CHANGE_CHUNK) -> list[tuple[Change, str]]:
        """The next jobs to re-home, at most ``limit``, each with its change."""
        out: list[tuple[Change, str]] = []
        while self._work and len(out) < limit:
            change, names = self._work[0]
            count = limit - len(out)
            out.extend((change, name) for name in names[:count])
            if count >= len(names):
                self._work.popleft()
            else:
                del names[:count]
        return out
