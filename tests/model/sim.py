"""A fleet of real in-process agents on one fake clock and one embedded store, and the
faults the scheduler model (tests/model/scheduler.py) does to it.

- **Time** is one :class:`~cronrace.testing.FakeClock`. The embedded store (fakeredis)
  reads it too (:func:`server_time_follows`): claims and leases expire when the fake clock
  says, as on a real server whose clock the nodes share.
- **A frozen node** (SIGSTOP, a long GC pause, a migrated VM): its sleepers do not return
  and its Redis calls are neither sent nor answered until it thaws; its clocks run on, so
  it wakes late. A node frozen for good has crashed (SIGKILL): it never acts again.
- **Redis down**: every call fails at once (fakeredis's ``connected`` flag).
- **Answers lost**: Redis executes every call, but no answer arrives (a network dropping
  replies, a timeout after the write): the ambiguous case of docs/design.md section 8.

Everything here is the test's hand on the fleet; the agents run unchanged.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import time as real_time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import fakeredis
from redis.exceptions import ConnectionError as RedisConnectionError

from cronrace.stores.redis.client import embedded_connection
from cronrace.testing import FakeClock

#: fakeredis modules that read ``time.time()``: key expiry, ``TIME``, stream ids.
SERVER_TIME_MODULES = (
    "fakeredis._socket._base",
    "fakeredis.commands_mixins.server_mixin",
    "fakeredis.model._stream",
    "fakeredis._helpers",
)
#: How far a buried node's clocks jump: every deadline it waits for is over at once.
FAR_S = 100 * 365 * 86400.0


class _ServerTime(ModuleType):
    """``time`` as fakeredis sees it: ``time()`` is the fake clock, the rest is real."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__("time")
        self._clock = clock

    def time(self) -> float:
        return self._clock.time()

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


@contextmanager
def server_time_follows(clock: FakeClock) -> Iterator[None]:
    """Make every fakeredis server read ``clock`` (restored on exit)."""
    modules = [importlib.import_module(name) for name in SERVER_TIME_MODULES]
    saved = [module.time for module in modules]  # type: ignore[attr-defined]
    shim = _ServerTime(clock)
    for module in modules:
        module.time = shim  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, original in zip(modules, saved, strict=True):
            module.time = original  # type: ignore[attr-defined]


class Process:
    """Whether a node's process runs, is frozen, or is dead and being cleared away."""

    def __init__(self) -> None:
        self.frozen = False
        self.killed = False  # frozen for good
        self.buried = False  # the test is clearing it away: everything fails fast
        self._thawed: asyncio.Event | None = None

    def freeze(self) -> None:
        self.frozen = True

    def thaw(self) -> None:
        if self.killed and not self.buried:
            return
        self.frozen = False
        if self._thawed is not None:
            self._thawed.set()
            self._thawed = None

    def kill(self) -> None:
        self.killed = True
        self.freeze()

    def bury(self) -> None:
        self.buried = True
        self.thaw()

    async def running(self) -> None:
        """Return when the process runs (at once unless frozen)."""
        while self.frozen:
            if self._thawed is None:
                self._thawed = asyncio.Event()
            await self._thawed.wait()


class NodeClock:
    """One node's view of the shared fake clock: it stands still while the node is frozen."""

    max_sleep_s = math.inf

    def __init__(self, base: FakeClock, process: Process) -> None:
        self.base = base
        self.process = process

    def time(self) -> float:
        return self.base.time() + (FAR_S if self.process.buried else 0.0)

    def monotonic(self) -> float:
        return self.base.monotonic() + (FAR_S if self.process.buried else 0.0)

    async def sleep(self, seconds: float) -> None:
        if self.process.buried:
            await asyncio.sleep(0)
            return
        await self.base.sleep(seconds)
        await self.process.running()


@dataclass
class Network:
    """The shared server's reachability: down, or answering nothing it executes."""

    server: fakeredis.FakeServer
    answers_lost: bool = False

    @property
    def down(self) -> bool:
        return not self.server.connected

    @down.setter
    def down(self, value: bool) -> None:
        self.server.connected = not value

    @property
    def reachable(self) -> bool:
        return not self.down and not self.answers_lost

    def heal(self) -> None:
        self.down = False
        self.answers_lost = False


def node_client(network: Network, process: Process) -> Any:
    """An async client of the shared server whose calls go through ``process`` and
    ``network``: frozen with the node, failing with the network."""

    class NodeConnection(embedded_connection()):  # type: ignore[misc]
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            await process.running()
            if process.buried:
                raise RedisConnectionError("the node is dead")
            await super().send_packed_command(command, check_health)

        async def read_response(self, **kwargs: Any) -> Any:
            response = await super().read_response(**kwargs)
            await process.running()
            if network.answers_lost or process.buried:
                await self.disconnect()
                raise RedisConnectionError("the answer was lost on the way")
            return response

    return fakeredis.FakeAsyncRedis(
        server=network.server, decode_responses=False, connection_class=NodeConnection
    )
