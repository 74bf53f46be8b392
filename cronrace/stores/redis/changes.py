"""The fleet's change log on Redis: who joined, who left, who published a new fingerprint.

``<ns>:fleet:log`` is a stream with one entry per change: ``n`` the node, ``k`` the kind
(``join``, ``leave``, ``print``) and ``v`` its value (the joiner's heartbeat expiry, the
new fingerprint). Stream ids are the server's and only grow, so a node that remembers the
last id it read (its cursor) reads only what came after with one ``XRANGE``: a heartbeat
costs O(changes), not O(N), and the fleet's heartbeats O(N), not O(N²).

The stream is trimmed to about :data:`LOG_MAX` entries. A reader whose cursor is more than
:data:`READ_MAX` entries behind, or whose cursor's entry is gone (trimmed, a wipe, the key
moved aside as garbage), is told there is a ``gap`` and reads in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cronrace.stores.redis.replies import decode_text

#: The stream keeps about this many entries (each a few dozen bytes).
LOG_MAX = 10_000
#: More changes than this since a cursor: read in full rather than the changes.
READ_MAX = 1_000
#: The cursor of an empty log.
EMPTY = "0-0"

JOIN = "join"
LEAVE = "leave"
PRINT = "print"


def entry(node: str, kind: str, value: str | int = "") -> dict[str, str]:
    """The fields of one log entry."""
    return {"n": node, "k": kind, "v": str(value)}


def add_kwargs() -> dict[str, Any]:
    """``XADD`` options: trim to about :data:`LOG_MAX` entries."""
    return {"maxlen": LOG_MAX, "approximate": True}


def parse_id(stream_id: str) -> tuple[int, int]:
    """A stream id as (milliseconds, sequence)."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def after(cursor: str) -> str:
    """The smallest stream id greater than ``cursor`` (XRANGE's start is inclusive)."""
    ms, seq = parse_id(cursor)
    return f"{ms}-{seq + 1}"


def last_id(reply: Any) -> str:
    """The id of an ``XREVRANGE + - COUNT 1`` reply's entry, or :data:`EMPTY`."""
    return decode_text(reply[0][0]) if reply else EMPTY


def decode(reply: Any) -> list[tuple[str, str, str, str]]:
    """An ``XRANGE`` reply as (id, node, kind, value), oldest first; malformed entries skipped.

    Its three fields are looked up, not every field decoded: a loaded 1,000-node fleet
    logs a join for every late beat, and each node reads them all (issue 19).
    """
    out = []
    for stream_id, fields in reply or ():
        if not fields:
            continue
        node, kind = fields.get(b"n"), fields.get(b"k")
        if node is None or kind is None:  # a server or client that answers text
            text = {decode_text(k): v for k, v in fields.items()}
            node, kind, value = text.get("n"), text.get("k"), text.get("v")
            if node is None or kind is None:
                continue
        else:
            value = fields.get(b"v")
        out.append(
            (decode_text(stream_id), decode_text(node), decode_text(kind), decode_text(value))
        )
    return out


def gap(cursor: str, entries: Sequence[tuple[str, str, str, str]], oldest: Any) -> bool:
    """Whether the log may no longer hold every change after ``cursor``.

    More than :data:`READ_MAX` entries were read (only so many are asked for), or the
    cursor's own entry is gone: the oldest entry is newer than it, or the log is empty
    although the cursor names an entry (the log was trimmed past it, wiped or moved aside).
    """
    if len(entries) > READ_MAX:
        return True
    if cursor == EMPTY:
        return False
    if not oldest:
        return True
    return parse_id(decode_text(oldest[0][0])) > parse_id(cursor)


def latest(
    entries: Sequence[tuple[str, str, str, str]], kinds: Sequence[str]
) -> dict[str, tuple[str, str]]:
    """Each node's last entry among ``kinds``: node -> (kind, value)."""
    out: dict[str, tuple[str, str]] = {}
    for _id, node, kind, value in entries:
        if kind in kinds:
            out[node] = (kind, value)
    return out
