"""The reference protocol's values: a job's state in the store, requests, replies, records.

Everything here is a frozen, hashable value, so that the exhaustive checker can keep sets
of states and the differential tests can compare a store's state with the reference's
field by field. Times are integers handed in by the caller: ``now_ms`` (the store's clock)
and ``now_us`` (the same clock in microseconds, the floor of every new fence). Nothing here
reads a clock or does I/O.

The state is one job's: what the keys of ``{<job>}`` hold on Redis, or the job's rows on
PostgreSQL (docs/design.md section 2). A claim key is a tick (an ``int``) or a manual
trigger (``"trigger:<id>"``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from cronrace.model.policies import Outcome, Overlap

ClaimKey = int | str
"""A tick (UTC epoch second) or ``"trigger:<id>"``."""


def trigger_key(trigger_id: str) -> str:
    """The claim key of a manual trigger."""
    return f"trigger:{trigger_id}"


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of a job's history: a decision about ticks, or a run's result.

    Attributes:
        tick_s: the tick (for a trigger: when it was asked; for a range: its first tick).
        outcome: what was decided, or how the run ended.
        node: the node that decided or ran.
        fence: the grant's fence (0 when nothing was granted).
        count: how many ticks (a ``missed`` range); 1 otherwise.
        last_s: a range's last tick (``missed``, ``data_lost``); ``tick_s`` otherwise.
        trigger_id: the manual trigger decided, if any.
    """

    tick_s: int
    outcome: Outcome
    node: str
    fence: int = 0
    count: int = 1
    last_s: int = 0
    trigger_id: str | None = None

    @property
    def range_s(self) -> tuple[int, int]:
        """The ticks the record covers, both ends included."""
        return (self.tick_s, max(self.tick_s, self.last_s))


#: Outcomes a decision writes for the ticks it covers (one per tick, or a range).
DECISION_OUTCOMES = frozenset(
    {
        Outcome.GRANTED,
        Outcome.SKIPPED_PAUSED,
        Outcome.SKIPPED_OVERLAP,
        Outcome.QUEUED,
        Outcome.MISSED,
        Outcome.DATA_LOST,
        Outcome.STALE,
    }
)


class Answer(enum.StrEnum):
    """What a decision answered."""

    DECIDED = "decided"
    """It decided every tick of (cursor, tick] and moved the cursor (or decided a trigger)."""
    LOST = "lost"
    """Another owner holds the tick's claim: nothing written."""
    COVERED = "covered"
    """The cursor is at or past the tick: a decision covered it already, nothing written."""
    MOVED = "moved"
    """The cursor is not the one expected: plan (cursor, tick] again and resend."""
    STALE = "stale"
    """A manual trigger that is no longer outstanding (decided already, or swept)."""


class Verdict(enum.StrEnum):
    """What a decision did with the ticks it fires (``Answer.DECIDED`` only)."""

    RUN = "run"
    """Granted: the caller runs ``ticks_s`` under ``fence``."""
    NOTHING = "nothing"
    """Nothing to fire: every tick it covered is ``missed``."""
    SKIPPED_PAUSED = "skipped:paused"
    SKIPPED_OVERLAP = "skipped:overlap"
    QUEUED = "queued"


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim key: who may decide its tick now, and once decided the remembered answer.

    Attributes:
        owner: ``<node>:<nonce>`` of the process that holds it.
        expires_ms: when it runs out (undecided: a few seconds; decided: ``claim_ttl``).
        memo: the answer of the decision made under it, for retries of that decision.
    """

    owner: str
    expires_ms: int
    memo: DecideReply | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A grant: the job's running lease (with an expiry) or the run it belongs to.

    Attributes:
        owner: ``<node>:<nonce>`` of the run.
        fence: the fence of the tick it runs now.
        ticks_s: the ticks the grant still has to run, the current one first.
        trigger_id: the manual trigger it runs, if any.
        expires_ms: when the lease runs out unless renewed.
        held: granted while a wipe hold is on, not started yet.
        reasserted: written back by its run after the store lost it.
    """

    owner: str
    fence: int
    ticks_s: tuple[int, ...]
    trigger_id: str | None = None
    expires_ms: int = 0
    held: bool = False
    reasserted: bool = False


@dataclass(frozen=True, slots=True)
class Pending:
    """The one tick (or trigger) waiting behind a live run under ``queue_one``."""

    tick_s: int
    trigger_id: str | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    """Everything the store keeps for one job.

    Attributes:
        cursor_s: every scheduled tick in (origin_s, cursor_s] is decided and recorded
            (None: no decision yet, or the store lost it).
        origin_s: the exclusive lower bound of the first decision since the job's state
            began (or was lost): I-cursor speaks of the ticks above it.
        fence: the fence counter (None: missing: a new job, or the store lost it).
        lease: the running lease (expired when ``expires_ms <= now``).
        run: the grant the lease belongs to, kept past the lease's expiry so that the next
            decision records it ``abandoned`` with the ticks it still had to run.
        pending: the tick waiting under ``queue_one``.
        paused: operators paused the job.
        hold_until_ms: new grants wait until then (the store lost the job's data).
        hold_fence: during the hold, the highest fence a run granted before the loss can
            hold (a run above it was granted during the hold, and never re-asserts).
        claims: the claim keys, sorted by key.
        triggers: outstanding manual triggers (id, posted ms), oldest first.
        history: the job's records, oldest first.
    """

    cursor_s: int | None = None
    origin_s: int | None = None
    fence: int | None = None
    lease: Lease | None = None
    run: Lease | None = None
    pending: Pending | None = None
    paused: bool = False
    hold_until_ms: int = 0
    hold_fence: int = 0
    claims: tuple[tuple[ClaimKey, Claim], ...] = ()
    triggers: tuple[tuple[str, int], ...] = ()
    history: tuple[Record, ...] = ()

    def claim_at(self, key: ClaimKey, now_ms: int) -> Claim | None:
        """The claim under ``key`` while it has not run out."""
        for k, claim in self.claims:
            if k == key:
                return claim if claim.expires_ms > now_ms else None
        return None

    def live_lease(self, now_ms: int) -> Lease | None:
        """The lease while it has not run out."""
        lease = self.lease
        return lease if lease is not None and lease.expires_ms > now_ms else None

    def with_claim(self, key: ClaimKey, claim: Claim) -> JobState:
        """This state with ``key`` set to ``claim``."""
        rest = tuple((k, c) for k, c in self.claims if k != key)
        claims = tuple(sorted((*rest, (key, claim)), key=lambda kc: str(kc[0])))
        return replace(self, claims=claims)

    def appended(self, records: tuple[Record, ...]) -> JobState:
        """This state with ``records`` appended to the history."""
        return replace(self, history=self.history + records) if records else self


@dataclass(frozen=True, slots=True)
class Missed:
    """Ticks of (cursor, tick] the caller will not fire: a range and how many ticks."""

    first_s: int
    last_s: int
    count: int


@dataclass(frozen=True, slots=True)
class DecideRequest:
    """A decision for tick ``tick_s`` of one job, under the claim its caller won.

    The caller planned (cursor_s, tick_s] with the pure planner (protocol/plan.py): the
    ticks it fires and the ranges it does not. The decision holds only if the store's
    cursor is the one expected; otherwise it answers ``moved`` and the caller plans again.

    Attributes:
        job: the job's name (the reference decides one job's state: it does not read it).
        tick_s: T, the tick whose claim the caller won (for a trigger: when it was asked).
        cursor_s: the cursor the caller expects (None: it knows none: a new job).
        from_s: the plan's exclusive lower bound (``cursor_s`` when it is known).
        fire_s: the ticks to fire, oldest first, each in (from_s, tick_s].
        missed: the rest of (from_s, tick_s], as ranges with their counts.
        owner: ``<node>:<nonce>`` of the caller.
        overlap: the job's overlap policy.
        lease_ttl_ms: how long a granted lease lives unless renewed.
        claim_ttl_ms: how long the decided claim keeps its answer for retries.
        known_fence: the highest fence the caller has seen for the job (0: none).
        trigger_window_ms: a trigger outstanding longer is recorded ``missed``.
        trigger_id: set for a manual trigger's decision (it leaves the cursor alone).
        history: how many records the store keeps of the job (0: its default); the
            reference keeps them all.
    """

    job: str
    tick_s: int
    cursor_s: int | None
    from_s: int
    fire_s: tuple[int, ...]
    missed: tuple[Missed, ...]
    owner: str
    overlap: Overlap
    lease_ttl_ms: int
    claim_ttl_ms: int
    known_fence: int = 0
    trigger_window_ms: int = 0
    trigger_id: str | None = None
    history: int = 0

    @property
    def claim_key(self) -> ClaimKey:
        """The claim key the decision is made under."""
        return self.tick_s if self.trigger_id is None else trigger_key(self.trigger_id)

    @property
    def node(self) -> str:
        """The caller's node id."""
        return self.owner.partition(":")[0]


@dataclass(frozen=True, slots=True)
class DecideReply:
    """What a decision answered, and for a grant what to run.

    Attributes:
        answer: see :class:`Answer`.
        cursor_s: the cursor found (``moved``, ``covered``), or set (``decided``).
        verdict: what was done with the fired ticks (``decided`` only).
        fence: the grant's fence (``run``); under ``allow`` the first tick's.
        fences: under ``allow``, one fence per fired tick (each runs apart).
        ticks_s: the ticks the grant runs, oldest first (``run``).
        hold_ms: a grant must wait this long before it starts (a wipe hold).
        data_lost: this decision found that the store lost the job's data.
        replayed: the remembered answer of an earlier send of the same request.
        renewed: a replayed grant whose lease still holds its fence, extended now: it may
            start. A replayed grant not renewed must not start.
        records: what this decision appended to the history.
    """

    answer: Answer
    cursor_s: int | None = None
    verdict: Verdict | None = None
    fence: int = 0
    fences: tuple[int, ...] = ()
    ticks_s: tuple[int, ...] = ()
    hold_ms: int = 0
    data_lost: bool = False
    replayed: bool = False
    renewed: bool = False
    records: tuple[Record, ...] = ()


class Renewal(enum.IntEnum):
    """What a renewal answered (the store contract's values)."""

    RENEWED = 1
    GONE = 0
    TAKEN = -1
    REASSERTED = 2


@dataclass(frozen=True, slots=True)
class RenewRequest:
    """Extend the lease held with ``fence``; with ``owner``, write it back if lost.

    Attributes:
        fence: the fence the run was granted.
        ttl_ms: how long the lease lives from now.
        owner: the run's owner; given, a lease the store lost (a wipe) is re-asserted.
        tick_s: the run's tick, written in a re-asserted lease.
        starting: a run granted during a wipe hold starts its handler now.
        trigger_id: the manual trigger the run runs, written in a re-asserted lease (so
            that its result, if the next decision records it ``abandoned``, names it).
        history: how many records the store keeps of the job (0: its default), for the
            result of a grant a re-asserted lease displaces; the reference keeps them all.
    """

    fence: int
    ttl_ms: int
    owner: str | None = None
    tick_s: int = 0
    starting: bool = False
    trigger_id: str | None = None
    history: int = 0


class Release(enum.StrEnum):
    """What a release did."""

    RELEASED = "released"
    HANDED_ON = "run"
    NOT_OWNER = "not_owner"


@dataclass(frozen=True, slots=True)
class ReleaseRequest:
    """End the run holding ``fence``: its record, then the next tick or the lease's end.

    Attributes:
        fence: the run's fence.
        owner: the owner of a handed-on run (the caller).
        lease_ttl_ms: the handed-on lease's lifetime.
        record: the run's result (written only while the fence holds the lease).
        hand_on: run the grant's next tick (catch-up ``all``) or the queued one; False
            (the caller stops) records those ``cancelled`` instead.
    """

    fence: int
    owner: str
    lease_ttl_ms: int
    record: Record | None = None
    hand_on: bool = True


@dataclass(frozen=True, slots=True)
class ReleaseReply:
    """What a release did; for a hand-on, the new fence, tick and trigger."""

    decision: Release
    fence: int = 0
    tick_s: int = 0
    trigger_id: str | None = None
    hold_ms: int = 0
    records: tuple[Record, ...] = ()
