"""A pipeline's reads share one timer, and each read is still bounded as redis-py bounds it.

The server here is a stub speaking RESP on a loopback port, so that when each reply is
sent (and whether it is sent at all) is the test's to choose; the client is cronrace's own
(``make_client``), with a 0.2 s ``redis_timeout_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import TimeoutError as RedisTimeoutError

from cronrace.stores.redis.client import make_client
from tests.helpers import count_timers, resp_commands

TIMEOUT_S = 0.2

#: Seconds to wait before answering the i-th ECHO (None: never answer it, nor any after).
Delays = Callable[[int], float | None]


class StubServer:
    """Answers +OK (PING: +PONG) to all but HELLO and ECHO; echoes the i-th ECHO after
    ``delays(i)`` seconds."""

    def __init__(self, delays: Delays) -> None:
        self.delays = delays
        self.echoes = 0
        self.server: asyncio.Server | None = None
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async for command in resp_commands(reader):
                name = command[0].upper()
                if name == b"HELLO":  # RESP3, as redis-py 8 asks
                    writer.write(b"%1\r\n$5\r\nproto\r\n:3\r\n")
                    continue
                if name != b"ECHO":
                    writer.write(b"+PONG\r\n" if name == b"PING" else b"+OK\r\n")
                    continue
                delay = self.delays(self.echoes)
                self.echoes += 1
                if delay is None:
                    await asyncio.sleep(3600)
                if delay:
                    await writer.drain()
                    await asyncio.sleep(delay)
                writer.write(b"$%d\r\n%b\r\n" % (len(command[1]), command[1]))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"redis://127.0.0.1:{port}"
        return self.url

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def _client(delays: Delays) -> AsyncIterator[tuple[Any, StubServer]]:
    stub = StubServer(delays)
    async with stub as url:
        client = make_client(url, timeout_s=TIMEOUT_S)
        try:
            yield client, stub
        finally:
            await client.aclose()


async def _echo_pipeline(client: Any, count: int) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for index in range(count):
        pipe.echo(f"e{index}")
    return list(await pipe.execute())


async def test_a_pipeline_of_many_replies_starts_one_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async for client, stub in _client(lambda _i: 0.0):
        await client.ping()  # connected: the handshake's reads are not counted
        calls = count_timers(monkeypatch)
        replies = await _echo_pipeline(client, 200)
        assert replies == [f"e{i}".encode() for i in range(200)]
        assert calls[0] <= 3, calls  # the pool's wait, the send, and the reads: one each
        # redis-py's own connection class for the same pipeline: a timer per reply.
        plain = aioredis.Redis.from_url(stub.url, socket_timeout=TIMEOUT_S)
        await plain.ping()
        calls[0] = 0
        await _echo_pipeline(plain, 200)
        assert calls[0] >= 200
        await plain.aclose()


async def test_a_read_that_waits_the_timeout_fails_as_redis_py_would() -> None:
    async for client, _stub in _client(lambda i: 0.0 if i < 5 else None):
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError, match=r"Timeout reading from 127\.0\.0\.1:"):
            await _echo_pipeline(client, 10)
        waited = time.monotonic() - started
        assert TIMEOUT_S <= waited < TIMEOUT_S + 1.0
        assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]
        # The connection that timed out was closed, not handed to the next caller.
        assert await client.ping()


async def test_replies_each_within_the_timeout_pass_however_long_they_take_together() -> None:
    # Ten replies 0.12 s apart: 1.2 s for the pipeline, no read waits 0.2 s.
    async for client, _stub in _client(lambda _i: 0.12):
        replies = await _echo_pipeline(client, 10)
        assert replies == [f"e{i}".encode() for i in range(10)]


async def test_this_process_busy_between_reads_is_not_blamed_on_the_server() -> None:
    # The first reply's callback blocks the loop 0.3 s (longer than the timeout); the next
    # reply comes 0.4 s after the first, so the second read waits for it: 0.1 s of its own.
    async for client, _stub in _client(lambda i: 0.4 if i == 1 else 0.0):

        def slow(reply: Any, **_options: Any) -> Any:
            time.sleep(0.3)
            return reply

        client.response_callbacks["ECHO"] = slow
        replies = await _echo_pipeline(client, 2)
        assert replies == [b"e0", b"e1"]


async def test_a_cancellation_from_elsewhere_is_not_taken_for_a_timeout() -> None:
    async for client, _stub in _client(lambda _i: None):
        task = asyncio.ensure_future(_echo_pipeline(client, 3))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await client.ping()
