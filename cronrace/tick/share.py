"""racers = k: which jobs this node keeps in its heap, and the ticks their racers may have lost.

A node's work must follow the ticks it races, not every job's every tick (DESIGN.md
section 12). So a job's racers are placed per window (fleet/racers.py) and a node keeps in
its heap only the jobs it races in their current window. Three things bring a job into
the heap: the start (every job is placed once), its window's turn (each job's windows
start at their own second of the period: a few jobs a second turn, never all at once),
and a membership change that makes this node one of its racers (found through the key
index and this node's own arcs on the new ring, fleet/placement.py, without placing every
job again). A job leaves the heap when
its next tick is raced by others: the loop does not push it back.

A change is queued here and its moved jobs are re-homed by the loop a chunk at a time
(:data:`CHANGE_CHUNK` jobs per turn of the loop), so even a change that moves every job
(the first view of a large fleet) never holds the loop for long.

Ticks whose racers died: a node that becomes a racer because members left looks at the
job's recent ticks (since the leavers' last heartbeat): those whose racers, in the view
before the change, all left are its to race again, late (``orphans``); those whose racers
partly live are remembered with their racers (``left``), so a later departure of the rest
still finds them. Every racer's first claim after it took a job over also covers the
ticks of the last few heartbeats (``passed``, :meth:`RacerShare.with_passed`): a racer
that died before the membership said so leaves nothing behind that the watermark has not
passed.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cronrace.fleet.membership import Membership
from cronrace.fleet.placement import KeyIndex
from cronrace.fleet.racers import PLACEMENT_WINDOW_S, POINTS_PER_NODE, Ring, placement_start_s
from cronrace.model.job import Job
from cronrace.model.policies import TickPlan
from cronrace.tick.decisions import EXPIRED_COUNT_CAP, Proposal
from cronrace.tick.plans import plan_due

log = logging.getLogger("cronrace.tick.share")

#: Jobs re-homed per turn of the loop after a membership change: at ~3 µs each, a few
#: milliseconds of event-loop time at once, however many jobs the change moved.
CHANGE_CHUNK = 500
#: Most ticks of one job listed for a departure (a one-second job's last minute). Past it
#: (a change seen late), the oldest and those of the last few heartbeats are listed, and
#: the orphaned ones between them are counted (``RacerShare.unlisted``), to be recorded
#: missed with the listed ones' decision.
RECENT_TICKS_CAP = 64
#: Finding the jobs this node races after a change (its own arcs, placement.py) walks
#: about k ring points per point of its own; re-homing every job costs about one placement
#: each. Past this many ring points per job of this node, every job is re-homed instead.
ARC_POINTS_PER_JOB = 4
#: How far back the ticks of a change seen late are looked at: since the leavers' last
#: heartbeat, up to an hour (a node whose own heartbeats were not getting through saw the
#: others leave only when its beats came back; older ticks are past every catch-up and
#: counted missed by the plan that covers them).
LATE_CHANGE_HORIZON_S = 3600


@dataclass(frozen=True, slots=True)
class Change:
    """One change of this node's racing members, as the heartbeat read it."""

    before: Ring
    after: Ring
    #: No tick before it lost its racers: the leavers' oldest last heartbeat, less a second
    #: of slack for clocks that disagree a little.
    since_s: int
    #: Whether members left (asked for every moved job: found once).
    departed: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "departed", not self.before.members <= self.after.members)


class RacerShare:
    """The k-of-N bookkeeping of one scheduler (inert with ``racers = all``)."""

    def __init__(
        self, node_id: str, membership: Membership, jobs: Mapping[str, Job], orphan_window_s: float
    ) -> None:
        self.node_id = node_id
        self.membership = membership
        self.jobs = jobs  # the scheduler's own dict: jobs added at runtime are seen here
        self.orphan_window_s = orphan_window_s
        self.index = KeyIndex(membership.racers.placed_as)
        #: (start of a job's next window, job): when to place it again.
        self._turns: list[tuple[int, str]] = []
        self._window: dict[str, int] = {}
        #: Jobs whose window turned lately: a departure looks at their last window's ticks.
        self._recent: deque[tuple[int, str]] = deque()
        self._work: deque[tuple[Change, list[str]]] = deque()
        #: The oldest tick of each job this node left to other racers since it last raced
        #: for the job: its next claim covers them (before the watermark passes them).
        self.passed: dict[str, int] = {}
        #: Ticks this node became a racer for because members left: raced at once, late.
        self.orphans: dict[str, list[int]] = {}
        #: How many more such ticks were not listed (past RECENT_TICKS_CAP, between the
        #: oldest listed and the last few heartbeats'): the plan of the listed ones counts
        #: them missed, so none goes unrecorded.
        self.unlisted: dict[str, int] = {}
        #: The oldest orphan of each job whose race for them got no answer: the job's next
        #: claim covers the ticks from it on, however old (:meth:`with_passed`).
        self.uncovered: dict[str, int] = {}
        #: Recent ticks this node left to others, and to whom.
        self.left: dict[str, deque[tuple[int, tuple[str, ...]]]] = {}
        #: Ticks past the cap between the oldest listed and the last few heartbeats' of a
        #: change seen late, whose racers partly live: ``(first, last, racers, count)``
        #: ranges, counted missed with the listed ones if the rest of the racers leave.
        self.left_unlisted: dict[str, list[tuple[int, int, tuple[str, ...], int]]] = {}

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
        self.passed.pop(name, None)
        self.orphans.pop(name, None)
        self.left.pop(name, None)
        self.left_unlisted.pop(name, None)
        self.unlisted.pop(name, None)
        self.uncovered.pop(name, None)

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
            self._recent.append((start_s, name))
            if (
                ring.decides(me, arcs_k, key, cache)
                if arcs_k is not None
                else self.races(name, start_s)
            ):
                turned.append((start_s, name))
        oldest_s = now - self.orphan_window_s
        while self._recent and self._recent[0][0] < oldest_s:
            self._recent.popleft()
        return turned, bool(self._turns) and self._turns[0][0] <= now

    # -- membership changes --------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Whether a change still has jobs to re-home."""
        return bool(self._work)

    def changed(self, before: Ring, after: Ring, last_beat_ms: int) -> None:
        """Queue the jobs a change of the racing members moved (the membership's hook)."""
        k = self.k
        if k is None:
            return
        change = Change(before, after, last_beat_ms // 1000 - 1)
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
        if change.departed:
            # Jobs whose window turned lately: their last window's ticks may be orphans.
            seen = set(names)
            for _start_s, name in self._recent:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
            self._members_left(change)
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

    def recover(self, change: Change, job: Job, first_s: int, now_s: int) -> None:
        """Find the recent ticks of a moved job that lost every racer and are now this node's.

        ``first_s`` is the job's first tick this node races from now on (the loop's), so
        only the ticks before it are looked at.
        """
        k = self.k
        if k is None or not change.departed:
            return
        name = job.name
        # Since the leavers' last heartbeat: a few heartbeats back when the departure was
        # seen in time; further when this node saw it late (its own beats were failing,
        # and it claimed nothing meanwhile). Bounded by the orphan window before, such a
        # change left the older ticks to a decision that passed them unrecorded (the
        # scheduler model with racers = 2: a job's ticks over 90 s, every node's beats
        # failing in turn).
        after_s = max(change.since_s, int(now_s - LATE_CHANGE_HORIZON_S)) - 1
        until_s = min(now_s, first_s - 1)
        # Every tick of one placement window has the same racers (racers.py): the rings
        # are asked once a window, not three times a tick (a one-second job's recent
        # ticks, at every departure a loaded fleet's views saw: issue 19).
        windows: dict[int, tuple[str, ...] | None] = {}
        ticks = job.schedule.ticks_between(after_s, until_s, RECENT_TICKS_CAP)
        recent_after_s = max(change.since_s, int(now_s - self.orphan_window_s)) - 1
        if len(ticks) == RECENT_TICKS_CAP and ticks[-1] < until_s and recent_after_s > after_s:
            # More than the cap since a change seen late: its oldest ticks, and (as for a
            # change seen in time) those of the last few heartbeats.
            recent = job.schedule.ticks_between(recent_after_s, until_s, RECENT_TICKS_CAP)
            upper_s = recent[0] - 1 if recent else until_s
            if upper_s > ticks[-1]:
                self._count_unlisted(change, job, ticks[-1], upper_s, windows)
            ticks = sorted({*ticks, *recent})
        for tick_s in ticks:
            racers = self._lost_racers(change, name, tick_s, windows)
            if racers is None:
                continue
            if change.after.members.isdisjoint(racers):
                self.orphans.setdefault(name, []).append(tick_s)
            else:  # a racer of it lives: remembered, in case the rest leave too
                self.left.setdefault(name, deque()).append((tick_s, racers))
        if name in self.orphans:
            self.orphans[name] = sorted(set(self.orphans[name]))

    def _lost_racers(
        self, change: Change, name: str, tick_s: int, windows: dict[int, tuple[str, ...] | None]
    ) -> tuple[str, ...] | None:
        """The racers a tick was left to, when this node races it only since the change
        (None otherwise); asked once per placement window (``windows`` remembers)."""
        placed = self.placed_as(name)
        start_s = placement_start_s(placed, tick_s)
        if start_s not in windows:
            me, k = self.node_id, self.k or 0
            windows[start_s] = (
                None  # raced it itself, or others race it now
                if change.before.races(me, placed, tick_s, k)
                or not change.after.races(me, placed, tick_s, k)
                else change.before.racers(placed, tick_s, k)
            )
        return windows[start_s]

    def _count_unlisted(
        self,
        change: Change,
        job: Job,
        after_s: int,
        until_s: int,
        windows: dict[int, tuple[str, ...] | None],
    ) -> None:
        """Count the orphaned ticks in ``(after_s, until_s]`` that are not listed: a range
        under LATE_CHANGE_HORIZON_S spans one placement window or two, each asked once.

        Those whose racers partly live are remembered as a range (``left_unlisted``), as
        the listed ones are in ``left``: dropped, they were neither raced nor counted when
        the rest of their racers left at a later change (a returning node that saw its two
        racers leave one read apart lost 8 of 81 ticks so, in a unit test)."""
        name, count = job.name, 0
        placed = self.placed_as(name)
        while after_s < until_s:
            end_s = min(until_s, placement_start_s(placed, after_s + 1) + PLACEMENT_WINDOW_S - 1)
            racers = self._lost_racers(change, name, after_s + 1, windows)
            if racers is not None:
                ticks = job.schedule.count_between(after_s, end_s, EXPIRED_COUNT_CAP)
                if change.after.members.isdisjoint(racers):
                    count += ticks
                elif ticks:
                    ranges = self.left_unlisted.setdefault(name, [])
                    ranges.append((after_s + 1, end_s, racers, ticks))
            after_s = end_s
        if count:
            self.unlisted[name] = self.unlisted.get(name, 0) + count

    def left_to(self, name: str, tick_s: int, racers: tuple[str, ...], now: float) -> None:
        """Remember who this node left a tick to, while that tick may still lose them."""
        left = self.left.setdefault(name, deque())
        left.append((tick_s, racers))
        oldest_s = now - self.orphan_window_s
        while left and left[0][0] < oldest_s:
            left.popleft()

    def _members_left(self, change: Change) -> None:
        """Find the remembered ticks whose racers have all left, that this node now races.

        Only once none of the racers a tick was left to is still a member: one late
        heartbeat that drops one racer of three costs no claim, and a tick whose racers
        leave one by one is raced again when the last one goes.

        Not only the ticks after the leavers' last heartbeat: a racer that lost a tick
        takes its claim over when the winner goes silent (tick/takeover.py), up to the
        orphan window after the tick, and may die before deciding it. Its last beat then
        comes after the tick, yet nobody decided it, and nobody else lost its claim (the
        scheduler model with racers = 2, seed 41: n1 won, froze; n2 took over, froze;
        n3 ran the next tick). So a tick is left alone only when the last racers beat
        later than that window after it.
        """
        k = self.k
        if k is None:
            return
        me, members = self.node_id, change.after.members
        # A lost claim is taken over at most the orphan window after its tick (the
        # takeovers' memory, race.py: the same span).
        since_s = change.since_s - math.ceil(self.orphan_window_s)
        found = 0
        for name, left in self.left.items():
            if name not in self.jobs:
                continue
            races: dict[int, bool] = {}  # by placement window, as in recover()
            placed = self.placed_as(name)
            mine = []
            for t, racers in left:
                if t < since_s or not members.isdisjoint(racers):
                    continue
                start_s = placement_start_s(placed, t)
                if start_s not in races:
                    races[start_s] = change.after.races(me, placed, t, k)
                if races[start_s]:
                    mine.append(t)
            if mine:
                self.orphans[name] = sorted({*self.orphans.get(name, ()), *mine})
                found += len(mine)
        for name, ranges in list(self.left_unlisted.items()):
            job = self.jobs.get(name)
            if job is None or name not in self.orphans:
                continue  # counted by the plan of the listed ones: only beside them
            kept = []
            for first_s, last_s, racers, count in ranges:
                if last_s < since_s:
                    continue  # older than any tick the leavers may have lost
                if not members.isdisjoint(racers):
                    kept.append((first_s, last_s, racers, count))
                    continue
                if change.after.races(me, self.placed_as(name), last_s, k):  # one window
                    if first_s < since_s:
                        count = job.schedule.count_between(since_s - 1, last_s, count)
                    self.unlisted[name] = self.unlisted.get(name, 0) + count
                    found += count
            if kept:
                self.left_unlisted[name] = kept
            else:
                del self.left_unlisted[name]
        if found:
            log.info(
                "members left: racing again for the recent ticks they were the racers of",
                extra={
                    "node": me,
                    "ticks": found,
                    "left": sorted(change.before.members - members)[:10],
                },
            )

    # -- ticks left to others ------------------------------------------------------------

    def with_passed(
        self,
        job: Job,
        plan: TickPlan,
        first_due_s: int,
        now: float,
        *,
        prior_tick_s: int,
        live_grace_s: float,
    ) -> Proposal:
        """Widen a plan to the ticks this node left to others lately (racers = k).

        Those ticks' racers may have died before the membership said so. Covering them in
        this claim's decision fires them now if nobody did (the acquire refuses what the
        watermark passed, so never twice), before this tick's decision would pass them.
        Orphans whose own race got no answer are covered from the oldest, however old
        (``uncovered``): bounded by the orphan window like the rest, the older ones were
        neither raced again nor counted (tests/faults/test_late_departures.py).
        """
        name = job.name
        alone = Proposal(job, plan, prior_tick_s=prior_tick_s)
        passed = self.passed.pop(name, None)
        orphans = self.orphans.pop(name, None)
        uncovered = self.uncovered.pop(name, None)
        unlisted = self.unlisted.pop(name, 0) if orphans else 0
        if passed is None and not orphans and uncovered is None:
            return alone  # the common case (and every one at racers = all): nothing left
        left = [t for t in (passed, *(orphans or ())) if t is not None]
        oldest = max(min(left, default=first_due_s), int(now - self.orphan_window_s))
        if uncovered is not None:
            oldest = min(oldest, uncovered)
        oldest = job.schedule.next_tick(oldest - 1)  # the first tick at or after it
        if oldest >= first_due_s:
            return alone
        wide, _following = plan_due(job, oldest, now, live_grace_s)
        if wide is None or wide.claim_tick_s != plan.claim_tick_s:
            return alone
        if unlisted:
            # Orphans past the cap (recover) are older than this plan's ticks: counted.
            wide = dataclasses.replace(wide, missed=wide.missed + unlisted)
        return Proposal(job, wide, shared_from_s=oldest)
