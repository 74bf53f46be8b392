"""The store contract: what every backend does for cronrace, documented once.

A store keeps one namespace's shared state: the per-tick claims, each job's cursor,
lease and fence counter, run records, the live node set, manual triggers, stored
schedules and the fleet's published definitions. The protocol built on it is docs/design.md
sections 3-5 and 8; section 14 maps each part to Redis and PostgreSQL. Every backend
gives the same answers to the same calls, which ``tests/stores/contract/`` checks against
each of them, and speaks only the values of :mod:`cronrace.stores.values`: no driver type
crosses this line, and every error leaving a store is one of cronrace's own
(:class:`~cronrace.errors.StoreError` and its family: ambiguous, unavailable, data, access).

The methods are grouped the way the protocol uses them:

- **tick**: claims, decisions under the dense cursor (the reference in
  :mod:`cronrace.protocol`: the overlap policy, the wipe hold, remembered answers, records
  written in the same step), cursors;
- **run**: renewing, releasing and handing on leases, and run records;
- **fleet**: heartbeat and membership, the epoch, published definitions (:attr:`Store.fleet`);
- **schedules**: stored schedules and their version (:attr:`Store.schedules`);
- **operator**: what ``cronrace status``, ``history``, ``pause`` and ``trigger`` read and write.

Features only one backend has are typed apart: :class:`RedisFeatures` (a fenced write on
a Redis key, a Redis stream entry) is what the stream target and ``RunContext.fenced_set``
need, and a store that lacks it says so by not being one; :class:`FailoverFollower` (a
deployment that announces its failovers, such as Sentinel's ``+switch-master``) is a
service the agent runs beside its heartbeat.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from cronrace.errors import StoreAccessError, StoreError, StoreUnavailableError
from cronrace.model.records import NodeInfo, RunRecord
from cronrace.protocol.values import (
    DecideReply,
    DecideRequest,
    RenewRequest,
)
from cronrace.protocol.values import (
    ReleaseReply as RunEndReply,
)
from cronrace.protocol.values import (
    Renewal as LeaseRenewal,
)
from cronrace.stores.values import (
    Claim,
    ClaimOutcome,
    ClaimReply,
    FleetReply,
    FleetRequest,
    HeartbeatReply,
    JobState,
    NotReplicatedError,
    Owner,
    RunEnd,
    ScheduleChange,
    ScheduleSet,
    WriteReply,
)


class Refusals(Protocol):
    """What a store was refused that waiting will not fix (credentials, permissions, TLS).

    Attributes:
        on_refused: called with ``(label, error, first)`` for every refusal.
        on_allowed: called with ``label`` when a refused operation went through again.
    """

    on_refused: Callable[[str, StoreAccessError, bool], None] | None
    on_allowed: Callable[[str], None] | None

    def problem(self) -> str | None:
        """One line naming what is refused now, or None."""
        ...


class ScheduleStore(abc.ABC):
    """Stored schedules: one consistent set of definitions (name -> JSON) with a version.

    The version counts changes; every live node compares it with its own at each heartbeat
    and reads the whole set when it moved (docs/design.md section 13).
    """

    @abc.abstractmethod
    async def write(self, changes: Sequence[ScheduleChange]) -> WriteReply:
        """Apply ``changes`` all or nothing, then tell the live nodes (a change notice).

        An ``add`` of a stored name, or an ``update``/``remove`` of a missing one, refuses
        the whole batch (``status`` ``exists`` or ``missing``) and writes nothing.
        """

    @abc.abstractmethod
    async def notify(self, written: WriteReply, names: Sequence[str]) -> None:
        """Tell live nodes which versions changed which names (a hint, not the record)."""

    @abc.abstractmethod
    async def read_all(self) -> ScheduleSet:
        """Every definition and the version they belong to, read at one instant."""

    @abc.abstractmethod
    async def read(self, names: Sequence[str]) -> tuple[int, dict[str, bytes | None]]:
        """Some definitions (None: not stored) and the current version."""

    @abc.abstractmethod
    async def version(self) -> int:
        """The current version (0: nothing stored yet, or unreadable)."""


class FleetStore(abc.ABC):
    """What each live node runs: a short fingerprint per node, and details on change."""

    @abc.abstractmethod
    async def exchange(
        self,
        node_id: str,
        fingerprint: str,
        *,
        details: bytes | None,
        now_ms: int,
        since: str | None = None,
        changed: bool = True,
    ) -> FleetReply:
        """Publish this node's fingerprint (and details when given); read the others'.

        With ``since`` None: every live node's fingerprint (a full read), and the cursor
        of the change log. With a cursor: only the fingerprints published since it
        (``full`` False; ``gap`` when the log was trimmed past it). ``changed``: this
        node's fingerprint differs from the one it published last, which is then
        written and logged (every node sees it at its next read of changes).
        """

    @abc.abstractmethod
    async def read_details(self, nodes: Sequence[str]) -> dict[str, bytes | None]:
        """The published details of ``nodes`` (None where a node has none)."""

    @abc.abstractmethod
    async def forget(self, nodes: Sequence[str]) -> None:
        """Delete what nodes that left the live set had published."""


class Store(abc.ABC):
    """One namespace of a backend: the shared state of a fleet (see the module doc).

    Attributes:
        schedules: stored schedules.
        fleet: the fleet's published definitions.
        access: what the backend refused that waiting will not fix.
    """

    schedules: ScheduleStore
    fleet: FleetStore
    access: Refusals

    # -- connection ----------------------------------------------------------------------

    @abc.abstractmethod
    async def prepare(self) -> None:
        """Make the store ready for a running node (Redis: load the scripts).

        Raises:
            StoreError: the backend cannot serve this namespace (for example a schema that
                is missing or older than this cronrace).
        """

    @abc.abstractmethod
    async def ping(self) -> bool:
        """Return whether the backend answers."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the store's connections."""

    # -- tick: claims -----------------------------------------------------------------------

    @abc.abstractmethod
    async def claim_each(
        self,
        claims: Sequence[Claim],
        owner: Owner,
        *,
        read_back: bool = False,
        wait_replicas: int = 0,
        wait_ms: int = 0,
    ) -> list[ClaimReply]:
        """Race for every claim of one wake-up; a loser writes nothing.

        Args:
            claims: the (job, tick) pairs, or manual triggers, this node races for.
            owner: this node's identity, written into what it wins.
            read_back: read every claim back, as :attr:`Claim.read_back` asks for one.
                A claim read back counts as won only while it holds ``owner`` and no
                decision: a tick this process decided already is never won again (its
                remembered answer is for retries of that decision, not for a second one).
            wait_replicas: replicas that must confirm the won claims (``claim_replicas``).
            wait_ms: how long to wait for them.

        Returns:
            One reply per claim, in order: won, lost, or unknown (no answer).
        """

    async def claim(
        self, claims: Sequence[Claim], owner: Owner, *, wait_replicas: int = 0, wait_ms: int = 0
    ) -> list[bool]:
        """Race for every claim (:meth:`claim_each`), all or nothing: True where won.

        Raises:
            StoreUnavailableError: some claim got no answer (it may have been written).
            NotReplicatedError: claims were won but fewer replicas than asked confirmed.
        """
        replies = await self.claim_each(claims, owner, wait_replicas=wait_replicas, wait_ms=wait_ms)
        if any(reply.outcome is ClaimOutcome.UNKNOWN for reply in replies):
            raise StoreUnavailableError("claim failed: some claim got no answer")
        short = [reply for reply in replies if reply.outcome is ClaimOutcome.NOT_REPLICATED]
        if short:
            won = [reply.outcome is not ClaimOutcome.LOST for reply in replies]
            raise NotReplicatedError(won, min(reply.acked for reply in short))
        return [reply.outcome is ClaimOutcome.WON for reply in replies]

    @abc.abstractmethod
    async def read_claims(self, claims: Sequence[Claim], owner: Owner) -> list[bool]:
        """Read claims back without claiming: True where ``owner`` holds one (a live claim,
        undecided or decided)."""

    @abc.abstractmethod
    def known_fence(self, job: str) -> int:
        """The highest fence this store object has seen for ``job`` (0: none).

        Sent with every decision: a fence counter missing although a fence is known means
        the backend lost the job's data, not that the job is new.
        """

    # -- tick: the dense cursor (the reference in cronrace/protocol/) ----------------------

    @abc.abstractmethod
    async def decide(self, requests: Sequence[DecideRequest]) -> list[DecideReply | Exception]:
        """Decide each request atomically, exactly as :func:`cronrace.protocol.decide` does.

        A request's replay, ``covered``, ``lost``, ``moved`` (or ``stale`` trigger) writes
        nothing; a decision appends its records to the job's history in the same atomic
        step, sets the cursor, and keeps its answer under the claim for ``claim_ttl_ms``.
        The store's clock is the reference's ``now_ms`` / ``now_us``. One round trip per
        shard for the whole batch.

        Returns:
            One reply per request (its ``records`` are those appended), or the error of
            that request alone.
        """

    @abc.abstractmethod
    async def renew_lease(self, job: str, request: RenewRequest) -> LeaseRenewal:
        """Extend (or re-assert) a run's lease, as :func:`cronrace.protocol.renew` does."""

    @abc.abstractmethod
    async def end_run(self, request: RunEnd) -> RunEndReply:
        """Write a run's record and hand its lease on or release it, as
        :func:`cronrace.protocol.release` does (the record only while the fence holds)."""

    async def end_runs(self, requests: Sequence[RunEnd]) -> list[RunEndReply | StoreError]:
        """End many runs: one reply, or that run's error, per request (a store that can
        sends them in one round trip per shard)."""
        replies: list[RunEndReply | StoreError] = []
        for request in requests:
            try:
                replies.append(await self.end_run(request))
            except StoreError as exc:
                replies.append(exc)
        return replies

    @abc.abstractmethod
    async def cursors(self, jobs: Sequence[str]) -> dict[str, int | None]:
        """Each job's cursor (None: no decision yet, or unreadable)."""

    # -- run: leases and records -----------------------------------------------------------

    @abc.abstractmethod
    async def record(self, records: Sequence[RunRecord], *, history: int) -> None:
        """Append run records to their jobs' histories, each kept to ``history`` entries."""

    @abc.abstractmethod
    async def records_since(self, job: str, since_ms: int, limit: int) -> list[RunRecord]:
        """Up to ``limit`` records of ``job`` appended since ``since_ms``, oldest first."""

    # -- fleet: heartbeat, membership, epoch ---------------------------------------------

    @abc.abstractmethod
    async def heartbeat(
        self,
        node_id: str,
        *,
        now_ms: int,
        ttl_ms: int,
        epoch_candidate: str,
        prune: bool = True,
        since: str | None = None,
        joined: bool = True,
        live_after_ms: int = 0,
        recheck: Sequence[str] = (),
        asserted_epoch: str = "",
        read_asserted: bool = False,
        fleet: FleetRequest | None = None,
    ) -> HeartbeatReply:
        """Read the shared clock and the epoch (writing ``epoch_candidate`` if none), and
        refresh this node's heartbeat.

        With ``since`` None, return every live member with its expiry (a full read) and
        the change log's cursor. With a cursor, return only the changes since it: the
        members logged as joined, those logged as left, those whose expiry is before
        ``live_after_ms`` (silent), and how many expire at or after it; ``gap`` when the
        log no longer reaches back to the cursor. ``joined``: log this node as joined
        (its first beat, or its last one was so long ago that its entry may be gone).
        ``recheck`` (with a cursor): members the caller counted silent; those of them whose
        expiry is now at or after ``live_after_ms`` are among the joined too (they beat
        again: a late beat is not logged, so that a loaded fleet's late beats are not each
        read by every node).

        ``asserted_epoch`` is published as this node's word that it re-asserted the leases
        of its runs for that epoch (after a wipe); with ``read_asserted`` the reply carries
        every live member's (only while a wipe is waited out: it is O(N)).

        With ``fleet``, the fleet's definitions exchange goes with the beat
        (:meth:`FleetStore.exchange` with this node and ``now_ms``), in the same round trip
        where the store can (a node's fixed work per beat is then one round trip), its
        reply in ``HeartbeatReply.fleet``.
        """

    @abc.abstractmethod
    async def leave(self, node_id: str) -> None:
        """Remove this node from the live set (graceful shutdown), and log that it left."""

    @abc.abstractmethod
    async def register_jobs(self, specs: dict[str, dict[str, str]]) -> None:
        """Publish job definitions so that operator commands can list them."""

    # -- operator ------------------------------------------------------------------------

    @abc.abstractmethod
    async def nodes(self, *, heartbeat_ttl_ms: int) -> list[NodeInfo]:
        """The live nodes, newest heartbeat first."""

    @abc.abstractmethod
    async def known_jobs(self) -> list[str]:
        """Every job any node of this namespace has registered."""

    @abc.abstractmethod
    async def job_states(self, jobs: Sequence[str]) -> list[JobState]:
        """What the store knows of each job (lease, cursor, pause flag), in one read."""

    @abc.abstractmethod
    async def set_paused(self, job: str, paused: bool) -> None:
        """Pause or resume a job on every node."""

    @abc.abstractmethod
    async def request_trigger(self, job: str) -> str:
        """Ask every node to race for one immediate run of ``job``; return its id."""

    @abc.abstractmethod
    async def trigger_claimant(self, job: str, trigger_id: str) -> str | None:
        """The node that claimed a manual trigger, or None while nobody has."""

    @abc.abstractmethod
    async def control_position(self) -> str:
        """The position after which new control requests (triggers, notices) appear."""

    @abc.abstractmethod
    async def read_control(
        self, after_id: str, *, block_ms: int
    ) -> list[tuple[str, dict[str, str]]]:
        """Control requests newer than ``after_id``, waiting up to ``block_ms`` for one."""

    @abc.abstractmethod
    async def history(self, job: str, limit: int) -> list[RunRecord]:
        """The newest ``limit`` run records of ``job``, newest first."""

    @abc.abstractmethod
    async def histories(self, jobs: Sequence[str], limit: int) -> dict[str, list[RunRecord]]:
        """The newest ``limit`` run records of each job, newest first, in one read."""


@runtime_checkable
class RedisFeatures(Protocol):
    """What only a Redis store offers: the stream target and fenced writes on Redis keys."""

    async def fenced_set(self, key: str, value: str | bytes, fence: int, ttl_ms: int = 0) -> bool:
        """Write ``value`` under the Redis ``key`` unless a higher fence wrote it before."""
        ...

    async def push_stream(self, stream: str, fields: dict[str, str], maxlen: int | None) -> str:
        """Append one entry to a Redis stream; return its id."""
        ...

    async def aclose(self) -> None:
        """Close the store's connections."""
        ...


@runtime_checkable
class FailoverFollower(Protocol):
    """A store whose deployment announces failovers, followed while the agent runs.

    Redis Sentinel announces a new primary at once (``+switch-master``); a store that
    listens moves its connections then rather than at the next heartbeat. The agent runs
    :meth:`follow_failovers` beside its heartbeat, on every store that is one.
    """

    async def follow_failovers(self) -> None:
        """Follow the deployment's failover announcements until cancelled (return at once
        where the deployment makes none)."""
        ...
