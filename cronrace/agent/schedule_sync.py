"""A running node's stored schedules, kept in step with the store.

:class:`ScheduleSync` reads the whole set at start-up, applies each change notice from the
control stream at once, and compares the stored version with its own at every heartbeat: a
node that missed a change (or met a store that lost its data, or came back from a
reconnect) reads the whole set again. A change reaches the tick loop through
:meth:`~cronrace.tick.loop.Scheduler.put_job` and ``drop_job``: an updated schedule fires
from its next tick after now, on every node alike. A stored schedule this node cannot run
(its handler is not registered here, a target it would refuse, a name a job in code already
has) is not raced for; the node logs that once and publishes it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from cronrace.errors import CronraceError
from cronrace.model.job import Handler, Job
from cronrace.operate.schedules import TargetFactory
from cronrace.specs.stored import ScheduleSpec, build_job

if TYPE_CHECKING:
    from cronrace.stores.contract import Store
    from cronrace.tick.loop import Scheduler

log = logging.getLogger("cronrace.agent.schedule_sync")

#: Stored schedules applied between two yields to the event loop when reading them all.
APPLY_CHUNK = 200


@dataclass(slots=True)
class ScheduleSync:
    """Keeps one running node's stored schedules in step with the store.

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
            return None, f"unreadable definition in the store: {str(exc).splitlines()[0]}"
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
