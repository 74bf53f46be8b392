"""The tick loop: wake, plan, race, advance (DESIGN.md section 3, steps 1-3).

A heap holds each job's next tick. At each wake-up the loop pops every due job, plans
what to fire (one tick in the steady state, a catch-up plan after a backlog), and hands
the proposals to the claim step (:class:`~cronrace.tick.race.TickRace`: claims,
decisions, runs). It never awaits a handler. With ``racers = k`` the heap holds only the
jobs this node races in their current placement window (tick/share.py): a node's work
follows the ticks it races, not every job's every tick.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from cronrace.errors import CronraceError, StoreError
from cronrace.fleet.membership import Membership, late_fire_bound_s
from cronrace.fleet.racers import Ring
from cronrace.model.job import Job
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import SetReady
from cronrace.runtime.retry import Retry, backoff_s
from cronrace.settings import AgentSettings
from cronrace.stores.contract import Store
from cronrace.stores.values import Owner
from cronrace.tick.decisions import Proposal
from cronrace.tick.outbox import Outbox
from cronrace.tick.plans import plan_due, plan_orphaned
from cronrace.tick.race import TickRace
from cronrace.tick.runner import Runner
from cronrace.tick.share import RacerShare
from cronrace.tick.wakeup import Nap, StopGate

log = logging.getLogger("cronrace.tick.loop")

#: The loop re-reads the wall clock at least this often (clock steps, new offsets)...
MAX_SLEEP_S = 1.0
#: ... unless something else looks at the clock for it (:meth:`Scheduler.watch_clock`):
#: it then sleeps until its next tick, up to this long.
WATCHED_MAX_SLEEP_S = 60.0
#: How much later than a tick's preferred node the others claim it (racers.py): more than
#: the wake-up jitter of a loaded 2-core machine (tens of ms), so the preferred node wins
#: when alive and runs spread across the fleet; the others still fire it if it is not.
PREFERRED_HEAD_START_S = 0.1
#: How often a stopping loop tries to decide the claims whose answers were lost.
STOP_ATTEMPTS = 5


class Scheduler:
    """The per-agent tick loop."""

    def __init__(
        self,
        *,
        jobs: dict[str, Job],
        store: Store,
        clock: Clock,
        settings: AgentSettings,
        owner: Owner,
        runner: Runner,
        outbox: Outbox,
        observer: Observer,
        set_ready: SetReady,
        membership: Membership | None = None,
    ) -> None:
        self.jobs = jobs
        self.store = store
        self.clock = clock
        self.settings = settings
        self.owner = owner
        self.runner = runner
        self.outbox = outbox
        self.observer = observer
        self._set_ready = set_ready
        self.membership = membership or Membership(
            settings.node_id, settings.racer_setting, settings.heartbeat_s
        )
        self.membership.on_change = self._members_changed
        #: racers = k: the jobs this node races, window by window, and the ticks their
        #: racers may have lost (passed, orphans, left: tick/share.py).
        self.share = RacerShare(settings.node_id, self.membership, jobs, self._orphan_window_s())
        self._passed = self.share.passed
        self._orphans = self.share.orphans
        #: A taken-over backlog's ticks past the catch-up window: job -> (oldest, count).
        self._expired: dict[str, tuple[int, int]] = {}
        #: Each job's newest tick this node planned (raced or left to others) and had an
        #: answer for: the tick before its next plan's. A decision passing it while its
        #: claim is still undecided (a slow answer on another node) notes it, so that node
        #: can still decide it late instead of finding it stale (acquire.lua, passed).
        self._prior_tick: dict[str, int] = {}
        #: (when to wake for it, tick, job): a job whose claim got no answer wakes later
        #: than its tick (backoff), and only the entry matching ``next_tick`` counts.
        self._heap: list[tuple[float, int, str]] = []
        self._unanswered: dict[str, int] = {}
        #: Each job's claim sent without an answer: it may be this node's (the write went
        #: through, the answer was lost). The job's next plans claim that tick again (read
        #: back), the ticks after it follow once it is answered. A plan claiming a newer tick
        #: never read it back: the node that lost it left it to this one, a third decided
        #: the newer tick and passed it, and it was neither run nor recorded (the scheduler
        #: model found it). Won, it is decided late (``missed``, or run if catchup = all).
        self._pinned: dict[str, int] = {}
        #: The loop's sleep: put_job, membership changes and a moved clock end it.
        self.nap = Nap(clock)
        #: Each job's next tick, for the jobs in the heap (racers = k: those this node races).
        self.next_tick: dict[str, int] = {}
        #: Jobs whose next tick cannot be computed: out of the heap until replaced.
        self._broken: set[str] = set()
        #: Whether every job has been started from its watermark (the loop is running).
        self.seeded = False
        self.gate = StopGate()
        #: The claim step: every tick's claim and decision goes through it.
        self.tick_race = TickRace(
            store=store,
            clock=clock,
            settings=settings,
            owner=owner,
            runner=runner,
            outbox=outbox,
            observer=observer,
            set_ready=set_ready,
        )
        self.tick_race.watch_departures(self.membership, self._wake_up)
        # A clock waking its sleepers exactly as it steps (FakeClock) says so: max_sleep_s.
        self._max_sleep_s = float(getattr(clock, "max_sleep_s", MAX_SLEEP_S))

    # -- the loop --------------------------------------------------------------------

    def stop(self) -> None:
        """Start no new wake-up; the one in hand decides its ticks and starts their runs."""
        self.gate.stop()

    async def run(self, runs: TaskGroup) -> None:
        """Run the tick loop until :meth:`stop` (then return) or until cancelled."""
        with self.gate.waiting():
            await self._seed()
        while not self.gate.stopping:
            now = self.clock.time()
            await self.tick_race.take_over_claims(self._orphans, self.jobs, self._expired)
            if self._orphans:
                await self._race_orphans(runs, now)
                continue
            turning = self._turn_windows(now)
            due = bool(self._heap) and self._heap[0][0] <= now
            if self.share.pending or turning:
                self._rehome(now)
                if not due:
                    await anyio.lowlevel.checkpoint()  # the rest of the change next turn
                    continue
            next_s = min(self._heap[0][0] if self._heap else math.inf, self.share.next_turn_s())
            if next_s == math.inf:
                with self.gate.waiting():
                    await self.nap.sleep(self._max_sleep_s)
                continue
            wait_s = next_s - now
            if wait_s > 0:
                # Some event loops wake a little early, and the wall clock may be stepped
                # or re-estimated meanwhile: sleep, then look at the clock again.
                with self.gate.waiting():
                    await self.nap.sleep(min(wait_s, self._max_sleep_s))
                continue
            if due:
                await self._wake(now, runs)
        await self._decide_unanswered(runs)

    async def _decide_unanswered(self, runs: TaskGroup) -> None:
        """Stopping: decide the ticks whose claims got no answer before the loop ended.

        Such a claim may have been written, and other nodes then lost it and moved on; a
        stop that never read it back left the tick won, undecided and unrecorded (the
        scheduler model found it). Those jobs are claimed again and read back, and what
        was won is decided and started as in any wake-up, for a few attempts while Redis
        is away (the shutdown grace bounds them too).
        """
        for attempt in range(STOP_ATTEMPTS):
            names = [name for name in self._unanswered if name in self.next_tick]
            if not names:
                return
            planned = {name: self.jobs[name] for name in names}
            now = self.clock.time()
            plans, _following, newest = self._propose(
                planned, [(self.next_tick[name], name) for name in names], now
            )
            unanswered = await self.tick_race.race(plans, runs) if plans else set()
            for name in names:
                self._pin(name, newest, unanswered)
                if name not in unanswered:
                    self._unanswered.pop(name, None)
                    if name in newest:
                        self._prior_tick[name] = newest[name]
            if not unanswered:
                return
            if attempt + 1 < STOP_ATTEMPTS:
                await self.clock.sleep(backoff_s(attempt))
        log.error(
            "stopping with claims Redis never answered: their ticks may have been won, and "
            "will not run",
            extra={"jobs": sorted(self._unanswered), "node": self.settings.node_id},
        )

    async def _wake(self, now: float, runs: TaskGroup) -> None:
        """Pop every due job, propose what it fires, race, and push each job's next tick."""
        planned: dict[str, Job] = {}
        due: list[tuple[int, str]] = []
        while self._heap and self._heap[0][0] <= now:
            _wake_s, first_due, name = heapq.heappop(self._heap)
            # Entries of a job replaced or removed at runtime (stored schedules) are
            # stale: only the one matching its current next tick counts, once.
            if self.next_tick.get(name) == first_due and name not in planned:
                planned[name] = self.jobs[name]
                due.append((first_due, name))
        plans, following, newest = self._propose(planned, due, now)
        try:
            unanswered = await self.tick_race.race(plans, runs) if plans else set()
        except Exception:  # the outermost loop: one job's surprise must not stop the rest
            log.exception(
                "unexpected error deciding ticks; moving on",
                extra={"jobs": [p.job.name for p in plans]},
            )
            unanswered = set()
        # A job replaced or removed while its claims were out has its new next tick
        # already (put_job, drop_job): the old definition's must not overwrite it.
        following = {n: s for n, s in following.items() if self.jobs.get(n) is planned[n]}
        for first_due, name in due:
            if name not in following:  # dropped by _unschedule, replaced or removed
                continue
            self._pin(name, newest, unanswered)
            if name not in unanswered:
                self._unanswered.pop(name, None)
                if name in newest:
                    self._prior_tick[name] = newest[name]
                self._push(name, following[name])
                continue
            # Redis (or this job's shard) did not answer: nothing was decided. Put the
            # tick back and back off; the next attempt plans it again, as a backlog
            # for the catch-up policy if late. Other shards' jobs go on meanwhile.
            attempt = self._unanswered.get(name, 0)
            self._unanswered[name] = attempt + 1
            self._push(name, first_due, wake_s=self.clock.time() + backoff_s(attempt))

    def _pin(self, name: str, newest: dict[str, int], unanswered: set[str]) -> None:
        """Pin a job's next plans to its claim that got no answer (``_pinned``), or unpin it."""
        tick_s = newest.get(name)
        if name not in unanswered:
            self._pinned.pop(name, None)
        elif tick_s is not None and self.tick_race.unanswered_claim(name, tick_s):
            self._pinned[name] = tick_s

    def _propose(
        self, planned: dict[str, Job], due: list[tuple[int, str]], now: float
    ) -> tuple[list[Proposal], dict[str, int], dict[str, int]]:
        """What this node races for among the due jobs, each job's following tick, and the
        newest tick each plan covers."""
        plans: list[Proposal] = []
        following: dict[str, int] = {}
        newest: dict[str, int] = {}
        skipped = 0
        for first_due, name in due:
            job = planned[name]
            pinned_s = self._pinned.get(name)
            try:
                plan, following[name] = plan_due(
                    job, first_due, now, self.settings.live_grace_s, until_s=pinned_s
                )
                if plan is not None:
                    newest[name] = plan.claim_tick_s
                others = (  # a pinned claim may be this node's: read it back in any case
                    None
                    if plan is None or pinned_s is not None
                    else self.membership.racers_of(name, plan.claim_tick_s)
                )
                if plan is not None and others is not None:
                    # racers = k: other nodes race for this one (racers.py).
                    self._passed.setdefault(name, first_due)
                    self.share.left_to(name, plan.claim_tick_s, others, now)
                    skipped += 1
                    continue
                if plan is not None:
                    prior_s = self._prior_tick.get(name, 0)
                    proposal = (
                        self.share.with_passed(
                            job,
                            plan,
                            first_due,
                            now,
                            prior_tick_s=prior_s,
                            live_grace_s=self.settings.live_grace_s,
                        )
                        if pinned_s is None  # what others left waits for the plan after it
                        else Proposal(job, plan, prior_tick_s=prior_s)
                    )
                    if proposal.shared_from_s is None and plan.missed:
                        # A backlog from this node's own last tick: other nodes may have
                        # decided some of it while this one was frozen or cut off (the
                        # scheduler model found missed 2 for two ticks another node ran).
                        proposal = dataclasses.replace(proposal, shared_from_s=first_due)
                    plans.append(proposal)
            except Exception as exc:  # noqa: BLE001 (logged by _unschedule; the rest go on)
                self._unschedule(job, exc)
                continue
        if skipped:
            self.observer.claims_skipped(skipped)
        return plans, following, newest

    async def _seed(self) -> None:
        """Start each job this node races from its watermark, or from now when it has none.

        With ``racers = k`` every job is placed in its window, and only those this node
        races in it (its own arcs on its view: about k·J/N) are read and planned: a node
        joining a 1,000-node fleet of 10,000 jobs planned all of them to push 20, and took
        0.24 s of CPU to be ready against 0.11 s now (benchmarks/node_startup.py). The
        others come in at their window's turn or a membership change, as they would have
        at their first tick.
        """
        self.share.track_all(list(self.jobs), int(self.clock.time()))
        raced = self.share.raced_now()
        names = [name for name in self.jobs if raced is None or name in raced]
        retry = Retry(self.clock)
        while True:
            try:
                marks = await self.store.watermarks(names)
                break
            except StoreError as exc:
                self._set_ready(False, why=f"cannot read watermarks: {exc}", source="seed")
                log.warning("cannot read watermarks yet", extra={"error": str(exc)})
                await retry.wait()
        now_s = int(self.clock.time())
        for name in names:
            job = self.jobs.get(name)
            if job is None:  # removed while the watermarks were read
                continue
            mark = marks.get(name)
            start = mark if mark is not None and mark < now_s else now_s
            try:
                first_s = job.schedule.next_tick(start)
            except Exception as exc:  # noqa: BLE001 (logged by _unschedule; the rest go on)
                self._unschedule(job, exc)
                continue
            self._push(name, first_s)
        self.seeded = True

    def _unschedule(self, job: Job, exc: Exception) -> None:
        """Drop a job whose next tick cannot be computed; the other jobs go on."""
        self.next_tick.pop(job.name, None)
        self._broken.add(job.name)
        log.error(
            "cannot compute the job's next tick; it will not fire until the agent restarts",
            exc_info=not isinstance(exc, CronraceError),
            extra={
                "job": job.name,
                "schedule": job.schedule.expr,
                "timezone": job.schedule.timezone,
                "error": str(exc),
                "node": self.settings.node_id,
            },
        )

    def _wake_up(self) -> None:
        """End the loop's nap now: it looks at the heap and the racers' work again."""
        self.nap.wake()

    def watch_clock(self) -> Callable[[], None]:
        """Let the loop sleep until its next tick; call what this returns about once a
        second (cheap: two clock reads) to end a nap when the clock moved."""
        self._max_sleep_s = max(self._max_sleep_s, WATCHED_MAX_SLEEP_S)
        return self.nap.check_clock

    def put_job(self, job: Job) -> None:
        """Add a job, or replace one, while the loop runs: it fires from its next tick
        after now (every node computes the same one), not from an older watermark."""
        self.jobs[job.name] = job
        self._broken.discard(job.name)
        self.share.track(job.name, int(self.clock.time()))
        try:
            first_s = job.schedule.next_tick(int(self.clock.time()))
        except Exception as exc:  # noqa: BLE001 (logged by _unschedule; the rest go on)
            self._unschedule(job, exc)
            return
        if self.next_tick.get(job.name) != first_s:
            self._push(job.name, first_s)
            self._wake_up()

    def drop_job(self, name: str) -> None:
        """Stop firing a job while the loop runs (its heap entries turn stale)."""
        self.jobs.pop(name, None)
        self.next_tick.pop(name, None)
        self._broken.discard(name)
        self._expired.pop(name, None)
        self.share.forget(name)

    def _push(self, name: str, tick_s: int, *, wake_s: float | None = None) -> None:
        if wake_s is None and not self.share.races(name, tick_s):
            # racers = k: others race this tick (its window's racers). The job leaves the
            # heap; its window's turn or a membership change brings it back.
            self.next_tick.pop(name, None)
            return
        self.next_tick[name] = tick_s
        if wake_s is None:
            preferred = self.membership.preferred(name, tick_s)
            wake_s = tick_s if preferred else tick_s + PREFERRED_HEAD_START_S
        heapq.heappush(self._heap, (wake_s, tick_s, name))

    # -- racers = k: ticks left to others, and ticks whose racers left ---------------------

    def _orphan_window_s(self) -> float:
        """How far back a tick may lack a racer: the late-fire bound and a heartbeat."""
        return late_fire_bound_s(self.settings.heartbeat_s) + self.settings.heartbeat_s

    def _members_changed(self, before: Ring, after: Ring, last_beat_ms: int) -> None:
        """The membership's hook: queue the jobs the change moved, wake the loop for them."""
        self.share.changed(before, after, last_beat_ms)
        if self.share.pending or self._orphans:
            self._wake_up()

    def _turn_windows(self, now: float) -> bool:
        """Place a chunk of the jobs whose window began (True: more are due): those this
        node races enter the heap (the others are raced elsewhere: a first tick past this
        window is that window's, and its turn looks again)."""
        turned, more = self.share.due_turns(now)
        for start_s, name in turned:
            job = self.jobs.get(name)
            if job is None or name in self.next_tick or name in self._broken:
                continue  # in the heap already: its next pop sees whom the window chose
            self._take_over(job, start_s - 1, now)
        return more

    def _rehome(self, now: float) -> None:
        """Re-home one chunk of the jobs a membership change moved (tick/share.py)."""
        now_s = int(now)
        for change, name in self.share.take():
            job = self.jobs.get(name)
            if job is None or name in self._broken:
                continue
            first_s = self.next_tick.get(name)
            if first_s is None:
                first_s = self._take_over(job, now_s - 1, now, since_s=change.since_s)
            if first_s is not None:
                self.share.recover(change, job, first_s, now_s)

    def _take_over(
        self, job: Job, after_s: int, now: float, *, since_s: int | None = None
    ) -> int | None:
        """Push a job's first tick after ``after_s`` when this node races it.

        Returns that tick (raced or not); None when it cannot be computed. A job taken
        over covers, with its first claim, the ticks of the last few heartbeats: their
        racers may have died before the membership said so.
        """
        name = job.name
        try:
            first_s = job.schedule.next_tick(after_s)
        except Exception as exc:  # noqa: BLE001 (logged by _unschedule; the rest go on)
            self._unschedule(job, exc)
            return None
        if self.share.races(name, first_s):
            oldest_s = int(now - self._orphan_window_s())
            if since_s is not None:
                oldest_s = max(oldest_s, since_s)
            self._passed.setdefault(name, oldest_s)
            self._push(name, first_s)
        return first_s

    async def _race_orphans(self, runs: TaskGroup, now: float) -> None:
        """Race, late, for the ticks this node became a racer for when members left."""
        # Emptied in place: the share (tick/share.py) adds later orphans to this same dict.
        orphans = dict(self._orphans)
        self._orphans.clear()
        plans = []
        for name, ticks in orphans.items():
            job = self.jobs.get(name)
            if job is None:
                continue
            unlisted = self.share.unlisted.pop(name, 0)
            shared_s = ticks[0]
            if name in self._expired:  # older than the catch-up window: counted, not raced
                oldest_s, count = self._expired.pop(name)
                unlisted, shared_s = unlisted + count, min(shared_s, oldest_s)
            plan = plan_orphaned(job, ticks, now, self.settings.live_grace_s, unlisted=unlisted)
            if plan is not None:
                plans.append(Proposal(job, plan, shared_from_s=shared_s))
        try:
            unanswered = await self.tick_race.race(plans, runs) if plans else set()
        except Exception:  # the outermost loop: one job's surprise must not stop the rest
            log.exception("unexpected error racing for orphaned ticks; moving on")
            return
        uncovered = self.share.uncovered
        for name in unanswered:  # Redis did not answer: the next claim covers them all
            uncovered[name] = min(uncovered.get(name, orphans[name][0]), orphans[name][0])

    async def fire_trigger(
        self, job: Job, trigger_id: str, runs: TaskGroup, *, age_s: float = 0.0
    ) -> None:
        """Race for a manual trigger (:meth:`TickRace.race_trigger`)."""
        await self.tick_race.race_trigger(job, trigger_id, runs, age_s=age_s)
