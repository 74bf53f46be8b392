"""This node's heartbeat: the server clock, the Redis epoch, and the fleet's membership.

Every ``heartbeat_s`` a node, in one round trip (``Store.heartbeat``):

- samples the server's ``TIME``, which corrects its
  :class:`~cronrace.runtime.clock.ServerOffsetClock` (every node then schedules on
  one shared clock);
- writes its own expiry into the live set ``<ns>:nodes`` (``HEARTBEAT_TTL_PERIODS``
  heartbeats from now) and reads the whole set back with every member's expiry, into
  :attr:`Heartbeat.membership` (:class:`~cronrace.fleet.membership.Membership`): the node's one
  view of who is alive, which k-of-N racers rank (docs/design.md section 12);
- reads the namespace's epoch, written once by the first node: a different epoch means
  Redis lost its data, so new runs wait (runs started before the wipe may still be alive)
  and the jobs are published again. The node re-asserts the leases of the runs it holds
  at once (each one Redis lost is written back) and then says so, publishing the epoch it
  did it for; every beat reads each member's word. New runs wait until every node that
  may hold a run has said so (the live members, and every node seen within the longest
  ``lease_ttl``: a silent one may still run a handler), or one ``lease_ttl`` has passed:
  a wipe then costs a heartbeat or two, not a lease.

A beat that fails makes the node not ready and is retried on the project's backoff; a
refusal (ACL, password) is retried slowly, as the operator may fix it meanwhile. A node
that stops claiming leaves the live set at once (:meth:`~Heartbeat.leave`) and beats no more.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping

from cronrace.errors import RedisAccessError, RedisMovingError, StoreError
from cronrace.fleet.membership import Membership
from cronrace.model.job import Job
from cronrace.runtime.clock import Clock, ServerOffsetClock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import Readiness
from cronrace.runtime.retry import Retry
from cronrace.stores.contract import Store
from cronrace.stores.values import FleetReply, FleetRequest, HeartbeatReply

log = logging.getLogger("cronrace.fleet.heartbeat")

#: A node's heartbeat lives this many heartbeat periods.
HEARTBEAT_TTL_PERIODS = 3
#: Prune dead members from the live set every this many heartbeats.
PRUNE_EVERY_BEATS = 10
#: Read every member (not only the changes) every this many heartbeats (5 min at 2 s): a
#: check only, as a view that does not add up is read again in full at once.
FULL_READ_EVERY_BEATS = 150
#: A beat this many periods after the last one counts as late: others may have counted
#: this node silent (after ``SILENT_AFTER_PERIODS``, 1.5; the margin covers the nodes'
#: clocks differing by up to a quarter period). They ask for it again at their reads of
#: changes (``Membership.recheck``), so a late beat logs nothing more.
LATE_AFTER_PERIODS = 1.25
#: A beat this many periods after the last one logs this node as joined again: its entry
#: in the live set may be gone (it expires 3 periods after the beat, and others stop
#: asking for it a period later), so they would not see it back without the log.
REJOIN_AFTER_PERIODS = 2.5


def heartbeat_ttl_ms(heartbeat_s: float) -> int:
    """How long one heartbeat keeps a node in the live set, in milliseconds."""
    return int(heartbeat_s * HEARTBEAT_TTL_PERIODS * 1000)


class Heartbeat:
    """Beat for one node: clock samples, the epoch, the membership, readiness.

    Args:
        node_id: this node.
        heartbeat_s: the period between beats.
        clock: the agent's clock; a :class:`ServerOffsetClock` is fed the samples.
        observer: told about failed beats.
        readiness: set reachable after each beat, unreachable after a failed one.
        jobs: this node's jobs (published again after a wipe; the longest ``lease_ttl``
            is how long new runs wait then).
        membership: the racers' view of the fleet, updated with every beat.
    """

    def __init__(
        self,
        *,
        node_id: str,
        heartbeat_s: float,
        clock: Clock,
        observer: Observer,
        readiness: Readiness,
        jobs: Mapping[str, Job],
        membership: Membership,
    ) -> None:
        self.node_id = node_id
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.observer = observer
        self.readiness = readiness
        self._jobs = jobs
        #: The namespace's epoch as last read (None before the first beat).
        self.epoch: str | None = None
        #: The live members as the last beat read them (the racers' view of the fleet).
        self.membership = membership
        #: Set once this node left the live set for good (stopping): it beats no more.
        self.left = False
        # A phase of this node's own: the fleet's full reads do not all fall on one beat.
        self._beats = secrets.randbelow(FULL_READ_EVERY_BEATS)
        self._hold_until_mono = 0.0
        #: Where the next read of membership changes starts (None: read in full).
        self._cursor: str | None = None
        #: This node's estimate of server time at its last beat that went through (ms).
        self._last_ok_ms: int | None = None
        self._late_after_ms = int(LATE_AFTER_PERIODS * heartbeat_s * 1000)
        self._rejoin_after_ms = int(REJOIN_AFTER_PERIODS * heartbeat_s * 1000)
        #: Reads of changes that did not add up (or met a gap) and were read again in full.
        self.full_reads_forced = 0
        #: Beats that came late, those of them that logged this node as joined again, full
        #: reads of the members, and reads of the changes taken: how a fleet's heartbeats
        #: cost O(N) or O(changes).
        self.late_beats = 0
        self.rejoins = 0
        self.full_reads = 0
        self.change_reads = 0
        #: Reads of changes that met a gap in the log (more than it reads at once, trimmed).
        self.gaps = 0
        #: The epoch this node re-asserted its runs' leases for ('' before the first beat).
        self.asserted_epoch = ""
        #: Re-asserts the leases of the runs this node holds; whether all were answered.
        self.reassert: Callable[[], Awaitable[bool]] | None = None
        #: Members seen live at an earlier beat and not since, with that beat's time (epoch
        #: ms), for the longest lease_ttl; the live members are seen at every beat. Kept by
        #: the changes of the live view, so that a beat costs O(changes), not O(N).
        self._gone_ms: dict[str, int] = {}
        self._noted_live: frozenset[str] = frozenset()
        self._noted_ms = 0
        #: The wipe being waited out: when this node saw it, and when every node had
        #: re-asserted its runs' leases (None while some have not).
        self._wipe_seen_mono: float | None = None
        self._wipe_seen_beat = 0
        self._released_mono: float | None = None

    @property
    def ttl_ms(self) -> int:
        """How long one beat keeps this node in the live set."""
        return heartbeat_ttl_ms(self.heartbeat_s)

    def hold_s(self) -> float:
        """Seconds new runs must still wait after Redis was found to have lost its data."""
        # The common case first: never held (asked by every run); then a wait that ended
        # early, once every node had re-asserted its leases.
        if not self._hold_until_mono or self._released_mono is not None:
            return 0.0
        return max(0.0, self._hold_until_mono - self.clock.monotonic())

    @property
    def _longest_lease_s(self) -> float:
        return max((job.lease_ttl_s for job in self._jobs.values()), default=0.0)

    def hold_released(self, granted_mono: float) -> bool:
        """Whether a run granted at ``granted_mono`` and held after a wipe may start now.

        True once every node that may hold a run re-asserted its leases after the wipe
        this node saw, for grants made within the longest lease_ttl of it (the hold a later
        loss of one job's data starts is waited out whole: no node re-asserts for it).
        """
        if self._wipe_seen_mono is None or self._released_mono is None:
            return False
        return abs(granted_mono - self._wipe_seen_mono) <= self._longest_lease_s

    async def beat(self, store: Store, fleet: FleetRequest | None = None) -> FleetReply | None:
        """Beat once: sample the server clock, refresh this node, read epoch and members.

        ``fleet``: the fleet's definitions exchange, sent in the same round trip; its
        reply is returned (None without one).

        Members are read in full on the first beat, every :data:`FULL_READ_EVERY_BEATS`
        beats (at a phase of this node's own), and when a read of the changes does not add
        up or meets a gap; otherwise only the changes since the last read are (O(changes),
        not O(N): docs/design.md section 12). A beat that comes late (others may have counted
        this node silent) logs nothing: those that did ask for it again at their reads of
        changes (``recheck``, :meth:`Membership.recheck`) and see it back. Only a beat so
        late that its entry may be gone (:data:`REJOIN_AFTER_PERIODS`) logs the node as
        joined again; a loaded 1,000-node fleet's late beats otherwise put an entry in the
        log for each, which every node reads. A late beat reads the changes too: the log
        holds who came and went meanwhile, the silent are read as they are now, a member
        pruned unseen makes the count disagree, and a member this node counted live but
        finds silent sends it to the full read (:meth:`Membership.apply_changes`: its own
        lateness is no evidence).
        A node late because its own process is loaded would otherwise read every member
        at every beat, O(N) each, which makes it later still: at N = 1,000 a loaded
        fleet's beats all came late and all read in full (issue 19).
        """
        base = self.clock.base if isinstance(self.clock, ServerOffsetClock) else self.clock
        sent_wall, sent_mono = base.time(), base.monotonic()
        now_ms = sent_ms = int(self.clock.time() * 1000)
        since_ms = None if self._last_ok_ms is None else now_ms - self._last_ok_ms
        late = since_ms is None or since_ms > self._late_after_ms
        rejoin = since_ms is None or since_ms > self._rejoin_after_ms
        if rejoin and fleet is not None and not fleet.changed:
            # Full reads made while this node's entry had expired dropped its fingerprint
            # (its published definitions are kept a while: it does not publish them again).
            # Logged with the join, they are back in every reader's view of who runs what:
            # without them a reader leaves this node out of its ring until its next full read.
            fleet = dataclasses.replace(fleet, changed=True)
        full = self._cursor is None or self._beats % FULL_READ_EVERY_BEATS == 0
        reply = await store.heartbeat(
            self.node_id,
            now_ms=now_ms,
            ttl_ms=self.ttl_ms,
            epoch_candidate=secrets.token_hex(8),
            prune=self._beats % PRUNE_EVERY_BEATS == 0,
            since=None if full else self._cursor,
            joined=rejoin,
            live_after_ms=self.membership.live_after_ms(now_ms, self.ttl_ms),
            recheck=() if full else self.membership.recheck(now_ms),
            asserted_epoch=self.asserted_epoch,
            read_asserted=self._waiting_out_wipe,
            fleet=fleet,
        )
        exchanged = reply.fleet
        self._beats += 1
        self.late_beats += late
        self.rejoins += rejoin
        rtt = base.monotonic() - sent_mono
        if isinstance(self.clock, ServerOffsetClock):
            self.clock.add_sample(
                sent_wall_s=sent_wall, received_wall_s=sent_wall + rtt, server_s=reply.server_time_s
            )
        now_ms = int(self.clock.time() * 1000)
        wiped = self.epoch is not None and reply.epoch != self.epoch
        if wiped:
            # This node's word that it re-asserted its leases goes out with the full read
            # just below: the wait for every node's word starts a beat sooner.
            await self._after_wipe(store, self.epoch, reply.epoch)
        if wiped or (not reply.full and (reply.gap or not self._take_changes(reply, now_ms))):
            self.full_reads_forced += not reply.full
            self.gaps += reply.gap
            reply = await store.heartbeat(
                self.node_id,
                now_ms=now_ms,
                ttl_ms=self.ttl_ms,
                epoch_candidate=secrets.token_hex(8),
                prune=False,
                joined=False,
                asserted_epoch=self.asserted_epoch,
                read_asserted=self._waiting_out_wipe,
            )
        if reply.full:
            self.full_reads += 1
            self.membership.update(reply.members, now_ms=now_ms, ttl_ms=self.ttl_ms)
        else:
            self.change_reads += 1
        self._cursor = reply.cursor or None
        self._last_ok_ms = sent_ms  # the expiry others read is from this estimate
        self.membership.beat_went_through(sent_ms)  # claims wait while it is old
        self.observer.membership(len(self.membership.ring.members))
        if self.epoch is None:
            self.asserted_epoch = reply.epoch  # a new node holds no run from before it
        elif (
            not wiped
            and self.asserted_epoch != reply.epoch
            and self.reassert is not None
            and await self.reassert()  # it failed at the wipe's beat: said at the next
        ):
            self.asserted_epoch = reply.epoch
        self.epoch = reply.epoch
        self._note_asserted(reply.asserted, now_ms)
        self.readiness.set_reachable(True)
        return exchanged

    def _take_changes(self, reply: HeartbeatReply, now_ms: int) -> bool:
        return self.membership.apply_changes(
            joined=reply.members,
            left=reply.left,
            silent=reply.silent,
            live_count=reply.live_count,
            now_ms=now_ms,
            ttl_ms=self.ttl_ms,
        )

    @property
    def _waiting_out_wipe(self) -> bool:
        """Whether new runs wait for nodes to re-assert their leases (each beat reads them)."""
        return self._wipe_seen_mono is not None and self._released_mono is None

    async def _after_wipe(self, store: Store, old_epoch: str | None, epoch: str) -> None:
        """Hold new runs, publish the jobs again, re-assert the leases of this node's runs."""
        hold = self._longest_lease_s
        self._hold_until_mono = self.clock.monotonic() + hold
        self._wipe_seen_mono, self._released_mono = self.clock.monotonic(), None
        self._wipe_seen_beat = self._beats
        log.critical(
            "Redis lost its data (epoch changed): fences were re-seeded from the server "
            "clock; new runs wait until every node re-asserted the leases of its runs (at "
            "most one lease_ttl), because runs started before may be alive",
            extra={"node": self.node_id, "old_epoch": old_epoch, "epoch": epoch, "hold_s": hold},
        )
        await store.register_jobs({name: job.spec() for name, job in self._jobs.items()})
        if self.reassert is None or await self.reassert():
            self.asserted_epoch = epoch  # else said at a later beat, once all were answered

    def _note_asserted(self, asserted: Mapping[str, str], now_ms: int) -> None:
        """Remember who was seen; end the wait once every node that may run has re-asserted."""
        live = self.membership.live
        if live is not self._noted_live:  # the same object while nobody came or went
            for node in self._noted_live - live:
                self._gone_ms[node] = self._noted_ms  # last seen at the beat before this one
            for node in live & self._gone_ms.keys():
                del self._gone_ms[node]
            self._noted_live = live
        self._noted_ms = now_ms
        if self._gone_ms:
            recent_ms = int(self._longest_lease_s * 1000) + self.ttl_ms
            self._gone_ms = {n: ms for n, ms in self._gone_ms.items() if now_ms - ms <= recent_ms}
        if self._wipe_seen_mono is None or self._released_mono is not None:
            return
        if self.asserted_epoch != self.epoch:
            return  # this node's own word is still to come
        # Every live node beats into the new node set within a heartbeat of the wipe, and
        # this node saw it after the wipe: by its next beat, every live node is listed.
        if self._beats <= self._wipe_seen_beat:
            return
        seen = live | self._gone_ms.keys()
        waiting = sorted(n for n in seen if asserted.get(n) != self.epoch)
        if waiting:
            return
        self._released_mono = self.clock.monotonic()
        log.warning(
            "every node re-asserted the leases of its runs after the wipe: new runs start",
            extra={
                "node": self.node_id,
                "epoch": self.epoch,
                "nodes": len(seen),
                "after_s": round(self._released_mono - self._wipe_seen_mono, 2),
            },
        )

    async def leave(self, store: Store) -> None:
        """Leave the live set now and beat no more (this node claims nothing any longer).

        The ticks it was a racer for then go to the others at their next heartbeat
        (racers = k), and none waits for it as their preferred node.
        """
        self.left = True
        await store.leave(self.node_id)

    async def run(
        self,
        store: Store,
        after_beat: Callable[[bool, FleetReply | None], Awaitable[None]] | None = None,
        fleet_request: Callable[[], FleetRequest | None] | None = None,
    ) -> None:
        """Beat every ``heartbeat_s`` until cancelled; back off while Redis fails.

        Args:
            store: where to beat.
            after_beat: called after each successful beat with whether it ended an outage
                and the reply to the fleet's exchange (the agent compares definitions and
                follows stored schedules there).
            fleet_request: the fleet's definitions exchange to send with each beat: one
                round trip a beat for both.
        """
        retry = Retry(self.clock)
        delay_s = self.heartbeat_s
        while True:
            await self.clock.sleep(delay_s)
            if self.left:  # stopping: it left the live set and must not join it again
                continue
            sent_mono = self.clock.monotonic()
            self.membership.hold()  # the read and the exchange change the ring once
            try:
                try:
                    exchanged = await self.beat(
                        store, None if fleet_request is None else fleet_request()
                    )
                    if after_beat is not None:
                        await after_beat(retry.attempt > 0, exchanged)
                finally:
                    self.membership.settle()
                retry.succeeded()
                # Beats are sent every heartbeat_s, however long the round trips took:
                # others count a member silent from its last beat (membership.py), and a
                # loaded machine's round trips must not add up into a false departure.
                delay_s = max(0.0, self.heartbeat_s - (self.clock.monotonic() - sent_mono))
            except RedisAccessError:
                # Logged, counted and made readiness fail where it was translated; keep
                # beating slowly: the operator may fix the ACL or the password meanwhile.
                retry.refused()
                delay_s = retry.failed()
                self.observer.redis_error("heartbeat")
            except StoreError as exc:
                delay_s = retry.failed()
                self.observer.redis_error("heartbeat")
                if isinstance(exc, RedisMovingError):
                    # A live resharding moving the namespace keys' slot: the cluster is
                    # healthy, and the next beat (on the backoff) passes.
                    log.info(
                        "heartbeat met a slot moving between shards",
                        extra={"node": self.node_id, "error": str(exc)},
                    )
                    continue
                self.readiness.set_reachable(
                    False, why=f"{self.readiness.server} unreachable: {exc}"
                )
                log.warning("heartbeat failed", extra={"node": self.node_id, "error": str(exc)})
