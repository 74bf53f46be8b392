"""Stored schedules at runtime: the operator API, and each node keeping in step with Redis.

:class:`Schedules` (``agent.schedules``) adds, changes and removes schedules stored in
Redis, from any process on the namespace, checking a definition fully before anything is
written and writing it in one script (``store/schedules.py``): nothing half-written stays.

:class:`ScheduleSync` is a running node's side. It reads the whole set at start-up, applies
each change notice from the control stream at once, and compares the stored version with
its own at every heartbeat: a node that missed a change (or met a Redis that lost its
data, or came back from a reconnect) reads the whole set again. A change reaches the tick
loop through :meth:`~cronrace.tick.loop.Scheduler.put_job` and ``drop_job``: an updated
schedule fires from its next tick after now, on every node alike. A stored schedule this
node cannot run (its handler is not registered here, a target it would refuse, a name a
job in code already has) is not raced for; the node logs that once and publishes it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

import anyio
import anyio.lowlevel

from cronrace.errors import CronraceError, JobDefinitionError, UnknownJobError
from cronrace.model.job import Handler, Job, PolicyOptions
from cronrace.specs.stored import ScheduleSpec, build_job, check_schedule
from cronrace.stores.redis.schedules import ScheduleChange, WriteReply

if TYPE_CHECKING:
    from cronrace.operate.client import OperatorClient
    from cronrace.stores.redis import Store
    from cronrace.tick.loop import Scheduler

log = logging.getLogger("cronrace.operate.schedules")

#: Stored schedules applied between two yields to the event loop when reading them all.
APPLY_CHUNK = 200
#: Turns a stored schedule's target table into a handler (the sidecar sets one).
TargetFactory = Callable[[ScheduleSpec], Handler]


class TargetOptions(PolicyOptions, total=False):
    """The keywords of :meth:`Schedules.add`: the job options and one target table."""

    http: Mapping[str, Any]
    command: Mapping[str, Any]
    stream: Mapping[str, Any]


class ScheduleChanges(TargetOptions, total=False):
    """The keywords of :meth:`Schedules.update`: any field of a stored schedule."""

    schedule: str
    handler: str
    args: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ScheduleDiff:
    """What applying a set of schedules changes: names added, updated, removed, kept."""

    added: tuple[ScheduleSpec, ...] = ()
    updated: tuple[tuple[ScheduleSpec, ScheduleSpec], ...] = ()  # (stored, wanted)
    removed: tuple[ScheduleSpec, ...] = ()
    unchanged: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.updated or self.removed)


def diff_sets(
    stored: Mapping[str, ScheduleSpec], wanted: Sequence[ScheduleSpec], *, prune: bool
) -> ScheduleDiff:
    """Compare the stored set with the wanted one (``prune``: remove what is not wanted)."""
    wanted_names = {spec.name for spec in wanted}
    added = tuple(spec for spec in wanted if spec.name not in stored)
    updated = tuple(
        (stored[spec.name], spec)
        for spec in wanted
        if spec.name in stored and stored[spec.name].to_json() != spec.to_json()
    )
    removed = tuple(
        spec for name, spec in sorted(stored.items()) if prune and name not in wanted_names
    )
    unchanged = tuple(
        spec.name
        for spec in wanted
        if spec.name in stored and stored[spec.name].to_json() == spec.to_json()
    )
    return ScheduleDiff(added, updated, removed, unchanged)


class Schedules:
    """Add, change and remove stored schedules; every live node follows within a heartbeat.

    Reached as ``agent.schedules``; it works from any process on the same Redis and
    namespace (an agent that is not running is enough), like the other operator controls.
    """

    def __init__(self, client: OperatorClient) -> None:
        self._client = client
        self._live_handlers: tuple[float, set[str]] = (-math.inf, set())

    @property
    def _store(self) -> Store:
        return self._client.store

    async def add(
        self,
        name: str,
        schedule: str,
        *,
        handler: str | None = None,
        args: Mapping[str, Any] | None = None,
        strict: bool | None = None,
        **options: Unpack[TargetOptions],
    ) -> ScheduleSpec:
        """Store a new schedule; every live node races for it from its next tick.

        Args:
            name: a job name nobody uses yet (nor a job defined in code or TOML).
            schedule: as for :meth:`cronrace.Agent.add_job`; ``H`` hashes ``name``.
            handler: the name a handler was registered under on the agents
                (``@agent.handler(name)``); or give a target table instead:
                ``http={...}``, ``command={...}`` or ``stream={...}`` (sidecar).
            args: JSON values the handler receives as ``ctx.args``.
            strict: refuse a handler name that neither this agent nor any live node has
                registered (default: the agent's ``strict_handlers`` setting).
            **options: the job options (:class:`~cronrace.model.job.PolicyOptions`) and a
                target table: ``http``, ``command`` or ``stream``.

        Raises:
            JobDefinitionError: a field is invalid, the name is taken, the target would be
                refused, or (strict) the handler is unknown; nothing was written.
            ScheduleError: the schedule or zone is invalid.
        """
        raw: dict[str, Any] = {"name": name, "schedule": schedule, **options}
        if handler is not None:
            raw["handler"] = handler
        if args:
            raw["args"] = dict(args)
        spec = await self._checked(raw, strict)
        await self._write([ScheduleChange("add", spec.name, spec.to_json())])
        log.info("stored schedule added", extra={"job": name, "schedule": spec.schedule})
        return spec

    async def update(
        self, name: str, *, strict: bool | None = None, **changes: Unpack[ScheduleChanges]
    ) -> ScheduleSpec:
        """Change fields of a stored schedule (the others keep their values).

        Every live node moves the schedule to its new next tick at once; a paused
        schedule stays paused. Give ``handler=`` or a target table to switch what it runs.

        Raises:
            UnknownJobError: no such stored schedule.
            JobDefinitionError: a field is invalid; nothing was written.
        """
        current = await self.get(name)
        raw = current.model_dump(mode="json", exclude_defaults=True)
        if any(key in changes for key in ("handler", "http", "command", "stream")):
            for key in ("handler", "args", "http", "command", "stream"):
                raw.pop(key, None)
        raw.update({key: value for key, value in changes.items() if value is not None})
        raw["name"] = name
        spec = await self._checked(raw, strict)
        await self._write([ScheduleChange("update", name, spec.to_json())])
        log.info("stored schedule updated", extra={"job": name, "schedule": spec.schedule})
        return spec

    async def remove(self, name: str) -> None:
        """Remove a stored schedule: no node fires it after its notice (or heartbeat).

        Its history, watermark and pause flag stay, as for a job removed from code.

        Raises:
            UnknownJobError: no such stored schedule.
        """
        await self._write([ScheduleChange("remove", name)])
        log.info("stored schedule removed", extra={"job": name})

    async def get(self, name: str) -> ScheduleSpec:
        """Return one stored schedule.

        Raises:
            UnknownJobError: no such stored schedule.
            StoreError: what is stored under the name is not a definition.
        """
        _, found = await self._store.schedules.read([name])
        raw = found.get(name)
        if raw is None:
            raise self._unknown(name)
        return _decode(name, raw)

    async def list(self) -> list[ScheduleSpec]:
        """Return every stored schedule, by name (garbage is logged and left out)."""
        stored = await self._store.schedules.read_all()
        out = []
        for name, raw in sorted(stored.definitions.items()):
            try:
                out.append(_decode(name, raw))
            except CronraceError as exc:
                log.error("unreadable stored schedule left out", extra={"error": str(exc)})
        return out

    async def diff(self, wanted: Sequence[ScheduleSpec], *, prune: bool = True) -> ScheduleDiff:
        """What :meth:`apply` would change."""
        return diff_sets({spec.name: spec for spec in await self.list()}, wanted, prune=prune)

    async def apply(
        self, wanted: Sequence[ScheduleSpec], *, prune: bool = True, strict: bool | None = None
    ) -> ScheduleDiff:
        """Make the stored set equal to ``wanted`` in one atomic write; return the diff.

        Args:
            wanted: checked definitions (see :func:`cronrace.specs.stored.check_schedule`).
            prune: also remove stored schedules that ``wanted`` does not name.
            strict: as for :meth:`add`.

        Raises:
            JobDefinitionError: some definition is refused (all are checked first).
        """
        taken = await self._code_job_names()
        for spec in wanted:
            raw = spec.model_dump(mode="json", exclude_defaults=True)
            await self._checked(raw, strict, code_jobs=taken)
        found = await self.diff(wanted, prune=prune)
        changes = [ScheduleChange("add", spec.name, spec.to_json()) for spec in found.added]
        changes += [ScheduleChange("update", new.name, new.to_json()) for _, new in found.updated]
        changes += [ScheduleChange("remove", spec.name) for spec in found.removed]
        if changes:
            await self._write(changes)
        return found

    # -- checks and writes -------------------------------------------------------------

    async def _code_job_names(self) -> set[str]:
        return set(self._client.jobs) | set(await self._store.known_jobs())

    async def _checked(
        self, raw: Mapping[str, Any], strict: bool | None, *, code_jobs: set[str] | None = None
    ) -> ScheduleSpec:
        allow_hosts = list(getattr(self._client.settings, "allow_hosts", []))
        spec = check_schedule(raw, allow_hosts=allow_hosts)
        allowed = getattr(self._client.settings, "stored_targets", None)  # a sidecar's file
        if allowed is not None and spec.handler is None and spec.target_kind not in allowed:
            raise JobDefinitionError(
                f"job {spec.name!r}: {spec.target_kind} targets from stored schedules are off "
                f"in this config (stored_targets = {allowed}); the sidecars would refuse it"
            )
        if code_jobs is None:
            code_jobs = await self._code_job_names()
        if spec.name in code_jobs:
            raise JobDefinitionError(
                f"job {spec.name!r}: name {spec.name!r} is already a job defined in code or a "
                "config file (a stored schedule of that name would fire beside it); choose "
                "another name"
            )
        if strict is None:
            strict = bool(getattr(self._client.settings, "strict_handlers", False))
        if strict and spec.handler is not None and not await self._handler_known(spec.handler):
            raise JobDefinitionError(
                f"job {spec.name!r}: handler {spec.handler!r} is not registered on this agent "
                "nor on any live node (strict); register it with @agent.handler"
                f"({spec.handler!r}) or pass strict=False"
            )
        return spec

    async def _handler_known(self, handler: str) -> bool:
        if handler in self._client.handlers:
            return True
        read_at, known = self._live_handlers
        now = time.monotonic()
        if now - read_at > self._client.settings.heartbeat_s:  # an apply checks many at once
            fleet = await self._client.fleet_details()
            known = {name for node in fleet for name in node.handlers}
            self._live_handlers = (now, known)
        return handler in known

    async def _write(self, changes: Sequence[ScheduleChange]) -> WriteReply:
        reply = await self._store.schedules.write(changes)
        if reply.status == "exists":
            raise JobDefinitionError(
                f"job {reply.name!r}: a stored schedule of that name exists; use update "
                "(cronrace schedules update) to change it"
            )
        if reply.status == "missing":
            raise self._unknown(reply.name)
        return reply

    def _unknown(self, name: str) -> UnknownJobError:
        return UnknownJobError(
            f"job {name!r}: no stored schedule of that name in namespace "
            f"{self._client.settings.namespace!r}"
        )


def _decode(name: str, raw: bytes) -> ScheduleSpec:
    try:
        return ScheduleSpec.from_json(name, raw)
    except ValueError as exc:
        raise JobDefinitionError(
            f"job {name!r}: the stored definition is unreadable ({str(exc).splitlines()[0]})"
        ) from None


# -- a running node ---------------------------------------------------------------------


@dataclass(slots=True)
class ScheduleSync:
    """Keeps one running node's stored schedules in step with Redis.

    Attributes:
        jobs: the stored schedules this node races for, by name.
        refused: the stored schedules it does not race for, and why.
        version: the stored version this node's set reflects.
    """

    store: Store
    node_id: str
    handlers: Mapping[str, Handler]
    code_jobs: Mapping[str, Job]
    target_factory: TargetFactory | None = None
    jobs: dict[str, Job] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    version: int = -1
    _raw: dict[str, bytes] = field(default_factory=dict)
    _scheduler: Scheduler | None = None
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    def attach(self, scheduler: Scheduler) -> None:
        """From now on, changes go to ``scheduler``'s heap (its jobs include ours)."""
        self._scheduler = scheduler

    async def reload(self, why: str) -> None:
        """Read the whole stored set and apply what differs from this node's."""
        async with self._lock:
            stored = await self.store.schedules.read_all()
            before = self.version
            for name in sorted(set(self._raw) - set(stored.definitions)):
                self._apply(name, None)
            for count, (name, raw) in enumerate(stored.definitions.items(), start=1):
                self._apply(name, raw)
                if count % APPLY_CHUNK == 0:
                    # Building thousands of jobs takes a while: claims, renewals and
                    # heartbeats must not wait for all of them.
                    await anyio.lowlevel.checkpoint()
            self.version = stored.version
        if before != stored.version:
            log.info(
                "stored schedules read",
                extra={
                    "node": self.node_id,
                    "why": why,
                    "version": stored.version,
                    "schedules": len(stored.definitions),
                    "racing": len(self.jobs),
                },
            )

    async def on_notice(self, fields: Mapping[str, str]) -> None:
        """Apply a change notice from the control stream (or read everything on a gap)."""
        try:
            first, last = int(fields.get("first", "")), int(fields.get("last", ""))
        except ValueError:
            return
        names = [name for name in fields.get("names", "").split(",") if name]
        if last <= self.version:
            return  # already read
        if first != self.version + 1 or not names:
            await self.reload("a change notice that does not follow this node's version")
            return
        async with self._lock:
            if first != self.version + 1:
                return  # a reload overtook this notice; the next check settles it
            _, found = await self.store.schedules.read(names)
            for name in names:
                self._apply(name, found.get(name))
            self.version = last

    async def check_version(self, version: int | None = None) -> None:
        """Compare the stored version (read with each heartbeat) with this node's; read
        everything when it moved without a notice reaching this node."""
        if version is None:
            version = await self.store.schedules.version()
        if version != self.version:
            await self.reload(f"stored version {version}, this node had {self.version}")

    def _apply(self, name: str, raw: bytes | None) -> None:
        if raw is not None and self._raw.get(name) == raw:
            return
        if raw is None:
            self._raw.pop(name, None)
            self.refused.pop(name, None)
            if self.jobs.pop(name, None) is not None and self._scheduler is not None:
                self._scheduler.drop_job(name)
            log.info("stored schedule no longer fires", extra={"job": name, "node": self.node_id})
            return
        self._raw[name] = raw
        job, problem = self._job_for(name, raw)
        if job is None:
            if self.jobs.pop(name, None) is not None and self._scheduler is not None:
                self._scheduler.drop_job(name)
            if self.refused.get(name) != problem:
                log.warning(
                    "not racing for a stored schedule this node cannot run",
                    extra={"job": name, "node": self.node_id, "reason": problem},
                )
            self.refused[name] = problem
            return
        self.refused.pop(name, None)
        self.jobs[name] = job
        if self._scheduler is not None:
            self._scheduler.put_job(job)

    def _job_for(self, name: str, raw: bytes) -> tuple[Job | None, str]:
        try:
            spec = ScheduleSpec.from_json(name, raw, parse_schedule=False)  # build_job parses
        except ValueError as exc:
            return None, f"unreadable definition in Redis: {str(exc).splitlines()[0]}"
        if name in self.code_jobs:
            return None, "a job defined in code or a config file has this name"
        if spec.handler is not None:
            handler = self.handlers.get(spec.handler)
            if handler is None:
                return None, f"no handler {spec.handler!r} registered on this node"
        elif self.target_factory is None:
            return None, f"{spec.describe()}: this node runs no targets (not a sidecar)"
        else:
            try:
                handler = self.target_factory(spec)
            except CronraceError as exc:
                return None, f"target refused: {exc}"
        try:
            return build_job(spec, handler), ""
        except CronraceError as exc:
            return None, str(exc)
