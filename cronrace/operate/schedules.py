"""Stored schedules at runtime: the operator API.

:class:`Schedules` (``agent.schedules``) adds, changes and removes schedules stored in
the store, from any process on the namespace, checking a definition fully before anything
is written and writing it in one step (``stores/redis/schedules.py``): nothing half-written
stays. It needs only what :class:`ScheduleHost` names (the operator client is one, and so
is anything else that has a store, settings, the jobs and handlers of this process, and a
look at the fleet); a running node's side is :mod:`cronrace.agent.schedule_sync`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from cronrace.errors import CronraceError, JobDefinitionError, UnknownJobError
from cronrace.model.job import Handler, Job, PolicyOptions
from cronrace.specs.stored import ScheduleSpec, check_schedule
from cronrace.stores.values import ScheduleChange, WriteReply

if TYPE_CHECKING:
    from cronrace.fleet.definitions import NodeDetails
    from cronrace.settings import AgentSettings
    from cronrace.stores.contract import Store

log = logging.getLogger("cronrace.operate.schedules")

#: Turns a stored schedule's target table into a handler (the sidecar sets one).
TargetFactory = Callable[[ScheduleSpec], Handler]


class ScheduleHost(Protocol):
    """What :class:`Schedules` needs of its owner (an :class:`~cronrace.OperatorClient`)."""

    @property
    def store(self) -> Store: ...

    @property
    def settings(self) -> AgentSettings: ...

    @property
    def jobs(self) -> Mapping[str, Job]: ...

    @property
    def handlers(self) -> Mapping[str, Handler]: ...

    async def fleet_details(self) -> list[NodeDetails]: ...


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

    def __init__(self, client: ScheduleHost) -> None:
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
