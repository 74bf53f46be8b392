"""A model of the claim / acquire / renew / release protocol, checked after every step.

A hypothesis state machine drives the real Lua scripts through :class:`cronrace.stores.redis.Store`
(one store per node, as in a fleet) and checks the contract of DESIGN.md after each step.
Its rules are what can happen to a fleet: nodes claim ticks (on time, late, or with a clock
so far behind that the claim key has expired), decide them, renew, finish and crash; they
pause, are cut off from Redis, and restart; time passes (every TTL in the namespace is
shortened, so leases and holds expire when the model says so, never by the wall clock);
Redis is wiped, fails over to a replica that lags (a snapshot taken some steps earlier),
loses its script cache, or finds garbage of any type under any key of a job; operators
pause, resume and trigger jobs. There is one job per overlap policy.

Time is counted in grains of ``GRAIN_MS``. A lease lives ``LEASE_TTL_MS`` (6 grains) and is
renewed every 2 grains by a node that is up; a node gives its run up by itself 0.9 lease
after the last renewal it sent (DESIGN.md section 4). A tick falls every ``TICK_MS``
(3 grains), numbered from ``TICK_BASE``; nodes attempt a tick (or a manual trigger) while
it is at most ``WINDOW_TICKS`` ticks old, and claims live longer than that.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import Counter, defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import fakeredis
import hypothesis
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from cronrace.model.policies import Catchup, Outcome, TickPlan, plan_ticks
from cronrace.model.records import RunRecord
from cronrace.stores.contract import Store as NodeStore
from cronrace.stores.redis import Store
from cronrace.stores.values import AcquireReply, AcquireRequest, Claim, Owner, Renewal
from tests.model import redis_state
from tests.model.mutations import apply_mutation

NAMESPACE = "m"
GRAIN_MS = 100_000
LEASE_TTL_MS = 6 * GRAIN_MS
RENEW_EVERY_MS = 2 * GRAIN_MS
LOCAL_DEADLINE_MS = int(0.9 * LEASE_TTL_MS)
TICK_MS = 3 * GRAIN_MS
WINDOW_TICKS = 2
CLAIM_TTL_MS = (WINDOW_TICKS + 2) * TICK_MS
MAX_CATCHUP = 2
#: Ticks are large numbers, like the epoch seconds they are in the agent: a small integer
#: written over a watermark is an old one, not one from the future.
TICK_BASE = 1_000_000

JOBS = {
    "j-skip": "skip",
    "j-queue": "queue_one",
    "j-replace": "replace",
    "j-allow": "allow",
}
LEASED = {job for job, overlap in JOBS.items() if overlap != "allow"}
NODES = ("a", "b", "c")
KEY_KINDS = ("lease", "fence", "last", "pending", "state", "runs", "claim")
DECISIONS = {"run", "stale", "marked", "skipped:paused", "skipped:overlap", "queued", "missed"}


@dataclass
class Run:
    """A run as the model sees it: granted to a node, maybe started, then ended."""

    rid: int
    job: str
    tick: int
    trigger: str | None
    node: str
    incarnation: int
    fence: int
    leased: bool
    granted_ms: int
    start_ms: int  # the handler starts here (later than the grant while a hold lasts)
    renewed_ms: int  # when the last successful renewal (or the grant) was sent
    era: int  # the data-loss era of the grant
    claimed_era: int  # the data-loss era when its claim was won
    more_ticks: list[int] = field(default_factory=list)  # catch-up ticks still to run
    started: bool = False
    state: str = "active"  # active | finished | lost | orphaned
    #: Every data loss since its lease was last renewed (a wipe, then a failover to a
    #: replica that copied the data before it: each may be what let another run in).
    lease_losses: set[str] = field(default_factory=set)
    blind: bool = False  # granted by a node that had seen no fence of the job
    #: Granted with a hold (after lost data): it confirms its lease as it starts, however
    #: early the hold ends (every node re-asserted its runs in the grant's very instant).
    held: bool = False

    def label(self) -> str:
        what = f"trigger {self.trigger}" if self.trigger else f"tick {self.tick}"
        return f"{self.job} {what} on {self.node} fence {self.fence}"


@dataclass
class Won:
    """A claim a node won and has not decided yet."""

    job: str
    plan: TickPlan
    trigger: str | None = None
    skewed: bool = False
    first: AcquireReply | None = None  # an earlier attempt's answer, lost on the way
    first_run: Run | None = None  # what that attempt granted, unknown to the node
    era: int = 0  # the job's data-loss era when the claim was won
    won_ms: int = 0  # when the claim was won
    prior: int = 0  # the node's newest tick before this plan (a decision may note it passed)
    taken_in_era: int | None = None  # another node took this claim over, in this data era


@dataclass
class Node:
    name: str
    store: NodeStore
    incarnation: int = 0
    status: str = "up"  # up | paused | cut | down
    cursor: dict[str, int] = field(default_factory=dict)  # newest tick handled, per job
    triggers_seen: set[str] = field(default_factory=set)
    won: list[Won] = field(default_factory=list)
    unsent: list[RunRecord] = field(default_factory=list)  # records kept while cut off

    @property
    def owner(self) -> str:
        return f"{self.name}:{self.incarnation}"


@dataclass
class Knowledge:
    """What the model expects Redis to hold for one job; copied with snapshots."""

    holder: int | None = None  # rid of the run holding the lease
    holder_known: bool = True
    lease_expires_ms: int = 0
    queued: int | None = None  # the tick waiting (queue_one)
    queued_known: bool = True
    unreleased: int | None = None  # rid of the last leased grant not released
    unreleased_known: bool = True
    paused: bool = False


class ProtocolModel(RuleBasedStateMachine):
    """The fleet and its Redis; subclasses say which server (see ``make_client``)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.elapsed_ms = 0  # time passed that Redis's TTLs have not been shortened by yet
        self.faults_since_probe = 0
        self.open_backend()
        self.reset_server()
        self.nodes = {name: Node(name, self.new_store()) for name in NODES}
        self.operator = self.new_store()
        self.now_ms = 0
        self.catchup: dict[str, Catchup] = {job: Catchup.LATEST for job in JOBS}
        self.runs: list[Run] = []
        self.rids = itertools.count(1)
        self.trigger_ids = itertools.count(1)
        self.triggers: dict[str, list[tuple[str, int]]] = defaultdict(list)  # id, issued
        self.know = {job: Knowledge() for job in JOBS}
        self.snapshots: list[tuple[Any, dict[str, Knowledge], int]] = []
        #: Undecided claims of crashed processes, by node: (owner, won), for takeovers.
        self.forgotten: dict[str, list[tuple[str, Won]]] = defaultdict(list)
        self.era = 0  # bumped by every event that loses Redis data
        self.last_loss = ""  # what lost data last (a wipe: the nodes see the epoch change)
        self.early_end_until_ms = -1  # held grants may start early until then (a wipe)
        self.job_era: dict[str, int] = dict.fromkeys(JOBS, 0)
        self.max_fence: dict[str, int] = dict.fromkeys(JOBS, 0)
        self.fences: dict[str, list[int]] = defaultdict(list)
        self.starts: dict[tuple[str, int | str], list[Run]] = defaultdict(list)
        # Data-loss windows: (era, job, ticks in flight then); each excuses one more start
        # of each of its ticks (README "Guarantees": the duplicate window).
        self.windows: list[tuple[int, str, set[int | str]]] = []
        self.excused: Counter[str] = Counter()
        self.watermark_seen: dict[str, tuple[int, int | None]] = {}
        self.records_expected: Counter[tuple[str, int]] = Counter()

    # -- the backend's hooks: what the model does to the store's data from outside --------
    #
    # Everything the rules, checks and invariants below need of the server goes through
    # these; RedisProtocolModel (here) and PostgresProtocolModel (postgres_state.py)
    # implement them. Each leaves the data as the fault it names would.

    def open_backend(self) -> None:
        """Connect to the server (called once per example, before ``reset_server``)."""
        raise NotImplementedError

    def close_backend(self) -> None:
        """Close what ``open_backend`` opened (the event loop still runs)."""
        raise NotImplementedError

    def reset_server(self) -> None:
        """Erase the namespace's data: an empty server (a new example, a wipe)."""
        raise NotImplementedError

    def new_store(self) -> Any:
        """A new node's store (its own evidence of fences) in the namespace."""
        raise NotImplementedError

    def pass_time(self, elapsed_ms: int) -> None:
        """Let ``elapsed_ms`` pass on the store's clock: what expires by then is gone."""
        raise NotImplementedError

    def restart_keeping_data(self) -> None:
        """The server restarts and keeps its data (Redis: its script cache is lost)."""
        raise NotImplementedError

    def snapshot_data(self) -> Any:
        """A copy of the namespace's data, for a replica that lags from now on."""
        raise NotImplementedError

    def restore_data(self, copy: Any, elapsed_ms: int) -> None:
        """Fail over to the replica holding ``copy``, taken ``elapsed_ms`` ago: what
        expired since (expiries are instants on a replica) is gone."""
        raise NotImplementedError

    def put_garbage(self, job: str, key: str, kind: str) -> None:
        """Garbage of ``kind`` lands in the job's ``key`` (one of ``KEY_KINDS``; ``claim``
        is the claim of the next tick)."""
        raise NotImplementedError

    def read_watermark(self, job: str) -> Any:
        """The job's watermark as stored (None when there is none)."""
        raise NotImplementedError

    def read_state(
        self,
    ) -> tuple[dict[str, int | None], dict[str, int], dict[str, int | None], int | None]:
        """Every job's live lease fence, the ms left of the leases of the jobs whose holder
        the model does not know, every watermark and j-queue's queued tick, as stored;
        garbage reads as absent."""
        raise NotImplementedError

    # -- plumbing ----------------------------------------------------------------------

    def run_async(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run one call to Redis, after letting Redis see the time that has passed."""
        self._apply_elapsed()
        return self.loop.run_until_complete(coro)

    def _apply_elapsed(self) -> None:
        if self.elapsed_ms:
            elapsed, self.elapsed_ms = self.elapsed_ms, 0
            self.pass_time(elapsed)

    def teardown(self) -> None:
        try:
            self._apply_elapsed()
            self.close_backend()
        finally:
            self.loop.close()

    def head(self) -> int:
        """The newest tick that has come (tick ``TICK_BASE + k`` falls at k * TICK_MS)."""
        return TICK_BASE + self.now_ms // TICK_MS

    def live_runs(self, job: str | None = None) -> list[Run]:
        return [r for r in self.runs if r.state == "active" and (job is None or r.job == job)]

    def node_runs(self, node: str, job: str) -> list[Run]:
        return [r for r in self.live_runs(job) if r.node == node]

    # -- the job definitions -------------------------------------------------------------

    @initialize(catchup=st.fixed_dictionaries({job: st.sampled_from(Catchup) for job in JOBS}))
    def define_jobs(self, catchup: dict[str, Catchup]) -> None:
        self.catchup = dict(catchup)
        self.now_ms = TICK_MS  # tick 1 has just come
        for node in self.nodes.values():
            node.cursor = dict.fromkeys(JOBS, TICK_BASE)

    # -- nodes race, decide, run ------------------------------------------------------------

    @rule(node=st.sampled_from(NODES), job=st.sampled_from(list(JOBS)), late=st.booleans())
    def claim(self, node: str, job: str, late: bool) -> None:
        """A node wakes up for one job and races for what is due (ticks, new triggers)."""
        self._claim(self.nodes[node], [job], late=late)

    def _claim(self, n: Node, jobs: list[str], *, late: bool) -> None:
        """Race for everything due of ``jobs`` in one pipeline; keep what was won."""
        if n.status != "up":
            return
        claims: list[Claim] = []
        wins: list[Won] = []
        for job in jobs:
            plan = self._plan(n, job, late)
            if plan is not None:
                claims.append(Claim(job, plan.claim_tick_s, CLAIM_TTL_MS))
                wins.append(Won(job, plan, prior=n.cursor[job]))
            for trigger, issued_ms in self.triggers[job]:
                if trigger not in n.triggers_seen:
                    n.triggers_seen.add(trigger)
                    if self.now_ms - issued_ms > WINDOW_TICKS * TICK_MS:
                        continue  # read too late to race for: its claim may be gone
                    now_tick = self.head()
                    claims.append(Claim(job, now_tick, CLAIM_TTL_MS, trigger))
                    wins.append(Won(job, TickPlan(now_tick, now_tick, (now_tick,), 0), trigger))
            n.cursor[job] = self.head()
        if not claims:
            return
        won = self.run_async(n.store.claim(claims, n.owner))
        for w, ok in zip(wins, won, strict=True):
            if ok:
                w.era, w.won_ms = self.job_era[w.job], self.now_ms
                n.won.append(w)

    def _plan(self, n: Node, job: str, late: bool) -> TickPlan | None:
        head = self.head()
        cutoff = head - WINDOW_TICKS
        after = n.cursor[job]
        due = list(range(max(after, cutoff - 1) + 1, head + 1))
        expired = max(0, cutoff - 1 - after)
        if not due:
            return None
        if len(due) == 1 and not expired and not late:
            return TickPlan(head, head, (head,), 0)
        return plan_ticks(
            self.catchup[job],
            due_ticks_s=due,
            newest_on_time=not late,
            expired=expired,
            first_expired_s=after + 1 if expired else None,
            cutoff_s=cutoff,
            max_catchup=MAX_CATCHUP,
        )

    @rule(node=st.sampled_from(NODES), job=st.sampled_from(list(JOBS)))
    def skewed_node_claims_an_old_tick(self, node: str, job: str) -> None:
        """A node whose clock is far behind attempts a tick whose claim may have expired.

        The scheduler never does this inside the tolerance; beyond it the watermark is the
        second line of defence (DESIGN.md section 5): the tick must come back ``stale``.
        """
        n = self.nodes[node]
        tick = self.head() - WINDOW_TICKS - 2
        if n.status != "up" or tick <= TICK_BASE:
            return
        if any(w.job == job and w.plan.claim_tick_s == tick and not w.trigger for w in n.won):
            # A node holds one plan per job and tick; deciding the same claim twice in one
            # pipeline is no scheduler's doing (the second answer replays the first).
            return
        (won,) = self.run_async(n.store.claim([Claim(job, tick, CLAIM_TTL_MS)], n.owner))
        if won:
            n.won.append(
                Won(
                    job,
                    TickPlan(tick, tick, (tick,), 0),
                    skewed=True,
                    era=self.job_era[job],
                    won_ms=self.now_ms,
                )
            )

    @rule(node=st.sampled_from(NODES))
    def decide(self, node: str) -> None:
        """The node decides every claim it won, in one pipeline (``acquire.lua``); claims
        whose answer was lost before are sent again."""
        n = self.nodes[node]
        if n.status != "up" or not n.won:
            return
        # A lost answer is asked again only while the won claim (which remembers it) lives:
        # the scheduler gives up when the tick leaves its catch-up window.
        window_ms = WINDOW_TICKS * TICK_MS
        wins = [w for w in n.won if w.first is None or self.now_ms - w.won_ms <= window_ms]
        n.won = []
        if not wins:
            return
        requests = [self._request(n, w) for w in wins]
        known = {w.job: n.store.known_fence(w.job) for w in wins}
        replies = self.run_async(n.store.acquire(requests))
        for w, reply in zip(wins, replies, strict=True):
            assert not isinstance(reply, Exception), f"acquire failed for {w}: {reply!r}"
            if self._taken_from(n, w, reply):
                continue
            if w.first is None:
                self._decided(n, w, reply, blind=known[w.job] == 0)
            else:
                self._decided_again(n, w, reply, blind=known[w.job] == 0, known=known[w.job])

    def _taken_from(self, n: Node, w: Won, reply: AcquireReply) -> bool:
        """A late decision of a claim another node took over: refused, unless data was lost
        since (the taken claim may be gone with it; the duplicate window covers that)."""
        if w.taken_in_era is None or w.taken_in_era != self.job_era[w.job]:
            return False
        assert reply.decision == "stale", (
            f"{n.owner} {w.job} tick {w.plan.claim_tick_s}: the claim was taken over, but "
            f"the late decision of its first winner answered {reply.decision} fence {reply.fence}"
        )
        _event("a taken-over winner's late decision was refused")
        return True

    @rule(node=st.sampled_from(NODES), job=st.sampled_from(list(JOBS)))
    def decide_but_the_answers_are_lost(self, node: str, job: str) -> None:
        """The node races for the job and decides what it won, but the acquire answers
        never arrive (the connection dropped): it will send them again."""
        n = self.nodes[node]
        self._claim(n, [job], late=False)
        wins = [w for w in n.won if w.first is None]
        if n.status != "up" or not wins:
            return
        blind = {w.job: n.store.known_fence(w.job) == 0 for w in wins}
        replies = self.run_async(n.store.acquire([self._request(n, w) for w in wins]))
        for w, reply in zip(wins, replies, strict=True):
            assert not isinstance(reply, Exception), f"acquire failed for {w}: {reply!r}"
            w.first = reply
            w.first_run = self._decided(n, w, reply, node_knows=False, blind=blind[w.job])

    def _decided_again(
        self, n: Node, w: Won, reply: AcquireReply, *, blind: bool, known: int
    ) -> None:
        """A retry after a lost answer: the same decision and fence, never a second grant
        while the first may run (acquire is idempotent per owner and tick)."""
        first = w.first
        assert first is not None
        _note(f"{n.owner} {w.job} retried -> {reply.decision} fence {reply.fence}")
        if not reply.replayed:
            # The first grant's lease ran out before the answer came, or Redis lost the
            # won claim that remembers the answer (and the watermark): decided afresh.
            lost = w.era != self.job_era[w.job]
            assert first.decision == "run" or lost, (
                f"{w.job}: a retried {first.decision} decision was decided again"
            )
            _event("a retried acquire whose grant had lapsed was decided again")
            self._decided(n, w, reply, blind=blind)
            return
        assert (reply.decision, reply.fence) == (first.decision, first.fence), (
            f"{w.job}: a retried acquire answered {reply.decision} fence {reply.fence}, "
            f"the first attempt {first.decision} fence {first.fence}"
        )
        run = w.first_run
        _event(f"a retried acquire replayed {reply.decision}")
        if run is None or run.state != "orphaned":
            return
        if run.leased and not reply.renewed:
            return  # its lease moved on before the node knew of it: it must not start
        if run.leased and reply.fence < self.max_fence[w.job]:
            # A failover to a lagging replica put the grant and its lease back, though
            # fences above it were handed out meanwhile (the deep run's second finding).
            assert known <= reply.fence, (
                f"{w.job}: a replayed grant started with fence {reply.fence}, though the "
                f"retrying node knew fence {known} (the newest handed out: "
                f"{self.max_fence[w.job]})"
            )
            _event("a replayed grant restored by a failover started (no newer fence known)")
        run.state = "active"
        if run.leased:
            run.renewed_ms = self.now_ms
            know = self.know[run.job]
            if know.holder == run.rid:
                know.lease_expires_ms = self.now_ms + LEASE_TTL_MS
        self._maybe_start(run)

    def _request(self, n: Node, w: Won, mode: str | None = None) -> AcquireRequest:
        plan = w.plan
        if mode is None:
            mode = "trigger" if w.trigger else ("run" if plan.fire_ticks_s else "mark")
        values = {
            "job": w.job,
            "decide_tick_s": plan.claim_tick_s,
            "mark_tick_s": plan.mark_tick_s,
            "run_tick_s": plan.fire_ticks_s[0] if plan.fire_ticks_s else plan.claim_tick_s,
            "owner": n.owner,
            "lease_ttl_ms": LEASE_TTL_MS,
            "overlap": JOBS[w.job],
            "mode": mode,
            "trigger_id": w.trigger,
            # As the scheduler does: the tick before the plan's, which a decision passing
            # it while its claim is undecided notes for its owner (acquire.lua, passed).
            "prior_tick_s": 0 if w.trigger else w.prior,
            "late_ok": self.catchup[w.job] is Catchup.ALL,
            # As the scheduler does: the oldest tick the plan covers (ticks are
            # consecutive here: those it fires and those it counts missed), and a mark's
            # answer kept as long as a claim lives.
            "first_tick_s": 0
            if w.trigger
            else plan.claim_tick_s - len(plan.fire_ticks_s) - plan.missed + 1,
            "keep_ms": CLAIM_TTL_MS if mode == "mark" else 0,
        }
        names = {f.name for f in dataclasses.fields(AcquireRequest)}
        return AcquireRequest(**{k: v for k, v in values.items() if k in names})

    def _decided(
        self, n: Node, w: Won, reply: AcquireReply, *, node_knows: bool = True, blind: bool
    ) -> Run | None:
        """Check a fresh decision against the model; return the run it granted, if any."""
        job, know = w.job, self.know[w.job]
        assert reply.decision in DECISIONS, f"unknown decision {reply.decision!r}"
        _note(f"{n.owner} {job} {w.plan} -> {reply.decision} fence {reply.fence}")
        if w.trigger is None:
            prev = reply.prev_watermark_s
            if reply.decision == "missed" or (
                reply.decision != "stale" and prev is not None and prev >= w.plan.claim_tick_s
            ):
                _event("a won tick passed while undecided was decided late")
            if reply.decision != "stale":
                self._check_watermark_covers(job, w.plan.mark_tick_s)
            elif w.skewed:
                _event("a claim won after its key expired was refused as stale")
        self._check_abandoned(job, reply)
        self._check_superseded(job, reply)
        if reply.decision == "queued":
            # Queue one keeps the newest: the tick the decision is for (a catch-up's
            # claimed tick, late or not; a trigger's own).
            know.queued, know.queued_known = self._request(n, w).decide_tick_s, True
        if reply.decision == "skipped:paused" and know.paused:
            _event("paused job skipped")
        if reply.decision != "run":
            return None
        if reply.late_from_s and not w.trigger:  # a late backlog: the ticks it took
            ticks = [
                t for t in w.plan.fire_ticks_s if reply.late_from_s <= t <= w.plan.claim_tick_s
            ]
        else:
            ticks = [
                t
                for t in w.plan.fire_ticks_s
                if reply.prev_watermark_s is None or w.trigger or t > reply.prev_watermark_s
            ]
        ticks = ticks or [w.plan.claim_tick_s]
        run = self._grant(
            n,
            job,
            ticks[0],
            w.trigger,
            reply.fence,
            reply.hold_ms,
            orphaned=not node_knows,
            claimed_era=w.era,
        )
        run.blind = blind
        run.more_ticks = ticks[1:]
        return run

    def _grant(
        self,
        n: Node,
        job: str,
        tick: int,
        trigger: str | None,
        fence: int,
        hold_ms: int,
        *,
        orphaned: bool = False,
        claimed_era: int | None = None,
    ) -> Run:
        self._check_fence(job, fence)
        leased = job in LEASED
        run = Run(
            rid=next(self.rids),
            job=job,
            tick=tick,
            trigger=trigger,
            node=n.name,
            incarnation=n.incarnation,
            fence=fence,
            leased=leased,
            granted_ms=self.now_ms,
            start_ms=self.now_ms + hold_ms,
            renewed_ms=self.now_ms,
            era=self.job_era[job],
            claimed_era=self.job_era[job] if claimed_era is None else claimed_era,
            state="orphaned" if orphaned else "active",
            held=hold_ms > 0,
        )
        if hold_ms:
            _event("a grant waited for the hold after lost data")
        self.runs.append(run)
        if leased:
            know = self.know[job]
            know.holder, know.holder_known = run.rid, True
            know.lease_expires_ms = self.now_ms + LEASE_TTL_MS
            know.unreleased, know.unreleased_known = run.rid, True
        self._maybe_start(run)
        return run

    def _maybe_start(self, run: Run) -> None:
        if run.started or run.state != "active" or self.now_ms < run.start_ms:
            return
        n = self.nodes[run.node]
        if run.leased and run.held and not self._renew(n, run, starting=True):
            # Held after lost data, it confirms its lease as it starts: an older run that
            # re-asserted its lease meanwhile took it, and this one never starts.
            _event("a held grant found its lease taken back and did not start")
            return
        run.started = True
        key: tuple[str, int | str] = (run.job, run.trigger or run.tick)
        earlier = self.starts[key]
        if earlier:
            self._excuse_duplicate(run, earlier[-1])
        earlier.append(run)

    def _excuse_duplicate(self, run: Run, before: Run) -> None:
        """A second start of one (job, tick): allowed only inside a data-loss window."""
        what = run.trigger or run.tick
        for index, (era, job, ticks) in enumerate(self.windows):
            # The two runs' claims straddle the loss: one was won before it, the other
            # (or a retried decision of the first) after. Either may start second: a grant
            # held after a wipe starts when its hold ends, after a grant made later.
            straddle = min(before.claimed_era, run.claimed_era) < era <= max(before.era, run.era)
            if job == run.job and what in ticks and straddle:
                ticks.discard(what)
                self.excused["duplicate start after lost data"] += 1
                _event("duplicate start inside a data-loss window (README bound)")
                _note(f"window {index} excuses {run.label()} after {before.label()}")
                return
        raise AssertionError(
            f"{run.job} {'trigger' if run.trigger else 'tick'} {what} started twice: "
            f"{before.label()} and {run.label()}, with no data loss in between to excuse it"
        )

    @rule(node=st.sampled_from(NODES), job=st.sampled_from(list(JOBS)), ok=st.booleans())
    def finish(self, node: str, job: str, ok: bool) -> None:
        """The node's oldest started run of the job ends: record it and release the lease."""
        self._finish(node, job, ok, reply_lost=False)

    @rule(node=st.sampled_from(NODES), job=st.sampled_from(sorted(LEASED)))
    def finish_but_the_reply_is_lost(self, node: str, job: str) -> None:
        """The release runs but its reply is lost; the runner retries it."""
        self._finish(node, job, True, reply_lost=True)

    def _finish(self, node: str, job: str, ok: bool, *, reply_lost: bool) -> None:
        n = self.nodes[node]
        runs = [r for r in self.node_runs(node, job) if r.started]
        if n.status != "up" or not runs:
            return
        run = runs[0]
        record = RunRecord(
            job,
            run.tick,
            node,
            Outcome.OK if ok else Outcome.ERROR,
            run.fence,
            trigger_id=run.trigger,
        )
        if not run.leased:
            self.run_async(n.store.record([record], history=1000))
            self.records_expected[(job, run.fence)] += 1
            run.state = "finished"
            self._continue_allowed(n, run)
            return
        next_tick = run.more_ticks[0] if run.more_ticks else 0
        finish = n.store.finish(
            record,
            history=1000,
            release_fence=run.fence,
            owner=n.owner,
            lease_ttl_ms=LEASE_TTL_MS,
            continue_tick_s=next_tick,
        )
        reply = self.run_async(finish)
        self.records_expected[(job, run.fence)] += 1
        run.state = "finished"
        handed = self._check_release(run, reply, node_sees_it=not reply_lost)
        if reply_lost:
            again = self.run_async(
                n.store.finish(
                    record,
                    history=1000,
                    release_fence=run.fence,
                    owner=n.owner,
                    lease_ttl_ms=LEASE_TTL_MS,
                    continue_tick_s=next_tick,
                    retried=True,
                )
            )
            _event(f"release retried after a lost reply: first {reply.decision}")
            if handed is not None and again.decision == "run" and again.fence == handed.fence:
                handed.state = "active"  # the retry told the node what the first did
                self._maybe_start(handed)
            else:
                assert again.decision == "not_owner", (
                    f"a retried release of {run.label()} answered {again.decision} "
                    f"(first: {reply.decision})"
                )
                if handed is not None:
                    _event("a hand-on was lost with the release's reply (orphaned)")
        self._check_records(job, run.fence)

    def _continue_allowed(self, n: Node, run: Run) -> None:
        """Catch-up ``all`` without a lease: the next tick gets its fence from acquire."""
        if not run.more_ticks:
            return
        tick, rest = run.more_ticks[0], run.more_ticks[1:]
        plan = TickPlan(tick, tick, (tick,), 0)
        request = self._request(n, Won(run.job, plan), mode="trigger")
        (reply,) = self.run_async(n.store.acquire([request]))
        assert not isinstance(reply, Exception), reply
        if reply.decision == "run":
            hold_ms = reply.hold_ms
            nxt = self._grant(n, run.job, tick, None, reply.fence, hold_ms)
            nxt.more_ticks = rest

    def _check_release(self, run: Run, reply: Any, *, node_sees_it: bool = True) -> Run | None:
        """Check a release against the model; return the run it handed on, if any."""
        know = self.know[run.job]
        holder = know.holder == run.rid
        if know.holder_known:
            assert (reply.decision != "not_owner") == holder, (
                f"release by {run.label()} answered {reply.decision}, but the model's "
                f"lease holder is {self._run_label(know.holder)}"
            )
        if reply.decision == "not_owner":
            return None
        know.holder, know.holder_known = None, True
        know.unreleased, know.unreleased_known = None, True
        if reply.decision != "run":
            if know.queued_known and not run.more_ticks:
                assert know.queued is None, (
                    f"release of {run.label()} left queued tick {know.queued} behind"
                )
            return None
        expected = run.more_ticks[0] if run.more_ticks else know.queued
        if run.more_ticks or know.queued_known:
            assert reply.tick_s == expected, (
                f"release of {run.label()} handed on tick {reply.tick_s}, expected {expected}"
            )
        if not run.more_ticks:
            know.queued, know.queued_known = None, True
        handed = self._grant(
            self.nodes[run.node],
            run.job,
            reply.tick_s,
            getattr(reply, "trigger_id", None),
            reply.fence,
            reply.hold_ms,
            orphaned=not node_sees_it,
        )
        handed.more_ticks = run.more_ticks[1:]
        # Handed on under the same lease, without a decision: a blind grant's next run is
        # as blind (README "A wiped Redis": the epoch check at the node's next heartbeat,
        # which this model does not have, is what would hold it).
        handed.blind = run.blind
        return handed

    def _run_label(self, rid: int | None) -> str:
        if rid is None:
            return "nobody"
        return next(r.label() for r in self.runs if r.rid == rid)

    @rule(node=st.sampled_from(NODES))
    def crash(self, node: str) -> None:
        """The process dies: its runs are orphaned, its won claims forgotten."""
        n = self.nodes[node]
        if n.status == "down":
            return
        self.forgotten[node] = [
            (n.owner, w) for w in n.won if w.first is None and not w.trigger
        ] + self.forgotten[node]
        n.status, n.won, n.unsent = "down", [], []
        self.faults_since_probe += 1
        for run in self.live_runs():
            if run.node == node:
                run.state = "orphaned"

    @rule(node=st.sampled_from(NODES))
    def restart(self, node: str) -> None:
        """A new process for the node: it starts from the watermarks (``Scheduler._seed``)."""
        n = self.nodes[node]
        if n.status != "down":
            return
        n.store = self.new_store()
        n.incarnation += 1
        n.status = "up"
        marks = self.run_async(n.store.watermarks(list(JOBS)))
        for job, mark in marks.items():
            head = self.head()
            n.cursor[job] = mark if mark is not None and mark < head else head
        n.triggers_seen = {t for ts in self.triggers.values() for t, _ in ts}

    @rule(node=st.sampled_from(NODES))
    def pause(self, node: str) -> None:
        """The process is frozen (SIGSTOP, a VM pause): it neither renews nor notices."""
        if self.nodes[node].status == "up":
            self.nodes[node].status = "paused"
            self.faults_since_probe += 1

    @rule(node=st.sampled_from(NODES), notices_first=st.booleans())
    def resume(self, node: str, notices_first: bool) -> None:
        """The process runs again; a run whose deadline passed is cancelled at its next
        checkpoint, which may come after it tried to release (``notices_first=False``)."""
        n = self.nodes[node]
        if n.status != "paused":
            return
        n.status = "up"
        if notices_first:
            self._local_deadlines(n)
        for run in self.live_runs():
            if run.node == node:
                self._maybe_start(run)

    @rule(node=st.sampled_from(NODES))
    def cut_off(self, node: str) -> None:
        """The node loses Redis (a partition): renewals fail, its deadline still runs."""
        if self.nodes[node].status == "up":
            self.nodes[node].status = "cut"
            self.faults_since_probe += 1

    @rule(node=st.sampled_from(NODES))
    def reconnect(self, node: str) -> None:
        n = self.nodes[node]
        if n.status != "cut":
            return
        n.status = "up"
        if n.unsent:
            self.run_async(n.store.record(n.unsent, history=1000))
            n.unsent = []

    def _local_deadlines(self, n: Node) -> None:
        for run in self.live_runs():
            overdue = self.now_ms >= run.renewed_ms + LOCAL_DEADLINE_MS
            if run.node == n.name and run.leased and overdue:
                self._lose(n, run, "no successful renewal within lease_ttl")

    def _lose(self, n: Node, run: Run, why: str) -> None:
        run.state = "lost"
        record = RunRecord(run.job, run.tick, n.name, Outcome.LEASE_LOST, run.fence, error=why)
        if n.status == "cut":
            n.unsent.append(record)
        else:
            self.run_async(n.store.record([record], history=1000))

    # -- time -----------------------------------------------------------------------------

    @rule(
        grains=st.integers(1, 7),
        awake=st.lists(st.sampled_from(NODES), unique=True),
        replica_syncs=st.booleans(),
    )
    def time_passes(
        self, grains: int, awake: list[str] | None = None, replica_syncs: bool = False
    ) -> None:
        """Time passes: TTLs shrink, up nodes renew every 2 grains, deadlines fall, and at
        each tick the ``awake`` nodes (in that order) race for it and decide at once. With
        ``replica_syncs`` the replica then copies the primary (and lags from there on)."""
        for _ in range(grains):
            self.now_ms += GRAIN_MS
            self.elapsed_ms += GRAIN_MS  # applied before the next call to Redis
            self._expire_known_leases()
            for n in self.nodes.values():
                if n.status == "up":
                    self._renew_due(n)
                if n.status in ("up", "cut"):
                    self._local_deadlines(n)
            if self.now_ms <= self.early_end_until_ms:
                self.every_node_re_asserts_its_leases_after_the_wipe()
            for run in self.live_runs():
                if self.nodes[run.node].status == "up":
                    self._maybe_start(run)
            if self.now_ms % TICK_MS == 0:
                for name in awake or ():
                    self._claim(self.nodes[name], list(JOBS), late=False)
                    self.decide(name)
        if replica_syncs:
            self._replica_syncs()

    def _expire_known_leases(self) -> None:
        for job in LEASED:
            know = self.know[job]
            if know.holder is None:
                continue
            if self.now_ms >= know.lease_expires_ms:
                know.holder = None  # expired in Redis; the state hash still names it

    def _renew_due(self, n: Node) -> None:
        for run in self.live_runs():
            if run.node != n.name or not run.leased:
                continue
            if self.now_ms - run.renewed_ms < RENEW_EVERY_MS:
                continue
            self._renew(n, run)

    def _renew(self, n: Node, run: Run, *, starting: bool = False) -> bool:
        """Renew ``run``'s lease as its node does (with its owner and tick: after lost data
        the lease is written back); whether the run still holds it."""
        answer = self.run_async(
            n.store.renew(
                run.job,
                run.fence,
                LEASE_TTL_MS,
                owner=Owner.parse(n.owner),
                tick_s=run.tick,
                starting=starting,
            )
        )
        know = self.know[run.job]
        if know.holder_known:
            expected = know.holder == run.rid
            if answer == Renewal.REASSERTED:
                # Written back after lost data: the lease was gone, or held by a grant of
                # the hold that has not started (it must not start now).
                holder = next((r for r in self.runs if r.rid == know.holder), None)
                assert holder is None or not holder.started, (
                    f"{run.label()} re-asserted its lease over {holder.label()}, which runs"
                )
                _event("a lease re-asserted after lost data")
            else:
                assert (answer == Renewal.RENEWED) == expected, (
                    f"renewal by {run.label()} answered {answer}, but the model's lease "
                    f"holder is {self._run_label(know.holder)}"
                )
        if answer in (Renewal.RENEWED, Renewal.REASSERTED):
            run.renewed_ms = self.now_ms
            run.lease_losses.clear()
            if answer == Renewal.REASSERTED:
                # The job's run again: should its lease expire unreleased, the next grant
                # reports it abandoned (DESIGN.md section 4), as any run's.
                know.unreleased, know.unreleased_known = run.rid, True
            know.holder, know.holder_known = run.rid, True
            know.lease_expires_ms = self.now_ms + LEASE_TTL_MS
            return True
        self._lose(n, run, "lease expired or was taken")
        return False

    @rule()
    def every_node_re_asserts_its_leases_after_the_wipe(self) -> None:
        """The nodes saw the epoch change: each one up renews every lease it holds at once
        (a lease the wipe took is written back), and the held grants start now instead of
        waiting out the hold, each confirming its lease first (a re-asserting older run may
        have taken it). Only while no node is paused or cut off: those are still seen, and
        every node that may run must have re-asserted first."""
        held = [r for r in self.live_runs() if not r.started and r.start_ms > self.now_ms]
        if self.last_loss != "wipe" or not held:
            return
        if any(n.status in ("paused", "cut") for n in self.nodes.values()):
            return
        for n in self.nodes.values():
            if n.status != "up":
                continue
            for run in self.live_runs():
                if run.node == n.name and run.leased and run.state == "active":
                    self._renew(n, run)
        for run in held:
            if run.state == "active" and self.nodes[run.node].status == "up":
                run.start_ms = self.now_ms
                _event("a held grant started early: every node re-asserted")
                self._maybe_start(run)

    # -- a winner that died: the takeover ----------------------------------------------------

    @rule(taker=st.sampled_from(NODES), victim=st.sampled_from(NODES))
    def a_dead_winners_claims_are_taken_over(self, taker: str, victim: str) -> None:
        """The victim froze or died between winning claims and deciding them; the taker
        sees its heartbeat expire, takes its undecided claims over (``take_over``, a
        compare-and-set), claims them again with read-back and will decide them. A frozen
        victim that thaws decides them too, late: it must be refused (``_taken_from``)."""
        t, v = self.nodes[taker], self.nodes[victim]
        if taker == victim or t.status != "up" or v.status not in ("paused", "down"):
            return
        if v.status == "paused":
            held = [(v.owner, w) for w in v.won if w.first is None and not w.trigger]
        else:
            held, self.forgotten[victim] = self.forgotten[victim], []
        mine = {(w.job, w.plan.claim_tick_s) for w in t.won if not w.trigger}
        held = [(o, w) for o, w in held if (w.job, w.plan.claim_tick_s) not in mine]
        if not held:
            return
        claims = [Claim(w.job, w.plan.claim_tick_s, CLAIM_TTL_MS) for _o, w in held]
        taken = self.run_async(t.store.take_over(claims, {victim}, t.owner))
        for (owner, w), claim, holder in zip(held, claims, taken, strict=True):
            if holder is None:
                continue
            assert str(holder) == owner, f"{claim}: taken from {holder}, expected {owner}"
            (ours,) = self.run_async(t.store.resolve_claims([claim], t.owner))
            assert ours, f"{claim}: taken over by {t.owner} but not read back as its own"
            w.taken_in_era = self.job_era[w.job]
            era = self.job_era[w.job]
            t.won.append(Won(w.job, w.plan, skewed=w.skewed, era=era, won_ms=self.now_ms))
            _event("an undecided claim of a dead winner was taken over")

    # -- operators ------------------------------------------------------------------------

    @rule(job=st.sampled_from(list(JOBS)), paused=st.booleans())
    def operator_pauses_or_resumes(self, job: str, paused: bool) -> None:
        self.run_async(self.operator.set_paused(job, paused))
        self.know[job].paused = paused

    @rule(job=st.sampled_from(list(JOBS)))
    def operator_triggers(self, job: str) -> None:
        """A manual trigger: every node will race for it at its next wake-up."""
        self.triggers[job].append((f"t{next(self.trigger_ids)}", self.now_ms))

    # -- Redis faults ---------------------------------------------------------------------

    @rule(keeps_data=st.booleans(), early_end=st.booleans())
    def redis_restarts(self, keeps_data: bool, early_end: bool = False) -> None:
        """Redis restarts: with persistence only the script cache is lost; without it,
        everything (a wipe). With ``early_end`` the nodes see the epoch change at their
        next heartbeat: while one lease_ttl lasts, held grants start once every node has
        re-asserted its leases (checked as time passes)."""
        if keeps_data:
            self.restart_keeping_data()
            return
        self.early_end_until_ms = self.now_ms + LEASE_TTL_MS if early_end else -1
        self._data_lost(set(JOBS), "wipe")
        self._apply_elapsed()
        self.reset_server()
        for job in JOBS:
            self.know[job] = Knowledge(paused=False)

    def _replica_syncs(self) -> None:
        """The replica catches up with the primary (it lags again from here)."""
        self._apply_elapsed()
        copies = self.snapshot_data()
        self.snapshots = [*self.snapshots[-2:], (copies, self._copy_knowledge(), self.now_ms)]

    @rule(back=st.integers(0, 2))
    def failover_to_a_lagging_replica(self, back: int) -> None:
        """The replica that took an earlier snapshot becomes the primary."""
        if not self.snapshots:
            return
        copies, know, taken_ms = self.snapshots[-1 - min(back, len(self.snapshots) - 1)]
        self._data_lost(set(JOBS), "failover")
        self._apply_elapsed()
        # A replica keeps each expiry as an instant (Redis 7 replicates PXAT; PostgreSQL
        # copies the rows, whose expiry columns are instants): what expired on the primary
        # since the replica's copy expired on the replica too.
        self.restore_data(copies, self.now_ms - taken_ms)
        self.know = {job: dataclasses.replace(k) for job, k in know.items()}
        for job in JOBS:
            # Leases in the snapshot were renewed since: what Redis holds is uncertain.
            self.know[job].holder_known = False
            self.know[job].unreleased_known = False
            self.know[job].queued_known = False

    @rule(
        job=st.sampled_from(list(JOBS)),
        key=st.sampled_from(KEY_KINDS),
        kind=st.sampled_from(redis_state.GARBAGE_KINDS),
    )
    def garbage_lands_under_a_key(self, job: str, key: str, kind: str) -> None:
        """Garbage lands in one part of a job's data (the kinds are the backend's: Redis
        types; PostgreSQL values the schema allows, see postgres_state.py)."""
        self._garbage_lands(job, key, kind)

    def _garbage_lands(self, job: str, key: str, kind: str) -> None:
        if key != "claim":
            self._data_lost({job}, f"garbage under {key}")
        self._apply_elapsed()
        self.put_garbage(job, key, kind)
        know = self.know[job]
        if key == "lease":
            know.holder_known = False
        if key in ("pending",):
            know.queued_known = False
        if key == "state":
            know.unreleased_known = False
            know.paused = False

    def _data_lost(self, jobs: set[str], why: str) -> None:
        """Open a duplicate window for the ticks any node may still attempt or is deciding."""
        self.era += 1
        self.last_loss = why
        self.faults_since_probe += 1
        head = self.head()
        for job in jobs:
            for run in self.live_runs(job):
                run.lease_losses.add(why)
            self.job_era[job] = self.era
            oldest = max(TICK_BASE + 1, head - WINDOW_TICKS - 2)
            in_flight: set[int | str] = set(range(oldest, head + 1))
            in_flight |= {t for t, _ in self.triggers[job]}
            # Claims won and not yet decided are in flight too, however old their tick (a
            # node whose clock is behind beyond the tolerance holds an old one).
            in_flight |= {
                t
                for n in self.nodes.values()
                for w in n.won
                if w.job == job and not w.trigger
                for t in (w.plan.claim_tick_s, *w.plan.fire_ticks_s)
            }
            self.windows.append((self.era, job, in_flight))
            self.know[job].holder_known = False
            self.know[job].queued_known = False
            self.know[job].unreleased_known = False
            self.watermark_seen.pop(job, None)
        _event(f"data lost: {why}")

    def _copy_knowledge(self) -> dict[str, Knowledge]:
        return {job: dataclasses.replace(k) for job, k in self.know.items()}

    # -- the contract, checked as things happen ---------------------------------------------

    def _check_fence(self, job: str, fence: int) -> None:
        """Every fence is above every fence this job had before, across wipes and failovers."""
        assert fence > self.max_fence[job], (
            f"{job}: fence {fence} handed out after fence {self.max_fence[job]} "
            f"(fences so far: {self.fences[job][-5:]})"
        )
        self.max_fence[job] = fence
        self.fences[job].append(fence)

    def _check_watermark_covers(self, job: str, mark: int) -> None:
        self._apply_elapsed()
        value = self.read_watermark(job)
        assert value is not None, f"{job}: decided tick {mark} but the watermark is gone"
        assert int(value) >= mark, f"{job}: decided tick {mark} but the watermark reads {value!r}"

    def _check_abandoned(self, job: str, reply: AcquireReply) -> None:
        know = self.know[job]
        if reply.abandoned_fence:
            reported = [r for r in self.runs if r.job == job and r.fence == reply.abandoned_fence]
            assert reported, f"{job}: abandoned fence {reply.abandoned_fence} was never granted"
            if know.unreleased_known:
                assert know.unreleased == reported[0].rid, (
                    f"{job}: reported {reported[0].label()} abandoned, expected "
                    f"{self._run_label(know.unreleased)}"
                )
            know.unreleased, know.unreleased_known = None, True
            _event("an abandoned run was reported")
        elif (
            reply.decision == "run"
            and know.unreleased_known
            and know.unreleased is not None
            and know.holder is None
            and know.holder_known
        ):
            raise AssertionError(
                f"{job}: the lease of {self._run_label(know.unreleased)} expired without "
                "release, and the next grant did not report it abandoned"
            )

    def _check_superseded(self, job: str, reply: AcquireReply) -> None:
        know = self.know[job]
        if reply.superseded_tick_s:
            if know.queued_known:
                assert reply.superseded_tick_s == know.queued, (
                    f"{job}: superseded tick {reply.superseded_tick_s}, but tick "
                    f"{know.queued} was the one queued"
                )
            know.queued, know.queued_known = None, True
            _event("a queued tick was superseded (and reported)")

    # -- the contract, checked after every step ---------------------------------------------

    @invariant()
    def the_contract_holds(self) -> None:
        """After every step: the lease Redis holds is the one the model expects, leased
        runs do not overlap, the watermark has not moved back, the queued tick is there."""
        if not hasattr(self, "loop"):
            return
        self._apply_elapsed()
        leases, pttls, marks, pending = self.read_state()
        for job in LEASED:
            know = self.know[job]
            if know.holder_known:
                expected = None
                if know.holder is not None:
                    expected = next(r.fence for r in self.runs if r.rid == know.holder)
                assert leases[job] == expected, (
                    f"{job}: Redis lease fence {leases[job]}, the model expects "
                    f"{self._run_label(know.holder)}"
                )
            else:
                # After lost data whatever Redis holds is the truth from here on.
                fence = leases[job]
                know.holder = next(
                    (r.rid for r in self.runs if r.job == job and r.fence == fence), None
                )
                know.holder_known = fence is None or know.holder is not None
                know.lease_expires_ms = self.now_ms + max(0, pttls[job])
            self._check_no_overlap(job)
        for job in JOBS:
            era, mark = self.job_era[job], marks[job]
            seen = self.watermark_seen.get(job)
            if seen is not None and seen[0] == era and seen[1] is not None:
                moved_back = mark is None or mark < seen[1]
                assert not moved_back, (
                    f"{job}: watermark moved back from {seen[1]} to {mark} with no data lost"
                )
            self.watermark_seen[job] = (era, mark)
        know = self.know["j-queue"]
        if know.queued_known:
            assert pending == know.queued, (
                f"j-queue: Redis has tick {pending} queued, the model expects {know.queued}"
            )
        else:
            know.queued, know.queued_known = pending, True

    def _entitled(self, run: Run) -> bool:
        """Alive as far as its own node can tell: not crashed, its deadline not passed."""
        return (
            run.state == "active"
            and self.nodes[run.node].status != "down"
            and self.now_ms < run.renewed_ms + LOCAL_DEADLINE_MS
        )

    def _check_no_overlap(self, job: str) -> None:
        running = [r for r in self.live_runs(job) if r.started and self._entitled(r)]
        if len(running) < 2:
            return
        newest = max(running, key=lambda r: r.fence)
        for older in running:
            if older is newest:
                continue
            if JOBS[job] == "replace":
                continue  # replaced: its next renewal fails (it is at most 2 grains away)
            if "wipe" in older.lease_losses and newest.blind:
                # README "A wiped Redis", the limit: a node that has seen no fence of the
                # job cannot tell a wiped job from a new one; the epoch check holds it at
                # its next heartbeat, which this model does not have.
                self.excused["overlap: a node without evidence met a wipe"] += 1
                _event("overlap after a wipe met by a node with no evidence (README limit)")
                continue
            if "failover" in older.lease_losses:
                # A failover to a replica without the lease: nothing in Redis says data was
                # lost when no node remembers a higher fence (asynchronous replication).
                self.excused["overlap after a lossy failover"] += 1
                _event("overlap after lost data (excused: asynchronous replication)")
                continue
            raise AssertionError(
                f"{job} ({JOBS[job]}): {older.label()} and {newest.label()} run at once"
            )

    def _check_records(self, job: str, fence: int) -> None:
        """A finished run's record is in the history exactly once."""
        records = self.run_async(self.operator.history(job, 50))
        ended = (Outcome.OK, Outcome.ERROR)
        found = sum(1 for r in records if r.fence == fence and r.outcome in ended)
        assert found == self.records_expected[(job, fence)] == 1, (
            f"{job}: the record of fence {fence} is in the history {found} times"
        )

    # -- liveness ---------------------------------------------------------------------------

    @precondition(lambda self: self.faults_since_probe > 0)
    @rule(job=st.sampled_from(list(JOBS)))
    def a_job_never_stays_stuck(self, job: str) -> None:
        """From any state: a lease passes, the job is resumed, ticks come; it runs again.

        A job counts as running when a run of it is started and alive; the new run then
        finishes, and its record must land.
        """
        self.faults_since_probe = 0
        self.time_passes(LEASE_TTL_MS // GRAIN_MS)
        self.operator_pauses_or_resumes(job, False)
        probe = self.nodes["a"]
        if probe.status == "down":
            self.restart("a")
        elif probe.status == "paused":
            self.resume("a", notices_first=True)
        elif probe.status == "cut":
            self.reconnect("a")
        for attempt in range(3):
            self.time_passes(TICK_MS // GRAIN_MS)
            before = len(self.runs)
            self.claim("a", job, late=False)
            self.decide("a")
            mine = [r for r in self.runs[before:] if r.job == job and r.node == "a"]
            if mine and not mine[0].started:
                self.time_passes(-(-(mine[0].start_ms - self.now_ms) // GRAIN_MS))
            if mine and mine[0].started and mine[0].state == "active":
                self.finish("a", job, ok=True)
                _event(f"stuck probe: a new run on attempt {attempt}")
                return
            if any(r.started and self._entitled(r) for r in self.live_runs(job)):
                _event("stuck probe: a run is alive")
                return
        raise AssertionError(f"{job}: still not running after a lease and three ticks")


def _event(text: str) -> None:
    """Count what happened for ``--hypothesis-show-statistics`` (not outside hypothesis:
    the regression tests replay steps without it)."""
    if currently_in_test_context():
        hypothesis.event(text)


def _note(text: str) -> None:
    if currently_in_test_context():
        hypothesis.note(text)


class RedisProtocolModel(ProtocolModel):
    """The model on a Redis server; subclasses say which (see ``make_clients``)."""

    def make_clients(self) -> tuple[Any, Any]:
        """An async client for the stores, a sync one of the same server for the model."""
        raise NotImplementedError

    def open_backend(self) -> None:
        self.client, self.raw = self.make_clients()

    def close_backend(self) -> None:
        self.run_async(self.client.aclose())
        self.raw.close()

    def reset_server(self) -> None:
        self.raw.flushall()
        self.raw.script_flush()

    def new_store(self) -> Store:
        store = Store(self.client, NAMESPACE)
        apply_mutation(store)
        return store

    @property
    def keys(self) -> Any:
        return self.operator.keys

    def pass_time(self, elapsed_ms: int) -> None:
        redis_state.shorten_ttls(self.raw, NAMESPACE, elapsed_ms)

    def restart_keeping_data(self) -> None:
        redis_state.flush_scripts(self.raw)

    def snapshot_data(self) -> list[redis_state.KeyCopy]:
        return redis_state.snapshot(self.raw, NAMESPACE)

    def restore_data(self, copy: Any, elapsed_ms: int) -> None:
        redis_state.restore(self.raw, NAMESPACE, copy, elapsed_ms=elapsed_ms)
        redis_state.flush_scripts(self.raw)

    def put_garbage(self, job: str, key: str, kind: str) -> None:
        name = {
            "lease": self.keys.lease(job),
            "fence": self.keys.fence(job),
            "last": self.keys.last(job),
            "pending": self.keys.pending(job),
            "state": self.keys.state(job),
            "runs": self.keys.runs(job),
            "claim": self.keys.claim(job, self.head() + 1),
        }[key]
        redis_state.put_garbage(self.raw, name, kind)

    def read_watermark(self, job: str) -> Any:
        return self.raw.get(self.keys.last(job))

    def read_state(
        self,
    ) -> tuple[dict[str, int | None], dict[str, int], dict[str, int | None], int | None]:
        """One round trip (MGET, HGETs, PTTLs).

        A key holding something else (garbage) reads as absent.
        """
        pipe = self.raw.pipeline(transaction=False)
        jobs = list(JOBS)
        # MGET reads a key of another type as nil: no error to sort out.
        pipe.mget([self.keys.last(job) for job in jobs] + [self.keys.pending("j-queue")])
        for job in jobs:
            pipe.hget(self.keys.lease(job), "fence")
        resync = [job for job in jobs if not self.know[job].holder_known]
        for job in resync:
            pipe.pttl(self.keys.lease(job))
        replies = pipe.execute(raise_on_error=False)
        values = [_int_or_none(r) for r in replies[0]]
        marks = dict(zip(jobs, values, strict=False))
        leases = {job: _int_or_none(r) for job, r in zip(jobs, replies[1:], strict=False)}
        pttls = dict.fromkeys(jobs, 0)
        for job, ttl in zip(resync, replies[1 + len(jobs) :], strict=True):
            pttls[job] = _int_or_none(ttl) or 0
        return leases, pttls, marks, values[-1]


class FakeRedisProtocolModel(RedisProtocolModel):
    """The model on fakeredis (with Lua): a new server for every example."""

    def make_clients(self) -> tuple[Any, Any]:
        server = fakeredis.FakeServer()
        return fakeredis.FakeAsyncRedis(server=server), fakeredis.FakeRedis(server=server)


def _int_or_none(raw: Any) -> int | None:
    if isinstance(raw, Exception) or raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None
