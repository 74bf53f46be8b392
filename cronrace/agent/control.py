"""The control reader: manual triggers and stored-schedule notices, from the control stream.

Operators append requests to ``<ns>:control`` (``cronrace trigger``, ``schedules add``);
every running node reads every entry from the position it took when it connected, so a
request made once a node reports ready is never missed. A trigger is raced for like a
tick (:meth:`~cronrace.tick.loop.Scheduler.fire_trigger`); a schedule notice is applied
at once (the heartbeat's version check catches up with one that was missed).
"""

from __future__ import annotations

import contextlib
import logging

from anyio.abc import TaskGroup

from cronrace.agent.schedule_sync import ScheduleSync
from cronrace.errors import RedisAccessError, StoreError
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.runtime.retry import Retry
from cronrace.stores.contract import Store
from cronrace.tick.loop import Scheduler

log = logging.getLogger("cronrace.agent.core")

#: The shortest blocking read of the control stream.
MIN_BLOCK_MS = 500


class ControlReader:
    """Reads the control stream for one running node.

    Args:
        store: where the stream is.
        clock: sleeps between failed reads.
        observer: counts failed reads.
        node_id: named in the log lines.
        redis_timeout_s: the socket timeout; a read blocks a little less than it.
    """

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        observer: Observer,
        node_id: str,
        redis_timeout_s: float,
    ) -> None:
        self.store = store
        self.clock = clock
        self.observer = observer
        self.node_id = node_id
        # Block as long as the socket timeout allows: each wait costs Redis one command per
        # node, and a trigger wakes it at once anyway.
        self.block_ms = max(MIN_BLOCK_MS, int((redis_timeout_s - 1) * 1000))
        #: The stream id after which this node reads (taken when it connects).
        self.position: str | None = None

    async def check(self) -> None:
        """Take the position to read from, and read once (at connection).

        Manual triggers come through ``XREAD``: a user who may not run it would otherwise
        fire every scheduled tick and silently drop every trigger. The reader goes on from
        this position: a trigger made once the agent reports ready is never before it.
        """
        self.position = await self.store.control_position()
        await self.store.read_control(self.position, block_ms=1)

    async def run(self, scheduler: Scheduler, sync: ScheduleSync | None, runs: TaskGroup) -> None:
        """Read and act on requests until the scheduler's gate closes."""
        gate = scheduler.gate
        retry = Retry(self.clock)
        while not gate.stopping:
            entries: list[tuple[str, dict[str, str]]] = []
            try:
                with gate.waiting():
                    if self.position is None:
                        self.position = await self.store.control_position()
                    entries = await self.store.read_control(self.position, block_ms=self.block_ms)
                    now_ms = 0
                    if any(fields.get("op") == "trigger" for _id, fields in entries):
                        # A trigger's age is read on Redis's clock, the stream ids' own.
                        now_ms = _stream_ms(await self.store.control_position())
                retry.succeeded()
            except RedisAccessError:
                # Logged, counted and made readiness fail where it was translated: manual
                # triggers cannot run while Redis refuses this, and /readyz says so.
                self.observer.redis_error("control")
                retry.refused()
                with gate.waiting():
                    await retry.wait()
                continue
            except StoreError as exc:
                self.observer.redis_error("control")
                if (
                    not retry.attempt
                ):  # the heartbeat reports the outage; say once that triggers wait
                    log.warning(
                        "control read failed; manual triggers wait until it works",
                        extra={"node": self.node_id, "error": str(exc)},
                    )
                with gate.waiting():
                    await retry.wait()
                continue
            if gate.stopping:
                # Every node reads every trigger: the ones still running race for these.
                return
            for entry_id, fields in entries:
                self.position = entry_id
                age_s = max(0.0, (now_ms - _stream_ms(entry_id)) / 1000)
                await self._act(scheduler, sync, entry_id, fields, runs, age_s)

    async def _act(
        self,
        scheduler: Scheduler,
        sync: ScheduleSync | None,
        entry_id: str,
        fields: dict[str, str],
        runs: TaskGroup,
        age_s: float,
    ) -> None:
        if fields.get("op") == "schedules" and sync is not None:
            with contextlib.suppress(StoreError):  # the heartbeat catches up
                await sync.on_notice(fields)
        job = scheduler.jobs.get(fields.get("job", ""))
        if fields.get("op") == "trigger" and job is not None:
            log.info("manual trigger", extra={"job": job.name, "trigger": fields.get("id")})
            await scheduler.fire_trigger(job, fields.get("id", entry_id), runs, age_s=age_s)


def _stream_ms(entry_id: str) -> int:
    """The time part of a stream id (``<ms>-<seq>``): when Redis took the entry."""
    return int(entry_id.split("-", 1)[0])
