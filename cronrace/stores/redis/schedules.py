"""Stored schedules in Redis: the definitions, their version, and the change notices.

Every definition lives in one hash, ``<ns>:schedules`` (name -> JSON), whose field
``:version`` counts the changes. One key holds the set, its index and its version, so one
script changes them together on every deployment, Cluster included (one slot), and one
``HGETALL`` reads a consistent set with the version it belongs to. A schedule's runtime
keys (claims, lease, state with its pause flag, runs) are its job keys, under ``{<name>}``.

After each change a notice goes to the control stream (``op=schedules``, the versions and
names), so live nodes apply it at once; it is a hint, not the record: a node that misses
one sees the version move with its next heartbeat and reads the whole set again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from cronrace.stores.contract import ScheduleStore
from cronrace.stores.redis.errors import translating
from cronrace.stores.redis.garbage import is_wrong_type, report_quarantined
from cronrace.stores.redis.keys import Keys
from cronrace.stores.redis.replies import decode_quarantined, decode_text, int_or_none
from cronrace.stores.redis.scripts import Scripts
from cronrace.stores.values import ScheduleChange, ScheduleSet, WriteReply

log = logging.getLogger("cronrace.stores.redis")

#: The hash field that counts changes (a schedule name never contains ':').
VERSION_FIELD = ":version"
#: A change notice lists its names when there are at most this many; else "read all".
NOTICE_NAMES_MAX = 100


@translating
class ScheduleCommands(ScheduleStore):
    """Redis commands for stored schedules (``store.schedules``)."""

    def __init__(self, client: Any, keys: Keys, scripts: Scripts) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts

    async def write(self, changes: Sequence[ScheduleChange]) -> WriteReply:
        """Apply ``changes`` all or nothing (``schedules.lua``), then tell the live nodes.

        Raises:
            RedisAmbiguousError: Redis did not answer; the batch may or may not be written
                (reading it back tells).
        """
        key = self.keys.schedules
        args: list[Any] = [self.keys.quarantine_of(key)]
        for change in changes:
            args += [change.op, change.name, change.definition]
        reply = await self.scripts.eval("schedules", [key], args)
        report_quarantined(decode_quarantined(reply[4]), script="schedules")
        written = WriteReply(decode_text(reply[0]), decode_text(reply[1]), *map(int, reply[2:4]))
        if written.status == "ok" and changes:
            await self.notify(written, [change.name for change in changes])
        return written

    async def notify(self, written: WriteReply, names: Sequence[str]) -> None:
        """Tell live nodes which versions changed which names (a hint; see module doc)."""
        listed = ",".join(names) if len(names) <= NOTICE_NAMES_MAX else ""
        await self.client.xadd(
            self.keys.control,
            {
                "op": "schedules",
                "first": str(written.first_version),
                "last": str(written.last_version),
                "names": listed,
            },
            maxlen=1000,
            approximate=True,
        )

    async def read_all(self) -> ScheduleSet:
        """Read every definition and the version they belong to, in one command."""
        try:
            raw = await self.client.hgetall(self.keys.schedules)
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            log.error(
                "garbage under the stored schedules key; no stored schedules until the next "
                "change moves it aside",
                extra={"key": self.keys.schedules},
            )
            return ScheduleSet(0, {})
        definitions = {decode_text(name): value for name, value in raw.items()}
        version = int_or_none(definitions.pop(VERSION_FIELD, None)) or 0
        return ScheduleSet(version, definitions)

    async def read(self, names: Sequence[str]) -> tuple[int, dict[str, bytes | None]]:
        """Read some definitions (None: not stored) and the current version."""
        try:
            values = await self.client.hmget(self.keys.schedules, [VERSION_FIELD, *names])
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            return 0, dict.fromkeys(names)
        return int_or_none(values[0]) or 0, dict(zip(names, values[1:], strict=True))

    async def version(self) -> int:
        """The current version (0: nothing stored yet, or garbage)."""
        try:
            return int_or_none(await self.client.hget(self.keys.schedules, VERSION_FIELD)) or 0
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            return 0
