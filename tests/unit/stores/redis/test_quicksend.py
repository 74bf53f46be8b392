"""A send the socket takes at once runs no task of its own; any other is bounded as before.

The servers here are stubs on a loopback port: one answers every command at once, one
never reads, so that a large command fills the socket and the send has to wait.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cronrace.stores.redis.client import embedded_connection, make_client
from cronrace.stores.redis.packing import FastConnection, QuickSend, takes_at_once
from tests.helpers import resp_commands

TIMEOUT_S = 0.2


async def _answer_until_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """+OK to every command (HELLO: RESP3, as redis-py 8 asks) until an ECHO: from then on,
    nothing more is read."""
    try:
        async for command in resp_commands(reader):
            name = command[0].upper()
            if name == b"ECHO":
                await asyncio.sleep(3600)
            if name == b"HELLO":
                writer.write(b"%1\r\n$5\r\nproto\r\n:3\r\n")
            else:
                writer.write(b"+OK\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _serving(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def _count_tasks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    loop = asyncio.get_running_loop()
    created = [0]
    create_task = loop.create_task

    def counting(coro: Any, **kwargs: Any) -> Any:
        created[0] += 1
        return create_task(coro, **kwargs)

    monkeypatch.setattr(loop, "create_task", counting)
    return created


async def test_a_pipeline_the_socket_takes_at_once_is_sent_without_a_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async for port in _serving(_answer_until_echo):
        client = make_client(f"redis://127.0.0.1:{port}", timeout_s=TIMEOUT_S)
        plain = Connection(host="127.0.0.1", port=port, socket_timeout=TIMEOUT_S)
        try:
            await client.ping()  # connected: the handshake is not counted
            await plain.connect()
            created = _count_tasks(monkeypatch)
            pipe = client.pipeline(transaction=False)
            for index in range(50):
                pipe.set(f"k{index}", index, nx=True, px=1000)
            assert await pipe.execute() == [True] * 50
            assert created[0] == 0
            # redis-py's own connection, for the same send: asyncio.wait_for's task, up to
            # Python 3.11 (since 3.12 wait_for runs in the caller's task, as asyncio.timeout).
            await plain.send_packed_command(plain.pack_command("SET", "k", "v"))
            assert created[0] == (1 if sys.version_info < (3, 12) else 0)
        finally:
            await client.aclose()
            await plain.disconnect()


async def test_a_send_that_fills_the_socket_is_still_bounded_by_the_timeout() -> None:
    async for port in _serving(_answer_until_echo):
        connection = FastConnection(host="127.0.0.1", port=port, socket_timeout=TIMEOUT_S)
        await connection.connect()
        # Taken at once, though the server reads nothing more after it.
        await connection.send_packed_command(connection.pack_command("ECHO", "stop"))
        large = [b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (64 << 20), b"x" * (64 << 20), b"\r\n"]
        started = time.monotonic()
        with anyio.fail_after(30):  # a send left unbounded would hang here
            try:
                await connection.send_packed_command(large)
            except RedisTimeoutError as exc:
                assert str(exc) == "Timeout writing to socket"  # noqa: PT017
            else:
                buffered = connection._writer.transport.get_write_buffer_size()
                high = connection_high_water(connection)
                await connection.disconnect(nowait=True)
                # Some interpreters (CPython 3.12.1 and 3.13.0 here) never pause a writer
                # after writelines(): drain() returns at once with the whole command
                # buffered in memory, so no send can wait and there is no wait to bound.
                assert buffered > high, "the send neither waited nor buffered"
                pytest.skip(f"this Python's writelines() buffers {buffered} bytes unpaused")
        assert time.monotonic() - started < 10
        assert not connection.is_connected  # closed, as redis-py closes it


def connection_high_water(connection: Any) -> int:
    """The write buffer's high-water mark of a connection's transport (bytes)."""
    return int(connection._writer.transport.get_write_buffer_limits()[1])


class _Transport:
    def __init__(self, buffered: int = 0, high: int = 65536, closing: bool = False) -> None:
        self.buffered = buffered
        self.high = high
        self.closing = closing

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.high // 4, self.high

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class _ResetWriter:
    """A writer whose socket was reset by the peer: drain raises what asyncio raises."""

    def __init__(self, error: OSError) -> None:
        self.transport = _Transport()
        self.error = error
        self.written: list[bytes] = []

    def writelines(self, data: list[bytes]) -> None:
        self.written += data

    async def drain(self) -> None:
        raise self.error

    def close(self) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


@pytest.mark.parametrize(
    "error",
    [ConnectionResetError(104, "Connection reset by peer"), OSError("no route")],
    ids=["errno", "message"],
)
async def test_a_failed_send_raises_and_closes_as_redis_py_does(error: OSError) -> None:
    raised = []
    for kind in (FastConnection, Connection):
        connection = kind(host="127.0.0.1", port=1, socket_timeout=TIMEOUT_S)
        writer = _ResetWriter(error)
        connection._reader = asyncio.StreamReader()
        connection._writer = writer  # type: ignore[assignment]
        with pytest.raises(RedisConnectionError) as caught:
            await connection.send_packed_command(connection.pack_command("SET", "k", "v"))
        assert writer.written  # it was written before the error came
        assert not connection.is_connected
        raised.append(str(caught.value))
    assert raised[0] == raised[1]


def test_a_command_is_taken_at_once_only_by_an_empty_buffer_with_room_for_it() -> None:
    command = [b"x" * 1000, b"y" * 1000]
    assert takes_at_once(_Transport(), command)
    assert not takes_at_once(_Transport(buffered=1), command)  # something is still unsent
    assert not takes_at_once(_Transport(high=1999), command)  # it would pause writing
    assert not takes_at_once(object(), command)  # a transport that cannot say


async def test_the_embedded_store_sends_without_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    assert issubclass(embedded_connection(), QuickSend)
    client = make_client("memory://test-quicksend")
    try:
        await client.ping()
        created = _count_tasks(monkeypatch)
        pipe = client.pipeline(transaction=False)
        for index in range(50):
            pipe.set(f"k{index}", b"x" * 100_000)
        assert await pipe.execute() == [True] * 50
        assert created[0] == 0
    finally:
        await client.aclose()
