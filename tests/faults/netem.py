"""A TCP proxy that puts a network between one agent and Redis: latency and partitions.

Each agent process of a fault test can talk to Redis through its own :class:`Proxy`:
``delay_s`` adds latency in each direction (it widens the window between a wake-up's
claims and its decisions, so that a signal can be aimed inside it), and :meth:`Proxy.cut`
blackholes the link, as a partition does: bytes are held, not refused, so the agent sees
timeouts rather than resets, until :meth:`Proxy.heal` lets them through again.

The proxy runs its own event loop in a thread, so synchronous tests can drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import redis

from cronrace.stores.redis import Keys
from cronrace.testing import free_port
from tests.faults.witness import Witness, start_node, stop_all


class Proxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream_port``, with latency and partitions."""

    def __init__(self, upstream_port: int, *, delay_s: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.delay_s = delay_s
        self._open: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Proxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=5)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            current = asyncio.current_task()
            tasks = [task for task in asyncio.all_tasks() if task is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._server is not None:
                await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def cut(self) -> None:
        """Blackhole the link both ways (connections stay open; bytes wait)."""
        self._in_loop(self._link().clear)

    def heal(self) -> None:
        """Let the held bytes and everything after them through."""
        self._in_loop(self._link().set)

    def _in_loop(self, action: Callable[[], None]) -> None:
        async def call() -> None:
            action()

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=5)

    def _link(self) -> asyncio.Event:
        assert self._open is not None, "start() first"
        return self._open

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_w.close()
            return
        self._writers |= {client_w, upstream_w}
        try:
            await asyncio.gather(self._pipe(client_r, upstream_w), self._pipe(upstream_r, client_w))
        finally:
            for writer in (client_w, upstream_w):
                self._writers.discard(writer)
                writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy bytes, each chunk ``delay_s`` late, holding them while the link is cut."""
        queue: deque[tuple[float, bytes]] = deque()
        arrived = asyncio.Event()
        done = False

        async def read() -> None:
            nonlocal done
            with contextlib.suppress(OSError):
                while chunk := await reader.read(65536):
                    queue.append((time.monotonic() + self.delay_s, chunk))
                    arrived.set()
            done = True
            arrived.set()

        reading = asyncio.ensure_future(read())
        try:
            while True:
                if not queue:
                    if done:
                        return
                    arrived.clear()
                    await arrived.wait()
                    continue
                due, chunk = queue[0]
                wait_s = due - time.monotonic()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                await self._link().wait()
                queue.popleft()
                writer.write(chunk)
                await writer.drain()
        except OSError:
            return
        finally:
            reading.cancel()
            writer.close()


class ProxiedNodes:
    """Agent processes (``tests.faults.app``), each reaching Redis through its own proxy."""

    def __init__(
        self,
        redis_port: int,
        namespace: str,
        witness: Witness,
        logs: Path,
        *,
        delay_s: float,
    ) -> None:
        self.redis_port = redis_port
        self.namespace = namespace
        self.witness = witness
        self.logs = logs
        self.delay_s = delay_s
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.proxies: dict[str, Proxy] = {}

    def add(self, node: str, **env: str) -> str:
        """Start ``node`` behind a new proxy (``env``: extra environment for it)."""
        proxy = self.proxies[node] = Proxy(self.redis_port, delay_s=self.delay_s).start()
        self.procs[node] = start_node(
            proxy.url, self.namespace, node, self.witness, env=env, stderr_dir=self.logs
        )
        return node

    def live(self) -> set[str]:
        """The nodes whose heartbeat Redis holds now (read directly, not through a proxy)."""
        client = redis.Redis(port=self.redis_port)
        try:
            members = client.zrangebyscore(Keys(self.namespace).nodes, time.time() * 1000, "+inf")
            return {member.decode() for member in members}
        finally:
            client.close()

    def wait_live(self, count: int | None = None, timeout_s: float = 30) -> None:
        """Wait until ``count`` of the running nodes (default: all) have a heartbeat."""
        want = len(self.procs) if count is None else count
        deadline = time.monotonic() + timeout_s
        while len(self.live() & set(self.procs)) < want:
            assert time.monotonic() < deadline, f"fewer than {want} nodes came up"
            time.sleep(0.05)

    def close(self) -> None:
        stop_all(self.procs.values())
        for proxy in self.proxies.values():
            proxy.stop()

    def __enter__(self) -> ProxiedNodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
