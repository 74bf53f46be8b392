"""What each live node runs, published with its heartbeat (docs/design.md section 13).

Two namespace-level hashes, one field per node:

- ``<ns>:fleet:defs``: a short fingerprint, ``<jobs> <details>``: the first part hashes
  the node's job definitions from code or TOML, the second everything it publishes. It is
  written with every heartbeat (a few dozen bytes), so that every node sees the others'
  at the cost of one ``HGETALL`` of fingerprints;
- ``<ns>:fleet:details``: the JSON the second part hashes (each job's digest, schedule
  and zone; the handlers this node has; the stored schedules it refuses and why), written
  only when it changed or went missing, and read only for nodes whose fingerprint moved.

Fields of nodes that left the live set are deleted by whichever node notices.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import cronrace.stores.redis.changes as changes
from cronrace.stores.contract import FleetStore
from cronrace.stores.redis.errors import translating
from cronrace.stores.redis.garbage import Command, is_wrong_type
from cronrace.stores.redis.keys import Keys
from cronrace.stores.redis.replies import decode_text, int_or_none
from cronrace.stores.redis.schedules import VERSION_FIELD
from cronrace.stores.values import FleetReply, FleetRequest

log = logging.getLogger("cronrace.stores.redis")


@translating
class FleetCommands(FleetStore):
    """Redis commands of the fleet's definitions exchange (``store.fleet``)."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    async def exchange(
        self,
        node_id: str,
        fingerprint: str,
        *,
        details: bytes | None,
        now_ms: int,
        since: str | None = None,
        changed: bool = True,
    ) -> FleetReply:
        """Publish this node's fingerprint (and details when given); read the others'.

        One round trip: also reads the stored schedules' version. With ``since`` None,
        every live node's fingerprint (``HGETALL`` and the live set); with a cursor, only
        the fingerprints logged since (changes.py). A changed fingerprint is logged. The
        heartbeat sends the same commands in its own round trip (members.py).
        """
        request = FleetRequest(fingerprint, details, since, changed)
        pipe = self.client.pipeline(transaction=False)
        for command in exchange_commands(self.keys, node_id, request, now_ms):
            command.queue(pipe)
        return decode_exchange(node_id, request, await pipe.execute(raise_on_error=False))

    async def read_details(self, nodes: Sequence[str]) -> dict[str, bytes | None]:
        """The published details of ``nodes`` (None where a node has none)."""
        if not nodes:
            return {}
        values = await self.client.hmget(self.keys.fleet_details, list(nodes))
        return dict(zip(nodes, values, strict=True))

    async def forget(self, nodes: Sequence[str]) -> None:
        """Delete the published fields of nodes that left."""
        if nodes:
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.keys.fleet_defs, *nodes)
            pipe.hdel(self.keys.fleet_details, *nodes)
            await pipe.execute()


def exchange_commands(
    keys: Keys, node_id: str, request: FleetRequest, now_ms: int
) -> list[Command]:
    """The commands of one exchange (:meth:`FleetCommands.exchange`), to pipeline."""
    commands = []
    if request.changed or request.since is None:
        commands.append(Command("hset", keys.fleet_defs, (node_id, request.fingerprint)))
    if request.changed:
        fields = changes.entry(node_id, changes.PRINT, request.fingerprint)
        commands.append(Command("xadd", keys.fleet_log, (fields,), changes.add_kwargs()))
    if request.details is not None:
        commands.append(Command("hset", keys.fleet_details, (node_id, request.details)))
    if request.since is None:
        commands += [
            Command("xrevrange", keys.fleet_log, ("+", "-"), {"count": 1}),  # the cursor first
            Command("hgetall", keys.fleet_defs),
            Command("zrangebyscore", keys.nodes, (now_ms, "+inf")),
        ]
    else:
        start = changes.after(request.since)
        commands += [
            Command("xrange", keys.fleet_log, (start, "+"), {"count": changes.READ_MAX + 1}),
            Command("xrange", keys.fleet_log, ("-", "+"), {"count": 1}),
        ]
    commands.append(Command("hexists", keys.fleet_details, (node_id,)))
    commands.append(Command("hget", keys.schedules, (VERSION_FIELD,)))
    return commands


def decode_exchange(
    node_id: str,
    request: FleetRequest,
    raw: Sequence[Any],
    entries_of: Callable[[Any], list[tuple[str, str, str, str]]] = changes.decode,
) -> FleetReply:
    """The reply of one exchange from the replies of :func:`exchange_commands`.

    ``entries_of`` decodes the change log's entries (the heartbeat passes its own, which
    remembers the reply it shares with the exchange: the entries are decoded once).

    Raises:
        The first error reply that is not ``WRONGTYPE`` (garbage under a fleet key reads
        as empty, logged).
    """
    replies = []
    for reply in raw:
        if isinstance(reply, Exception) and not is_wrong_type(reply):
            raise reply
        if isinstance(reply, Exception):
            # Garbage under a fleet key: this exchange sees nothing there; the node
            # that deletes dead fields (HDEL) fails too and says which key (ERROR).
            log.error("garbage under a fleet key; shown as empty", extra={"error": str(reply)})
            reply = None
        replies.append(reply)
    has_details, version = replies[-2:]
    schedules_version = int_or_none(version) or 0
    since = request.since
    if since is not None:
        logged, oldest = replies[-4:-2]
        entries = entries_of(logged)
        cursor = entries[-1][0] if entries else since
        prints = changes.latest(entries, (changes.PRINT,))
        return FleetReply(
            fingerprints={node: value for node, (_kind, value) in prints.items()},
            dead=(),
            details_missing=not has_details,
            schedules_version=schedules_version,
            full=False,
            cursor=cursor,
            gap=changes.gap(since, entries, oldest),
        )
    last, everyone, live_raw = replies[-5:-2]
    everyone, live_raw = everyone or {}, live_raw or []
    live = {decode_text(node) for node in live_raw} | {node_id}
    prints_all = {decode_text(node): decode_text(value) for node, value in everyone.items()}
    return FleetReply(
        fingerprints={node: value for node, value in prints_all.items() if node in live},
        dead=tuple(sorted(set(prints_all) - live)),
        details_missing=not has_details,
        schedules_version=schedules_version,
        cursor=changes.last_id(last),
    )
