"""What goes into the Redis scripts and what comes back, typed; and reply decoding.

The scripts speak strings and integers; the rest of cronrace speaks the enums and value
types here (decisions, modes, the lease owner), built and parsed in this module only. A
script's reply is decoded once, here. Replies are read as bytes and decoded with
``errors="replace"``: a value that is not UTF-8 (garbage under one of our keys) is reported
by the caller, never a crash in decoding.
"""

from __future__ import annotations

import enum
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Self

from cronrace.errors import StoreError
from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord

log = logging.getLogger("cronrace.stores.redis")


class NotReplicatedError(StoreError):
    """Claims were won, but fewer replicas than asked confirmed them in time."""

    def __init__(self, won: list[bool], acked: int) -> None:
        super().__init__(f"claims confirmed by {acked} replicas only")
        self.won = won
        self.acked = acked


class ClaimOutcome(enum.Enum):
    """How one claim of a wake-up came out."""

    WON = "won"
    LOST = "lost"
    #: Its shard did not answer: the claim may or may not have been written. The next
    #: attempt at the same key reads it back (DESIGN.md section 8).
    UNKNOWN = "unknown"
    #: Won, but fewer replicas than asked confirmed its shard's writes in time.
    NOT_REPLICATED = "not_replicated"


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """One claim's outcome, and how many replicas confirmed its shard's writes."""

    outcome: ClaimOutcome
    acked: int = 0


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a claim or a lease: one agent process, ``<node_id>:<nonce>`` in Redis.

    The nonce tells two processes of one node id apart (a restart, a duplicate), so a claim
    value found after a lost reply is known to be this process's own (DESIGN.md section 8).
    Node ids never contain ``:`` (``AgentSettings`` refuses them).
    """

    node_id: str
    nonce: str

    @classmethod
    def new(cls, node_id: str) -> Self:
        """A fresh owner for one agent process of ``node_id``."""
        return cls(node_id, secrets.token_hex(6))

    @classmethod
    def parse(cls, text: str) -> Self:
        """Read ``<node_id>:<nonce>`` back (a value without ``:`` is a node id alone)."""
        node_id, _, nonce = text.partition(":")
        return cls(node_id, nonce)

    def __str__(self) -> str:
        return f"{self.node_id}:{self.nonce}"


class AcquireMode(enum.StrEnum):
    """What a won claim asks ``acquire.lua`` for."""

    RUN = "run"
    """Decide the tick and run it (if the overlap policy allows)."""
    MARK = "mark"
    """Decide the tick (a catch-up that fires nothing): advance the watermark, run nothing."""
    TRIGGER = "trigger"
    """Run a manual trigger (or a further tick of a catch-up): leave the watermark alone."""


class AcquireDecision(enum.StrEnum):
    """What ``acquire.lua`` decided for one won claim."""

    RUN = "run"
    STALE = "stale"
    MARKED = "marked"
    SKIPPED_PAUSED = "skipped:paused"
    SKIPPED_OVERLAP = "skipped:overlap"
    QUEUED = "queued"
    MISSED = "missed"
    """A won tick whose answer came after a later tick's decision (which passed it), when
    the job's catch-up policy does not run late ticks."""

    @property
    def outcome(self) -> Outcome | None:
        """The outcome recorded for a tick decided this way, None when it runs or is only
        marked (its record comes from the run, or from the catch-up's ``missed``)."""
        return _DECISION_OUTCOMES.get(self)


_DECISION_OUTCOMES = {
    AcquireDecision.STALE: Outcome.STALE,
    AcquireDecision.SKIPPED_PAUSED: Outcome.SKIPPED_PAUSED,
    AcquireDecision.SKIPPED_OVERLAP: Outcome.SKIPPED_OVERLAP,
    AcquireDecision.QUEUED: Outcome.QUEUED,
    AcquireDecision.MISSED: Outcome.MISSED,
}


class ReleaseDecision(enum.StrEnum):
    """What ``release.lua`` did with a lease."""

    RELEASED = "released"
    HANDED_ON = "run"
    """Kept with a new fence for the next tick (queued, or a catch-up's next)."""
    NOT_OWNER = "not_owner"
    """The lease had moved on (another fence): nothing was released."""


class Renewal(enum.IntEnum):
    """What ``renew.lua`` answered."""

    RENEWED = 1
    GONE = 0
    """No lease (it expired)."""
    TAKEN = -1
    """Another fence holds it."""


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Who holds a job's running lease."""

    owner: Owner
    fence: int
    tick_s: int
    started_ms: int
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class JobState:
    """What Redis knows of one job (shared by every node)."""

    job: str
    watermark_s: int | None
    lease: LeaseInfo | None
    paused: bool
    counters: dict[str, int]
    spec: dict[str, str]
    last_fence: int | None


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim to race for: a scheduled tick, or a manual trigger when ``trigger_id``."""

    job: str
    tick_s: int
    ttl_ms: int
    trigger_id: str | None = None


@dataclass(frozen=True, slots=True)
class AcquireRequest:
    """The arguments of ``acquire.lua`` for one won claim.

    A request for a won claim (mode ``run`` or ``mark``, or ``trigger`` with its
    ``trigger_id``) is idempotent for its owner: sent again after a lost reply it returns
    the first answer (``AcquireReply.replayed``), never a second fence. A ``trigger``
    without ``trigger_id`` (a further tick of a running catch-up) is not remembered.
    """

    job: str
    decide_tick_s: int
    mark_tick_s: int
    run_tick_s: int
    owner: Owner
    lease_ttl_ms: int
    overlap: Overlap
    mode: AcquireMode
    trigger_id: str | None = None
    prior_tick_s: int = 0
    """The tick before those this decision covers (0: unknown). If another node's claim
    on it is undecided, the script notes it passed, so that node may still decide it."""
    late_ok: bool = False
    """A passed tick decided late runs (catchup = all) rather than being answered missed."""

    @property
    def request_id(self) -> str:
        """What names this decision for retries ('' when it is never retried)."""
        if self.mode != AcquireMode.TRIGGER:
            return f"{self.mode}:{self.decide_tick_s}"
        return f"trigger:{self.trigger_id}" if self.trigger_id else ""


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A key that held garbage (a wrong type, an unreadable value), moved aside by a script.

    Attributes:
        kind: which key of the job it was (``lease``, ``fence``, ``watermark``, ...).
        key: its full name.
        moved_to: where it is now, kept for inspection (it expires after 7 days).
    """

    kind: str
    key: str
    moved_to: str


@dataclass(frozen=True, slots=True)
class AcquireReply:
    """What ``acquire.lua`` decided (the script's header explains each field)."""

    decision: AcquireDecision
    fence: int
    prev_watermark_s: int | None
    holder_fence: int
    holder_owner: Owner | None
    abandoned_tick_s: int
    abandoned_fence: int
    abandoned_owner: Owner | None
    warnings: tuple[str, ...]
    superseded_tick_s: int
    hold_ms: int = 0
    data_lost: bool = False
    superseded_trigger_id: str | None = None
    replayed: bool = False
    renewed: bool = False
    quarantined: tuple[Quarantined, ...] = ()


@dataclass(frozen=True, slots=True)
class ReleaseReply:
    """What ``release.lua`` decided, and for a hand-on the new fence and tick."""

    decision: ReleaseDecision
    fence: int
    tick_s: int
    warnings: tuple[str, ...]
    hold_ms: int = 0
    quarantined: tuple[Quarantined, ...] = ()
    trigger_id: str | None = None  # a handed-on queued trigger keeps its id


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """A finished run's record and the release of its lease (``release.lua``).

    ``continue_tick_s`` asks to hand the lease on to that tick (catch-up ``all``);
    ``retried`` says an earlier attempt's reply was lost, so it may have written the record.
    """

    record: RunRecord
    history: int
    release_fence: int
    owner: Owner
    lease_ttl_ms: int
    continue_tick_s: int = 0
    retried: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """The server's clock, the epoch and the live members, read in one round trip."""

    server_time_s: float
    epoch: str
    #: Every member whose heartbeat had not expired: node id -> expiry, epoch ms.
    members: dict[str, int] = field(default_factory=dict)


def decode_owner(raw: Any) -> Owner | None:
    """An owner as a script answers it ('' when there is none)."""
    text = decode_text(raw)
    return Owner.parse(text) if text else None


def decode_claim_owner(raw: Any) -> Owner | None:
    """Who holds a claim key: its value is ``<owner>``, and once decided
    ``<owner>\n<request_id>\n<reply>`` (acquire.lua keeps its answer there)."""
    if raw is None:
        return None
    return Owner.parse(decode_text(raw).split("\n", 1)[0])


def decode_quarantined(raw: Any) -> tuple[Quarantined, ...]:
    """Decode a script's ``warnings`` string: ``kind|key|moved_to`` items, comma-separated."""
    out = []
    for item in decode_text(raw).split(","):
        kind, _, rest = item.partition("|")
        key, _, moved_to = rest.partition("|")
        if kind:
            out.append(Quarantined(kind, key, moved_to))
    return tuple(out)


def decode_text(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return str(raw)


def int_or_none(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def decode_job_state(
    job: str, last: Any, lease: Any, lease_ttl_ms: Any, state: Any, fence: Any
) -> JobState:
    """Build a job's state from the raw replies of ``Store.job_states``; garbage reads as unset."""
    fields = {decode_text(k): decode_text(v) for k, v in (state or {}).items()}
    held = {decode_text(k): decode_text(v) for k, v in (lease or {}).items()}
    lease_fence = int_or_none(held.get("fence"))
    lease_info = None
    if lease_fence is not None:
        lease_info = LeaseInfo(
            owner=Owner.parse(held.get("owner", "")),
            fence=lease_fence,
            tick_s=int_or_none(held.get("tick")) or 0,
            started_ms=int_or_none(held.get("started_ms")) or 0,
            ttl_ms=int(lease_ttl_ms),
        )
    counters = {
        key: value
        for key in ("skipped_overlap", "skipped_paused", "missed", "queued", "abandoned")
        if (value := int_or_none(fields.get(key))) is not None
    }
    return JobState(
        job=job,
        watermark_s=int_or_none(last),
        lease=lease_info,
        paused=fields.get("paused") == "1",
        counters=counters,
        spec={k.removeprefix("spec_"): v for k, v in fields.items() if k.startswith("spec_")},
        last_fence=int_or_none(fence),
    )


def decode_acquire(reply: Any) -> AcquireReply:
    """Decode one ``acquire.lua`` reply (a fresh answer or a replayed one).

    Raises:
        StoreError: the reply is not one ``acquire.lua`` gives (another version's script).
    """
    try:
        decision = AcquireDecision(decode_text(reply[0]))
    except ValueError:
        raise StoreError(f"acquire.lua answered an unknown decision {reply[0]!r}") from None
    prev = int(reply[2])
    quarantined = decode_quarantined(reply[8])
    return AcquireReply(
        decision=decision,
        fence=int(reply[1]),
        prev_watermark_s=None if prev < 0 else prev,
        holder_fence=int(reply[3]),
        holder_owner=decode_owner(reply[4]),
        abandoned_tick_s=int(reply[5]),
        abandoned_fence=int(reply[6]),
        abandoned_owner=decode_owner(reply[7]),
        warnings=tuple(q.kind for q in quarantined),
        superseded_tick_s=int(reply[9]),
        hold_ms=int(reply[10]),
        data_lost=int(reply[11]) == 1,
        superseded_trigger_id=decode_text(reply[12]) or None,
        replayed=int(reply[13]) == 1,
        renewed=int(reply[14]) == 1,
        quarantined=quarantined,
    )


def decode_release(reply: Any, quarantined: tuple[Quarantined, ...]) -> ReleaseReply:
    """Decode one ``release.lua`` reply (its quarantined keys decoded by the caller).

    Raises:
        StoreError: the reply is not one ``release.lua`` gives.
    """
    try:
        decision = ReleaseDecision(decode_text(reply[0]))
    except ValueError:
        raise StoreError(f"release.lua answered an unknown decision {reply[0]!r}") from None
    return ReleaseReply(
        decision=decision,
        fence=int(reply[1]),
        tick_s=int(reply[2]),
        warnings=tuple(q.kind for q in quarantined),
        hold_ms=int(reply[4]),
        quarantined=quarantined,
        trigger_id=decode_text(reply[5]) or None,
    )


def decode_renewal(raw: Any) -> Renewal:
    """Decode ``renew.lua``'s answer.

    Raises:
        StoreError: not one ``renew.lua`` gives.
    """
    try:
        return Renewal(int(raw))
    except (TypeError, ValueError):
        raise StoreError(f"renew.lua answered {raw!r}") from None


def decode_run_entries(job: str, entries: Any) -> list[RunRecord]:
    """Decode history stream entries; an unreadable one is logged and skipped."""
    out = []
    for entry_id, fields in entries:
        raw = fields.get(b"r", fields.get("r"))
        try:
            out.append(RunRecord.from_json(raw or b"", record_id=decode_text(entry_id)))
        except ValueError as exc:
            log.warning(
                "unreadable run record skipped",
                extra={"job": job, "record_id": decode_text(entry_id), "error": str(exc)},
            )
    return out
