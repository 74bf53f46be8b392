"""Prompt wake-ups for control notices: ``LISTEN`` where the connection allows it.

``post_control()`` (control.sql: manual triggers, stored-schedule notices) sends ``NOTIFY
cronrace_control`` with the namespace as its payload, in the transaction that posts the
notice. A node waiting for notices (``read_control``) holds one connection of its own,
outside the pool, that ``LISTEN``\\s, and reads the table at the first notification for its
namespace: a trigger reaches it in milliseconds. The table stays the truth; a notification
only says "look now", and the node reads the table at the end of every wait as well.

Behind a transaction-mode pooler (PgBouncer) a ``LISTEN`` does not stay: the server session
it ran in goes back to the pooler at once, and notifications reach whoever holds it next,
or nobody. So the listener proves itself when it connects: it sends a ``NOTIFY`` through the
pool and waits :data:`PROBE_S` for it. When it does not come, ``LISTEN`` is given up for
good (one INFO line) and the reads poll the table every ``poll_ms``, as they always may.
``?listen=off`` in the URL skips it.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import anyio
import psycopg

from cronrace.stores.postgres.database import Database

log = logging.getLogger("cronrace.stores.postgres")

#: The channel post_control() notifies (control.sql).
CHANNEL = "cronrace_control"
#: How long the listener waits for its own probe before deciding LISTEN does not work.
PROBE_S = 1.0


class Listener:
    """One node's ``LISTEN`` on the control channel (see the module doc).

    Args:
        db: the store's database (its pool sends the probe).
        namespace: the notifications this node wakes for.
    """

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.ns = namespace
        #: None until tried; then whether notifications reach this node.
        self.works: bool | None = None if db.target.listen else False
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def wait(self, timeout_s: float) -> None:
        """Return when the control table may hold a new notice: at a notification for
        this namespace (or up to ``timeout_s``) while listening, else after ``poll_ms``
        (or ``timeout_s``, if shorter)."""
        poll_s = self.db.target.poll_ms / 1000
        try:
            if self._conn is None and self.works is None and timeout_s < PROBE_S:
                conn = None  # too short a wait to prove LISTEN in (the read at start-up)
            elif self.works is False:
                conn = None
            else:
                conn = self._conn or await self._connect()
            if conn is None:
                await anyio.sleep(min(poll_s, max(0.0, timeout_s)))
                return
            async for note in conn.notifies(timeout=max(0.0, timeout_s)):
                if note.payload == self.ns:
                    return
        except (psycopg.Error, OSError) as exc:
            # A connection lost (a server restart): notices may have been missed meanwhile,
            # so the caller reads the table now; the next wait connects again.
            log.info("control listener lost its connection", extra={"error": str(exc)})
            await self.aclose()

    async def _connect(self) -> psycopg.AsyncConnection[Any] | None:
        """Connect, ``LISTEN``, and prove notifications arrive (else give LISTEN up)."""
        conn = await psycopg.AsyncConnection.connect(
            self.db.target.conninfo, **self.db.connect_options()
        )
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
            token = f"probe:{secrets.token_hex(8)}"
            await self.db.rows("notify", {"payload": token})
            async for note in conn.notifies(timeout=PROBE_S):
                if note.payload == token:
                    self.works = True
                    self._conn = conn
                    return conn
        except BaseException:
            await conn.close()
            raise
        await conn.close()
        self.works = False
        log.info(
            "LISTEN does not reach this connection (a transaction-mode pooler?): control "
            "notices are polled every poll_ms",
            extra={"poll_ms": self.db.target.poll_ms},
        )
        return None

    async def aclose(self) -> None:
        """Close the listening connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
