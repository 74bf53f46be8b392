"""Commands packed into RESP faster than redis-py's generic packer, byte for byte the same.

redis-py packs every argument through its encoder (a chain of type checks) and grows the
command's buffer one argument at a time: a tick's winner spent more CPU packing its
claim, acquire and release than on anything else of its run. The arguments cronrace sends
are strings, bytes and ints; their encodings are formatted directly, and a string's (its
keys, the script's SHA, the owner) is kept, as the same keys come back every tick. Any
other argument (a float, a bool, a command name with a space) goes to redis-py's packer,
which raises or packs it as before. tests/unit/stores/redis/test_packing.py holds the two
packers to the same bytes.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

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


# The reads of a pipeline's replies share one timer (readtimer.py).
class FastConnection(FastPacking, SharedReadTimer, Connection):
    pass


class FastSSLConnection(FastPacking, SharedReadTimer, SSLConnection):
    pass


class FastUnixConnection(FastPacking, SharedReadTimer, UnixDomainSocketConnection):
    pass
