"""The values every store speaks: requests, replies, identities; no driver types.

A store's commands take and return these (:mod:`cronrace.stores.contract`); each store
package encodes them for its server and decodes its server's answers into them, once.
Decisions, modes and renewals are enums; the lease owner ``<node>:<nonce>`` is a small
value type, built and parsed here only.
"""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass, field
from typing import Self

from cronrace.errors import StoreError
from cronrace.model.records import RunRecord
from cronrace.protocol.values import Record, ReleaseRequest
from cronrace.protocol.values import Renewal as Renewal  # the store contract's answer


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
    #: attempt at the same key reads it back (docs/design.md section 8).
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
    value found after a lost reply is known to be this process's own (docs/design.md section 8).
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
    cursor_s: int | None
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
    #: An earlier attempt at this claim got no reply (it may have been written): read it
    #: back, and count it won if it holds this process's claim, still undecided.
    read_back: bool = False


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
class HeartbeatReply:
    """The server's clock, the epoch and the members, read in one round trip.

    A full read (``full``) lists every live member. A read of the changes since a cursor
    lists only what changed since (docs/design.md section 12, "membership changes"): the members
    that joined or came back, those that left, those gone silent, and how many are live,
    so that the reader can tell whether its view adds up (if not, it reads in full).
    """

    server_time_s: float
    epoch: str
    #: Full: every member whose heartbeat had not expired. Changes: the members that
    #: joined (or came back) since the cursor. Node id -> expiry, epoch ms.
    members: dict[str, int] = field(default_factory=dict)
    #: Whether ``members`` is the whole live set (False: the changes since the cursor).
    full: bool = True
    #: Where the next read of changes starts ("": the store keeps no change log).
    cursor: str = ""
    #: Changes only: members whose heartbeat expires before ``live_after_ms`` (silent).
    silent: dict[str, int] = field(default_factory=dict)
    #: Changes only: members that left the live set on purpose since the cursor.
    left: tuple[str, ...] = ()
    #: Changes only: how many members' heartbeats expire at or after ``live_after_ms``.
    live_count: int = -1
    #: Changes only: the log no longer holds every change since the cursor (read in full).
    gap: bool = False
    #: With ``read_asserted``: each live member's word that it re-asserted its runs'
    #: leases after a wipe: node id -> the epoch it did so for ('' before it says; a node
    #: that never saw a wipe says the epoch it started in).
    asserted: dict[str, str] = field(default_factory=dict)
    #: The fleet's definitions exchange sent with the beat (``fleet``), else None.
    fleet: FleetReply | None = None


@dataclass(frozen=True, slots=True)
class ScheduleChange:
    """One change of a batch: ``add``, ``update``, ``put`` or ``remove`` one name."""

    op: str
    name: str
    definition: bytes = b""


@dataclass(frozen=True, slots=True)
class WriteReply:
    """What a batch of changes did.

    Attributes:
        status: ``ok``; ``exists`` (an add met a stored name) or ``missing`` (an update
            or remove met none): then nothing was written.
        name: the name that refused the batch.
        first_version: the version of the first change (0 when none was made).
        last_version: the version of the last change.
    """

    status: str
    name: str
    first_version: int
    last_version: int


@dataclass(frozen=True, slots=True)
class ScheduleSet:
    """The stored definitions as read at one instant, with their version (0: none yet)."""

    version: int
    definitions: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class FleetRequest:
    """A fleet definitions exchange sent with a heartbeat (``FleetStore.exchange``'s
    arguments: the heartbeat's node and ``now_ms`` are the exchange's)."""

    fingerprint: str
    details: bytes | None
    #: None: read every live node's fingerprint; a cursor: those logged since it.
    since: str | None = None
    changed: bool = True


@dataclass(frozen=True, slots=True)
class FleetReply:
    """One heartbeat's view: the live nodes' fingerprints and the stored schedules' version.

    Attributes:
        fingerprints: live node -> its ``<jobs> <details>`` fingerprint.
        dead: nodes whose fields remain although they left the live set.
        details_missing: this node's details are not stored (first beat, or a wipe).
        schedules_version: the stored schedules' version (0: none stored).
    """

    fingerprints: dict[str, str]
    dead: tuple[str, ...]
    details_missing: bool
    schedules_version: int
    #: Whether ``fingerprints`` is every live node's (False: those published since the
    #: cursor, which may include nodes no longer live).
    full: bool = True
    #: Where the next read of changes starts ("": the store keeps no change log).
    cursor: str = ""
    #: Changes only: the log no longer holds every change since the cursor.
    gap: bool = False


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A run's end, sent to the store: its record, then its lease handed on or released.

    The store's form of :class:`cronrace.protocol.ReleaseRequest`: the record is the whole
    run record (times, error, detail), of which the reference keeps a projection.

    Attributes:
        job: the job.
        fence: the run's fence.
        owner: the run's owner, and the owner of a handed-on run.
        lease_ttl_ms: a handed-on lease's lifetime.
        record: the run's result (written only while the fence holds the lease).
        history: how many records the store keeps of the job.
        hand_on: run the grant's next tick or the queued one (False: record them
            ``cancelled``; the caller stops).
    """

    job: str
    fence: int
    owner: Owner
    lease_ttl_ms: int
    record: RunRecord | None
    history: int
    hand_on: bool = True

    def reference(self) -> ReleaseRequest:
        """The reference protocol's request for this run's end."""
        record = None if self.record is None else reference_record(self.record)
        return ReleaseRequest(self.fence, str(self.owner), self.lease_ttl_ms, record, self.hand_on)


def reference_record(record: RunRecord) -> Record:
    """The reference protocol's projection of a run record."""
    return Record(
        record.tick_s,
        record.outcome,
        record.node,
        record.fence,
        record.count,
        record.last_tick_s,
        record.trigger_id,
    )
