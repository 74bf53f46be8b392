"""Commands packed into RESP faster than redis-py's generic packer, byte for byte the same,
and sent without a task of their own when the socket takes them at once.

redis-py packs every argument through its encoder (a chain of type checks) and grows the
command's buffer one argument at a time: a tick's winner spent more CPU packing its
claim, acquire and release than on anything else of its run. The arguments cronrace sends
are strings, bytes and ints; their encodings are formatted directly, and a string's (its
keys, the script's SHA, the owner) is kept, as the same keys come back every tick. Any
other argument (a float, a bool, a command name with a space) goes to redis-py's packer,
which raises or packs it as before. tests/unit/stores/redis/test_packing.py holds the two
packers to the same bytes.

Sending: redis-py bounds every send by ``socket_timeout`` with ``asyncio.wait_for``, which
on Python 3.11 runs the write in a new task (a task, a future, a timer and two more turns
of the event loop for every pipeline, where the write itself is one ``send`` that
returns at once). A send can only wait when the socket's buffer is full: when the
transport holds nothing unsent and the command fits under its high-water mark, it is
written and drained directly (``drain`` then returns without waiting); otherwise it goes
the timed way, as before. The errors are redis-py's: a write that fails closes the
connection and raises its ``ConnectionError``. tests/unit/stores/redis/test_quicksend.py
holds both ways to that.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError

from cronrace.stores.redis.readtimer import SharedReadTimer

#: The most argument encodings kept; past it the table starts again (it holds keys of
#: every job a process races, and the claim keys of one tick).
KEPT_MAX = 1 << 16

_kept: dict[str, bytes] = {}


def pack(args: tuple[Any, ...]) -> bytes | None:
    """One command in RESP, or None when an argument is not a str, bytes or int."""
    name = args[0]
    if type(name) is not str or not name.isalnum():
        return None
    parts = [b"*%d\r\n" % len(args)]
    kept = _kept
    for arg in args:
        kind = type(arg)
        if kind is str:
            part = kept.get(arg)
            if part is None:
                data = arg.encode()
                part = b"$%d\r\n%b\r\n" % (len(data), data)
                if len(kept) >= KEPT_MAX:
                    kept.clear()
                kept[arg] = part
        elif kind is int:
            data = b"%d" % arg
            part = b"$%d\r\n%b\r\n" % (len(data), data)
        elif kind is bytes:
            part = b"$%d\r\n%b\r\n" % (len(arg), arg)
        else:
            return None
        parts.append(part)
    return b"".join(parts)


class FastPacking:
    """A connection mixin: :func:`pack` where it applies, redis-py's packer elsewhere."""

    def pack_command(self, *args: Any) -> list[bytes]:
        encoder = self.encoder  # type: ignore[attr-defined]
        if encoder.encoding == "utf-8" and encoder.encoding_errors == "strict":
            packed = pack(args)
            if packed is not None:
                return [packed]
        return super().pack_command(*args)  # type: ignore[misc, no-any-return]


def takes_at_once(transport: Any, command: list[bytes]) -> bool:
    """Whether writing ``command`` to ``transport`` cannot make ``drain`` wait: nothing is
    waiting to be sent (so writing is not paused) and the command fits under the
    high-water mark (so writing it cannot pause it)."""
    try:
        if transport.get_write_buffer_size():
            return False
        _low, high = transport.get_write_buffer_limits()
    except (AttributeError, NotImplementedError, RuntimeError):
        return False
    size = 0
    for part in command:
        size += len(part)
    return bool(size <= high)


class QuickSend:
    """A connection mixin: a send the socket takes at once skips redis-py's timed task."""

    def _takes_at_once(self, command: list[bytes]) -> bool:
        return takes_at_once(self._writer.transport, command)  # type: ignore[attr-defined]

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        if (
            type(command) is not list
            or self._writer is None  # type: ignore[attr-defined]
            or self._reader is None  # type: ignore[attr-defined]
            or self.health_check_interval  # type: ignore[attr-defined]
            or not self._takes_at_once(command)
        ):
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        # redis-py's handling of a failed send, less the timeout the send cannot reach.
        try:
            await self._send_packed_command(command)  # type: ignore[attr-defined]
        except OSError as exc:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            err_no, why = exc.args[:2] if len(exc.args) > 1 else ("UNKNOWN", exc)
            raise RedisConnectionError(f"Error {err_no} while writing to socket. {why}.") from exc
        except BaseException:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise


# The reads of a pipeline's replies share one timer (readtimer.py).
class FastConnection(FastPacking, QuickSend, SharedReadTimer, Connection):
    pass


class FastSSLConnection(FastPacking, QuickSend, SharedReadTimer, SSLConnection):
    pass


class FastUnixConnection(FastPacking, QuickSend, SharedReadTimer, UnixDomainSocketConnection):
    pass
