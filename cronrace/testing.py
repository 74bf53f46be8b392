"""What users need to test their own jobs: a fake clock and an in-memory agent.

Example::

    from cronrace.testing import FakeClock, memory_agent, run_handler

    async def test_cleanup_deletes_old_rows():
        ctx_result = await run_handler(cleanup, job="cleanup", tick_s=1_700_000_000)

    async def test_job_fires_every_minute():
        clock = FakeClock(start_s=1_700_000_000)
        agent = memory_agent(clock)
        fired = []
        agent.add_job(lambda ctx: fired.append(ctx.tick_s), "* * * * *", name="minutely")
        async with anyio.create_task_group() as tg:
            await tg.start(agent.run)   # returns once the agent is ready
            await clock.advance(180)    # three minutes pass at once
            agent.stop()
        assert len(fired) == 3
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import math
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from cronrace.agent.core import Agent
from cronrace.model.job import Handler, RunContext
from cronrace.settings import AgentSettings
from cronrace.stores.contract import RedisFeatures, Store
from cronrace.stores.urls import open_store

__all__ = ["FakeClock", "RedisServer", "TLSFiles", "free_port", "memory_agent", "run_handler"]


class FakeClock:
    """A clock that only moves when told to; sleepers wake as time passes them.

    ``time()`` is wall time (UTC epoch seconds) and ``monotonic()`` moves with it.
    :meth:`advance` moves from one sleeper's wake-up to the next, so every task wakes at
    the instant it asked for, never late, and everything a real clock would have fired on
    the way fires. At each of those instants it lets the woken tasks run until every task
    waits again (on this clock, on Redis, on a timer) before time moves on: an hour of a
    minutely job takes well under a second of real time.
    """

    #: The agent's tick loop may sleep until the next tick in one go: this clock wakes every
    #: sleeper at its instant, also when stepped, so re-reading it every second buys nothing.
    max_sleep_s = math.inf

    def __init__(self, start_s: float = 1_700_000_000.0) -> None:
        self._origin_s = float(start_s)
        # Time is kept as seconds since the start, where a float resolves nanoseconds; an
        # epoch time (~1.7e9) resolves only ~0.2 us, and a sleep shorter than that (a lease
        # renewal's "the rest of the interval") would not move it: the sleeper would wake
        # at once, sleep again, and never let time pass.
        self._elapsed_s = 0.0
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()
        self._busy: list[Callable[[], bool]] = []

    def time(self) -> float:
        return self._origin_s + self._elapsed_s

    def monotonic(self) -> float:
        return self._elapsed_s

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        wake = anyio.Event()
        # Strictly later than now, however short the sleep: a sleeper never wakes where it
        # fell asleep.
        wake_s = max(self._elapsed_s + seconds, math.nextafter(self._elapsed_s, math.inf))
        heapq.heappush(self._sleepers, (wake_s, next(self._order), wake))
        await wake.wait()

    def wait_while(self, busy: Callable[[], bool]) -> None:
        """Make :meth:`advance` also wait (on real time) while ``busy()`` is true.

        For work this clock cannot see, such as sync handlers in worker threads;
        :func:`memory_agent` registers its agent's.
        """
        self._busy.append(busy)

    async def advance(self, seconds: float, *, step_s: float | None = None) -> None:
        """Move time forward by ``seconds``, waking every sleeper at its own instant.

        Args:
            seconds: how far to move.
            step_s: also stop at least this often (sleepers wake at their own instant
                whatever it is; a smaller step only adds stops).
        """
        target = self._elapsed_s + max(0.0, seconds)
        await self._settle()
        while True:
            stop = min(self._sleepers[0][0], target) if self._sleepers else target
            if step_s is not None and step_s > 0:
                stop = min(stop, self._elapsed_s + step_s)
            self._elapsed_s = max(self._elapsed_s, stop)
            self._wake_due()
            await self._settle()
            if self._elapsed_s >= target:
                return

    async def set_time(self, time_s: float) -> None:
        """Jump to ``time_s`` at once, as a process paused until then sees it on waking.

        Sleepers due on the way all wake together, late; use :meth:`advance` for time that
        passes while the process runs. What was started before the jump first runs until it
        waits (an agent just started has planned its first tick), as :meth:`advance` does.
        """
        await self._settle()
        self._elapsed_s = max(self._elapsed_s, float(time_s) - self._origin_s)
        self._wake_due()
        await self._settle()

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._elapsed_s:
            heapq.heappop(self._sleepers)[2].set()

    async def _settle(self) -> None:
        """Let every task run until it waits again (and threads registered as busy finish)."""
        deadline = time.monotonic() + THREAD_WAIT_S
        while True:
            await _all_tasks_blocked()
            if not any(busy() for busy in self._busy) or time.monotonic() > deadline:
                return
            await anyio.sleep(0.001)


#: The longest real time :meth:`FakeClock.advance` waits for busy worker threads per stop.
THREAD_WAIT_S = 5.0
#: The most event-loop turns one settle takes (a task that never waits would spin forever).
SETTLE_MAX_TURNS = 10_000
#: Without a visible ready queue: how many turns in a row every task must be waiting.
QUIET_TURNS = 20


async def _all_tasks_blocked() -> None:
    """Yield until every other task waits on something (a future, a timer, a socket)."""
    try:
        this = asyncio.current_task()
    except RuntimeError:  # not asyncio (trio): its own test is exact and fast
        await anyio.wait_all_tasks_blocked()
        return
    # anyio.wait_all_tasks_blocked polls every 0.1 s on asyncio, far too slow for a clock
    # that stops thousands of times. The same test one loop turn at a time, plus an empty
    # ready queue: a done callback still queued (a future that completed, the task that
    # awaits it not yet told) would otherwise pass for a blocked task. Loops without a
    # visible ready queue (uvloop) get a few quiet turns in a row instead.
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    quiet = 0
    for _ in range(SETTLE_MAX_TURNS):
        await asyncio.sleep(0)
        blocked = all(_waiting(task) for task in asyncio.all_tasks() if task is not this)
        if blocked and ready is not None and not ready:
            return
        quiet = quiet + 1 if blocked else 0
        if quiet >= QUIET_TURNS:
            return


def _waiting(task: asyncio.Task[Any]) -> bool:
    waiter = getattr(task, "_fut_waiter", None)
    return waiter is not None and not waiter.done()


def memory_agent(clock: FakeClock | None = None, **settings: Any) -> Agent:
    """Return an agent on a fresh embedded store of its own, optionally on a fake clock.

    With a fake clock the agent schedules on it directly (``clock="local"``): the embedded
    store's own ``TIME`` follows the real clock and must not correct it. Its heartbeat then
    beats every 60 s of fake time unless ``heartbeat_s`` is given: on the embedded store it
    has nothing to measure, and every beat is a stop of :meth:`FakeClock.advance`.
    """
    options: dict[str, Any] = {
        "store_url": f"memory://test-{secrets.token_hex(4)}",
        "node_id": "test-node",
        "clock": "local" if clock is not None else "redis",
        "shutdown_grace_s": 1.0,
        **({"heartbeat_s": 60.0} if clock is not None else {}),
        **settings,
    }
    agent = Agent(settings=AgentSettings(**options), clock=clock)
    if clock is not None:
        # Sync handlers run in worker threads the clock cannot see: wait for them.
        clock.wait_while(lambda: bool(agent.runner and agent.runner.sync_handlers_running))
    return agent


async def run_handler(
    handler: Handler,
    *,
    job: str = "job",
    tick_s: int = 1_700_000_000,
    fence: int = 1,
    node_id: str = "test-node",
    store: Store | None = None,
) -> Any:
    """Call a handler once with a real :class:`RunContext` and return what it returns.

    No claim and no lease are involved: this is the handler alone, as one run would call
    it. Async handlers are awaited; sync ones run in a worker thread.

    Args:
        handler: the job's function.
        job: ``ctx.job``.
        tick_s: ``ctx.tick_s`` (UTC epoch seconds).
        fence: ``ctx.fence``.
        node_id: ``ctx.node_id``.
        store: where ``ctx.fenced_set`` writes; default: a fresh embedded store.

    Returns:
        What the handler returned (an agent keeps it as the run record's ``detail``).

    Raises:
        Exception: whatever the handler raised, unchanged (an agent records ``error``).
    """
    the_store = store or open_store(f"memory://test-{secrets.token_hex(4)}")
    writer = the_store if isinstance(the_store, RedisFeatures) else None
    ctx = RunContext(job=job, tick_s=tick_s, fence=fence, node_id=node_id, _store=writer)
    try:
        if inspect.iscoroutinefunction(handler):
            return await handler(ctx)
        return await anyio.to_thread.run_sync(handler, ctx)
    finally:
        if store is None:
            await the_store.aclose()


# -- a private redis-server for integration tests ------------------------------------------

REDIS_SERVER = shutil.which("redis-server")


#: Ports handed out by :func:`free_port`: below Linux's ephemeral range (32768-60999),
#: where every outgoing connection takes its local port, so a port found free is far less
#: likely to be taken by a client socket before the server binds it.
FREE_PORTS = range(20_000, 32_000)


def free_port() -> int:
    """Return a free loopback TCP port (never 6379)."""
    for _ in range(50):
        port = FREE_PORTS.start + secrets.randbelow(len(FREE_PORTS))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    while True:  # that range is crowded: let the kernel pick
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != 6379:
            return port


class PortTakenError(RuntimeError):
    """A redis-server could not bind its port: another process took it after it was picked."""


@dataclass(frozen=True)
class TLSFiles:
    """The PEM files of a TLS-only :class:`RedisServer`: its certificate and key, and the
    CA that signed the certificate (what clients must trust)."""

    cert_file: Path
    key_file: Path
    ca_file: Path


class RedisServer:
    """One private redis-server process on 127.0.0.1, with its data in ``directory``.

    For integration tests of your own jobs against a real server (and for cronrace's own
    tests and benchmarks): a free port, never 6379; stopped by ``stop()`` or on leaving a
    ``with`` block. AOF with ``appendfsync always`` by default, the configuration under
    which cronrace's guarantees hold.

    Args:
        password: the default user's password (``requirepass``); :attr:`url` carries it.
        tls: serve TLS only (``--tls-port``, no plain port) with these files; :attr:`url`
            is then ``rediss://`` and names the CA.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendonly: bool = True,
        extra_args: tuple[str, ...] = (),
        password: str | None = None,
        tls: TLSFiles | None = None,
    ) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed")
        self.directory = directory
        self.port = port or free_port()
        #: Ports this object picked and no server has served yet may be picked again when
        #: another process took one between the pick and the bind.
        self._repick = port is None
        self._served = False
        self.appendonly = appendonly
        self.extra_args = extra_args
        self.password = password
        self.tls = tls
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        secret = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss://{secret}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca_file}"
        return f"redis://{secret}127.0.0.1:{self.port}/0"

    def _listen_args(self) -> list[str]:
        args = ["--requirepass", self.password] if self.password else []
        if self.tls is None:
            return [*args, "--port", str(self.port)]
        return [
            *args,
            "--port",
            "0",
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(self.tls.cert_file),
            "--tls-key-file",
            str(self.tls.key_file),
            "--tls-ca-cert-file",
            str(self.tls.ca_file),
            "--tls-auth-clients",
            "no",
        ]

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers (synchronous: call it from fixtures).

        A first start whose port (or ``--cluster-port``) another process took since it was
        picked is tried again on new free ports, up to five times.
        """
        for _attempt in range(4):
            try:
                return self._start_once(timeout_s)
            except PortTakenError:
                self._pick_new_ports()
        return self._start_once(timeout_s)

    def _pick_new_ports(self) -> None:
        if self._repick:
            self.port = free_port()
        args = list(self.extra_args)
        for index, arg in enumerate(args[:-1]):
            if arg == "--cluster-port":
                args[index + 1] = str(free_port())
        self.extra_args = tuple(args)

    def _start_once(self, timeout_s: float) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self._served:  # a failed first try's log must not speak for this one
            (self.directory / "redis.log").unlink(missing_ok=True)
        argv = [
            str(REDIS_SERVER),
            *self._listen_args(),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "always",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.directory / "redis.log"),
            *self.extra_args,
        ]
        # An argv list: the resolved redis-server and our own arguments, never a shell.
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)  # noqa: S603
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                if "Address already in use" in log and not self._served:
                    raise PortTakenError(log)
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log}")
            if self.ping():
                self._served = True
                self._repick = False
                return self
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer in {timeout_s}s")

    def ping(self) -> bool:
        auth = f"AUTH {self.password}\r\n".encode() if self.password else b""
        try:
            with contextlib.ExitStack() as stack:
                sock = stack.enter_context(
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
                )
                if self.tls is not None:
                    context = ssl.create_default_context(cafile=str(self.tls.ca_file))
                    sock = stack.enter_context(
                        context.wrap_socket(sock, server_hostname="127.0.0.1")
                    )
                sock.sendall(auth + b"PING\r\n")
                reply = b""
                while b"PONG" not in reply and b"-" not in reply and len(reply) < 256:
                    chunk = sock.recv(64)
                    if not chunk:
                        break
                    reply += chunk
                return b"+PONG" in reply
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
