"""What goes into the Redis scripts and what comes back, typed; and reply decoding.

Replies are read as bytes and decoded here with ``errors="replace"``: a value that is not
UTF-8 (garbage under one of our keys) is reported by the caller, never a crash in decoding.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from cronrace.errors import StoreError
from cronrace.records import JobState, LeaseInfo, RunRecord

log = logging.getLogger("cronrace.store")


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
    owner: str
    lease_ttl_ms: int
    overlap: str
    mode: str  # run | mark | trigger
    trigger_id: str | None = None

    @property
    def request_id(self) -> str:
        """What names this decision for retries ('' when it is never retried)."""
        if self.mode != "trigger":
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

    decision: str
    fence: int
    prev_watermark_s: int | None
    holder_fence: int
    holder_owner: str
    abandoned_tick_s: int
    abandoned_fence: int
    abandoned_owner: str
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
    """What ``release.lua`` decided: ``released``, ``run`` (hand-on) or ``not_owner``."""

    decision: str
    fence: int
    tick_s: int
    warnings: tuple[str, ...]
    hold_ms: int = 0
    quarantined: tuple[Quarantined, ...] = ()
    trigger_id: str | None = None  # a handed-on queued trigger keeps its id


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """The server's clock, the epoch and the live members, read in one round trip."""

    server_time_s: float
    epoch: str
    #: Every member whose heartbeat had not expired: node id -> expiry, epoch ms.
    members: dict[str, int] = field(default_factory=dict)


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
            owner=held.get("owner", ""),
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
    """Decode one ``acquire.lua`` reply (a fresh answer or a replayed one)."""
    prev = int(reply[2])
    quarantined = decode_quarantined(reply[8])
    return AcquireReply(
        decision=decode_text(reply[0]),
        fence=int(reply[1]),
        prev_watermark_s=None if prev < 0 else prev,
        holder_fence=int(reply[3]),
        holder_owner=decode_text(reply[4]),
        abandoned_tick_s=int(reply[5]),
        abandoned_fence=int(reply[6]),
        abandoned_owner=decode_text(reply[7]),
        warnings=tuple(q.kind for q in quarantined),
        superseded_tick_s=int(reply[9]),
        hold_ms=int(reply[10]),
        data_lost=int(reply[11]) == 1,
        superseded_trigger_id=decode_text(reply[12]) or None,
        replayed=int(reply[13]) == 1,
        renewed=int(reply[14]) == 1,
        quarantined=quarantined,
    )


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
