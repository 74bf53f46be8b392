"""Stored schedules and the fleet's published definitions, in PostgreSQL tables.

``schedules`` holds name -> definition (JSON) and ``schedule_versions`` one version per
namespace that counts the changes; one function changes a batch all or nothing, counts it
and posts the change notice in the same transaction (functions/control.sql), and one
statement reads the set with the version it belongs to. ``fleet`` holds each node's
fingerprint (written with every heartbeat) and its details (written on change), as the
Redis store's two hashes do (docs/design.md section 13).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from cronrace.stores.contract import FleetStore, ScheduleStore
from cronrace.stores.postgres.database import Database
from cronrace.stores.postgres.errors import translating
from cronrace.stores.values import FleetReply, ScheduleChange, ScheduleSet, WriteReply

#: A change notice lists its names when there are at most this many; else "read all".
NOTICE_NAMES_MAX = 100


@translating
class ScheduleTable(ScheduleStore):
    """Stored schedules of one namespace (``store.schedules``)."""

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.ns = namespace

    async def write(self, changes: Sequence[ScheduleChange]) -> WriteReply:
        """Apply ``changes`` all or nothing; the notice is posted in the same transaction.

        Raises:
            StoreAmbiguousError: no answer; the batch may or may not be written.
        """
        reply = await self.db.value(
            "schedules_write",
            {
                "ns": self.ns,
                "ops": [change.op for change in changes],
                "names": [change.name for change in changes],
                "definitions": [change.definition for change in changes],
            },
        )
        return WriteReply(
            str(reply["status"]), str(reply["detail"]), int(reply["first"]), int(reply["last"])
        )

    async def notify(self, written: WriteReply, names: Sequence[str]) -> None:
        """Post a change notice again (``write`` posts one already)."""
        listed = ",".join(names) if len(names) <= NOTICE_NAMES_MAX else ""
        fields = {
            "op": "schedules",
            "first": str(written.first_version),
            "last": str(written.last_version),
            "names": listed,
        }
        await self.db.rows("post_control", {"ns": self.ns, "fields": orjson.dumps(fields).decode()})

    async def _read(self, names: Sequence[str] | None) -> tuple[int, dict[str, bytes]]:
        rows = await self.db.rows(
            "schedules_read", {"ns": self.ns, "names": None if names is None else list(names)}
        )
        version = 0
        definitions: dict[str, bytes] = {}
        for name, definition in rows:
            if name is None:
                version = int(bytes(definition).decode())
            else:
                definitions[str(name)] = bytes(definition)
        return version, definitions

    async def read_all(self) -> ScheduleSet:
        """Every definition and the version they belong to, in one statement."""
        version, definitions = await self._read(None)
        return ScheduleSet(version, definitions)

    async def read(self, names: Sequence[str]) -> tuple[int, dict[str, bytes | None]]:
        """Some definitions (None: not stored) and the current version."""
        version, found = await self._read(names)
        return version, {name: found.get(name) for name in names}

    async def version(self) -> int:
        """The current version (0: nothing stored yet)."""
        value = await self.db.value("schedules_version", {"ns": self.ns})
        return int(value or 0)


@translating
class FleetTable(FleetStore):
    """The fleet's definitions exchange of one namespace (``store.fleet``)."""

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.ns = namespace

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
        """Publish this node's fingerprint (and details when given); read the others'
        (all of them, or those logged since the cursor ``since``)."""
        reply = await self.db.value(
            "fleet_exchange",
            {
                "ns": self.ns,
                "node": node_id,
                "fingerprint": fingerprint,
                "details": details,
                "now_ms": now_ms,
                "since": None if since is None else int(since or 0),
                "changed": changed,
            },
        )
        if since is not None:
            found = reply["changes"]
            prints = latest_changes(found["entries"], ("print",))
            return FleetReply(
                fingerprints={node: value for node, (_kind, value) in prints.items()},
                dead=(),
                details_missing=bool(reply["details_missing"]),
                schedules_version=int(reply["schedules_version"]),
                full=False,
                cursor=str(found["cursor"]),
                gap=bool(found["gap"]),
            )
        return FleetReply(
            fingerprints={str(k): str(v) for k, v in reply["fingerprints"].items()},
            dead=tuple(str(node) for node in reply["dead"]),
            details_missing=bool(reply["details_missing"]),
            schedules_version=int(reply["schedules_version"]),
            cursor=str(reply["cursor"]),
        )

    async def read_details(self, nodes: Sequence[str]) -> dict[str, bytes | None]:
        """The published details of ``nodes`` (None where a node has none)."""
        if not nodes:
            return {}
        rows = await self.db.rows("fleet_details", {"ns": self.ns, "nodes": list(nodes)})
        found = {str(node): None if details is None else bytes(details) for node, details in rows}
        return {node: found.get(node) for node in nodes}

    async def forget(self, nodes: Sequence[str]) -> None:
        """Delete the published rows of nodes that left."""
        if nodes:
            await self.db.rows("fleet_forget", {"ns": self.ns, "nodes": list(nodes)})


def latest_changes(entries: Any, kinds: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Each node's last change among ``kinds`` in a change-log read: node -> (kind, value).

    ``entries``: ``[[seq, node, kind, value], ...]``, oldest first (fleet_changes()).
    """
    out: dict[str, tuple[str, str]] = {}
    for _seq, node, kind, value in entries:
        if kind in kinds:
            out[str(node)] = (str(kind), str(value))
    return out
