"""The racers' view of the fleet: the live node set, read with every heartbeat.

The heartbeat already writes this node's expiry into ``<ns>:nodes`` and, in the same
round trip, reads the members back (no extra round trip per tick). This module turns
that read into a :class:`~cronrace.fleet.racers.Ring` and tells the scheduler when members
leave, so that the ticks they were the only racers for are raced again (docs/design.md
section 12).

A member counts as live for racing while its last heartbeat is at most
:data:`SILENT_AFTER_PERIODS` heartbeats old, tighter than its expiry in the node set
(3 periods), because racing is where a dead member costs ticks: a member wrongly thought
dead only adds racers (the claim still decides), a dead one thought live can leave a
tick without any. Every node shares ``heartbeat_s`` (it sets the expiry everyone reads).

Silence is judged only over time this node itself could beat. A store that holds every
write for a while (``CLIENT PAUSE WRITE`` before a managed failover) or does not answer
silences every member alike, this node too: its own reads stop. Others' beats then land
late, stamped with when they were sent, or their entries expire first. So after a read
more than :data:`BLIND_AFTER_PERIODS` after the previous one, the members this node
counted live stay live for :data:`SILENT_AFTER_PERIODS` more, listed or not; those still
silent then leave at the next read. A member that really died is noticed at most 2.5
heartbeats after its last beat, or after this node's own beats went through again,
whichever is later. Departures re-home racers = k jobs (tick/share.py).

Membership decides who races, never whether a tick is accounted for: a tick whose racers
died is above its job's cursor, and the job's next decision covers it (docs/design.md
section 3). A view that is wrong costs latency or extra claims, never a tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

import anyio

from cronrace.fleet.racers import Racers, Ring, first_of, placement_start_s
from cronrace.fleet.rings import POINTS, ring_of

log = logging.getLogger("cronrace.fleet.membership")

#: A member whose last heartbeat is older than this many periods does not race.
SILENT_AFTER_PERIODS = 1.5
#: A read this many periods after this node's previous one finds the node itself cut off
#: meanwhile (its own beats held up or failing): the members' silence over that time is
#: no evidence that they left (below). Beats are sent every period, so reads come about
#: a period apart; this margin covers round trips that vary by a quarter period.
BLIND_AFTER_PERIODS = 1.25
#: How long after a silent member's heartbeat expiry this node still asks for it again at
#: each read of changes (:meth:`Membership.recheck`), in periods: a member that beats again
#: within :data:`~cronrace.fleet.heartbeat.REJOIN_AFTER_PERIODS` of its last beat does
#: not log itself as joined (heartbeat.py), and its beat must land within this margin.
RECHECK_AFTER_EXPIRY_PERIODS = 1.0
#: At most this many silent members are asked for again at one read (the most recent
#: first); one beyond it that comes back makes the view not add up: read in full.
RECHECK_MAX = 1_000
#: A ring change that only adds members, fewer than a quarter of them, waits until this
#: many heartbeats after the ring last changed (it is made at the first beat after). A
#: member not yet placed only adds racers, its own view placing it (the claim decides),
#: while each change costs a node its own arcs and its jobs re-homed: a forming 1,000-node
#: fleet changed every node's ring at every beat (issue 19). Departures never wait.
JOINS_WAIT_PERIODS = 6
#: At most this many (job, window) placements are kept; past it they are all dropped and
#: placed again as asked (a node races about k·J/N jobs, a window or two each at a time).
PLACED_MAX = 1 << 14


def late_fire_bound_s(heartbeat_s: float) -> float:
    """How late a tick whose k racers all died may fire (docs/design.md section 12).

    A dead racer stops beating at most when it dies (before the tick), is silent for
    :data:`SILENT_AFTER_PERIODS` heartbeats, and each node notices at its next heartbeat
    (one more period): 2.5 heartbeats, 5 s at the default 2 s, plus one claim and acquire
    round trip. A job whose next tick comes sooner fires the orphan with that tick.
    """
    return (SILENT_AFTER_PERIODS + 1) * heartbeat_s


#: Called with the ring before and after every change of the racing members, and the
#: oldest last heartbeat (epoch ms) among those that left (now, when none left): no tick
#: before it lost its racers.
ChangeHook = Callable[[Ring, Ring, int], None]


class Membership:
    """This node's view of the live members, rebuilt when the heartbeat reads a change."""

    def __init__(self, node_id: str, racers: Racers, heartbeat_s: float) -> None:
        self.node_id = node_id
        self.racers = racers
        self.heartbeat_s = heartbeat_s
        #: The current view; empty until the first heartbeat read (then every node races).
        self.ring = Ring.build([])
        #: The racers of each job this node races, per placement window, on
        #: ``self._placed_on`` (the ring they were placed on): a window's racers are the
        #: same for each of its ticks (an hour of them), and the scheduler asks about every
        #: tick it races three times.
        self._placed: dict[tuple[str, int, int], tuple[str, ...]] = {}
        self._placed_on: Ring | None = None
        #: Each member's last heartbeat, epoch ms, as of the last read.
        self.last_beat_ms: dict[str, int] = {}
        self.on_change: ChangeHook | None = None
        #: Called with the members that went silent since the last read (any fingerprint).
        self.on_departed: Callable[[frozenset[str]], None] | None = None
        #: Whether every live member publishes what this node does (the same jobs,
        #: handlers, refusals and racers setting), as of the last fleet exchange.
        self.uniform = False
        #: Live members (this node too) as of the last heartbeat read.
        self.live: frozenset[str] = frozenset({node_id})
        self._fingerprints: dict[str, str] = {}
        #: What was last logged of the live members' likeness: "" (nothing yet),
        #: "uniform", "pending" (some have not said what they run yet) or "unlike".
        self._likeness = ""
        self._was_uniform = False
        self._confirmed_ms = 0
        #: When this node's own reads went through again after it was cut off (0: never).
        self._resumed_ms = 0
        #: When this node's own last heartbeat that went through was sent (epoch ms, what
        #: the others judge it by); None until the heartbeat reports one (never in tests
        #: that drive a scheduler without heartbeats: no beat, no judgement).
        self.own_beat_ms: int | None = None
        self._beat_waiters: list[anyio.Event] = []
        #: Members read silent (not left), with their expiry (epoch ms): each read of
        #: changes asks for them again, so one that beats again is seen back without a
        #: join in the change log (a late beat logs none: heartbeat.py).
        self._silenced: dict[str, int] = {}
        #: While a heartbeat is under way (:meth:`hold`): the last heartbeat of each member
        #: gone from the live set meanwhile (None: not held), and whether the ring is owed
        #: a rebuild at :meth:`settle`, as of when.
        self._held: dict[str, int] | None = None
        self._owed_ms: int | None = None
        #: When the ring last changed (epoch ms; 0: never), and whether members that joined
        #: since wait to be placed (:data:`JOINS_WAIT_PERIODS`).
        self._changed_ms = 0
        self.joins_waiting = False

    def hold(self) -> None:
        """Keep the ring until :meth:`settle`: a heartbeat's read of the members and the
        fleet exchange that comes with it then change it once, not twice.

        A beat that reads joins learns the joiners' fingerprints from the exchange a
        moment later; rebuilt at once, the ring changed without them and again with them,
        and each change costs a splice, this node's arcs and its jobs re-homed (a tenth of
        a 1,000-node fleet replaced at once: about a fifth of every node's CPU). Between
        the two the ring is at most one round trip old: a join not yet placed only adds
        racers, a departure not yet placed is taken over a moment later (well within
        the dead-racer bound).
        """
        self._held = {}

    def settle(self) -> None:
        """Rebuild the ring once with what :meth:`hold` kept back, if anything, or with the
        members that joined and wait to be placed (:data:`JOINS_WAIT_PERIODS`)."""
        held, self._held = self._held, None
        owed_ms, self._owed_ms = self._owed_ms, None
        if held is None:
            return
        if owed_ms is None:
            if not self.joins_waiting:
                return
            owed_ms = self._confirmed_ms  # members waiting to be placed: once they may be
        self._rebuild(lambda node: held.get(node, self.last_beat_ms.get(node, owed_ms)), owed_ms)

    @property
    def point_cache(self) -> dict[str, list[int]]:
        """Each node's ring points (shared by the agents of one process: pure values)."""
        return POINTS

    @property
    def k(self) -> int | None:
        """How many nodes race for each tick; None: all."""
        return self.racers.k

    def _blind(self, confirmed_ms: int, now_ms: int) -> bool:
        """Whether this node's own reads went through too lately to judge silence (the read
        before ``now_ms`` was at ``confirmed_ms``); see the module's docstring."""
        if confirmed_ms and now_ms - confirmed_ms > BLIND_AFTER_PERIODS * self.heartbeat_s * 1000:
            if now_ms - self._resumed_ms > SILENT_AFTER_PERIODS * self.heartbeat_s * 1000:
                log.info(
                    "this node's heartbeats were held up: members' silence meanwhile is not "
                    "taken for departure",
                    extra={"node": self.node_id, "gap_ms": now_ms - confirmed_ms},
                )
            self._resumed_ms = now_ms
        return now_ms - self._resumed_ms <= SILENT_AFTER_PERIODS * self.heartbeat_s * 1000

    def update(self, expiries_ms: Mapping[str, int], *, now_ms: int, ttl_ms: int) -> None:
        """Take a full read of the node set (member -> heartbeat expiry, ms)."""
        silent_ms = int(SILENT_AFTER_PERIODS * self.heartbeat_s * 1000)
        seen_before = self.last_beat_ms
        self.last_beat_ms = {node: expiry - ttl_ms for node, expiry in expiries_ms.items()}
        live = {node for node, beat in self.last_beat_ms.items() if now_ms - beat <= silent_ms}
        if self._blind(self._confirmed_ms, now_ms):
            # The members this view had live stay so: their silence is no evidence. Listed
            # or not: an entry expires 3 periods after its beat, and a held beat lands late.
            # Those no longer listed (pruned) keep the last beat this view knew of them:
            # should they prove departed, their orphaned ticks are looked for from it.
            live |= self.live
            for node in self.live - self.last_beat_ms.keys():
                if node in seen_before:
                    self.last_beat_ms[node] = seen_before[node]
        live.add(self.node_id)  # this node races for its own view, whatever Redis says
        departed = self.live - live
        if live != self.live:  # the same object while nothing changed (others compare it)
            self.live = frozenset(live)
        if departed and self.on_departed is not None:
            self.on_departed(departed)
        self._confirmed_ms = now_ms
        self._silenced = {
            node: expiry for node, expiry in expiries_ms.items() if node not in self.live
        }

        def last_beat_ms(node: str) -> int:
            return seen_before.get(node, self.last_beat_ms.get(node, now_ms))

        self._rebuild(last_beat_ms, now_ms)

    def counted_live(self, now_ms: int) -> bool:
        """Whether every other node counts this one live now, or will at its next read:
        its own last beat that went through at most :data:`BLIND_AFTER_PERIODS` old.

        Others count a member departed once its last beat is :data:`SILENT_AFTER_PERIODS`
        old; the quarter period between covers a claim's round trip and the others' own
        claims of the same tick, sent a moment later (placement).
        """
        own = self.own_beat_ms
        return own is None or now_ms - own <= BLIND_AFTER_PERIODS * self.heartbeat_s * 1000

    def beat_went_through(self, sent_ms: int) -> None:
        """This node's heartbeat sent at ``sent_ms`` went through (wakes claims waiting)."""
        self.own_beat_ms = sent_ms
        waiters, self._beat_waiters = self._beat_waiters, []
        for event in waiters:
            event.set()

    async def next_beat(self) -> None:
        """Return when this node's next heartbeat goes through."""
        event = anyio.Event()
        self._beat_waiters.append(event)
        await event.wait()

    def live_after_ms(self, now_ms: int, ttl_ms: int) -> int:
        """The heartbeat expiry a member must have to count as live now (not silent)."""
        return now_ms - int(SILENT_AFTER_PERIODS * self.heartbeat_s * 1000) + ttl_ms

    def apply_changes(
        self,
        *,
        joined: Mapping[str, int],
        left: Iterable[str],
        silent: Mapping[str, int],
        live_count: int,
        now_ms: int,
        ttl_ms: int,
    ) -> bool:
        """Take a read of the changes since the last one; False if the view does not add up.

        ``joined``: members logged as joined, or asked for again (:meth:`recheck`) and
        beating again (-> expiry); ``left``: logged as left;
        ``silent``: members whose expiry is before :meth:`live_after_ms` (-> expiry);
        ``live_count``: how many members are not silent. Members this view has and the
        read names nowhere stay live (they beat, or they would be silent). When the view
        then counts another number of live members than the store does (a change this
        read could not see), nothing is taken and the caller reads in full.

        While this node's own reads were held up (blind, see the module's docstring), the
        members it counted live stay live, listed silent, pruned or not, as a full read
        keeps them (:meth:`update`), so the count is not checked: a full read would learn
        only of members back unseen, and those add racers, never lose a tick. The first
        read after the blind spell checks it. A node late because its own process was
        loaded must not read every member to learn nothing more: at N = 600 a loaded
        fleet's blind reads fell back to full reads 4,133 times in 20 s, each O(N), which
        kept the loops loaded (issue 19).
        """
        confirmed_ms, self._confirmed_ms = self._confirmed_ms, now_ms
        silent_ms = int(SILENT_AFTER_PERIODS * self.heartbeat_s * 1000)
        blind = self._blind(confirmed_ms, now_ms)
        gone = {n for n in left if n != self.node_id}
        if not blind:
            gone.update(n for n in silent if n != self.node_id)
        came = {n for n in joined if n not in gone and n not in silent}
        live = self.live
        if not (came <= live and gone.isdisjoint(live)):
            live = frozenset((live | came) - gone)
        silenced = self._silenced
        for node in (*joined, *left):
            silenced.pop(node, None)
        oldest_ms = self._recheck_oldest_ms(now_ms)
        for node, expiry in silent.items():
            if node not in live and expiry >= oldest_ms:
                silenced[node] = expiry
        if not blind and live_count >= 0 and len(live) != live_count:
            return False
        beats = self.last_beat_ms
        for node, expiry in joined.items():
            beats[node] = expiry - ttl_ms
        for node in left:
            beats.pop(node, None)
        for node, expiry in silent.items():
            if expiry < now_ms and node not in live:
                beats.pop(node, None)
            else:  # kept live while this node was cut off: its last beat is known now
                beats[node] = expiry - ttl_ms
        if live == self.live:
            return True
        departed = self.live - live
        exact = {n: silent[n] - ttl_ms for n in departed if n in silent}

        def last_beat_ms(node: str) -> int:
            # Known exactly for a member read silent; otherwise no later than what the last
            # read vouched for (it was not silent then), nor than what it logged.
            if node in exact:
                return exact[node]
            return min(beats.get(node, now_ms), confirmed_ms - silent_ms)

        self.live = live
        if departed and self.on_departed is not None:
            self.on_departed(departed)
        self._rebuild(last_beat_ms, now_ms)
        return True

    def _recheck_oldest_ms(self, now_ms: int) -> int:
        """The oldest expiry of a member still asked for again (:meth:`recheck`)."""
        return now_ms - int(RECHECK_AFTER_EXPIRY_PERIODS * self.heartbeat_s * 1000)

    def recheck(self, now_ms: int) -> tuple[str, ...]:
        """The members read silent lately, to ask for again at the next read of changes.

        A member whose beat comes late, but within
        :data:`~cronrace.fleet.heartbeat.REJOIN_AFTER_PERIODS` of its last one, does not
        log itself as joined: the nodes that counted it silent see it back here instead.
        A loaded fleet's late beats would otherwise each be one more entry that every
        node reads (O(N) each, the join storm of issue 19). Members are asked for until
        :data:`RECHECK_AFTER_EXPIRY_PERIODS` after their expiry; one that comes back
        later logs a join, or, landing late, makes the view not add up (read in full).
        """
        if not self._silenced:
            return ()
        oldest_ms = self._recheck_oldest_ms(now_ms)
        kept = {n: e for n, e in self._silenced.items() if e >= oldest_ms and n != self.node_id}
        self._silenced = kept
        if len(kept) > RECHECK_MAX:
            return tuple(sorted(kept, key=kept.__getitem__, reverse=True)[:RECHECK_MAX])
        return tuple(kept)

    def alike(self, fingerprints: Mapping[str, str], now_ms: int) -> None:
        """Take the fleet exchange's fingerprints (node -> what it runs), this node's too."""
        self._fingerprints = dict(fingerprints)
        self._rebuild(lambda node: self.last_beat_ms.get(node, now_ms), now_ms)

    def _rebuild(self, last_beat_ms: Callable[[str], int], now_ms: int) -> None:
        """Race among the live members that publish what this node does.

        A member that runs other jobs (or has not said yet: it just joined) is left out
        of this node's ring, so no tick is left to a racer that may lack its job; it races
        by its own view meanwhile, which only adds racers (the claim still decides).
        """
        held = self._held
        if held is not None:  # settled at the beat's end: keep when the departed last beat
            for node in self.ring.members - self.live:
                if node not in held:
                    held[node] = last_beat_ms(node)
            self._owed_ms = now_ms
            return
        own = self._fingerprints.get(self.node_id)
        members = {
            node for node in self.live if own is not None and self._fingerprints.get(node) == own
        }
        members.add(self.node_id)
        uniform = members == self.live
        if self.racers.k is not None:
            self._say_alike(members, own)
        self.uniform = uniform
        old = self.ring
        self.joins_waiting = False
        if members == old.members:
            return
        if (
            members > old.members
            and 4 * (len(members) - len(old.members)) < len(old.members)
            and now_ms - self._changed_ms < JOINS_WAIT_PERIODS * self.heartbeat_s * 1000
        ):
            self.joins_waiting = True  # placed at a beat after the wait
            return
        self._changed_ms = now_ms
        self.ring = ring_of(frozenset(members), old)
        left, joined = old.members - members, members - old.members
        log.info(
            "racing members changed",
            extra={
                "node": self.node_id,
                "members": len(members),
                "left": sorted(left)[:10],
                "joined": sorted(joined)[:10],
            },
        )
        if self.on_change is not None:
            last_ms = min((last_beat_ms(node) for node in left), default=now_ms)
            self.on_change(old, self.ring, min(last_ms, now_ms))

    def _say_alike(self, members: set[str], own: str | None) -> None:
        """Log when the live members' likeness changes, at a level an operator can keep on.

        A member that runs other jobs, handlers or racers settings is a WARNING; the fleet
        alike again (or for the first time) is INFO. A member that has not said yet (it
        just joined: its exchange is read at the next beat) is DEBUG: a fleet of 1,000
        nodes starting within a minute would otherwise log a WARNING and an INFO line on
        every node for every join (issue 19).
        """
        others = self.live - members
        if not others:
            likeness = "uniform"
        elif own is not None and any(n in self._fingerprints for n in others):
            likeness = "unlike"
        else:
            likeness = "pending"
        if likeness == self._likeness:
            return
        before, self._likeness = self._likeness, likeness
        if likeness == "unlike":
            level = logging.WARNING
        elif likeness == "uniform" and (before == "unlike" or not self._was_uniform):
            self._was_uniform = True
            level = logging.INFO
        else:
            level = logging.DEBUG
        if not log.isEnabledFor(level):
            return
        unlike = sorted(others)
        log.log(
            level,
            "every live node runs the same jobs: racing among all of them"
            if likeness == "uniform"
            else "some live nodes run other jobs, handlers or racers settings: racing among "
            "the others"
            if likeness == "unlike"
            else "some live nodes have not said what they run yet: racing among the others",
            extra={
                "node": self.node_id,
                "racers": str(self.racers),
                "unlike": unlike[:10],
                "unlike_count": len(unlike),
            },
        )

    def races(self, job: str, tick_s: int) -> bool:
        """Whether this node races for one (job, tick) in its current view."""
        return self.racers_of(job, tick_s) is None

    def racers_of(self, job: str, tick_s: int) -> tuple[str, ...] | None:
        """The nodes that race for a (job, tick) when this node is not one of them.

        None when this node races: ``all`` mode, at most k members alike to it, or this
        node among the first k.
        """
        k = self.racers.k
        ring = self.ring
        if k is None or k >= len(ring.members):
            return None
        chosen = self._racers(ring, job, tick_s, k)
        return None if self.node_id in chosen else chosen

    def _racers(self, ring: Ring, job: str, tick_s: int, k: int) -> tuple[str, ...]:
        """``ring.racers(job, tick_s, k)`` (by the job's group, when grouped), placed once
        per job (or group) and window on this ring."""
        if self._placed_on is not ring:  # rings are immutable: a new view, new placements
            self._placed.clear()
            self._placed_on = ring
        placed = self.racers.placed_as(job)  # its own name, or its group's
        start_s = placement_start_s(placed, tick_s)
        chosen = self._placed.get((placed, start_s, k))
        if chosen is None:
            chosen = ring.candidates(placed, start_s, k)
            # Kept only for what this node races: it is asked about each of those ticks;
            # of the others, once a window (whether it races them now).
            if self.node_id in chosen:
                if len(self._placed) >= PLACED_MAX:  # windows gone by, jobs removed
                    self._placed.clear()
                self._placed[(placed, start_s, k)] = chosen
        return chosen

    def preferred(self, job: str, tick_s: int) -> bool:
        """Whether this node is the first choice for a (job, tick): it claims at once.

        ``all`` mode spreads runs with the ring's first node of the tick; k racers take
        turns within their placement window (racers.py).
        """
        ring = self.ring
        if len(ring.members) < 2:
            return True
        k = self.racers.k
        if k is None or k >= len(ring.members):
            return ring.preferred(job, tick_s) == self.node_id
        return first_of(self._racers(ring, job, tick_s, k), tick_s) == self.node_id

    def next_after_preferred(self, job: str, tick_s: int) -> bool:
        """Whether this node is second choice for a (job, tick): the one loser that claims
        it again a little later, in case its winner died before deciding it
        (docs/design.md section 3, step 6). One node, so that it costs one claim."""
        ring = self.ring
        if len(ring.members) < 2:
            return False
        k = self.racers.k
        if k is None or k >= len(ring.members):
            order = ring.candidates(job, tick_s, 2)
        else:
            racers = self._racers(ring, job, tick_s, k)
            if len(racers) < 2:
                return False
            first = first_of(racers, tick_s)
            at = racers.index(first) if first in racers else 0
            order = racers[at:] + racers[:at]
        return len(order) > 1 and order[1] == self.node_id
