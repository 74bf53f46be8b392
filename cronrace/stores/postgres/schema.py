"""The schema's versions: create and upgrade it (``cronrace db upgrade``), print it
(``cronrace db sql``), and check it before an agent starts.

A version is a migration file, ``sql/migrations/NNNN_name.sql``, applied once, in order,
all pending ones and then every function (``CREATE OR REPLACE``) in one transaction under
a transaction-level advisory lock: idempotent, and safe while other nodes run (they go on
with the functions they had until the commit, and with the new ones after it). Migrations
are written to be idempotent too (``IF NOT EXISTS``), so the script ``cronrace db sql``
prints for a DBA can be run on a schema at any version.

A change to a function is a new version: :data:`FUNCTION_DIGESTS` pins each version's
functions, and a test fails until a changed function comes with a new migration file.
An agent refuses a schema older than its own version, naming the command to run; a newer
one (a newer cronrace upgraded it during a rolling deploy) is used with a warning.
"""

from __future__ import annotations

import logging

from cronrace.errors import StoreSchemaError
from cronrace.stores.postgres.access import UPGRADE_HINT
from cronrace.stores.postgres.database import Database
from cronrace.stores.postgres.ddl import upgrade_sql
from cronrace.stores.postgres.queries import functions_digest, latest_version

log = logging.getLogger("cronrace.stores.postgres")

#: The digest of the functions of each schema version (queries.functions_digest).
FUNCTION_DIGESTS = {
    1: "e37bd967e05007d9",
    2: "d9640e932faf1b69",
    3: "5db935b6b16e3ae8",
    4: "01a4721fa09aba7c",
    5: "252430b6fa0de23a",
    6: "54f2dda3f21d90f0",
    7: "d5037751b556ca97",
    8: "300ee2a5dcb3d0b7",
    9: "da7bb245664399ad",
    10: "1924aacdc82e7662",
    11: "666d084c5f07777e",
    12: "5e3ee1fcf803db93",
    13: "1f44670844eced49",
    14: "a71d819069cc96ab",
    15: "2a98ee9c7b27ed3c",
    16: "3e958d16da03d719",
    17: "83ece974ce460b23",
    18: "d06210e15fa3edfc",
    19: "6722a49d3ced2c8c",
    20: "1859de2d6b2e3e5e",
    21: "4ea7b066427871d0",
    22: "e222d16f5d3abf69",
    23: "7f8b88b960d34b05",
    24: "0caf069bdd0d390a",
}


#: What an upgrade across a version does to the data, said by ``cronrace db upgrade``.
UPGRADE_NOTES = {
    23: "every job's dense cursor was seeded from its watermark; the new functions "
    "(decide, renew_lease, end_run) stand beside the old ones",
    24: "the watermark's functions (acquire, renew, release) and columns (watermark, passed "
    "ticks and ranges, triggers decided) were dropped: agents of the watermark protocol must be "
    "stopped before this upgrade",
}


def upgrade_notes(before: int, after: int) -> list[str]:
    """What upgrading an existing schema from ``before`` to ``after`` did to its data (a new
    schema, ``before`` 0, holds none)."""
    if before <= 0:
        return []
    return [
        f"version {v}: {note}" for v, note in sorted(UPGRADE_NOTES.items()) if before < v <= after
    ]


async def current_version(db: Database) -> tuple[int, str] | None:
    """The schema's version and functions digest; None when it has no cronrace schema."""
    try:
        found = await db.row("schema_version")
    except StoreSchemaError:
        return None
    if found is None:
        return None
    return int(found[0]), str(found[1])


async def upgrade(db: Database) -> tuple[int, int]:
    """Create or upgrade the schema; return the versions before and after (0: none).

    Raises:
        StoreError: translated; a refusal (no CREATE privilege ...) names what is missing.
    """
    found = await current_version(db)
    before = found[0] if found else 0
    await db.script(upgrade_sql(db.target.schema, before))
    db.access.schema_fixed()
    return before, latest_version()


async def check(db: Database) -> None:
    """Refuse a schema that is missing or older than this cronrace's (one line, naming the
    command); warn about a newer one.

    Raises:
        StoreSchemaError: missing or older.
    """
    schema = db.target.schema
    found = await current_version(db)
    needed = latest_version()
    if found is None:
        error = StoreSchemaError(
            f"the PostgreSQL database has no cronrace schema {schema!r}: {UPGRADE_HINT}"
        )
        db.access.refuse("schema", error)
        raise error
    version, digest = found
    if version < needed:
        error = StoreSchemaError(
            f"the PostgreSQL schema {schema!r} is at version {version}, this cronrace needs "
            f"{needed}: {UPGRADE_HINT}"
        )
        db.access.refuse("schema", error)
        raise error
    if version > needed:
        log.warning(
            "the PostgreSQL schema is newer than this cronrace; running with it",
            extra={"schema": schema, "version": version, "needed": needed},
        )
    elif digest != functions_digest():
        log.warning(
            "the PostgreSQL schema's functions differ from this cronrace's at the same version",
            extra={"schema": schema, "version": version},
        )
    db.access.schema_fixed()
