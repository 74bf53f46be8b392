"""Which definitions each live node runs, and where two nodes disagree about one job.

Every node fires the jobs defined in its own code or TOML file. Two live nodes with
different definitions of one job (a rolling deploy that changes a schedule, a config file
edited on one host) race for different tick sets and fire their union, without a word
from either. So each node publishes a digest of each such job's definition (schedule,
zone, policies, target) with its heartbeat, reads the others', and when live nodes
disagree logs it at ERROR naming the job and the nodes, counts it in
``cronrace_definition_disagreements``, and ``cronrace status`` shows it.

The same exchange carries what a node can run of the stored schedules (its handlers, and
the stored schedules it refuses and why), so that a schedule no live node can run is
reported, not silently idle. Stored schedules themselves are not compared: every node
reads them from Redis.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel

from cronrace.model.job import Job
from cronrace.runtime.observer import Observer
from cronrace.stores.values import FleetReply, FleetRequest

if TYPE_CHECKING:
    from cronrace.stores.contract import Store

#: Read every node's fingerprint (not only the changes) every this many exchanges.
FULL_READ_EVERY_EXCHANGES = 150
#: A node's published definitions are deleted (``forget``) only once full reads have
#: found it dead (its heartbeat expired) for this long. A node whose beats were held up
#: a few periods (a loaded process, a long GC) and then come again finds its definitions
#: still there, and does not publish them again: every node would read that in the log.
#: A saturated 1,000-node start-up republished for 1,303 of its last 3,000 log entries.
FORGET_AFTER_S = 60.0

log = logging.getLogger("cronrace.fleet")


@dataclass(frozen=True, slots=True)
class JobDefinition:
    """What a node publishes of one job: its digest, and enough to say how it differs."""

    digest: str
    schedule: str
    timezone: str


def _handler_identity(handler: object) -> Any:
    """A target's full spec, or a function's module and qualified name."""
    spec = getattr(handler, "spec", None)
    if isinstance(spec, BaseModel):
        return {type(spec).__name__: spec.model_dump(mode="json")}
    target = getattr(handler, "__wrapped__", handler)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def job_definition(job: Job) -> JobDefinition:
    """Digest a job's definition: schedule, zone, policies and what it runs."""
    try:
        return _remembered_definition(job)
    except TypeError:  # a handler that cannot be hashed: digested every time
        return _definition(job)


#: Sized for the jobs of one process, as the schedules' parse cache is: a Job is frozen and
#: its digest a pure value of it, so agents of one process that define the same jobs
#: (a benchmark's hundred simulated nodes) hold one digest of each, and a restarted run
#: of the same agent digests nothing again.
@functools.lru_cache(maxsize=1 << 16)
def _remembered_definition(job: Job) -> JobDefinition:
    return _definition(job)


def _definition(job: Job) -> JobDefinition:
    data = {
        "schedule": job.schedule.expr,
        "timezone": job.schedule.timezone,
        "overlap": job.overlap.value,
        "catchup": job.catchup.value,
        "lease_ttl_s": job.lease_ttl_s,
        "catchup_window_s": job.catchup_window_s,
        "max_catchup": job.max_catchup,
        "runs": _handler_identity(job.handler),
    }
    raw = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    return JobDefinition(
        hashlib.sha256(raw).hexdigest()[:16], job.schedule.expr, job.schedule.timezone
    )


@dataclass(frozen=True, slots=True)
class NodeDetails:
    """What one node publishes.

    Attributes:
        node_id: the node.
        jobs: its jobs from code or TOML, by name.
        handlers: the handler names stored schedules may name on it.
        targets: whether it runs stored schedules' target tables (a sidecar).
        refused: stored schedules it does not race for, and why.
        racers: its ``racers`` setting (``all`` or k; ``?`` when it does not say).
    """

    node_id: str
    jobs: dict[str, JobDefinition] = field(default_factory=dict)
    handlers: tuple[str, ...] = ()
    targets: bool = False
    refused: dict[str, str] = field(default_factory=dict)
    racers: str = "?"

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "jobs": {name: [d.digest, d.schedule, d.timezone] for name, d in self.jobs.items()},
                "handlers": list(self.handlers),
                "targets": self.targets,
                "refused": self.refused,
                "racers": self.racers,
            },
            option=orjson.OPT_SORT_KEYS,
        )

    @classmethod
    def from_json(cls, node_id: str, raw: bytes) -> NodeDetails:
        """Read published details; garbage reads as a node that publishes nothing."""
        try:
            data = orjson.loads(raw)
            jobs = {
                str(name): JobDefinition(str(d[0]), str(d[1]), str(d[2]))
                for name, d in data.get("jobs", {}).items()
            }
            return cls(
                node_id,
                jobs,
                tuple(str(h) for h in data.get("handlers", [])),
                bool(data.get("targets", False)),
                {str(k): str(v) for k, v in data.get("refused", {}).items()},
                str(data.get("racers", "?")),
            )
        except (orjson.JSONDecodeError, AttributeError, TypeError, IndexError, KeyError):
            log.error("unreadable fleet details of a node; ignored", extra={"node": node_id})
            return cls(node_id)

    def fingerprint(self, published: bytes | None = None) -> str:
        """``<jobs> <details>``: hashes of the job digests alone, and of everything
        (``published``: this :meth:`to_json` already made, not made again)."""
        jobs = orjson.dumps(
            {name: d.digest for name, d in self.jobs.items()}, option=orjson.OPT_SORT_KEYS
        )
        return f"{_short(jobs)} {_short(self.to_json() if published is None else published)}"


def _short(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One job that live nodes define differently: node -> its definition."""

    job: str
    by_node: dict[str, JobDefinition]

    def describe(self) -> str:
        """``node-a, node-b: '*/5 * * * *' UTC; node-c: '*/10 * * * *' UTC`` (or digests)."""
        groups: dict[JobDefinition, list[str]] = {}
        for node, definition in sorted(self.by_node.items()):
            groups.setdefault(definition, []).append(node)
        parts = []
        for definition, nodes in groups.items():
            shown = f"{definition.schedule!r} {definition.timezone}"
            if (
                sum(
                    1
                    for d in groups
                    if (d.schedule, d.timezone) == (definition.schedule, definition.timezone)
                )
                > 1
            ):
                shown += f" (digest {definition.digest})"
            parts.append(f"{', '.join(nodes)}: {shown}")
        return "; ".join(parts)


def disagreements(fleet: Sequence[NodeDetails]) -> list[Disagreement]:
    """Jobs that two or more nodes define, not all alike (a job some nodes lack is fine)."""
    by_job: dict[str, dict[str, JobDefinition]] = {}
    for node in fleet:
        for name, definition in node.jobs.items():
            by_job.setdefault(name, {})[node.node_id] = definition
    return [
        Disagreement(name, nodes)
        for name, nodes in sorted(by_job.items())
        if len({d.digest for d in nodes.values()}) > 1
    ]


class FleetDefinitions:
    """This node's side of the exchange: publish with each heartbeat, compare, report."""

    def __init__(self, store: Store, node_id: str, observer: Observer) -> None:
        self.store = store
        self.node_id = node_id
        self.observer = observer
        self.disagreements: list[Disagreement] = []
        self._written: str | None = None
        self._known: dict[str, tuple[str, NodeDetails]] = {}  # node -> (fingerprint, details)
        #: Every node's fingerprint as of the last exchange, this node's included (between
        #: full reads it may still hold nodes that left; ``live`` filters them).
        self.fingerprints: dict[str, str] = {}
        #: Whether the last exchange changed :attr:`fingerprints`.
        self.changed = True
        self._cursor: str | None = None
        # A phase of this node's own: the fleet's full reads do not all fall on one beat.
        self._exchanges = secrets.randbelow(FULL_READ_EVERY_EXCHANGES)
        self._live_seen: Collection[str] | None = None
        #: The details last published and their fingerprint (O(jobs) to compute): a node
        #: that publishes the same details object again reuses it.
        self._printed: tuple[NodeDetails, str, bytes] | None = None
        #: The last request's details, fingerprint and whether it changed (for absorb).
        self._sent: tuple[NodeDetails, str, bool] | None = None
        #: Nodes full reads found dead (published, not live), and since when (shared ms).
        self._dead_since: dict[str, int] = {}

    def _fingerprint(self, details: NodeDetails) -> str:
        return self._published(details)[1]

    def _published(self, details: NodeDetails) -> tuple[NodeDetails, str, bytes]:
        """The details, their fingerprint and their JSON: made once per details object (a
        node of 10,000 jobs made the JSON twice at each start, ~10 ms each)."""
        if self._printed is None or self._printed[0] is not details:
            published = details.to_json()
            self._printed = (details, details.fingerprint(published), published)
        return self._printed

    def request(self, details: NodeDetails) -> FleetRequest:
        """What the next exchange sends: the heartbeat carries it (one round trip a beat),
        and :meth:`absorb` reads its reply.

        Every fingerprint is read on the first exchange and every
        :data:`FULL_READ_EVERY_EXCHANGES` (or when the change log has a gap); otherwise
        only those published since the last read.
        """
        fingerprint = self._fingerprint(details)
        changed = fingerprint != self._written
        full = self._cursor is None or self._exchanges % FULL_READ_EVERY_EXCHANGES == 0
        self._exchanges += 1
        self._sent = (details, fingerprint, changed)
        return FleetRequest(
            fingerprint,
            self._published(details)[2] if changed else None,
            since=None if full else self._cursor,
            changed=changed,
        )

    async def exchange(
        self, details: NodeDetails, now_ms: int, live: Collection[str] | None = None
    ) -> int:
        """Publish ``details``, read the others' fingerprints, report disagreements: a
        :meth:`request` and its :meth:`absorb` in a round trip of their own.

        Returns:
            The stored schedules' version (read in the same round trip).
        """
        request = self.request(details)
        reply = await self.store.fleet.exchange(
            self.node_id,
            request.fingerprint,
            details=request.details,
            now_ms=now_ms,
            since=request.since,
            changed=request.changed,
        )
        return await self.absorb(reply, now_ms, live)

    async def absorb(
        self, reply: FleetReply, now_ms: int, live: Collection[str] | None = None
    ) -> int:
        """Take the reply to the last :meth:`request`: the others' fingerprints, and the
        disagreements, worked out again only when a fingerprint or ``live`` (the live
        members; None: every node read) changed: an exchange where nothing did costs O(1),
        not O(N).

        Returns:
            The stored schedules' version (read in the same round trip).
        """
        assert self._sent is not None, "absorb() answers a request()"
        details, fingerprint, changed = self._sent
        if reply.gap:
            reply = await self.store.fleet.exchange(
                self.node_id, fingerprint, details=None, now_ms=now_ms, changed=False
            )
        if reply.details_missing and not changed:
            # Redis lost it (a wipe) or a node pruned it: publish again now.
            self._written = None
            reply = await self.store.fleet.exchange(
                self.node_id, fingerprint, details=self._published(details)[2], now_ms=now_ms
            )
            changed = True
        self._written = fingerprint
        self._cursor = reply.cursor or None
        before = self.fingerprints
        if reply.full:
            self.fingerprints = {**reply.fingerprints, self.node_id: fingerprint}
            self.changed = self.fingerprints != before
        else:
            moved = {n: f for n, f in reply.fingerprints.items() if before.get(n) != f}
            if moved or changed:
                self.fingerprints = {**before, **moved, self.node_id: fingerprint}
            self.changed = bool(moved) or changed
        self._known[self.node_id] = (fingerprint, details)
        if self.changed or live is not self._live_seen:
            self._live_seen = live
            await self._compare(fingerprint, live)
        if reply.full:
            for node in set(self._known) - set(reply.fingerprints) - {self.node_id}:
                del self._known[node]
        if reply.full:
            gone = self._dead_for_long(reply.dead, now_ms)
            if gone:
                await self.store.fleet.forget(gone)
        return reply.schedules_version

    def _dead_for_long(self, dead: Collection[str], now_ms: int) -> list[str]:
        """Of the nodes a full read found dead, those found dead for :data:`FORGET_AFTER_S`.

        Only full reads list the dead; a node missing from one is alive again (or was
        forgotten by another node) and starts over.
        """
        since = {node: self._dead_since.get(node, now_ms) for node in dead}
        self._dead_since = since
        return sorted(n for n, s in since.items() if now_ms - s >= FORGET_AFTER_S * 1000)

    async def _compare(self, fingerprint: str, live: Collection[str] | None) -> None:
        """Work out (and report) which jobs the live nodes define differently."""
        own_jobs = fingerprint.split(" ")[0]
        others = {
            n: f
            for n, f in self.fingerprints.items()
            if n != self.node_id and (live is None or n in live)
        }
        if all(f.split(" ")[0] == own_jobs for f in others.values()):
            self._report([])
            return
        stale = [n for n, f in others.items() if self._known.get(n, ("",))[0] != f]
        for node, raw in (await self.store.fleet.read_details(stale)).items():
            if raw is not None:
                self._known[node] = (others[node], NodeDetails.from_json(node, raw))
        known = [self._known[n][1] for n in [self.node_id, *others] if n in self._known]
        self._report(disagreements(known))

    def _report(self, found: list[Disagreement]) -> None:
        before = {d.job: d for d in self.disagreements}
        for item in found:
            if before.get(item.job) != item:
                log.error(
                    "live nodes define this job differently: they fire the union of its "
                    "ticks until they agree",
                    extra={
                        "job": item.job,
                        "nodes": sorted(item.by_node),
                        "definitions": item.describe(),
                        "node": self.node_id,
                    },
                )
        for job in sorted(set(before) - {d.job for d in found}):
            log.warning(
                "live nodes agree again on this job", extra={"job": job, "node": self.node_id}
            )
        self.disagreements = found
        self.observer.definition_disagreements(len(found))


async def live_details(store: Store, *, heartbeat_ttl_ms: int) -> list[NodeDetails]:
    """What every live node publishes (for ``status`` and strict handler checks)."""
    nodes = [node.node_id for node in await store.nodes(heartbeat_ttl_ms=heartbeat_ttl_ms)]
    found = await store.fleet.read_details(nodes)
    return [
        NodeDetails.from_json(node, raw) if raw else NodeDetails(node)
        for node, raw in found.items()
    ]


def stored_problems(specs: Mapping[str, Any], fleet: Sequence[NodeDetails]) -> dict[str, str]:
    """Stored schedules no live node races for, and why (specs: name -> ScheduleSpec)."""
    out: dict[str, str] = {}
    if not fleet:
        return out  # no live node at all: status says so once, not once per schedule
    for name, spec in specs.items():
        reasons = []
        for node in fleet:
            if name in node.refused:
                reasons.append(f"{node.node_id}: {node.refused[name]}")
            elif spec.handler is not None and spec.handler not in node.handlers:
                reasons.append(f"{node.node_id}: no handler {spec.handler!r}")
            elif spec.handler is None and not node.targets:
                reasons.append(f"{node.node_id}: runs no targets")
            else:
                break
        else:
            out[name] = "no live node runs it" + (f" ({'; '.join(reasons)})" if reasons else "")
    return out
