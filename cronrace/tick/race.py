"""One wake-up's race: claim, decide, start (DESIGN.md section 3, steps 2 and 4-5).

The scheduler hands :meth:`TickRace.race` what each due job proposes (``decisions.
Proposal``). The race sends every claim in one pipeline per shard, decides the won ones in
a second (``acquire.lua``, retried idempotently while Redis is away: ``acquiring.py``),
applies each decision's verdict (``decisions.decide``: records, observer events, the run
to start) and hands runs to the runner. It never awaits a handler. This is the one place
a claim is sent for a tick; the scheduler's loop decides only what to propose, and when.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import anyio
from anyio.abc import TaskGroup

from cronrace.errors import StoreError, StoreUnavailableError
from cronrace.fleet.membership import Membership, late_fire_bound_s
from cronrace.model.job import Job
from cronrace.model.policies import Outcome, Overlap, TickPlan
from cronrace.runtime import tracing
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import SetReady
from cronrace.runtime.retry import BACKOFF, Backoff
from cronrace.settings import AgentSettings
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, ClaimOutcome, ClaimReply, Owner
from cronrace.tick.acquire import Answer, acquire_retrying
from cronrace.tick.decisions import (
    EXPIRED_COUNT_CAP,
    RAN_OUT,
    Proposal,
    RunStart,
    acquire_request,
    decide,
    first_decided_s,
    not_replicated,
    report,
    report_not_replicated,
)
from cronrace.tick.lease import SAFETY_MARGIN
from cronrace.tick.outbox import Outbox
from cronrace.tick.plans import window_start_s
from cronrace.tick.releases import FOREIGN_RELEASE_WAIT_S, let_others_release
from cronrace.tick.runner import Runner
from cronrace.tick.takeover import Takeovers
from cronrace.tick.wakeup import ABORT_TIMEOUT_S, WakeUp, account_for_cut_wakeup

log = logging.getLogger("cronrace.tick.loop")

#: Claims failing for this long make an outage (not a blip: a restart, a stale connection)
#: after which runs on other nodes may have finished with their releases still pending.
LONG_OUTAGE_S = 0.5
#: The longest a decision waits for this node's own pending releases of the same jobs.
RELEASE_FIRST_TIMEOUT_S = 1.0


class TickRace:
    """Claims and decisions of one agent's wake-ups, and what it learnt from past ones.

    It remembers the claims whose reply was lost (the next attempt at the same key reads
    it back) and when claims last went through after an outage (runs elsewhere may have
    finished with their releases still pending).
    """

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        settings: AgentSettings,
        owner: Owner,
        runner: Runner,
        outbox: Outbox,
        observer: Observer,
        set_ready: SetReady,
        backoff: Backoff = BACKOFF,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.owner = owner
        self.runner = runner
        self.outbox = outbox
        self.observer = observer
        self._set_ready = set_ready
        self._backoff = backoff
        self._ambiguous: set[tuple[str, int, str | None]] = set()
        #: Claims this node lost, taken over when their winner goes silent (takeover.py).
        self.takeovers = Takeovers(
            settings.node_id, late_fire_bound_s(settings.heartbeat_s) + settings.heartbeat_s
        )
        self._unreachable_since: float | None = None
        self._recovered_mono = float("-inf")  # when claims went through after an outage
        #: The live view (watch_departures): claims wait while others may count this node
        #: departed (Membership.counted_live).
        self._membership: Membership | None = None
        self._unheard = False  # logged that claims wait for a heartbeat

    def unanswered_claim(self, job: str, tick_s: int) -> bool:
        """Whether this node's last claim of the job's tick got no answer (it may be won)."""
        return (job, tick_s, None) in self._ambiguous

    def claim_ttl_ms(self, job: Job) -> int:
        """A claim must outlive every attempt at its tick (DESIGN.md section 5)."""
        return int((job.catchup_window_s + self.settings.skew_tolerance_s + 1) * 1000)

    async def race(self, proposals: Sequence[Proposal], runs: TaskGroup) -> set[str]:
        """Claim every plan (one pipeline per shard), then decide the won ones.

        A graceful stop never cuts this short; a forced one (cancellation) leaves what it
        may have won to :func:`~cronrace.tick.wakeup.account_for_cut_wakeup`.

        Returns:
            The jobs whose claims got no answer: nothing was decided for them.
        """
        skew_s = self.settings.skew_tolerance_s  # claim_ttl_ms, without a call per claim
        claims = [
            Claim(
                p.job.name,
                p.plan.claim_tick_s,
                int((p.job.catchup_window_s + skew_s + 1) * 1000),
                p.trigger_id,
            )
            for p in proposals
        ]
        wakeup = WakeUp(proposals, claims)
        try:
            # Runs started here are tasks created inside the span: they are its children.
            with tracing.claims_span(self.settings.node_id, len(claims)) as span:
                return await self._race(wakeup, runs, span)
        except anyio.get_cancelled_exc_class():
            await self._account_if_cut(wakeup)
            raise

    async def _account_if_cut(self, wakeup: WakeUp) -> None:
        """A forced stop cut ``wakeup`` short: account for what it had won, not decided."""
        if not wakeup.decided:
            with anyio.CancelScope(shield=True), anyio.move_on_after(ABORT_TIMEOUT_S):
                await account_for_cut_wakeup(
                    wakeup,
                    store=self.store,
                    runner=self.runner,
                    outbox=self.outbox,
                    owner=self.owner,
                    node_id=self.settings.node_id,
                    clock=self.clock,
                )

    async def _decide_apart(self, winners: list[Proposal], runs: TaskGroup) -> None:
        """Decide, apart from the wake-up, won claims whose jobs were busy (JobBusyError)."""
        claims = [
            Claim(p.job.name, p.plan.claim_tick_s, self.claim_ttl_ms(p.job), p.trigger_id)
            for p in winners
        ]
        wakeup = WakeUp(winners, claims, winners=list(winners))
        try:
            await self._decide(wakeup, runs, apart=True)
        except anyio.get_cancelled_exc_class():
            await self._account_if_cut(wakeup)
            raise

    async def _race(self, wakeup: WakeUp, runs: TaskGroup, span: Any) -> set[str]:
        if not await self._counted_live():
            wakeup.decided = True  # nothing claimed: the loop plans these ticks again
            return {p.job.name for p in wakeup.plans}
        replies = await self._claim(wakeup.claims)
        winners: list[Proposal] = []
        short: list[tuple[Proposal, ClaimReply]] = []
        lost: list[tuple[Proposal, ClaimReply]] = []
        unknown: set[str] = set()
        won, lost_outcome = ClaimOutcome.WON, ClaimOutcome.LOST  # compared, not hashed
        for p, reply in zip(wakeup.plans, replies, strict=True):
            outcome = reply.outcome
            if outcome is won:
                winners.append(p)
            elif outcome is lost_outcome:
                lost.append((p, reply))
            elif outcome is ClaimOutcome.NOT_REPLICATED:
                short.append((p, reply))
            else:
                unknown.add(p.job.name)
        wakeup.winners = winners
        now = self.clock.time()
        for p, _reply in lost:
            if p.trigger_id is None:
                self.takeovers.lost(p.job.name, p.plan.claim_tick_s, now, first_decided_s(p))
        if winners or short or lost:
            self.observer.claims(len(winners) + len(short), len(lost))
        span.answered(len(winners) + len(short), len(lost))
        if short:
            await self._not_replicated(short)
        if winners:
            await self._releases_first(winners)
            unknown |= await self._decide(wakeup, runs)
        wakeup.decided = True
        return unknown

    async def race_trigger(
        self, job: Job, trigger_id: str, runs: TaskGroup, *, age_s: float = 0.0
    ) -> None:
        """Race for a manual trigger: its own claim key, the same lease and overlap policy.

        One read over ``catchup_window`` after it was asked (``age_s``, Redis's clock) is
        dropped; one claimed later still (a pause after reading) the store finds decided.
        """
        if age_s > job.catchup_window_s:
            log.warning(
                "manual trigger read too late to race for; another node may have run it",
                extra={
                    "job": job.name,
                    "trigger": trigger_id,
                    "age_s": round(age_s, 1),
                    "node": self.settings.node_id,
                },
            )
            return
        now_s = int(self.clock.time())
        plan = TickPlan(now_s, now_s, (now_s,), 0)
        if await self.race([Proposal(job, plan, trigger_id)], runs):
            log.error(
                "manual trigger dropped: Redis did not answer",
                extra={"job": job.name, "trigger": trigger_id},
            )

    def watch_departures(self, membership: Membership, wake: Callable[[], None]) -> None:
        """Look for claims to take over whenever members go silent (then ``wake`` the loop)."""
        self._membership = membership

        def departed(nodes: frozenset[str]) -> None:
            self.takeovers.departed(nodes)
            wake()

        membership.on_departed = departed

    async def _counted_live(self) -> bool:
        """Wait (a heartbeat at most) until the others count this node live; False if not.

        A claim won by a node the others count departed is never taken over should that
        node die before deciding it: only a new departure makes them look at the claims
        they lost (takeover.py). So while this node's own heartbeats have not gone through
        for longer than the others wait before counting it departed (its beats failing
        while its claims would go through, a process thawed before its next beat), it
        claims nothing; the loop plans those ticks again (late, under the catch-up policy).
        """
        membership, node_id = self._membership, self.owner.node_id
        if membership is None or membership.counted_live(int(self.clock.time() * 1000)):
            if self._unheard:
                self._unheard = False
                log.info("heartbeats go through again: claiming", extra={"node": node_id})
            return True
        if not self._unheard:
            self._unheard = True
            log.warning(
                "this node's heartbeats have not gone through lately: others may count it "
                "departed, so it claims nothing until one does",
                extra={"node": node_id, "last_beat_ms": membership.own_beat_ms},
            )
        async with anyio.create_task_group() as waits:  # the beat, or a heartbeat's time

            async def give_up() -> None:
                await self.clock.sleep(self.settings.heartbeat_s)
                waits.cancel_scope.cancel()

            waits.start_soon(give_up)
            await membership.next_beat()
            waits.cancel_scope.cancel()
        return membership.counted_live(int(self.clock.time() * 1000))

    async def take_over_claims(
        self,
        orphans: dict[str, list[int]],
        jobs: Mapping[str, Job],
        expired: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        """Take over the claims of departed winners that nobody decided (takeover.py).

        The ticks taken are added to ``orphans``, which the loop races for at once: each
        is claimed again and read back (as a claim whose reply was lost is) and decided.
        Ticks already in ``orphans`` (their racers all left) are looked at too: a racer
        that won one and died holds its claim. Returns at once unless members departed
        since the last look, or orphans wait while members departed lately.

        A claim decides its plan's whole backlog: the ticks this node's lost plan covered
        are raced with it inside the catch-up window (the decision leaves those at or below
        its watermark to others), and counted in ``expired`` (job -> oldest, count) past it.
        """
        if not self.takeovers.due(self.clock.monotonic(), orphans):
            return
        taken = await self.takeovers.take(
            self.store,
            self.owner,
            now=self.clock.time(),
            now_mono=self.clock.monotonic(),
            orphans=orphans,
        )
        now = self.clock.time()
        for name, ticks in taken.items():
            self._ambiguous |= {(name, t, None) for t in ticks}
            backlog: list[int] = []
            job = jobs.get(name)
            for tick_s in ticks:
                first_s = self.takeovers.covered(name, tick_s)
                if job is not None and first_s < tick_s:
                    start_s = window_start_s(now, job.catchup_window_s)
                    upper_s = min(start_s, tick_s) - 1
                    if first_s <= upper_s and expired is not None:
                        count = job.schedule.count_between(first_s - 1, upper_s, EXPIRED_COUNT_CAP)
                        if count:
                            oldest_s, before = expired.get(name, (first_s, 0))
                            expired[name] = (min(oldest_s, first_s), before + count)
                    first_s = max(first_s, start_s)
                    backlog += job.schedule.ticks_between(first_s - 1, tick_s, EXPIRED_COUNT_CAP)
            orphans[name] = sorted({*orphans.get(name, ()), *ticks, *backlog})
        if taken:
            self.observer.claims_taken_over(sum(len(ticks) for ticks in taken.values()))

    async def _not_replicated(self, short: list[tuple[Proposal, ClaimReply]]) -> None:
        """Record won claims that too few replicas confirmed: they do not run."""
        wanted = self.settings.claim_replicas
        verdict = not_replicated(
            [(p, reply.acked) for p, reply in short],
            wanted=wanted,
            node_id=self.settings.node_id,
            now_ms=int(self.clock.time() * 1000),
        )
        acked = min(reply.acked for _p, reply in short)
        report_not_replicated(verdict, acked=acked, wanted=wanted, observer=self.observer)
        history = max(p.job.history for p, _r in short)
        await self.outbox.write(list(verdict.records), history=history)

    async def _releases_first(self, winners: list[Proposal]) -> None:
        """Let finished runs' releases reach Redis before their jobs' decision (releases.py).

        This node's own are sent at once and awaited (bounded); after an outage, a lease
        another node holds is given a moment to go.
        """
        releases = self.runner.releases
        releases.retry_now()
        names = {p.job.name for p in winners}
        if releases.pending(names):
            with anyio.move_on_after(RELEASE_FIRST_TIMEOUT_S):
                await releases.settled(names)
        until_mono = self._recovered_mono + FOREIGN_RELEASE_WAIT_S
        if self.clock.monotonic() < until_mono:
            await let_others_release(
                self.store,
                [p.job.name for p in winners if p.job.overlap is not Overlap.ALLOW],
                owner=self.owner,
                clock=self.clock,
                until_mono=until_mono,
            )

    async def _claim(self, claims: list[Claim]) -> list[ClaimReply]:
        """Send the claims; ``UNKNOWN`` for those Redis (or their shard) did not answer.

        A claim whose reply was lost may have been written. Such claims are remembered,
        and the next attempt at the same key reads it back instead of trusting ``NX``
        (that key only: it counts won while it holds this process's claim undecided).
        """
        keys = [(c.job, c.tick_s, c.trigger_id) for c in claims]
        ambiguous = self._ambiguous
        if ambiguous and not ambiguous.isdisjoint(keys):
            # Only those: any other claim this process holds was answered, and decided or
            # being decided; read back, it would be decided again (a tick ran twice).
            claims = [
                replace(c, read_back=True) if key in ambiguous else c
                for c, key in zip(claims, keys, strict=True)
            ]
        sent_mono = self.clock.monotonic()
        try:
            replies = await self.store.claim_each(
                claims,
                self.owner,
                wait_replicas=self.settings.claim_replicas,
                wait_ms=self.settings.claim_replicas_timeout_ms,
            )
        except StoreError as exc:
            log.error("claims failed; will retry and read back", extra={"error": str(exc)})
            replies = [ClaimReply(ClaimOutcome.UNKNOWN)] * len(claims)
            failed = str(exc)
        else:
            failed = "claims got no answer"
        unknown = {
            key
            for key, reply in zip(keys, replies, strict=True)
            if reply.outcome is ClaimOutcome.UNKNOWN
        }
        if self._ambiguous or unknown:  # nearly always neither: no set of every claim
            oldest_s = int(self.clock.time()) - 3600
            self._ambiguous = {
                key for key in (self._ambiguous - set(keys)) | unknown if key[1] >= oldest_s
            }
        if unknown:
            self.observer.redis_error("claim")
        if len(unknown) < len(keys):
            # Claims held up for as long (``CLIENT PAUSE WRITE`` before a maintenance
            # failover holds every write, and answers them all at once) are an outage too:
            # releases of runs that ended meanwhile were held up with them.
            held_up = self.clock.monotonic() - sent_mono >= LONG_OUTAGE_S
            if self._after_long_outage() or held_up:
                self._recovered_mono = self.clock.monotonic()
            self._unreachable_since = None
        elif self._unreachable_since is None:
            self._unreachable_since = self.clock.monotonic()
        self._set_ready(not unknown, why=failed, source="claims")
        return replies

    def _after_long_outage(self) -> bool:
        since = self._unreachable_since
        return since is not None and self.clock.monotonic() - since >= LONG_OUTAGE_S

    async def _decide(self, wakeup: WakeUp, runs: TaskGroup, *, apart: bool = False) -> set[str]:
        """Decide the wake-up's won claims; those of busy jobs go on apart (unless this is
        that already), so that the loop claims every other job's ticks meanwhile.

        Returns:
            The jobs whose decision the store never answered in time: the loop claims
            the tick again, read back (pinned), and decides it late or finds it decided.
            Planned in a backlog instead, a claim lost to another racer left it to no one
            (the scheduler model, racers = 2, deep seed 41).
        """
        winners = list(wakeup.winners or [])
        unrun: list[tuple[Proposal, RunStart]] = []
        node = self.settings.node_id
        undecided: set[str] = set()

        def leave(indexes: list[int]) -> None:
            gone = {id(winners[i]) for i in indexes}
            wakeup.winners = [p for p in wakeup.winners or [] if id(p) not in gone]

        def hand_off(indexes: list[int]) -> None:
            leave(indexes)
            runs.start_soon(self._decide_apart, [winners[i] for i in indexes], runs)

        def settle(indexes: list[int], answers: list[Answer]) -> None:
            # Nothing awaits in here: each run is registered with the runner before a
            # forced stop can come, and a winner settled leaves the wake-up's account.
            leave(indexes)
            now_ms = int(self.clock.time() * 1000)
            now_mono = self.clock.monotonic()  # once: nothing in here awaits
            for index in indexes:
                p, (reply, granted_mono) = winners[index], answers[index]
                if isinstance(reply, Exception):
                    if isinstance(reply, StoreUnavailableError):
                        # Claimed again, read back (pinned): see TickRace._decide.
                        undecided.add(p.job.name)
                        self._ambiguous.add((p.job.name, p.plan.claim_tick_s, p.trigger_id))
                    continue
                deadline_mono = granted_mono + p.job.lease_ttl_s * (1 - SAFETY_MARGIN)
                late = now_mono >= deadline_mono
                verdict = decide(p, reply, node_id=node, now_ms=now_ms, answered_late=late)
                report(p, reply, verdict, node_id=node, observer=self.observer)
                wakeup.records += verdict.records
                if verdict.unrun is not None:
                    unrun.append((p, verdict.unrun))
                if verdict.start is not None:
                    self._start(p, verdict.start, granted_mono, runs)

        ttl_ms = self.claim_ttl_ms  # a late decision's answer is kept about as long
        await acquire_retrying(
            self.store,
            self.clock,
            [acquire_request(p, self.owner, ttl_ms(p.job)) for p in winners],
            [p.plan.claim_tick_s + p.job.catchup_window_s for p in winners],
            observer=self.observer,
            set_ready=self._set_ready,
            backoff=self._backoff,
            settle=settle,
            hand_off=None if apart else hand_off,
            wait_first=apart,
        )
        wakeup.decided = True
        for p, grant in unrun:
            await self.runner.release_unrun(
                p.job,
                list(grant.ticks),
                grant.fence,
                Outcome.LEASE_LOST,
                RAN_OUT,
                trigger_id=p.trigger_id,
                retry_s=0,
            )
        if wakeup.records and winners:
            history = max(p.job.history for p in winners)
            await self.outbox.write(wakeup.records, history=history)
        return undecided

    def _start(self, p: Proposal, start: RunStart, granted_mono: float, runs: TaskGroup) -> None:
        """Register a granted run with the runner, then start its task."""
        if start.hold_s:
            self.runner.hold_job(p.job.name, start.hold_s)
        grant = self.runner.admit(p.job, list(start.ticks), start.fence, granted_mono, p.trigger_id)
        self.runner.start(grant, runs)
