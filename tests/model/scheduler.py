"""A model of the scheduler: real agents' tick loops on a fake clock, checked from the records.

A hypothesis state machine runs a fleet of up to three real :class:`cronrace.Agent` (their
tick loops, runners, leases, outboxes and control readers, unchanged) in one event loop on
one :class:`~cronrace.testing.FakeClock`, against one embedded store (fakeredis with Lua)
that reads the same clock (tests/model/sim.py). Its rules are what happens to a fleet:
time passes; a node freezes for longer than a lease while the others go on, and wakes
late; Redis goes down, or executes calls whose answers never arrive, for as long as the
machine says; nodes join, stop gracefully or by force (a second stop), crash, and restart;
an operator triggers a job. The two jobs draw their overlap policy (skip, queue_one,
replace, allow), their catch-up policy (skip, latest, all) and how long a run lasts.

Every handler writes to a witness outside the store. After every step: no tick or
trigger started twice, and none before its tick. At the end, with Redis back and every
node thawed, a node runs until every backlog is decided, the fleet stops gracefully, and
each job's ticks since its first decision are counted from the run records: each one
has exactly one decision record (granted, skipped, queued, or a missed range that counts
it), up to the job's cursor, which reached the last tick (I-cursor, docs/design.md section
3), and every run record names a start the witness saw. Crashes included: a node that
dies takes no tick with it, the job's next decision covers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import fakeredis
import hypothesis
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from cronrace import Agent, AgentSettings
from cronrace.errors import RedisUnavailableError
from cronrace.model.job import RunContext
from cronrace.model.policies import Catchup, Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.stores.redis import Store
from cronrace.stores.redis.keys import Keys
from cronrace.stores.values import ClaimOutcome, ClaimReply
from cronrace.testing import FakeClock
from tests.model.mutations import apply_mutation, python_mutation
from tests.model.sim import FAR_S, Network, NodeClock, Process, node_client, server_time_follows

NAMESPACE = "s"
#: A whole minute: both periods below divide it, so every job's first tick is the same.
START_S = 1_700_000_040
LEASE_TTL_S = 20.0
CATCHUP_WINDOW_S = 40.0
MAX_CATCHUP = 2
NODES = ("n1", "n2", "n3")
FINAL_NODE = "n-last"
#: Long enough for every backlog to be decided and every run to finish (the longest lasts
#: 35 s, a queue_one chain ends once nothing is queued).
SETTLE_S = int(CATCHUP_WINDOW_S + 2 * LEASE_TTL_S + 45)
#: The records a decision writes for the ticks it covers (one per tick, or a range).
DECIDED = {
    Outcome.GRANTED,
    Outcome.SKIPPED_OVERLAP,
    Outcome.SKIPPED_PAUSED,
    Outcome.QUEUED,
    Outcome.MISSED,
    Outcome.DATA_LOST,
}
RAN = {Outcome.OK, Outcome.ERROR}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class JobSpec:
    name: str
    every_s: int
    overlap: Overlap
    catchup: Catchup
    duration_s: int


def job_spec(name: str, every_s: int) -> st.SearchStrategy[JobSpec]:
    return st.builds(
        JobSpec,
        name=st.just(name),
        every_s=st.just(every_s),
        overlap=st.sampled_from(Overlap),
        catchup=st.sampled_from(Catchup),
        duration_s=st.sampled_from([0, 4, 12, 35]),
    )


@dataclass(frozen=True)
class Start:
    """A handler started: the witness the checks read, kept outside the store."""

    job: str
    tick_s: int
    trigger_id: str | None
    node: str
    fence: int
    at_s: float


@dataclass
class Node:
    name: str
    process: Process
    agent: Agent
    host: asyncio.Task[None] | None = None
    stopping: bool = False
    error: BaseException | None = None
    #: Freeze right after the next won claim of a tick, before its decision is sent.
    freeze_on_win: bool = False
    #: Its heartbeats fail (refused) while its other calls go through.
    beats_fail: bool = False

    @property
    def done(self) -> bool:
        return self.host is None or self.host.done()

    @property
    def running(self) -> bool:
        return not self.done and not self.process.killed


def checked(step: F) -> F:
    """Note a failing step, so that teardown does not pile its own checks on top."""

    @functools.wraps(step)
    def run(self: SchedulerModel, *args: Any, **kwargs: Any) -> Any:
        self.steps += 1
        try:
            return step(self, *args, **kwargs)
        except BaseException:
            self.failed = True
            raise

    return run  # type: ignore[return-value]


class SchedulerModel(RuleBasedStateMachine):
    #: The agents' heartbeat: long by default (no member ever goes silent in a step, so
    #: no claim is taken over); a regression case may shorten it before the fleet starts.
    heartbeat_s = 60.0
    #: ``racers``: every node races every tick; :class:`RacersModel` races k of them.
    racers = "all"
    #: ``racer_groups``: each job placed alone; :class:`GroupedRacersModel` places both
    #: jobs in one group.
    racer_groups = "jobs"

    def __init__(self) -> None:
        super().__init__()
        self.failed = False
        self.steps = 0  # rules and invariant checks run (counted for the statistics)
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock(start_s=START_S)
        self._server_time = server_time_follows(self.clock)
        self._server_time.__enter__()
        self._undo_mutation = python_mutation()
        self.server = fakeredis.FakeServer()
        self.network = Network(self.server)
        self.raw = fakeredis.FakeRedis(server=self.server)
        self.operator = Store(fakeredis.FakeAsyncRedis(server=self.server), NAMESPACE)
        self.keys = Keys(NAMESPACE)
        self.specs: dict[str, JobSpec] = {}
        self.nodes: dict[str, Node] = {}
        self.graveyard: list[Node] = []
        self.starts: list[Start] = []
        self.seen: Counter[tuple[str, int | str]] = Counter()
        self.first_decided: dict[str, int] = {}
        self.triggers: list[str] = []

    # -- plumbing ----------------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def settle(self) -> None:
        self.run(self.clock.advance(0))

    def stop(self, node: Node) -> None:
        """``agent.stop()``, called in the agents' event loop (it cancels scopes there)."""

        async def stop() -> None:
            node.agent.stop()

        self.run(stop())

    def _handler(self, node: str, clock: NodeClock, duration_s: int) -> Any:
        async def handler(ctx: RunContext) -> None:
            self.starts.append(
                Start(ctx.job, ctx.tick_s, ctx.trigger_id, node, ctx.fence, self.clock.time())
            )
            if duration_s:
                await clock.sleep(duration_s)

        return handler

    def _start(self, name: str) -> None:
        old = self.nodes.get(name)
        if old is not None:
            self.graveyard.append(old)
        process = Process()
        clock = NodeClock(self.clock, process)
        settings = AgentSettings(
            redis_url="memory://model",
            node_id=name,
            namespace=NAMESPACE,
            clock="local",
            heartbeat_s=self.heartbeat_s,
            racers=self.racers,
            racer_groups=self.racer_groups,
            # Stopping is driven by the fake clock: runs end, releases give up, on it.
            shutdown_grace_s=3600.0,
        )
        agent = Agent(settings=settings, clock=clock)
        store = Store(node_client(self.network, process), NAMESPACE)
        apply_mutation(store)
        self._freeze_on_win(name, store)
        self._fail_beats(name, store)
        agent._store = store  # the shared embedded store, through this node's process
        for spec in self.specs.values():
            agent.add_job(
                self._handler(name, clock, spec.duration_s),
                f"@every {spec.every_s}s",
                name=spec.name,
                overlap=spec.overlap,
                catchup=spec.catchup,
                lease_ttl=LEASE_TTL_S,
                catchup_window=CATCHUP_WINDOW_S,
                max_catchup=MAX_CATCHUP,
            )
        node = Node(name, process, agent)
        node.host = self.loop.create_task(self._host(node))
        self.nodes[name] = node
        # Start-up waits a millisecond of real time on the control stream (a blocking read).
        self.run(self._until(lambda: agent.ready or node.done, timeout_s=10))
        assert agent.ready, f"{name} did not start: {node.error!r}"
        self.settle()

    def _freeze_on_win(self, name: str, store: Store) -> None:
        """Let :meth:`node_freezes_after_its_next_win` stop the node between a won claim
        and its decision (the window of a winner that stalls or dies there)."""
        claim_each = store.claim_each

        async def claim_and_maybe_freeze(
            claims: Any, owner: Any, **kwargs: Any
        ) -> list[ClaimReply]:
            replies = await claim_each(claims, owner, **kwargs)
            node = self.nodes.get(name)
            won = any(
                r.outcome is ClaimOutcome.WON and c.trigger_id is None
                for c, r in zip(claims, replies, strict=True)
            )
            if node is not None and node.freeze_on_win and won:
                node.freeze_on_win = False
                node.process.freeze()
            return replies

        store.claim_each = claim_and_maybe_freeze  # type: ignore[method-assign]

    def _fail_beats(self, name: str, store: Store) -> None:
        """Let :meth:`node_heartbeats_fail` refuse the node's heartbeats alone."""
        heartbeat = store.heartbeat

        async def maybe_refused(*args: Any, **kwargs: Any) -> Any:
            node = self.nodes.get(name)
            if node is not None and node.beats_fail:
                raise RedisUnavailableError("heartbeat refused (the model's fault)")
            return await heartbeat(*args, **kwargs)

        store.heartbeat = maybe_refused  # type: ignore[method-assign]

    async def _until(self, condition: Callable[[], bool], *, timeout_s: float) -> None:
        deadline = self.loop.time() + timeout_s
        while not condition() and self.loop.time() < deadline:
            await self.clock.advance(0)
            await asyncio.sleep(0.001)

    async def _host(self, node: Node) -> None:
        try:
            await node.agent.run()
        except BaseException as exc:
            if not node.process.buried:
                node.error = exc

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.running and not n.stopping]

    # -- the fleet ---------------------------------------------------------------------

    @initialize(
        jobs=st.tuples(job_spec("j1", 10), job_spec("j2", 15)),
        nodes=st.integers(1, len(NODES)),
    )
    @checked
    def define_fleet(self, jobs: tuple[JobSpec, ...], nodes: int) -> None:
        """Start the fleet and let it decide each job's first tick with nothing wrong:
        the ticks counted at the end are the ones after it."""
        self.specs = {spec.name: spec for spec in jobs}
        for name in NODES[:nodes]:
            self._start(name)
        self.run(self.clock.advance(max(spec.every_s for spec in jobs)))
        for name in self.specs:
            mark = self.raw.get(self.keys.cursor(name))
            assert mark is not None, f"{name}: no first decision"
            self.first_decided[name] = int(mark)

    @rule(seconds=st.integers(1, 60))
    @checked
    def time_passes(self, seconds: int) -> None:
        self.run(self.clock.advance(seconds))

    @rule(name=st.sampled_from(NODES))
    @checked
    def node_freezes(self, name: str) -> None:
        """The node stops (SIGSTOP, a GC pause, a migrated VM) while the others go on."""
        node = self.nodes.get(name)
        if node is None or not node.running:
            return
        node.process.freeze()

    @rule(name=st.sampled_from(NODES))
    @checked
    def node_freezes_after_its_next_win(self, name: str) -> None:
        """The node will freeze right after its next won claim, before deciding it."""
        node = self.nodes.get(name)
        if node is None or not node.running:
            return
        node.freeze_on_win = True

    @rule(name=st.sampled_from(NODES), failing=st.booleans())
    @checked
    def node_heartbeats_fail(self, name: str, failing: bool) -> None:
        """The node's heartbeats fail (or go through again) while its claims, decisions
        and releases go through: a process that is up, counted departed by the others."""
        node = self.nodes.get(name)
        if node is None or not node.running:
            return
        node.beats_fail = failing

    @rule(name=st.sampled_from(NODES))
    @checked
    def node_thaws(self, name: str) -> None:
        """A frozen node goes on where it stopped: its sleepers wake late, together."""
        node = self.nodes.get(name)
        if node is None or not node.process.frozen or node.process.killed:
            return
        node.process.thaw()
        self.settle()

    @rule(name=st.sampled_from(NODES))
    @checked
    def node_crashes(self, name: str) -> None:
        """SIGKILL: the node never acts again (frozen for good)."""
        node = self.nodes.get(name)
        if node is None or not node.running:
            return
        node.process.kill()
        _event("a node crashed (no tick may be lost for it)")
        _event("a node crashed")

    @rule(name=st.sampled_from(NODES), forced=st.booleans())
    @checked
    def node_stops(self, name: str, forced: bool) -> None:
        """SIGTERM (gracefully: the wake-up in hand is decided, runs finish); a second one
        (forced) cancels at once, still recording what was won."""
        node = self.nodes.get(name)
        if node is None or not node.running or node.process.frozen:
            return
        if not node.stopping:
            self.stop(node)
            node.stopping = True
        if forced:
            self.stop(node)
        if not self.network.reachable:
            _event("a node stopped while Redis was unreachable")
        self.settle()

    @precondition(lambda self: self.network.reachable)
    @rule(name=st.sampled_from(NODES))
    @checked
    def node_starts(self, name: str) -> None:
        """A node joins, or a stopped or crashed one restarts (a new process)."""
        node = self.nodes.get(name)
        if node is not None and node.running:
            return
        self._start(name)

    @rule(kind=st.sampled_from(["down", "answers_lost"]))
    @checked
    def redis_becomes_unreachable(self, kind: str) -> None:
        if kind == "down":
            self.network.down = True
        else:
            self.network.answers_lost = True
        for node in self.nodes.values():
            if node.stopping and not node.done:
                _event("a node was stopping when Redis became unreachable")
        self.settle()

    @rule()
    @checked
    def redis_comes_back(self) -> None:
        self.network.heal()
        self.settle()

    @precondition(lambda self: self.network.reachable)
    @rule(job=st.sampled_from(["j1", "j2"]))
    @checked
    def operator_triggers(self, job: str) -> None:
        self.triggers.append(self.run(self.operator.request_trigger(job)))
        self.settle()

    # -- the contract ------------------------------------------------------------------

    @invariant()
    @checked
    def nothing_fires_twice_or_early(self) -> None:
        for node in [*self.nodes.values(), *self.graveyard]:
            assert node.error is None, f"{node.name}'s agent failed: {node.error!r}"
        new = self.starts[sum(self.seen.values()) :]
        for start in new:
            key = (start.job, start.trigger_id or start.tick_s)
            self.seen[key] += 1
            what = f"trigger {start.trigger_id}" if start.trigger_id else f"tick {start.tick_s}"
            assert self.seen[key] == 1, (
                f"{start.job} {what} started twice: "
                f"{[s for s in self.starts if (s.job, s.trigger_id or s.tick_s) == key]}"
            )
            assert start.at_s >= start.tick_s, (
                f"{start.job} {what} started at {start.at_s:.3f}, before its tick"
            )

    def every_tick_is_accounted_for(self) -> None:
        """Heal everything, let a node decide every backlog, stop the fleet gracefully,
        then count each job's ticks since its first decision from the records."""
        self.network.heal()
        for node in self.nodes.values():
            node.freeze_on_win = False
            node.beats_fail = False
            node.process.thaw()
        self.settle()
        if not self.live():
            self._start(FINAL_NODE)
        self.run(self.clock.advance(SETTLE_S))
        stopping = [n for n in [*self.nodes.values(), *self.graveyard] if n.running]
        for node in stopping:
            if not node.stopping:
                self.stop(node)
                node.stopping = True
        stopped_s = int(self.clock.time())
        for _ in range(200):
            if all(n.done for n in stopping):
                break
            self.run(self.clock.advance(5))
        unfinished = [n.name for n in stopping if not n.done]
        assert not unfinished, f"a graceful stop did not finish: {unfinished}"
        self.nothing_fires_twice_or_early()
        for job, spec in self.specs.items():
            records = self.run(self.operator.history(job, 100_000))
            self._check_job(spec, records, stopped_s)

    def _check_job(self, spec: JobSpec, records: list[RunRecord], stopped_s: int) -> None:
        """I-cursor, checked from the records: every tick after the first decision up to
        the job's cursor has exactly one decision record (a tick's own, or a range that
        counts it), the cursor reached the last tick before the stop, and every run record
        names a start the witness saw. Crashes included: a tick is never lost, only
        decided late (or recorded missed)."""
        job = spec.name
        first = self.first_decided[job]
        raw = self.raw.get(self.keys.cursor(job))
        assert raw is not None, f"{job}: no cursor at the end"
        cursor = int(raw)
        last = stopped_s - stopped_s % spec.every_s
        assert cursor >= last - spec.every_s, f"{job}: cursor {cursor} behind the last tick {last}"
        started = {(s.trigger_id or s.tick_s, s.fence) for s in self.starts if s.job == job}
        for r in records:
            if r.outcome in RAN:
                assert (r.trigger_id or r.tick_s, r.fence) in started, (
                    f"{job}: a record says tick {r.tick_s} ran with fence {r.fence}; "
                    "no handler started so"
                )
        window = range(first + spec.every_s, cursor + 1, spec.every_s)
        decided: Counter[int] = Counter()
        # A queued tick that a newer one displaced has two records: its decision (queued)
        # and its result (skipped:overlap); the result is no second decision.
        queued = {r.tick_s for r in records if r.trigger_id is None and r.outcome is Outcome.QUEUED}
        for r in records:
            if r.trigger_id is not None or r.outcome not in DECIDED:
                continue
            if r.outcome is Outcome.SKIPPED_OVERLAP and r.tick_s in queued:
                continue
            if r.outcome in (Outcome.MISSED, Outcome.DATA_LOST):
                covered = [t for t in window if r.tick_s <= t <= max(r.tick_s, r.last_tick_s)]
                if r.outcome is Outcome.MISSED:
                    ticks = range(r.tick_s - r.tick_s % spec.every_s, r.last_tick_s + 1)
                    counted = len([t for t in ticks if t % spec.every_s == 0 and t >= r.tick_s])
                    assert counted == r.count, f"{job}: a missed record counts {r.count} of {r}"
                decided.update(covered)
            else:
                decided[r.tick_s] += 1
        fired = {s.tick_s for s in self.starts if s.job == job and not s.trigger_id}
        # A run's tick was decided granted, or queued and handed on to a run.
        granted = {r.tick_s for r in records if r.outcome in (Outcome.GRANTED, Outcome.QUEUED)}
        summary = (
            f"{job} ({spec.overlap.value}, catch-up {spec.catchup.value}): ticks after {first} "
            f"up to the cursor {cursor}: {len(window)}; fired {len(fired & set(window))}"
        )
        _note(summary)
        twice = sorted(t for t in window if decided[t] > 1)
        assert not twice, f"{job}: ticks decided twice: {twice}; {summary}"
        lost = sorted(t for t in window if not decided[t])
        assert not lost, f"ticks without a decision record: {lost}; {summary}"
        unrecorded = sorted(t for t in fired if t > first and t not in granted)
        assert not unrecorded, (
            f"{job}: ticks started without a granted or queued record: {unrecorded}"
        )

    def teardown(self) -> None:
        low = self.steps // 20 * 20
        _event(f"steps (rules and checks) per example: {low}-{low + 19}")
        try:
            if not self.failed and self.specs:
                self.every_tick_is_accounted_for()
        finally:
            self._clear_away()

    def _clear_away(self) -> None:
        try:
            nodes = [*self.nodes.values(), *self.graveyard]
            for node in nodes:
                node.process.bury()
                if node.host is not None:
                    node.host.cancel()
            hosts = [n.host for n in nodes if n.host is not None and not n.host.done()]
            if hosts:
                # Whatever a buried node still waits for on the fake clock is over now.
                self.run(self.clock.set_time(self.clock.time() + FAR_S))
                self.run(asyncio.wait(hosts, timeout=10))
            stuck = [n.name for n in nodes if not n.done]
            assert not stuck, f"agents did not stop when cancelled: {stuck}"
            self.run(self.operator.aclose())
            for node in nodes:
                with contextlib.suppress(Exception):
                    self.run(node.agent.aclose())
            self.raw.close()
        finally:
            self.loop.close()
            self._server_time.__exit__(None, None, None)
            self._undo_mutation()


class RacersModel(SchedulerModel):
    """The same fleet with ``racers = 2``: two of the three nodes race each tick.

    Heartbeats every 2 s, so that a frozen, crashed or unheard node departs within a step
    and the others race again the ticks it was left (orphans), take over the claims it
    won undecided, and re-home its jobs; views differ between nodes while beats fail.
    """

    heartbeat_s = 2.0
    racers = "2"


class GroupedRacersModel(RacersModel):
    """The same fleet with both jobs in one racer group: one pair of nodes races both
    jobs' ticks in a window, so a departure orphans the ticks of both at once, and the
    third node races nothing until it does."""

    racer_groups = "1"


def _event(text: str) -> None:
    if currently_in_test_context():
        hypothesis.event(text)


def _note(text: str) -> None:
    if currently_in_test_context():
        hypothesis.note(text)
