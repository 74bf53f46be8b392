"""One wake-up's race: claim, decide, start (docs/design.md section 3, steps 2-4).

The scheduler hands :meth:`TickRace.race` what each due job proposes. The race sends every
claim in one pipeline per shard (``SET ... NX PX undecided_claim``), decides the won ones
in a second (retried idempotently while the store is away: acquire.py), plans again and
resends a decision answered ``moved``, and hands granted runs to the runner. It never
awaits a handler. A claim only says who may move the job's cursor now: losing one, or
giving a decision up, loses no tick, since the job's next decision covers every tick
above the cursor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import replace

import anyio
from anyio.abc import TaskGroup

from cronrace.errors import StoreError
from cronrace.model.job import Job
from cronrace.model.policies import Overlap
from cronrace.protocol import Answer as Said
from cronrace.protocol import DecideReply, DecideRequest
from cronrace.runtime import tracing
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import SetReady
from cronrace.runtime.retry import BACKOFF, Backoff
from cronrace.settings import AgentSettings
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, ClaimOutcome, ClaimReply, Owner
from cronrace.tick.acquire import Answer, decide_retrying
from cronrace.tick.decisions import Proposal, RunStart, decide_request, report, run_start
from cronrace.tick.lease import SAFETY_MARGIN
from cronrace.tick.plans import Plan, plan_tick
from cronrace.tick.releases import FOREIGN_RELEASE_WAIT_S, let_others_release
from cronrace.tick.runner import Runner

log = logging.getLogger("cronrace.tick.loop")

#: Claims failing for this long make an outage (not a blip: a restart, a stale connection)
#: after which runs on other nodes may have finished with their releases still pending.
LONG_OUTAGE_S = 0.5
#: The longest a decision waits for this node's own pending releases of the same jobs.
RELEASE_FIRST_TIMEOUT_S = 1.0
#: How often one wake-up plans a job again after ``moved`` (the cursor only grows, so
#: this ends anyway; the bound keeps a store answering nonsense from holding the loop).
MAX_REPLANS = 8


class TickRace:
    """Claims and decisions of one agent's wake-ups.

    Attributes:
        cursors: each job's cursor as this node last learnt it (from its own decisions'
            answers, or read at the start); a plan expects it.
    """

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        settings: AgentSettings,
        owner: Owner,
        runner: Runner,
        observer: Observer,
        set_ready: SetReady,
        cursors: MutableMapping[str, int | None],
        backoff: Backoff = BACKOFF,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.owner = owner
        self.runner = runner
        self.observer = observer
        self.cursors = cursors
        self._set_ready = set_ready
        self._backoff = backoff
        #: Claims whose reply was lost: the next claim of the same key reads it back.
        self._ambiguous: set[tuple[str, int, str | None]] = set()
        self._unreachable_since: float | None = None
        self._recovered_mono = float("-inf")  # when claims went through after an outage
        #: Told of each lost claim whose tick this node claims again later (the recheck).
        self.on_lost: Callable[[Job, int], None] | None = None

    def undecided_claim_ms(self) -> int:
        """How long an undecided claim lives (D): a latency knob, not a safety one."""
        return int(self.settings.undecided_claim_s * 1000)

    def claim_ttl_ms(self, job: Job) -> int:
        """How long a decided claim keeps its answer for retries: past every retry."""
        return int((job.catchup_window_s + self.settings.skew_tolerance_s + 1) * 1000)

    def plan(self, job: Job, tick_s: int, now: float, *, since_s: int | None = None) -> Plan:
        """Plan (cursor, tick] from the cursor this node knows (a job without one: the ticks
        after ``since_s``)."""
        cursor_s = self.cursors.get(job.name)
        grace_s = self.settings.live_grace_s
        return plan_tick(job, tick_s, cursor_s, now, grace_s, since_s=since_s)

    async def race(
        self, proposals: Sequence[Proposal], runs: TaskGroup, *, recheck: bool = False
    ) -> set[str]:
        """Claim every plan (one pipeline per shard), then decide the won ones.

        A claim lost is told to :attr:`on_lost` (the loop claims it again later, if second
        in line), unless this race is that ``recheck`` already: once is enough.

        Returns:
            The jobs whose claims got no answer: the loop plans them again, backing off.
        """
        ttl_ms = self.undecided_claim_ms()
        claims = [Claim(p.job.name, p.plan.tick_s, ttl_ms, p.trigger_id) for p in proposals]
        with tracing.claims_span(self.settings.node_id, len(claims)) as span:
            replies = await self._claim(claims)
            winners: list[Proposal] = []
            unknown: set[str] = set()
            lost = 0
            for p, reply in zip(proposals, replies, strict=True):
                if reply.outcome is ClaimOutcome.WON:
                    winners.append(p)
                elif reply.outcome is ClaimOutcome.LOST:
                    lost += 1
                    if p.trigger_id is None and self.on_lost is not None and not recheck:
                        self.on_lost(p.job, p.plan.tick_s)
                else:  # no answer, or too few replicas confirmed it: claimed again later
                    unknown.add(p.job.name)
            if winners or lost:
                self.observer.claims(len(winners), lost)
            span.answered(len(winners), lost)
            if winners:
                await self._releases_first(winners)
                unknown |= await self._decide(winners, runs)
        return unknown

    async def race_trigger(
        self, job: Job, trigger_id: str, runs: TaskGroup, *, age_s: float = 0.0
    ) -> None:
        """Race for a manual trigger: its own claim key, the same lease and overlap policy.

        The store decides it once: a trigger already decided, or outstanding past its
        window (recorded missed by the job's decisions), is answered ``stale``.
        """
        now_s = int(self.clock.time() - age_s)
        plan = Plan(now_s, None, now_s - 1, (now_s,), ())
        if await self.race([Proposal(job, plan, trigger_id)], runs):
            log.error(
                "manual trigger not decided: the store did not answer; it stays outstanding "
                "until its window ends (then it is recorded missed)",
                extra={"job": job.name, "trigger": trigger_id},
            )

    async def _releases_first(self, winners: list[Proposal]) -> None:
        """Let finished runs' releases reach the store before their jobs' decision.

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
        """Send the claims; ``UNKNOWN`` for those the store (or their shard) did not answer.

        A claim whose reply was lost may have been written: the next attempt at the same
        key reads it back (it counts won while it holds this process's claim undecided).
        """
        keys = [(c.job, c.tick_s, c.trigger_id) for c in claims]
        ambiguous = self._ambiguous
        if ambiguous and not ambiguous.isdisjoint(keys):
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
        if self._ambiguous or unknown:
            oldest_s = int(self.clock.time()) - 3600
            self._ambiguous = {
                key for key in (self._ambiguous - set(keys)) | unknown if key[1] >= oldest_s
            }
        if unknown:
            self.observer.redis_error("claim")
        if len(unknown) < len(keys):
            held_up = self.clock.monotonic() - sent_mono >= LONG_OUTAGE_S
            since = self._unreachable_since
            if (since is not None and self.clock.monotonic() - since >= LONG_OUTAGE_S) or held_up:
                self._recovered_mono = self.clock.monotonic()
            self._unreachable_since = None
        elif self._unreachable_since is None:
            self._unreachable_since = self.clock.monotonic()
        self._set_ready(not unknown, why=failed, source="claims")
        return replies

    async def _decide(
        self, winners: list[Proposal], runs: TaskGroup, *, apart: bool = False
    ) -> set[str]:
        """Decide the won claims; plan again and resend those answered ``moved``.

        Returns:
            The jobs whose decision the store never answered in time: nothing is lost
            (their ticks stay above the cursor), the loop plans them again.
        """
        todo = winners
        undecided: set[str] = set()
        for _round in range(MAX_REPLANS):
            again: list[Proposal] = []
            undecided |= await self._decide_once(todo, runs, again, apart=apart)
            if not again:
                return undecided
            todo = again
        log.error(
            "the cursor kept moving under this node's decisions; leaving them to the next "
            "decision of each job",
            extra={"jobs": sorted(p.job.name for p in todo)},
        )
        return undecided

    async def _decide_once(
        self, winners: list[Proposal], runs: TaskGroup, again: list[Proposal], *, apart: bool
    ) -> set[str]:
        node = self.settings.node_id
        undecided: set[str] = set()
        requests = [self._request(p) for p in winners]

        def hand_off(indexes: list[int]) -> None:
            runs.start_soon(self._decide_apart, [winners[i] for i in indexes], runs)

        def settle(indexes: list[int], answers: list[Answer]) -> None:
            # Nothing awaits in here: each run is registered with the runner before a
            # forced stop can come.
            now = self.clock.time()
            now_mono = self.clock.monotonic()
            for index in indexes:
                p, (reply, granted_mono) = winners[index], answers[index]
                if isinstance(reply, Exception):
                    undecided.add(p.job.name)
                    continue
                self._learn(p, reply)
                report(p, reply, node_id=node, observer=self.observer)
                if reply.answer is Said.MOVED:
                    cursor_s = reply.cursor_s
                    if cursor_s is None or cursor_s < p.plan.tick_s:
                        again.append(replace(p, plan=self.plan(p.job, p.plan.tick_s, now)))
                    continue
                start = run_start(p, reply)
                if start is None:
                    continue
                deadline_mono = granted_mono + p.job.lease_ttl_s * (1 - SAFETY_MARGIN)
                if now_mono >= deadline_mono and p.job.overlap is not Overlap.ALLOW:
                    # Answered past its lease's deadline (a slow store, retries): a run
                    # started now could overlap the next grant. Its lease runs out and
                    # the job's next decision records it abandoned.
                    log.warning(
                        "granted run answered past its lease's deadline; not started",
                        extra={"job": p.job.name, "tick": p.plan.tick_s, "fence": start.fence},
                    )
                    continue
                self._start(p, start, granted_mono, runs)

        await decide_retrying(
            self.store,
            self.clock,
            requests,
            [p.plan.tick_s + p.job.catchup_window_s for p in winners],
            observer=self.observer,
            set_ready=self._set_ready,
            backoff=self._backoff,
            settle=settle,
            hand_off=None if apart else hand_off,
            wait_first=apart,
        )
        return undecided

    async def _decide_apart(self, winners: list[Proposal], runs: TaskGroup) -> None:
        """Decide, apart from the wake-up, won claims whose jobs were busy."""
        await self._decide(winners, runs, apart=True)

    def _request(self, p: Proposal) -> DecideRequest:
        return decide_request(
            p,
            self.owner,
            claim_ttl_ms=self.claim_ttl_ms(p.job),
            trigger_window_ms=int(p.job.catchup_window_s * 1000),
            known_fence=self.store.known_fence(p.job.name),
        )

    def _learn(self, p: Proposal, reply: DecideReply) -> None:
        """Keep the newest cursor an answer told of (it only grows, but for a store that
        lost its data: then the decision's own cursor is the truth)."""
        if p.trigger_id is not None or reply.cursor_s is None:
            return
        name, known = p.job.name, self.cursors.get(p.job.name)
        if reply.answer is Said.DECIDED or reply.answer is Said.MOVED or known is None:
            self.cursors[name] = reply.cursor_s
        else:
            self.cursors[name] = max(known, reply.cursor_s)

    def _start(self, p: Proposal, start: RunStart, granted_mono: float, runs: TaskGroup) -> None:
        """Register a granted run with the runner, then start its task."""
        if start.hold_s:
            self.runner.hold_job(p.job.name, start.hold_s)
        grant = self.runner.admit(
            p.job, list(start.ticks), start.fence, granted_mono, p.trigger_id, list(start.fences)
        )
        self.runner.start(grant, runs)
