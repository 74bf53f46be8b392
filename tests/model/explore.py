"""An exhaustive, explicit-state checker of the reference protocol (``cronrace/protocol/``).

``python -m tests.model.explore`` explores every interleaving of a small world built on the
reference's pure functions (breadth first, a visited set of hashable world states: the
reference's values are frozen dataclasses) and checks invariants in every state. It prints
its progress to stderr and ``states=<n> violations=<n>`` as its last stdout line; on a
violation it prints the shortest trace to it and exits 1.

The world
---------
One job; ``--nodes`` nodes (2-3); ``--ticks`` ticks of a 4 s period (4, 8, 12); a discrete
clock of whole seconds. Each overlap policy (skip, queue_one, replace, allow) and catch-up
policy (skip, latest, all with ``max_catchup`` 2) is explored in a run of its own
(``--overlap``/``--catchup`` pick some). Nodes behave as the agent will, abstractly:

- At or after a tick a node claims it (``protocol.claim``; an undecided claim lives D = 1 s,
  shorter than the period). A node late for several ticks claims the newest only (its
  decision covers the others). Winning, it plans (cursor, T] with ``protocol.plan`` from the
  cursor it expects (learnt from the ``decided``, ``moved`` and ``covered`` replies; none at
  first: the job began at 0) and sends ``protocol.decide``; on ``moved`` it plans again and
  resends; ``lost`` and ``covered`` end its interest in T; it never decides a tick its own
  cursor is at or past. A loser ranked r (a per-tick rotation of the nodes, r in 1..N)
  claims T again at T + r*D unless its cursor covers T: the recheck, which covers a tick
  whose winner died before deciding when no later tick comes.
- A grant runs: it starts at once, or, held by a wipe hold, waits ``hold_ms`` (renewing
  once, without its owner: an unstarted grant must not re-assert) and starts by a renewal
  with ``starting``. A started run is short (it releases at once) or long (it renews once,
  with its owner and tick, a second before its lease ends, and releases a second before the
  renewed lease ends: past the next tick). ``protocol.release`` hands on the next tick of a
  catch-up grant or the queued one. A run that cannot renew in time stops when its lease
  ends (the agent's own deadline); the next decision records it ``abandoned``. Under
  ``allow`` there is no lease: each fired tick runs apart under its own fence and its end
  appends its result to the history directly (the agent's outbox; the reference has no call
  for it).
- An operator posts one manual trigger (``--triggers``) at the first tick's instant; every
  node claims it once, and the winner decides it (a 4 s window: older, the next tick
  decision sweeps it ``missed``).

A node decides one claim key (a tick, or the trigger) at a time, as the agent pins a job to
a decision without an answer; its runs go on meanwhile. A node that is up makes its claims,
decisions, resends and run steps promptly: time does not pass while one is due (a node late
for them is a frozen one). Time then jumps to the next instant at which anything happens (a
tick, a recheck, a claim, lease or hold running out, a run's planned step, a thaw): between
two such instants no guard of the world changes.

Faults, each at any step (a crash or freeze of a node with nothing to do is the same as one
just before its next step, and only that one is made). ``--faults`` bounds how many happen
on one path (1 by default), and each kind has its own bound (1):

- ``--crashes``: a node stops for good (its runs die with it);
- ``--freezes``: a node takes no step for 2 s (past its undecided claims) or 5 s (past its
  leases, its answers' memos and the next tick) while the others and time move on, then
  resumes; its runs find their deadline passed and stop;
- ``--lost``: a store call (claim, decide, renew, release) is applied but its answer is
  lost; the node sends the same request again (a claim with read-back; a decision with the
  highest fence the node knows by then);
- a claim, a lease or a hold runs out: time passes;
- ``--losses``: the store loses data right after a write: it is wiped (``JobState()``), or a
  failover puts back a replica's copy that lacks that write (the node got its answer). A
  loss later, before the next write, is the same loss followed by steps that do not touch
  the store, so only these are made.

Why these bounds: every fault multiplies the states by the steps it may happen at (on the
small scope, without the trigger: a crash x3, a lost answer x3, a loss x23, a freeze x17,
the trigger x8). One fault per path reaches every rule of the reference that exists for a
fault (a replay, a data loss and its hold, a re-assertion, a tick covered by a recheck, a
grant answered too late); two per path (``--faults 2``) reach their combinations (a lost
answer and then a failover: the replay rule) at ten to twenty times the states.

Invariants
----------
In every state:

- I-cursor: every scheduled tick s with origin < s <= cursor has exactly one decision record
  in the store's history (an outcome of ``DECISION_OUTCOMES``; a ``queued`` tick displaced by
  a newer one gets ``skipped:overlap`` as its result, not as a second decision); a range's
  count is the number of ticks it covers; a trigger has at most one decision record.
- A decision's result is written at most once (per decision record).
- At most one start per tick or trigger, counted in the world, outside the store. A wipe or
  a rollback lets a tick decided before the loss and above the restored cursor (a trigger
  decided before it and outstanding again) start once more: those are exempt, and counted.
- A run starts only with a fence at least as high as any its node knows (a replayed grant
  never starts below a newer fence; ``allow`` fires several fences at once and is left out).
- Fences rise in grant order: every new grant's fence is above every fence granted earlier
  on the path, wipes and rollbacks included.
- No overlap under skip / queue_one: at most one started run believes its lease live, among
  runs the store confirmed (granted, started or renewed) since the last loss. After a loss,
  a run started before it overlaps a run granted after it only until its next renewal, and
  only when the grant could not know of the loss (its caller knew no fence above the store's
  counter, nor, for a tick's decision, a cursor the store had lost: a trigger's decision
  does not look at the cursor); those states are counted.
- No decision without its record: every record a ``decided`` reply names is in the history.

At quiescence (no node can take a step, time past every claim, lease and hold): a fresh node
decides the tick after the window (plans from the store's cursor, resends on ``moved``), so
that the last tick is decided even if every node died and a run whose lease ran out gets its
``abandoned``; then every tick of the window has one decision record (or is at or below
the origin of a store that lost its data, under a ``data_lost`` record), every ``granted`` or
``queued`` tick and trigger has a result, and the trigger has one decision record (unless a
loss took it). A grant under ``allow`` has no lease for the next decision to find: a run
that died (or never started) leaves no result; those are counted, not violations.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from cronrace.model.policies import Catchup, Outcome, Overlap
from cronrace.protocol.values import (
    DECISION_OUTCOMES,
    Answer,
    ClaimKey,
    DecideReply,
    DecideRequest,
    JobState,
    Record,
    Release,
    ReleaseReply,
    ReleaseRequest,
    Renewal,
    RenewRequest,
    Verdict,
    trigger_key,
)
from tests.model.reference_mutations import MUTATIONS, SCOPES, applied

# Through the modules, so that a mutation swapped into them is what runs.
_DECIDE = importlib.import_module("cronrace.protocol.decide")
_LEASE = importlib.import_module("cronrace.protocol.lease")
_PLAN = importlib.import_module("cronrace.protocol.plan")

JOB = "job"
TRIGGER_ID = "t1"
TRIGGER_KEY = trigger_key(TRIGGER_ID)
AUDITOR = "audit:0"

UP, FROZEN, CRASHED = "up", "frozen", "crashed"

#: A run's result, besides a displaced ``queued`` tick's ``skipped:overlap``.
RESULTS = frozenset(Outcome) - DECISION_OUTCOMES


@dataclass(frozen=True, slots=True)
class Scope:
    """The world's size, timings and fault bounds."""

    nodes: int = 2
    ticks: int = 3
    period_s: int = 4
    claim_s: int = 1
    lease_s: int = 3
    memo_s: int = 4
    grace_s: int = 1
    max_catchup: int = 2
    trigger_window_s: int = 4
    freeze_s: tuple[int, ...] = (2, 5)
    trigger_at_s: int = 4
    faults: int = 1
    crashes: int = 1
    freezes: int = 1
    lost: int = 1
    losses: int = 1
    triggers: int = 1
    overlap: Overlap = Overlap.SKIP
    catchup: Catchup = Catchup.LATEST

    @property
    def tick_list(self) -> tuple[int, ...]:
        return tuple(self.period_s * k for k in range(1, self.ticks + 1))

    @property
    def last_s(self) -> int:
        return self.period_s * self.ticks

    @property
    def horizon_s(self) -> int:
        """No path goes on past this (a path cut here is counted, never checked)."""
        return self.last_s + 6 * self.period_s

    def describe(self) -> str:
        return (
            f"nodes={self.nodes} ticks={self.ticks} overlap={self.overlap} "
            f"catchup={self.catchup} crashes={self.crashes} freezes={self.freezes} "
            f"lost={self.lost} losses={self.losses} faults/path={self.faults} "
            f"triggers={self.triggers}"
        )


@dataclass(frozen=True, slots=True)
class Work:
    """The claim key a node is racing or deciding."""

    key: ClaimKey
    deciding: bool = False
    recheck: bool = False
    read_back: bool = False
    resend: DecideRequest | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """A grant a node holds: waiting for a hold, running, or ending."""

    key: ClaimKey
    tick_s: int
    trigger_id: str | None
    fence: int
    ticks_s: tuple[int, ...]
    deadline_ms: int  # the lease's end as the node counts it (0: allow, no lease)
    hold_end_ms: int  # not started until then (0: started)
    renew_ms: int  # its next renewal (0: none planned)
    confirmed: int  # the loss epoch in which the store last confirmed it
    unwarned: bool  # granted after a loss by a caller that could not know of it
    end_ms: int = 0  # when its handler ends (0: started, its length not chosen yet)
    resend: RenewRequest | ReleaseRequest | None = None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    status: str = UP
    cursor: int | None = None
    known_fence: int = 0
    next_index: int = 0
    work: Work | None = None
    trigger_work: Work | None = None
    trigger_done: bool = False
    rechecks: tuple[tuple[int, int], ...] = ()
    runs: tuple[Run, ...] = ()
    thaw_s: int = 0

    @property
    def owner(self) -> str:
        return f"{self.name}:0"


@dataclass(frozen=True, slots=True)
class World:
    now_s: int
    store: JobState
    nodes: tuple[Node, ...]
    seq: int = 0
    starts: tuple[tuple[str, int], ...] = ()
    max_fence: int = 0
    epoch: int = 0
    exempt: frozenset[str] = frozenset()
    crashes: int = 0
    freezes: int = 0
    lost: int = 0
    losses: int = 0
    trigger_at_ms: int | None = None
    trigger_lost: bool = False
    orphans: frozenset[str] = frozenset()


@dataclass(slots=True)
class Step:
    label: str
    world: World
    violation: str | None = None
    #: Seen by no one else and touching no shared state (a node's own bookkeeping).
    local: bool = False


@dataclass(slots=True)
class Stats:
    states: int = 0
    transitions: int = 0
    quiescent: int = 0
    cut: int = 0
    exempt_starts: int = 0
    exempt_overlaps: int = 0
    allow_unrecorded: int = 0
    depth: int = 0


@dataclass(slots=True)
class Found:
    """A violation and the shortest path to it."""

    message: str
    trace: list[str] = field(default_factory=list)


_MISSING = object()


_REPLACERS: dict[type, Any] = {}


def _re(obj, **changes):  # type: ignore[no-untyped-def]
    """``dataclasses.replace``, without its per-call introspection (the search's hot path):
    a function made once per class, reading each field unless it is changed."""
    cls = type(obj)
    fn = _REPLACERS.get(cls)
    if fn is None:
        names = [f.name for f in fields(cls)]
        args = ", ".join(f"{n}=_M" for n in names)
        body = ", ".join(f"o.{n} if {n} is _M else {n}" for n in names)
        scope: dict[str, Any] = {"_M": _MISSING, "cls": cls}
        exec(f"def fn(o, {args}):\n    return cls({body})", scope)  # noqa: S102
        fn = _REPLACERS[cls] = scope["fn"]
    return fn(obj, **changes)


def _key(key: ClaimKey) -> str:
    return str(key)


class Explorer:
    """Breadth-first search over one scope's worlds."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.stats = Stats()
        self.ticks = scope.tick_list

    # -- the world's pieces ---------------------------------------------------------------

    def initial(self) -> World:
        nodes = tuple(Node(f"n{i + 1}") for i in range(self.scope.nodes))
        return self._posted(World(self.ticks[0], JobState(), nodes))

    def _clock(self, w: World) -> tuple[int, int, World]:
        """The store's clock for one call, in ms and µs.

        The µs clock is the step's second plus a millisecond per loss of the store within
        that second: it only floors fences, and only a loss (a counter lost or put back)
        needs the clock to have moved on between two grants. Advancing it with every call
        would tell apart states that differ only in the order of calls that grant nothing.
        """
        return w.now_s * 1000, w.now_s * 1_000_000 + w.seq * 1000, w

    def _rank(self, i: int, tick_s: int) -> int:
        return 1 + (i + tick_s // self.scope.period_s) % self.scope.nodes

    def _with_node(self, w: World, i: int, node: Node) -> World:
        return _re(w, nodes=(*w.nodes[:i], node, *w.nodes[i + 1 :]))

    def _request(self, w: World, node: Node, key: ClaimKey) -> DecideRequest:
        s = self.scope
        common = {
            "job": JOB,
            "owner": node.owner,
            "overlap": s.overlap,
            "lease_ttl_ms": s.lease_s * 1000,
            "claim_ttl_ms": s.memo_s * 1000,
            "known_fence": node.known_fence,
            "trigger_window_ms": s.trigger_window_s * 1000,
        }
        if key == TRIGGER_KEY:
            assert w.trigger_at_ms is not None
            tick = w.trigger_at_ms // 1000
            return DecideRequest(
                tick_s=tick,
                cursor_s=node.cursor,
                from_s=tick,
                fire_s=(tick,),
                missed=(),
                trigger_id=TRIGGER_ID,
                **common,
            )
        assert isinstance(key, int)
        return self.plan_request(node.cursor, key, w.now_s, **common)

    def plan_request(
        self, cursor: int | None, tick_s: int, now_s: int, **common: object
    ) -> DecideRequest:
        s = self.scope
        from_s = cursor if cursor is not None else 0
        due = [t for t in (*self.ticks, self.ticks[-1] + s.period_s) if from_s < t <= tick_s]
        fire, missed = _PLAN.plan(
            s.catchup,
            due_s=due,
            on_time=now_s - tick_s <= s.grace_s,
            expired=None,
            max_catchup=s.max_catchup,
        )
        return DecideRequest(
            tick_s=tick_s,
            cursor_s=cursor,
            from_s=from_s,
            fire_s=fire,
            missed=missed,
            **common,
        )

    # -- successors -------------------------------------------------------------------------

    def successors(self, w: World) -> tuple[list[Step], bool]:
        """Every step from ``w``, and whether ``w`` is quiescent."""
        steps: list[Step] = []
        urgent = False
        node_steps = 0
        for i, node in enumerate(w.nodes):
            if node.status == CRASHED:
                continue
            if node.status == FROZEN:
                if w.now_s >= node.thaw_s:
                    return [self._thaw(w, i)], False
                continue
            mine, node_urgent = self._node_steps(w, i)
            local = [step for step in mine if step.local]
            if local:
                # Partial-order reduction: a node's own bookkeeping commutes with every other
                # step and no invariant reads it before it is done: take it first, alone.
                return local, False
            steps += mine
            node_steps += len(mine)
            urgent = urgent or node_urgent
            s = self.scope
            # A node with nothing to do that crashes or freezes is the node that does so
            # right before its next step: only the latter is explored.
            if not mine or self._faults(w) >= s.faults:
                continue
            if w.crashes < s.crashes:
                steps.append(self._crash(w, i))
            if w.freezes < s.freezes:
                for pause in s.freeze_s:
                    frozen = _re(node, status=FROZEN, thaw_s=w.now_s + pause)
                    steps.append(
                        Step(
                            f"{node.name} freezes for {pause} s",
                            _re(self._with_node(w, i, frozen), freezes=w.freezes + 1),
                        )
                    )
        steps += self._losses(w, steps)
        advance = None if urgent else self._advance(w)
        if advance is not None:
            steps.append(advance)
        quiescent = node_steps == 0 and advance is None and not self._pending(w)
        return steps, quiescent

    def _node_steps(self, w: World, i: int) -> tuple[list[Step], bool]:
        node = w.nodes[i]
        steps: list[Step] = []
        urgent = False
        now_ms = w.now_s * 1000
        # The job's claim key in hand, else the newest tick due, else a due recheck.
        if node.work is not None:
            urgent = True
            steps += self._work_steps(w, i, node.work, trigger=False)
        else:
            due = [t for t in self.ticks[node.next_index :] if t <= w.now_s]
            recheck = next(((t, at) for t, at in node.rechecks if at <= w.now_s), None)
            if due:
                urgent = True
                tick = due[-1]
                passed = _re(node, next_index=self.ticks.index(tick) + 1)
                if node.cursor is not None and node.cursor >= tick:
                    steps.append(
                        Step(
                            f"{node.name} passes {tick} (its cursor is {node.cursor})",
                            self._with_node(w, i, passed),
                            local=True,
                        )
                    )
                else:
                    w2 = self._with_node(w, i, _re(passed, work=Work(tick)))
                    steps += self._work_steps(w2, i, Work(tick), trigger=False)
            elif recheck is not None:
                urgent = True
                tick = recheck[0]
                rest = tuple(r for r in node.rechecks if r != recheck)
                if node.cursor is not None and node.cursor >= tick:
                    steps.append(
                        Step(
                            f"{node.name} drops its recheck of {tick}",
                            self._with_node(w, i, _re(node, rechecks=rest)),
                            local=True,
                        )
                    )
                else:
                    work = Work(tick, recheck=True)
                    w2 = self._with_node(w, i, _re(node, rechecks=rest, work=work))
                    steps += self._work_steps(w2, i, work, trigger=False)
        # The manual trigger.
        if node.trigger_work is not None:
            urgent = True
            steps += self._work_steps(w, i, node.trigger_work, trigger=True)
        elif w.trigger_at_ms is not None and not node.trigger_done:
            urgent = True
            work = Work(TRIGGER_KEY)
            w2 = self._with_node(w, i, _re(node, trigger_work=work, trigger_done=True))
            steps += self._work_steps(w2, i, work, trigger=True)
        # Runs: each step of a run is prompt, at the time its length sets.
        for r, run in enumerate(node.runs):
            if run.resend is not None:
                urgent = True
                steps += self._call_variants(w, lambda w, lost, r=r: self._resend(w, i, r, lost))
            elif run.hold_end_ms:
                if now_ms >= run.hold_end_ms:
                    urgent = True
                    steps += self._call_variants(
                        w, lambda w, lost, r=r: self._start_held(w, i, r, lost)
                    )
                elif run.renew_ms and now_ms >= run.renew_ms:
                    urgent = True
                    steps += self._call_variants(w, lambda w, lost, r=r: self._renew(w, i, r, lost))
            elif not run.end_ms:
                urgent = True
                steps += self._lengths(w, i, r)
            elif run.renew_ms and now_ms >= run.renew_ms:
                urgent = True
                steps += self._call_variants(w, lambda w, lost, r=r: self._renew(w, i, r, lost))
            elif now_ms >= run.end_ms:
                urgent = True
                if run.deadline_ms:
                    steps += self._call_variants(
                        w, lambda w, lost, r=r: self._release(w, i, r, lost)
                    )
                else:
                    steps.append(self._finish_allowed(w, i, r))
        return steps, urgent

    def _faults(self, w: World) -> int:
        return w.crashes + w.freezes + w.lost + w.losses

    def _lengths(self, w: World, i: int, r: int) -> list[Step]:
        """A started run is short (it ends at once) or long (it renews once, a second
        before its lease's end, and ends a second before the renewed lease's end: past the
        next tick). The moments between matter only through the events they fall between,
        and these two put its end on either side of the job's next decision."""
        node = w.nodes[i]
        run = node.runs[r]
        now_ms = w.now_s * 1000
        lease_ms = self.scope.lease_s * 1000
        short = _re(run, end_ms=now_ms, renew_ms=0)
        if run.deadline_ms:
            renew = run.deadline_ms - 1000
            long = _re(run, renew_ms=renew, end_ms=renew + lease_ms - 1000)
        else:
            long = _re(run, end_ms=now_ms + 2 * lease_ms - 2000)
        return [
            Step(
                f"{node.name}'s run of {run.key} is short",
                self._with_run(w, i, r, short),
                local=True,
            ),
            Step(
                f"{node.name}'s run of {run.key} is long", self._with_run(w, i, r, long), local=True
            ),
        ]

    def _with_run(self, w: World, i: int, r: int, run: Run) -> World:
        node = w.nodes[i]
        return self._with_node(w, i, _re(node, runs=_put(node.runs, r, run)))

    def _call_variants(self, w: World, call) -> list[Step]:  # type: ignore[no-untyped-def]
        """A store call answered, and (fault budget left) the same call with its answer lost."""
        steps = [call(w, False)]
        if w.lost < self.scope.lost and self._faults(w) < self.scope.faults:
            steps.append(call(_re(w, lost=w.lost + 1), True))
        return steps

    def _work_steps(self, w: World, i: int, work: Work, *, trigger: bool) -> list[Step]:
        node = w.nodes[i]
        if (
            not trigger
            and isinstance(work.key, int)
            and node.cursor is not None
            and node.cursor >= work.key
        ):
            done = _re(node, work=None)
            return [
                Step(
                    f"{node.name} drops {work.key} (its cursor is {node.cursor})",
                    self._with_node(w, i, done),
                    local=True,
                )
            ]
        if work.deciding:
            return self._call_variants(w, lambda w, lost: self._decide(w, i, work, lost, trigger))
        return self._call_variants(w, lambda w, lost: self._claim(w, i, work, lost, trigger))

    def _set_work(self, node: Node, work: Work | None, trigger: bool) -> Node:
        return _re(node, trigger_work=work) if trigger else _re(node, work=work)

    # -- claims and decisions ---------------------------------------------------------------

    def _claim(self, w: World, i: int, work: Work, lost: bool, trigger: bool) -> Step:
        s = self.scope
        now_ms, _now_us, w = self._clock(w)
        node = w.nodes[i]
        won, store = _DECIDE.claim(
            w.store,
            work.key,
            node.owner,
            ttl_ms=s.claim_s * 1000,
            now_ms=now_ms,
            read_back=work.read_back,
        )
        w = _re(w, store=store)
        again = " again" if work.recheck else ""
        back = " (read back)" if work.read_back else ""
        what = f"{node.name} claims {work.key}{again}{back}"
        if lost:
            node = self._set_work(node, _re(work, read_back=True), trigger)
            return Step(
                f"{what}: {'won' if won else 'lost'}, answer lost", self._with_node(w, i, node)
            )
        if won:
            node = self._set_work(node, _re(work, deciding=True, read_back=False), trigger)
        else:
            node = self._set_work(node, None, trigger)
            if not trigger and not work.recheck:
                assert isinstance(work.key, int)
                at = work.key + self._rank(i, work.key) * s.claim_s
                node = _re(node, rechecks=(*node.rechecks, (work.key, at)))
        return Step(f"{what}: {'won' if won else 'lost'}", self._with_node(w, i, node))

    def _decide(self, w: World, i: int, work: Work, lost: bool, trigger: bool) -> Step:
        node = w.nodes[i]
        if work.resend is not None:
            req = _re(work.resend, known_fence=node.known_fence)
        else:
            req = self._request(w, node, work.key)
        now_ms, now_us, w = self._clock(w)
        before = w.store
        reply, store = _DECIDE.decide(before, req, now_ms=now_ms, now_us=now_us)
        w = _re(w, store=store)
        label = (
            f"{node.name} decides {work.key} (cursor {req.cursor_s}, fire {list(req.fire_s)}, "
            f"missed {[(m.first_s, m.last_s, m.count) for m in req.missed]}, known fence "
            f"{req.known_fence}{', resent' if work.resend else ''}): {_reply(reply)}"
        )
        w, violation = self._check_decision(w, before, req, reply)
        if violation is not None or lost:
            if lost:
                node = self._set_work(node, _re(work, resend=req), trigger)
                w = self._with_node(w, i, node)
            return Step(label + (", answer lost" if lost else ""), w, violation)
        if reply.cursor_s is not None and reply.answer not in (Answer.LOST, Answer.STALE):
            node = _re(node, cursor=reply.cursor_s)
        if reply.answer is Answer.MOVED:
            node = self._set_work(node, _re(work, resend=None), trigger)
            return Step(label, self._with_node(w, i, node))
        node = self._set_work(node, None, trigger)
        w = self._with_node(w, i, node)
        if reply.verdict is Verdict.RUN and (not reply.replayed or reply.renewed):
            w, violation = self._grant(w, i, req, reply, before, now_ms)
        elif reply.verdict is not None:
            node = w.nodes[i]
            fences = (*reply.fences, reply.fence)
            w = self._with_node(w, i, _re(node, known_fence=max(node.known_fence, *fences)))
        return Step(label, w, violation)

    def _check_decision(
        self, w: World, before: JobState, req: DecideRequest, reply: DecideReply
    ) -> tuple[World, str | None]:
        """No decision without its record; fences rise in grant order."""
        if reply.answer is not Answer.DECIDED or reply.replayed:
            return w, None
        n = len(reply.records)
        history = w.store.history
        if len(history) != len(before.history) + n or history[len(history) - n :] != reply.records:
            return w, f"a decision's records are not in the history: {list(reply.records)}"
        if reply.verdict is Verdict.RUN:
            for fence in reply.fences or (reply.fence,):
                if fence <= w.max_fence:
                    return w, f"fence {fence} granted after fence {w.max_fence}"
                w = _re(w, max_fence=fence)
        return w, None

    def _grant(
        self,
        w: World,
        i: int,
        req: DecideRequest,
        reply: DecideReply,
        before: JobState,
        now_ms: int,
    ) -> tuple[World, str | None]:
        s = self.scope
        node = w.nodes[i]
        known_before = node.known_fence
        fences = reply.fences if s.overlap is Overlap.ALLOW else (reply.fence,)
        node = _re(node, known_fence=max(node.known_fence, *fences))
        # A tick's decision tells a lost cursor (the caller expects one, the store has none);
        # a trigger's does not look at the cursor; both tell a lost or older fence counter.
        unwarned = (
            w.epoch > 0
            and req.known_fence <= (before.fence or 0)
            and not (
                req.trigger_id is None and req.cursor_s is not None and before.cursor_s is None
            )
        )
        hold_end = now_ms + reply.hold_ms if reply.hold_ms else 0
        runs: list[Run] = []
        trigger = req.trigger_id
        if s.overlap is Overlap.ALLOW:
            for tick, fence in zip(reply.ticks_s, reply.fences, strict=True):
                key: ClaimKey = TRIGGER_KEY if trigger else tick
                runs.append(
                    Run(key, tick, trigger, fence, (tick,), 0, hold_end, 0, w.epoch, unwarned)
                )
        else:
            tick = reply.ticks_s[0]
            key = TRIGGER_KEY if trigger else tick
            runs.append(
                Run(
                    key,
                    tick,
                    trigger,
                    reply.fence,
                    reply.ticks_s,
                    now_ms + s.lease_s * 1000,
                    hold_end,
                    now_ms + s.lease_s * 1000 - 1000 if hold_end else 0,
                    w.epoch,
                    unwarned,
                )
            )
        node = _re(node, runs=(*node.runs, *runs))
        w = self._with_node(w, i, node)
        violation = None
        if not hold_end:
            for run in runs:
                w, violation = self._started(w, i, run, known_before)
                if violation:
                    break
        return w, violation

    def _started(self, w: World, i: int, run: Run, known_before: int) -> tuple[World, str | None]:
        """Count a start (outside the store) and check it."""
        key = _key(run.key)
        counts = dict(w.starts)
        count = counts.get(key, 0) + 1
        counts[key] = count
        w = _re(w, starts=tuple(sorted(counts.items())))
        if count > 1:
            if key in w.exempt and count <= 2:
                self.stats.exempt_starts += 1
            else:
                return w, f"{key} started {count} times"
        if self.scope.overlap is not Overlap.ALLOW and run.fence < known_before:
            return (
                w,
                f"{key} started with fence {run.fence} below fence {known_before} its node knew",
            )
        return w, None

    # -- runs -------------------------------------------------------------------------------

    def _renew_request(self, run: Run, node: Node, *, starting: bool) -> RenewRequest:
        """A started run renews with its owner and tick (a lease the store lost is written
        back); a held grant, not started, renews and starts without: it must not re-assert
        (with its owner, its renewal would replace a started run's re-asserted lease)."""
        if run.hold_end_ms:
            return RenewRequest(run.fence, self.scope.lease_s * 1000, starting=starting)
        return RenewRequest(
            run.fence, self.scope.lease_s * 1000, node.owner, run.tick_s, trigger_id=run.trigger_id
        )

    def _renew(self, w: World, i: int, r: int, lost: bool) -> Step:
        node = w.nodes[i]
        run = node.runs[r]
        req = self._renew_request(run, node, starting=False)
        return self._send_renew(w, i, r, req, lost, _re(run, renew_ms=0))

    def _start_held(self, w: World, i: int, r: int, lost: bool) -> Step:
        node = w.nodes[i]
        run = node.runs[r]
        if not run.deadline_ms:  # allow: no lease to confirm
            started = _re(run, hold_end_ms=0)
            w = self._with_node(w, i, _re(node, runs=_put(node.runs, r, started)))
            w, violation = self._started(w, i, started, node.known_fence)
            return Step(
                f"{node.name} starts {run.key} (fence {run.fence}) after the hold", w, violation
            )
        req = self._renew_request(run, node, starting=True)
        return self._send_renew(w, i, r, req, lost, run)

    def _send_renew(
        self, w: World, i: int, r: int, req: RenewRequest, lost: bool, run: Run
    ) -> Step:
        now_ms, now_us, w = self._clock(w)
        node = w.nodes[i]
        answer, store = _LEASE.renew(w.store, req, now_ms=now_ms, now_us=now_us)
        w = _re(w, store=store)
        verb = "starts" if req.starting else "renews"
        what = f"{node.name} {verb} {run.key} (fence {run.fence}): {answer.name}"
        if lost:
            runs = _put(node.runs, r, _re(run, resend=req))
            return Step(what + ", answer lost", self._with_node(w, i, _re(node, runs=runs)))
        return self._renewed(w, i, r, run, req, answer, now_ms, what)

    def _renewed(
        self,
        w: World,
        i: int,
        r: int,
        run: Run,
        req: RenewRequest,
        answer: Renewal,
        now_ms: int,
        what: str,
    ) -> Step:
        node = w.nodes[i]
        if answer in (Renewal.RENEWED, Renewal.REASSERTED):
            ok = _re(
                run,
                deadline_ms=now_ms + req.ttl_ms,
                confirmed=w.epoch,
                resend=None,
                hold_end_ms=0 if req.starting else run.hold_end_ms,
                renew_ms=0 if req.starting else run.renew_ms,
            )
            w = self._with_node(w, i, _re(node, runs=_put(node.runs, r, ok)))
            if req.starting:
                w, violation = self._started(w, i, ok, node.known_fence)
                return Step(what, w, violation)
            return Step(what, w)
        # Gone or taken: the run stops (a held one never starts).
        return Step(what, self._with_node(w, i, _re(node, runs=_drop(node.runs, r))))

    def _release(self, w: World, i: int, r: int, lost: bool) -> Step:
        node = w.nodes[i]
        run = node.runs[r]
        record = Record(run.tick_s, Outcome.OK, node.name, run.fence, trigger_id=run.trigger_id)
        req = ReleaseRequest(run.fence, node.owner, self.scope.lease_s * 1000, record)
        return self._send_release(w, i, r, req, lost, run)

    def _send_release(
        self, w: World, i: int, r: int, req: ReleaseRequest, lost: bool, run: Run
    ) -> Step:
        now_ms, now_us, w = self._clock(w)
        node = w.nodes[i]
        reply, store = _LEASE.release(w.store, req, now_ms=now_ms, now_us=now_us)
        w = _re(w, store=store)
        what = f"{node.name} ends {run.key} (fence {run.fence}): {_release(reply)}"
        violation = None
        if reply.decision is Release.HANDED_ON:
            if reply.fence <= w.max_fence:
                violation = f"fence {reply.fence} handed on after fence {w.max_fence}"
            w = _re(w, max_fence=max(w.max_fence, reply.fence))
        if lost or violation:
            if lost:
                runs = _put(node.runs, r, _re(run, resend=req))
                w = self._with_node(w, i, _re(node, runs=runs))
            return Step(what + (", answer lost" if lost else ""), w, violation)
        return self._released(w, i, r, run, reply, now_ms, what)

    def _released(
        self, w: World, i: int, r: int, run: Run, reply: ReleaseReply, now_ms: int, what: str
    ) -> Step:
        s = self.scope
        node = w.nodes[i]
        runs = _drop(node.runs, r)
        if reply.decision is not Release.HANDED_ON:
            return Step(what, self._with_node(w, i, _re(node, runs=runs)))
        known_before = node.known_fence
        if len(run.ticks_s) > 1 and run.ticks_s[1] == reply.tick_s and reply.trigger_id is None:
            ticks = run.ticks_s[1:]
        else:
            ticks = (reply.tick_s,)
        key: ClaimKey = TRIGGER_KEY if reply.trigger_id else reply.tick_s
        hold_end = now_ms + reply.hold_ms if reply.hold_ms else 0
        nxt = Run(
            key,
            reply.tick_s,
            reply.trigger_id,
            reply.fence,
            ticks,
            now_ms + s.lease_s * 1000,
            hold_end,
            now_ms + s.lease_s * 1000 - 1000 if hold_end else 0,
            w.epoch,
            True,
        )
        node = _re(node, runs=(*runs, nxt), known_fence=max(node.known_fence, reply.fence))
        w = self._with_node(w, i, node)
        violation = None
        if not hold_end:
            w, violation = self._started(w, i, nxt, known_before)
        return Step(what, w, violation)

    def _resend(self, w: World, i: int, r: int, lost: bool) -> Step:
        run = w.nodes[i].runs[r]
        req = run.resend
        if isinstance(req, RenewRequest):
            return self._send_renew(w, i, r, req, lost, _re(run, resend=None))
        assert isinstance(req, ReleaseRequest)
        return self._send_release(w, i, r, req, lost, _re(run, resend=None))

    def _finish_allowed(self, w: World, i: int, r: int) -> Step:
        """An ``allow`` run ends: its result goes to the history (the agent's outbox)."""
        node = w.nodes[i]
        run = node.runs[r]
        record = Record(run.tick_s, Outcome.OK, node.name, run.fence, trigger_id=run.trigger_id)
        w = _re(w, store=w.store.appended((record,)))
        w = self._with_node(w, i, _re(node, runs=_drop(node.runs, r)))
        return Step(f"{node.name} ends {run.key} (fence {run.fence}, allow): its record written", w)

    # -- faults, operators, time ------------------------------------------------------------

    def _thaw(self, w: World, i: int) -> Step:
        node = w.nodes[i]
        now_ms = w.now_s * 1000
        runs = tuple(r for r in node.runs if not _expired(r, now_ms))
        thawed = _re(node, status=UP, runs=runs, thaw_s=0)
        return Step(f"{node.name} thaws", self._with_node(w, i, thawed), local=True)

    def _crash(self, w: World, i: int) -> Step:
        node = w.nodes[i]
        orphans = w.orphans | {_key(r.key) for r in node.runs if not r.deadline_ms}
        dead = Node(node.name, CRASHED)
        w = _re(self._with_node(w, i, dead), crashes=w.crashes + 1, orphans=orphans)
        return Step(f"{node.name} crashes", w)

    def _losses(self, w: World, steps: list[Step]) -> list[Step]:
        """The store loses data right after a step that wrote it: wiped, or put back to the
        copy of a replica that lacks that write (the node got its answer first).

        A loss at any later step, before the next write, is the same loss followed by the
        steps taken in between (none of them touches the store), so only these are made.
        """
        s = self.scope
        if w.losses >= s.losses or self._faults(w) >= s.faults:
            return []
        lost: list[Step] = []
        for step in steps:
            after = step.world
            if step.violation is not None or after.store is w.store or after.losses > w.losses:
                continue
            if after.store != JobState():
                lost.append(
                    Step(f"{step.label}; the store is wiped", self._lose(after, JobState()))
                )
            if w.store != after.store:
                lost.append(
                    Step(
                        f"{step.label}; a failover to a replica loses that write",
                        self._lose(after, w.store),
                    )
                )
        return lost

    def _posted(self, w: World) -> World:
        """The operator's trigger, posted when its instant comes."""
        s = self.scope
        if not s.triggers or w.trigger_at_ms is not None or w.now_s < s.trigger_at_s:
            return w
        now_ms, _us, w = self._clock(w)
        store = _DECIDE.post_trigger(w.store, TRIGGER_ID, now_ms=now_ms)
        return _re(w, store=store, trigger_at_ms=now_ms)

    def _lose(self, w: World, restored: JobState) -> World:
        """The store loses data: what was decided or started above what it keeps may again."""
        old = w.store
        decided = {_key(k) for k, _d, _r in _ledger(old.history, self.ticks) if _d}
        decided |= {k for k, _n in w.starts}
        cursor = restored.cursor_s
        kept = {_key(k) for k, d, _r in _ledger(restored.history, self.ticks) if d}
        exempt = set(w.exempt)
        for key in decided:
            if key == TRIGGER_KEY:
                if key not in kept:
                    exempt.add(key)
            elif cursor is None or int(key) > cursor:
                exempt.add(key)
        return _re(
            w,
            store=restored,
            losses=w.losses + 1,
            epoch=w.epoch + 1,
            seq=w.seq + 1,
            exempt=frozenset(exempt),
            trigger_lost=w.trigger_lost or w.trigger_at_ms is not None,
        )

    def _next_event(self, w: World) -> int | None:
        """The next instant at which something happens unless a node acts (None: none).

        Time jumps there: between two such instants no guard of the world changes, so a
        step taken at any moment between them is the step taken at the earlier one.
        """
        now = w.now_s
        s = self.scope
        instants: list[int] = [c.expires_ms // 1000 for _k, c in w.store.claims]
        if w.store.lease is not None:
            instants.append(w.store.lease.expires_ms // 1000)
        instants.append(w.store.hold_until_ms // 1000)
        if s.triggers and w.trigger_at_ms is None:
            instants.append(s.trigger_at_s)
        for node in w.nodes:
            if node.status == CRASHED:
                continue
            if node.status == FROZEN:
                instants.append(node.thaw_s)
            if node.next_index < len(self.ticks):
                instants.append(self.ticks[node.next_index])
            instants += [at for _t, at in node.rechecks]
            for run in node.runs:
                instants += [
                    run.deadline_ms // 1000,
                    run.hold_end_ms // 1000,
                    run.renew_ms // 1000,
                    run.end_ms // 1000,
                ]
        return min((t for t in instants if t > now), default=None)

    def _pending(self, w: World) -> bool:
        return self._next_event(w) is not None

    def _advance(self, w: World) -> Step | None:
        now = self._next_event(w)
        if now is None:
            return None
        if now > self.scope.horizon_s:
            self.stats.cut += 1
            return None
        now_ms = now * 1000
        nodes = tuple(
            _re(n, runs=tuple(r for r in n.runs if not _expired(r, now_ms)))
            if n.status == UP
            else n
            for n in w.nodes
        )
        w = self._posted(_re(w, now_s=now, seq=0, nodes=nodes))
        return Step(f"time passes: t={now}", w)

    # -- invariants ---------------------------------------------------------------------------

    def check(self, w: World, parent: World | None = None) -> str | None:
        """The invariants of every state (of what changed since ``parent``)."""
        if parent is not None and w.store is parent.store:
            return self._check_runs(w, parent)
        store = w.store
        ledger = _ledger(store.history, self.ticks)
        for rec in store.history:
            if rec.outcome is Outcome.MISSED and rec.trigger_id is None:
                covered = [t for t in self.ticks if rec.tick_s <= t <= rec.range_s[1]]
                if len(covered) != rec.count:
                    return f"missed range {rec.range_s} counts {rec.count}, covers {len(covered)}"
        by_key = {k: (d, rs) for k, d, rs in ledger}
        if store.cursor_s is not None:
            origin = store.origin_s if store.origin_s is not None else 0
            for t in self.ticks:
                if origin < t <= store.cursor_s:
                    decisions = by_key.get(t, (0, 0))[0]
                    if decisions != 1:
                        return (
                            f"I-cursor: tick {t} <= cursor {store.cursor_s} has "
                            f"{decisions} decision records"
                        )
        trig = by_key.get(TRIGGER_KEY)
        if trig is not None and trig[0] > 1:
            return f"trigger {TRIGGER_ID} has {trig[0]} decision records"
        for key, _d, results in ledger:
            if results > 1 and _key(key) not in w.exempt:
                return f"{key} has {results} results for one decision"
        return self._check_runs(w, None)

    def _check_runs(self, w: World, parent: World | None) -> str | None:
        if self.scope.overlap not in (Overlap.SKIP, Overlap.QUEUE_ONE):
            return None
        if parent is not None and w.nodes is parent.nodes and w.now_s == parent.now_s:
            return None
        return self._check_overlap(w)

    def _check_overlap(self, w: World) -> str | None:
        now_ms = w.now_s * 1000
        live = [
            (node.name, run)
            for node in w.nodes
            if node.status != CRASHED
            for run in node.runs
            # Its handler ended when it sent its release (resent after a lost answer).
            if not run.hold_end_ms
            and run.deadline_ms > now_ms
            and not isinstance(run.resend, ReleaseRequest)
        ]
        if len(live) < 2:
            return None
        confirmed = [r for _n, r in live if r.confirmed == w.epoch]
        if len(confirmed) != 1 or not confirmed[0].unwarned:
            runs = ", ".join(f"{n} {r.key} fence {r.fence}" for n, r in live)
            return f"overlap under {self.scope.overlap}: {runs} each believe their lease live"
        self.stats.exempt_overlaps += 1
        return None

    def check_quiescent(self, w: World) -> str | None:
        """At quiescence, a fresh node decides the tick after the window; then every tick
        and the trigger are accounted for."""
        s = self.scope
        self.stats.quiescent += 1
        t_x = s.last_s + s.period_s
        now_s = max(w.now_s, t_x)
        if w.trigger_at_ms is not None:
            now_s = max(now_s, w.trigger_at_ms // 1000 + s.trigger_window_s)
        now_ms = now_s * 1000
        store = w.store
        won, store = _DECIDE.claim(store, t_x, AUDITOR, ttl_ms=s.claim_s * 1000, now_ms=now_ms)
        if not won:
            return f"the auditor could not claim {t_x}"
        cursor: int | None = None
        common = {
            "job": JOB,
            "owner": AUDITOR,
            "overlap": s.overlap,
            "lease_ttl_ms": s.lease_s * 1000,
            "claim_ttl_ms": s.memo_s * 1000,
            "trigger_window_ms": s.trigger_window_s * 1000,
        }
        for attempt in range(4):
            req = self.plan_request(cursor, t_x, now_s, **common)
            reply, store = _DECIDE.decide(
                store, req, now_ms=now_ms, now_us=now_s * 1_000_000 + attempt
            )
            if reply.answer is not Answer.MOVED:
                break
            cursor = reply.cursor_s
        if reply.answer is not Answer.DECIDED:
            return f"the auditor's decision of {t_x} answered {_reply(reply)}"
        ledger = {k: (d, last, res) for k, d, res, last in _ledger_full(store.history, self.ticks)}
        origin = store.origin_s or 0
        lost_up_to = max(
            (r.range_s[1] for r in store.history if r.outcome is Outcome.DATA_LOST), default=None
        )
        for t in self.ticks:
            if t <= origin:
                if lost_up_to is None or lost_up_to < t:
                    return f"tick {t} at or below origin {origin} has no data_lost record"
                continue
            decisions = ledger.get(t, (0, None, 0))[0]
            if decisions != 1:
                return f"after the window: tick {t} has {decisions} decision records"
        # The auditor's own grants (its tick, and under catch-up all the tick before it when
        # the store lost everything) never run: they are not the world's.
        own = {r.tick_s for r in reply.records if r.node == AUDITOR.partition(":")[0]}
        for key, (decisions, last, results) in ledger.items():
            if key in own or not decisions or last not in (Outcome.GRANTED, Outcome.QUEUED):
                continue
            if results:
                continue
            if s.overlap is Overlap.ALLOW:
                self.stats.allow_unrecorded += 1
                continue
            return f"after the window: {key} was {last} and has no result"
        if w.trigger_at_ms is not None and not w.trigger_lost:
            trig = ledger.get(TRIGGER_KEY, (0, None, 0))[0]
            if trig != 1 and TRIGGER_ID not in dict(store.triggers):
                return f"after the window: trigger {TRIGGER_ID} has {trig} decision records"
        return None

    # -- the search ---------------------------------------------------------------------------

    def run(self, progress: bool = True) -> Found | None:
        start = self.initial()
        parents: dict[World, tuple[World | None, str]] = {start: (None, "start")}
        queue: deque[tuple[World, int]] = deque([(start, 0)])
        found = self.check(start)
        if found:
            return Found(found, ["start"])
        last = time.monotonic()
        while queue:
            w, depth = queue.popleft()
            self.stats.depth = max(self.stats.depth, depth)
            steps, quiescent = self.successors(w)
            if quiescent:
                violation = self.check_quiescent(w)
                if violation:
                    return Found(violation, self._trace(parents, w))
            for step in steps:
                self.stats.transitions += 1
                violation = step.violation
                known = len(parents)
                parents.setdefault(step.world, (w, step.label))
                new = len(parents) > known
                if violation is None and new:
                    violation = self.check(step.world, w)
                if violation:
                    return Found(violation, self._trace(parents, step.world))
                if new:
                    queue.append((step.world, depth + 1))
            if progress and time.monotonic() - last > 5:
                last = time.monotonic()
                print(f"  ... {len(parents)} states, depth {depth}", file=sys.stderr)
        self.stats.states = len(parents)
        return None

    def _trace(self, parents: dict[World, tuple[World | None, str]], w: World) -> list[str]:
        self.stats.states = len(parents)
        labels: list[str] = []
        cur: World | None = w
        while cur is not None:
            parent, label = parents[cur]
            labels.append(f"t={cur.now_s:>3} {label}")
            cur = parent
        labels.reverse()
        self.stats.depth = len(labels) - 1
        return labels


def _put(runs: tuple[Run, ...], r: int, run: Run) -> tuple[Run, ...]:
    return (*runs[:r], run, *runs[r + 1 :])


def _drop(runs: tuple[Run, ...], r: int) -> tuple[Run, ...]:
    return (*runs[:r], *runs[r + 1 :])


def _expired(run: Run, now_ms: int) -> bool:
    """A run whose lease's end passed stops (the agent's own deadline); allow has none."""
    return bool(run.deadline_ms) and run.deadline_ms <= now_ms


def _ledger_full(
    history: tuple[Record, ...], ticks: tuple[int, ...]
) -> Iterator[tuple[ClaimKey, int, int, Outcome | None]]:
    """Per claim key: how many decision records, how many results of its last decision,
    and the last decision's outcome. A ``skipped:overlap`` after a ``queued`` still waiting
    is that tick's result (a newer tick displaced it), not a second decision."""
    decisions: dict[ClaimKey, int] = {}
    results: dict[ClaimKey, int] = {}
    last: dict[ClaimKey, Outcome] = {}
    order: list[ClaimKey] = []
    for rec in history:
        if rec.trigger_id is not None:
            keys: list[ClaimKey] = [trigger_key(rec.trigger_id)]
        elif rec.outcome in (Outcome.MISSED, Outcome.DATA_LOST):
            first, end = rec.range_s
            keys = [t for t in (*ticks, ticks[-1] + (ticks[1] - ticks[0])) if first <= t <= end]
        else:
            keys = [rec.tick_s]
        for key in keys:
            if key not in decisions:
                decisions[key] = 0
                results[key] = 0
                order.append(key)
            displaced = (
                rec.outcome is Outcome.SKIPPED_OVERLAP
                and last.get(key) is Outcome.QUEUED
                and results[key] == 0
            )
            if rec.outcome in DECISION_OUTCOMES and not displaced:
                decisions[key] += 1
                results[key] = 0
                last[key] = rec.outcome
            else:
                results[key] += 1
    for key in order:
        yield key, decisions[key], results[key], last.get(key)


def _ledger(history: tuple[Record, ...], ticks: tuple[int, ...]) -> list[tuple[ClaimKey, int, int]]:
    return [(k, d, r) for k, d, r, _last in _ledger_full(history, ticks)]


def _reply(reply: DecideReply) -> str:
    parts = [reply.answer.value]
    if reply.replayed:
        parts.append("replayed" + (" renewed" if reply.renewed else " not renewed"))
    if reply.verdict is not None:
        parts.append(reply.verdict.value)
    if reply.ticks_s:
        parts.append(f"ticks {list(reply.ticks_s)}")
    if reply.fences:
        parts.append(f"fences {list(reply.fences)}")
    elif reply.fence:
        parts.append(f"fence {reply.fence}")
    if reply.hold_ms:
        parts.append(f"hold {reply.hold_ms} ms")
    if reply.data_lost:
        parts.append("data lost")
    parts.append(f"cursor {reply.cursor_s}")
    return " ".join(parts)


def _release(reply: ReleaseReply) -> str:
    if reply.decision is Release.HANDED_ON:
        return f"handed on to {reply.tick_s} fence {reply.fence}" + (
            f" hold {reply.hold_ms} ms" if reply.hold_ms else ""
        )
    return reply.decision.value


# -- command line -------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    """One scope's result."""

    scope: Scope
    stats: Stats
    seconds: float
    cpu_seconds: float
    found: Found | None


def explore(scope: Scope, mutation: str | None = None, *, progress: bool = False) -> Result:
    """Explore one scope (with a mutation of the reference applied, if named)."""
    explorer = Explorer(scope)
    began, cpu = time.monotonic(), time.process_time()
    with applied(mutation):
        found = explorer.run(progress=progress)
    return Result(scope, explorer.stats, time.monotonic() - began, time.process_time() - cpu, found)


def scopes(base: Scope, overlaps: list[Overlap], catchups: list[Catchup]) -> Iterator[Scope]:
    for overlap, catchup in itertools.product(overlaps, catchups):
        yield _re(base, overlap=overlap, catchup=catchup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.model.explore", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nodes", type=int, help="nodes (2)")
    parser.add_argument("--ticks", type=int, help="ticks (3)")
    parser.add_argument("--crashes", type=int, help="crashes per path (1)")
    parser.add_argument("--freezes", type=int, help="freezes per path (1)")
    parser.add_argument("--lost", type=int, help="answers lost per path (1)")
    parser.add_argument("--losses", type=int, help="wipes and failovers per path (1)")
    parser.add_argument("--triggers", type=int, choices=(0, 1), help="manual triggers (1)")
    parser.add_argument("--faults", type=int, help="faults of any kind per path (1)")
    parser.add_argument("--overlap", action="append", choices=[o.value for o in Overlap])
    parser.add_argument("--catchup", action="append", choices=[c.value for c in Catchup])
    parser.add_argument(
        "--mutation",
        choices=sorted(MUTATIONS),
        help="apply a mutation of the reference (its own scope, unless options say otherwise)",
    )
    parser.add_argument("--list-mutations", action="store_true")
    args = parser.parse_args(argv)
    if args.list_mutations:
        for name in MUTATIONS:
            print(name)
        return 0
    fields = dict(SCOPES[args.mutation]) if args.mutation else {}
    for name in ("nodes", "ticks", "crashes", "freezes", "lost", "losses", "triggers", "faults"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    base = Scope(**fields)
    if not 1 <= base.nodes <= 4 or not 2 <= base.ticks <= 5 or base.faults < 0:
        print(
            f"explore: --nodes {base.nodes} --ticks {base.ticks} --faults {base.faults}: "
            "nodes 1-4, ticks 2-5, faults 0 or more",
            file=sys.stderr,
        )
        return 2
    if args.mutation and "overlap" in fields and not args.overlap:
        args.overlap = [fields["overlap"].value]
    if args.mutation and "catchup" in fields and not args.catchup:
        args.catchup = [fields["catchup"].value]
    overlaps = [Overlap(o) for o in args.overlap] if args.overlap else list(Overlap)
    catchups = [Catchup(c) for c in args.catchup] if args.catchup else list(Catchup)
    total = 0
    began = time.monotonic()
    for scope in scopes(base, overlaps, catchups):
        print(
            f"exploring {scope.describe()}"
            + (f" mutation={args.mutation}" if args.mutation else ""),
            file=sys.stderr,
        )
        result = explore(scope, args.mutation, progress=True)
        st = result.stats
        total += st.states
        print(
            f"  states={st.states} transitions={st.transitions} quiescent={st.quiescent} "
            f"depth={st.depth} cut={st.cut} exempt_starts={st.exempt_starts} "
            f"exempt_overlaps={st.exempt_overlaps} allow_unrecorded={st.allow_unrecorded} "
            f"{result.seconds:.1f}s (cpu {result.cpu_seconds:.1f}s)",
            file=sys.stderr,
        )
        if result.found is not None:
            print(f"violation: {result.found.message}")
            print(f"scope: {scope.describe()}")
            for line in result.found.trace:
                print(f"  {line}")
            print(f"states={total} violations=1")
            return 1
    print(f"total {time.monotonic() - began:.1f}s", file=sys.stderr)
    print(f"states={total} violations=0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
