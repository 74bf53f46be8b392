"""The tick loop: wake, plan, race (docs/design.md section 3, steps 1-3).

A heap holds each job's next tick. At each wake-up the loop pops every due job, plans the
decision of its newest due tick from the job's cursor (one tick in the steady state; the
whole backlog after a late wake-up), and hands the proposals to the race
(:class:`~cronrace.tick.race.TickRace`: claims, decisions, runs). It never awaits a handler.

A tick this node raced and lost is decided by its winner; for a job whose period is longer
than ``undecided_claim_s`` (D), the loser ranked next claims it again D later, so that a
winner that died before deciding is covered without waiting for the job's next tick. With
``racers = k`` the heap holds only the jobs this node races in their current placement
window (tick/share.py), and a node that becomes a racer of a job claims its newest due tick
once: the decision covers whatever is open since the cursor.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from cronrace.errors import CronraceError, StoreError
from cronrace.fleet.membership import Membership
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
from cronrace.tick.plans import Plan, newest_tick
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
#: How long after its undecided claim ran out the next in line claims a lost tick again:
#: the winner's claim was made a little after the tick (its wake-up, the round trip).
RECHECK_MARGIN_S = 0.5


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
        #: racers = k: the jobs this node races, window by window (tick/share.py).
        self.share = RacerShare(settings.node_id, self.membership, jobs)
        #: Each job's cursor as this node last learnt it (read at the start, then from the
        #: answers to its own decisions).
        self.cursors: dict[str, int | None] = {}
        #: Each job's newest tick this node raced: in the steady state the cursor its next
        #: decision expects (whoever won it decided it). A wrong guess costs one
        #: ``moved`` answer, never a tick.
        self._raced: dict[str, int] = {}
        #: (when to wake for it, tick, job): a job whose claim got no answer wakes later
        #: than its tick (backoff), and only the entry matching ``next_tick`` counts.
        self._heap: list[tuple[float, int, str]] = []
        #: (when, tick, job): ticks this node lost and claims again, second in line.
        self._rechecks: list[tuple[float, int, str]] = []
        self._unanswered: dict[str, int] = {}
        #: The loop's sleep: put_job, membership changes and a moved clock end it.
        self.nap = Nap(clock)
        #: Each job's next tick, for the jobs in the heap (racers = k: those this node races).
        self.next_tick: dict[str, int] = {}
        #: Jobs whose next tick cannot be computed: out of the heap until replaced.
        self._broken: set[str] = set()
        #: Whether every job has been started from its cursor (the loop is running).
        self.seeded = False
        self.gate = StopGate()
        #: The claim step: every tick's claim and decision goes through it.
        self.tick_race = TickRace(
            store=store,
            clock=clock,
            settings=settings,
            owner=owner,
            runner=runner,
            observer=observer,
            set_ready=set_ready,
            cursors=self.cursors,
        )
        self.tick_race.on_lost = self._lost
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
            turning = self._turn_windows(now)
            due = bool(self._heap) and self._heap[0][0] <= now
            if self.share.pending or turning:
                self._rehome(now)
                if not due:
                    await anyio.lowlevel.checkpoint()  # the rest of the change next turn
                    continue
            recheck = bool(self._rechecks) and self._rechecks[0][0] <= now
            next_s = min(
                self._heap[0][0] if self._heap else math.inf,
                self._rechecks[0][0] if self._rechecks else math.inf,
                self.share.next_turn_s(),
            )
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
            if recheck:
                await self._recheck(now, runs)

    async def _wake(self, now: float, runs: TaskGroup) -> None:
        """Pop every due job, plan its newest due tick, race, and push each job's next tick."""
        planned: dict[str, Job] = {}
        due: list[tuple[int, str]] = []
        while self._heap and self._heap[0][0] <= now:
            _wake_s, first_due, name = heapq.heappop(self._heap)
            # Entries of a job replaced or removed at runtime (stored schedules) are
            # stale: only the one matching its current next tick counts, once.
            if self.next_tick.get(name) == first_due and name not in planned:
                planned[name] = self.jobs[name]
                due.append((first_due, name))
        proposals: list[Proposal] = []
        following: dict[str, int] = {}
        now_s = int(now)
        skipped = 0
        for first_due, name in due:
            job = planned[name]
            try:
                tick_s, following[name] = self._due_tick(job, first_due, now_s)
                if self.membership.racers_of(name, tick_s) is not None:
                    # racers = k: others race this tick (the view moved since it was pushed).
                    skipped += 1
                    continue
                proposals.append(Proposal(job, self._plan(job, tick_s, now, first_due - 1)))
            except Exception as exc:  # noqa: BLE001 (logged by _unschedule; the rest go on)
                self._unschedule(job, exc)
        if skipped:
            self.observer.claims_skipped(skipped)
        try:
            unanswered = await self.tick_race.race(proposals, runs) if proposals else set()
        except Exception:  # the outermost loop: one job's surprise must not stop the rest
            log.exception(
                "unexpected error deciding ticks; moving on",
                extra={"jobs": [p.job.name for p in proposals]},
            )
            unanswered = set()
        for p in proposals:
            self._raced[p.job.name] = max(self._raced.get(p.job.name, 0), p.plan.tick_s)
        # A job replaced or removed while its claims were out has its new next tick
        # already (put_job, drop_job): the old definition's must not overwrite it.
        following = {n: s for n, s in following.items() if self.jobs.get(n) is planned[n]}
        for first_due, name in due:
            if name not in following:  # dropped by _unschedule, replaced or removed
                continue
            if name not in unanswered:
                self._unanswered.pop(name, None)
                self._push(name, following[name])
                continue
            # The store (or this job's shard) did not answer: nothing was decided. Put the
            # tick back and back off; the next attempt plans the job again from its cursor.
            attempt = self._unanswered.get(name, 0)
            self._unanswered[name] = attempt + 1
            self._push(name, first_due, wake_s=self.clock.time() + backoff_s(attempt))

    def _due_tick(self, job: Job, first_due_s: int, now_s: int) -> tuple[int, int]:
        """The newest due tick of a job popped at ``first_due_s``, and the one after now."""
        following = job.schedule.next_tick(first_due_s)
        if following > now_s or first_due_s >= now_s:
            return first_due_s, following  # the steady state: one tick due
        return newest_tick(job, first_due_s - 1, now_s), job.schedule.next_tick(now_s)

    def _plan(self, job: Job, tick_s: int, now: float, since_s: int) -> Plan:
        """Plan ``tick_s`` from the cursor this node expects: the one it knows, or the tick
        it raced last (whoever won that decided it), whichever is newer. Only a cursor the
        node has seen is ever expected: a store without one then lost the job's data."""
        name = job.name
        known = self.cursors.get(name)
        raced = self._raced.get(name)
        if known is not None and raced is not None and known < raced < tick_s:
            self.cursors[name] = raced
        return self.tick_race.plan(job, tick_s, now, since_s=since_s)

    def _lost(self, job: Job, tick_s: int) -> None:
        """A claim this node lost: claim it again D later if it is second in line and the
        job's next tick is further away than that (docs/design.md section 3, step 6)."""
        wait_s = self.settings.undecided_claim_s
        try:
            if job.schedule.interval_s(tick_s) <= wait_s:
                return  # the job's next decision comes about as soon
        except Exception:  # noqa: BLE001 (a broken schedule is reported by the loop)
            return
        if self.membership.next_after_preferred(job.name, tick_s):
            heapq.heappush(self._rechecks, (tick_s + wait_s + RECHECK_MARGIN_S, tick_s, job.name))

    async def _recheck(self, now: float, runs: TaskGroup) -> None:
        """Claim again the lost ticks that are due: a winner that died before deciding
        leaves its claim to run out; won now, the tick is decided here, late."""
        proposals: list[Proposal] = []
        while self._rechecks and self._rechecks[0][0] <= now:
            _when, tick_s, name = heapq.heappop(self._rechecks)
            job = self.jobs.get(name)
            known = self.cursors.get(name)
            if job is None or (known is not None and known >= tick_s):
                continue
            proposals.append(Proposal(job, self.tick_race.plan(job, tick_s, now)))
        if not proposals:
            return
        try:
            await self.tick_race.race(proposals, runs, recheck=True)
        except Exception:  # the outermost loop: one job's surprise must not stop the rest
            log.exception("unexpected error re-claiming lost ticks; moving on")

    async def _seed(self) -> None:
        """Start each job this node races from its cursor, or from now when it has none.

        With ``racers = k`` every job is placed in its window, and only those this node
        races in it are read and planned; the others come in at their window's turn or a
        membership change, as they would have at their first tick.
        """
        self.share.track_all(list(self.jobs), int(self.clock.time()))
        raced = self.share.raced_now()
        names = [name for name in self.jobs if raced is None or name in raced]
        retry = Retry(self.clock)
        while True:
            try:
                cursors = await self.store.cursors(names)
                break
            except StoreError as exc:
                self._set_ready(False, why=f"cannot read cursors: {exc}", source="seed")
                log.warning("cannot read the jobs' cursors yet", extra={"error": str(exc)})
                await retry.wait()
        self.cursors.update(cursors)
        now_s = int(self.clock.time())
        for name in names:
            job = self.jobs.get(name)
            if job is None:  # removed while the cursors were read
                continue
            cursor = cursors.get(name)
            start = cursor if cursor is not None and cursor < now_s else now_s
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
        after now (every node computes the same one), not from an older cursor."""
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
        self.cursors.pop(name, None)
        self._raced.pop(name, None)
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

    # -- racers = k: windows and membership changes --------------------------------------

    def _members_changed(self, before: Ring, after: Ring, last_beat_ms: int) -> None:
        """The membership's hook: queue the jobs the change moved, wake the loop for them."""
        self.share.changed(before, after, last_beat_ms)
        if self.share.pending:
            self._wake_up()

    def _turn_windows(self, now: float) -> bool:
        """Place a chunk of the jobs whose window began (True: more are due): those this
        node races enter the heap."""
        turned, more = self.share.due_turns(now)
        for start_s, name in turned:
            job = self.jobs.get(name)
            if job is None or name in self.next_tick or name in self._broken:
                continue  # in the heap already: its next pop sees whom the window chose
            self._take_up(job, start_s - 1)
        return more

    def _rehome(self, now: float) -> None:
        """Re-home one chunk of the jobs a membership change moved (tick/share.py): a job
        this node now races, and did not, claims its newest due tick once."""
        now_s = int(now)
        for _change, name in self.share.take():
            job = self.jobs.get(name)
            if job is None or name in self._broken or name in self.next_tick:
                continue
            try:
                newest_s = newest_tick(job, now_s - int(job.catchup_window_s) - 1, now_s)
            except Exception as exc:  # noqa: BLE001 (logged by _unschedule; the rest go on)
                self._unschedule(job, exc)
                continue
            if newest_s and self.share.races(name, newest_s):
                self.next_tick[name] = newest_s
                heapq.heappush(self._heap, (now, newest_s, name))
            else:
                self._take_up(job, now_s)

    def _take_up(self, job: Job, after_s: int) -> None:
        """Push a job's first tick after ``after_s`` when this node races it."""
        try:
            first_s = job.schedule.next_tick(after_s)
        except Exception as exc:  # noqa: BLE001 (logged by _unschedule; the rest go on)
            self._unschedule(job, exc)
            return
        if self.share.races(job.name, first_s):
            self._push(job.name, first_s)

    async def fire_trigger(
        self, job: Job, trigger_id: str, runs: TaskGroup, *, age_s: float = 0.0
    ) -> None:
        """Race for a manual trigger (:meth:`TickRace.race_trigger`)."""
        await self.tick_race.race_trigger(job, trigger_id, runs, age_s=age_s)
