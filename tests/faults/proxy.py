"""A TCP proxy in front of redis-server that loses replies on purpose.

Agents connect to the proxy instead of Redis. ``cut_after(marker)`` arms it: the next
request that contains ``marker`` (e.g. the SHA of ``decide.lua``) is passed on to Redis,
which runs it, but its reply is thrown away and the connection is closed a moment later,
exactly like a network cut between the command and its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

from cronrace.testing import free_port


@dataclass
class _Armed:
    marker: bytes
    times: int
    cut: int = 0


@dataclass
class FaultProxy:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``target_port`` in a thread of its own."""

    target_port: int
    port: int = field(default_factory=free_port)
    hold_s: float = 0.05
    _armed: _Armed | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> FaultProxy:
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        assert started.wait(5), "proxy did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def retarget(self, port: int) -> None:
        """Send new connections to ``port`` (a DNS name re-pointed); open ones stay put."""
        self.target_port = port

    def cut_after(self, marker: bytes, times: int = 1) -> None:
        """Lose the replies of the next ``times`` requests containing ``marker``."""
        with self._lock:
            self._armed = _Armed(marker, times)

    @property
    def cuts(self) -> int:
        with self._lock:
            return self._armed.cut if self._armed else 0

    def _take(self, chunk: bytes) -> bool:
        with self._lock:
            armed = self._armed
            if armed is None or armed.cut >= armed.times or armed.marker not in chunk:
                return False
            armed.cut += 1
            return True

    def _run(self, started: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        server = loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        )
        started.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            loop.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.close()
            return
        doomed = asyncio.Event()

        async def upstream() -> None:
            while chunk := await client_r.read(65536):
                cut = self._take(chunk)
                if cut:
                    doomed.set()  # from now on nothing goes back to this client
                server_w.write(chunk)
                await server_w.drain()
                if cut:
                    await asyncio.sleep(self.hold_s)  # Redis runs it meanwhile
                    return

        async def downstream() -> None:
            while chunk := await server_r.read(65536):
                if doomed.is_set():
                    continue
                client_w.write(chunk)
                await client_w.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        with contextlib.suppress(Exception):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for writer in (client_w, server_w):
            with contextlib.suppress(Exception):
                writer.close()
