"""A node's heartbeat on Redis: the clock, the epoch, and the members that changed.

The live set is ``<ns>:nodes``, a sorted set member -> heartbeat expiry (ms). A full read
returns all of it; a read of changes (a cursor into the change log, changes.py) returns
only the members that joined or left since, those gone silent (expiry before
``live_after_ms``: a short ``ZRANGEBYSCORE`` of the dying) and how many are live
(``ZCOUNT``), so that the reader can check its view adds up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import cronrace.stores.redis.changes as changes
from cronrace.errors import RedisDataError
from cronrace.stores.redis.errors import RAW_FAILURES, translate, translating
from cronrace.stores.redis.fleet import decode_exchange, exchange_commands
from cronrace.stores.redis.garbage import Command
from cronrace.stores.redis.replies import decode_text
from cronrace.stores.redis.runs import RunCommands
from cronrace.stores.redis.sentinel import follow_primary
from cronrace.stores.values import FleetReply, FleetRequest, HeartbeatReply

log = logging.getLogger("cronrace.stores.redis")


@translating
class MemberCommands(RunCommands):
    """The heartbeat and leaving the live set."""

    async def heartbeat(
        self,
        node_id: str,
        *,
        now_ms: int,
        ttl_ms: int,
        epoch_candidate: str,
        prune: bool = True,
        since: str | None = None,
        joined: bool = True,
        live_after_ms: int = 0,
        recheck: Sequence[str] = (),
        asserted_epoch: str = "",
        read_asserted: bool = False,
        fleet: FleetRequest | None = None,
    ) -> HeartbeatReply:
        """Read the server clock and the epoch, refresh this node's heartbeat, read members.

        One round trip (two on Sentinel: the sentinels are asked where the primary is, so
        that a node leaves a demoted primary within a heartbeat). ``now_ms`` is the
        caller's estimate of server time; with ``prune``, members whose heartbeat expired
        before it are dropped from the live set (readers filter by score anyway, so
        pruning now and then is enough). With ``since`` None every live member is read;
        with a cursor only the changes since it (see the module doc). ``asserted_epoch`` is
        written under ``<ns>:asserted`` (this node's word that it re-asserted its runs'
        leases after a wipe); with ``read_asserted`` every live member's is read back.
        ``fleet``: the fleet's definitions exchange (fleet.py) rides in the same pipeline.
        """
        await follow_primary(self.client)
        commands = [
            self._command("", "epoch", "set", epoch_candidate, nx=True),
            self._command("", "epoch", "get"),
            self._command("", "nodes", "zadd", {node_id: now_ms + ttl_ms}),
        ]
        if joined:
            fields = changes.entry(node_id, changes.JOIN, now_ms + ttl_ms)
            commands.append(self._command("", "fleet_log", "xadd", fields, **changes.add_kwargs()))
        reads = len(commands)
        if since is None:
            # The cursor first: a change logged between the two reads is read again next
            # time rather than missed.
            commands.append(self._command("", "fleet_log", "xrevrange", "+", "-", count=1))
            commands.append(
                self._command("", "nodes", "zrangebyscore", now_ms, "+inf", withscores=True)
            )
        else:
            start = changes.after(since)
            commands += [
                self._command("", "fleet_log", "xrange", start, "+", count=changes.READ_MAX + 1),
                self._command("", "fleet_log", "xrange", "-", "+", count=1),
                self._command(
                    "", "nodes", "zrangebyscore", "-inf", f"({live_after_ms}", withscores=True
                ),
                self._command("", "nodes", "zcount", live_after_ms, "+inf"),
            ]
            if recheck:
                commands.append(self._command("", "nodes", "zmscore", list(recheck)))
        commands.append(self._command("", "asserted", "hset", node_id, asserted_epoch))
        if read_asserted:
            commands.append(self._command("", "asserted", "hgetall"))
        if prune:
            commands.append(self._command("", "nodes", "zremrangebyscore", "-inf", now_ms))
        # Garbage under the epoch is moved aside like any other: the fresh epoch then
        # written makes every node hold new runs once, as after a wipe (the safe side).
        # The exchange's commands ride along; a read the beat makes already (the change
        # log's oldest entry, its changes when both cursors agree) is not sent twice,
        # unless the exchange logs a new fingerprint first (its reads then follow it).
        wanted = [] if fleet is None else exchange_commands(self.keys, node_id, fleet, now_ms)
        same = [
            -1
            if fleet is None or fleet.changed
            else next((i for i, c in enumerate(commands) if _alike(c, w)), -1)
            for w in wanted
        ]
        tail = [w for w, i in zip(wanted, same, strict=True) if i < 0]
        (seconds, micros), *replies = await self._pipeline_repairing(
            commands, time_first=True, tail=tail
        )
        exchanged = None
        decoded: list[tuple[Any, list[tuple[str, str, str, str]]]] = []

        def entries_of(logged: Any) -> list[tuple[str, str, str, str]]:
            # The change log's entries, decoded once when the beat and the exchange share
            # the read (a loaded fleet's log holds a join for each of its late beats).
            for reply, entries in decoded:
                if reply is logged:
                    return entries
            decoded.append((logged, changes.decode(logged)))
            return decoded[-1][1]

        if fleet is not None:
            own = iter(replies[len(commands) :])
            raw = [next(own) if i < 0 else replies[i] for i in same]
            exchanged = _decode_exchange(node_id, fleet, raw, entries_of)
            replies = replies[: len(commands)]
        server_time_s = int(seconds) + int(micros) / 1e6
        epoch = decode_text(replies[1])
        rechecked = replies[reads + 4] if since is not None and recheck else None
        said = (
            replies[reads + (2 if since is None else 4 + bool(recheck)) + 1]
            if read_asserted
            else None
        )
        asserted = {decode_text(k): decode_text(v) for k, v in (said or {}).items()}
        if since is None:
            last, members = replies[reads], replies[reads + 1]
            live = {decode_text(node): int(score) for node, score in members or ()}
            return HeartbeatReply(
                server_time_s=server_time_s,
                epoch=epoch,
                members=live,
                cursor=changes.last_id(last),
                asserted={node: word for node, word in asserted.items() if node in live},
                fleet=exchanged,
            )
        logged, oldest, silent, live_count = replies[reads : reads + 4]
        entries = entries_of(logged)
        cursor = entries[-1][0] if entries else since
        if changes.gap(since, entries, oldest):
            return HeartbeatReply(
                server_time_s,
                epoch,
                full=False,
                cursor=cursor,
                gap=True,
                asserted=asserted,
                fleet=exchanged,
            )
        last = changes.latest(entries, (changes.JOIN, changes.LEAVE))
        came = {n: int(v) for n, (k, v) in last.items() if k == changes.JOIN and v.isdigit()}
        for node, score in zip(recheck, rechecked or (), strict=False):
            # Back: beating again since it was read silent (a late beat logs no join).
            if (
                score is not None
                and score >= live_after_ms
                and last.get(node, ("",))[0] != changes.LEAVE
            ):
                came[node] = max(int(score), came.get(node, 0))
        return HeartbeatReply(
            server_time_s=server_time_s,
            epoch=epoch,
            members=came,
            full=False,
            cursor=cursor,
            silent={decode_text(node): int(score) for node, score in silent or ()},
            left=tuple(sorted(n for n, (k, _v) in last.items() if k == changes.LEAVE)),
            live_count=int(live_count),
            asserted=asserted,
            fleet=exchanged,
        )

    async def leave(self, node_id: str) -> None:
        """Remove this node from the live set, and log that it left."""
        await self._pipeline_repairing(
            [
                self._command("", "nodes", "zrem", node_id),
                self._command(
                    "",
                    "fleet_log",
                    "xadd",
                    changes.entry(node_id, changes.LEAVE),
                    **changes.add_kwargs(),
                ),
                self._command("", "asserted", "hdel", node_id),
            ]
        )


def _decode_exchange(
    node_id: str,
    fleet: FleetRequest,
    replies: list[Any],
    entries_of: Callable[[Any], list[tuple[str, str, str, str]]],
) -> FleetReply | None:
    """The exchange's reply; None where an error reply of its own data failed it (logged:
    ticks must not care), while any other error fails the beat, as it would have alone."""
    try:
        return decode_exchange(node_id, fleet, replies, entries_of)
    except RAW_FAILURES as exc:
        error = translate(exc, in_reply=True)
        if not isinstance(error, RedisDataError):
            raise error from exc
        log.error("fleet definitions exchange failed", extra={"error": str(error)})
        return None


def _alike(sent: Command, wanted: Command) -> bool:
    """Whether ``wanted`` is the same read as ``sent``: one reply serves both."""
    return (sent.method, sent.key, sent.args, dict(sent.kwargs)) == (
        wanted.method,
        wanted.key,
        wanted.args,
        dict(wanted.kwargs),
    )
