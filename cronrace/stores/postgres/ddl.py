"""The script that creates or upgrades the schema, as text (no driver needed).

``cronrace db upgrade`` runs it in one transaction; ``cronrace db sql`` prints it for a DBA
(``psql -1 -f``). It begins with a transaction-level advisory lock, so concurrent upgrades
wait for each other, and every part of it is idempotent.
"""

from __future__ import annotations

import hashlib

from cronrace.stores.postgres.queries import (
    bind_schema,
    functions_digest,
    functions_text,
    latest_version,
    migrations,
    read_sql,
)


def upgrade_lock(schema: str) -> int:
    """The advisory lock number of ``schema``'s upgrades (a signed 64-bit integer)."""
    digest = hashlib.blake2b(f"cronrace.upgrade:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def upgrade_sql(schema: str, from_version: int = 0) -> str:
    """The script that brings ``schema`` from ``from_version`` to the newest version."""
    parts = [read_sql("upgrade_begin.sql").replace("@lock@", str(upgrade_lock(schema)))]
    for version, name, text in migrations():
        if version > from_version:
            parts.append(f"-- ==== migration {name} ====\n{text}")
    parts.append(f"-- ==== functions ====\n{functions_text()}")
    end = read_sql("upgrade_end.sql")
    end = end.replace("@version@", str(latest_version()))
    parts.append(end.replace("@functions@", functions_digest()))
    return bind_schema("\n".join(parts), schema)
