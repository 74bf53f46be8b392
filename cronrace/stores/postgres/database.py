"""Connections to PostgreSQL: a bounded pool, one statement per call, errors translated.

Nothing here keeps session state that a transaction-mode pooler (PgBouncer) would break:
every call is one autocommit statement (its own transaction), server-side prepared
statements are off (``prepare_threshold=None``), locks are row locks or transaction-level
advisory locks, never session ones. The pool connects lazily, at the first call.

A pool whose connections cannot be made answers only "timed out" (it connects in the
background); the store then connects once itself to learn why, so that a wrong password
or an untrusted certificate is named and refused at once, not retried as an outage.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
import psycopg_pool

from cronrace.errors import RedisAccessError, RedisUnavailableError
from cronrace.stores.postgres.access import AccessWatch
from cronrace.stores.postgres.errors import translate
from cronrace.stores.postgres.queries import Statements
from cronrace.stores.postgres.urls import PostgresTarget

log = logging.getLogger("cronrace.stores.postgres")

Row = tuple[Any, ...]


class Database:
    """The pool, the bound statements and the access watch of one PostgreSQL URL.

    Args:
        target: the parsed URL.
        max_connections: the pool's size.
        timeout_s: how long a call may wait for a connection, and for its answer.
    """

    def __init__(
        self, target: PostgresTarget, *, max_connections: int = 16, timeout_s: float = 5.0
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.statements = Statements(target.schema)
        self.access = AccessWatch(target.schema)
        self.pool = psycopg_pool.AsyncConnectionPool(
            target.conninfo,
            min_size=1,
            max_size=max(1, max_connections),
            open=False,
            timeout=timeout_s,
            kwargs=self.connect_options(),
            name="cronrace",
        )
        self._opened = False
        self._open_lock = anyio.Lock()

    def connect_options(self) -> dict[str, Any]:
        """What every connection is made with (pooler-safe, autocommit)."""
        options: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
        if "connect_timeout" not in self.target.conninfo:
            options["connect_timeout"] = max(1, round(self.timeout_s))
        return options

    async def _open(self) -> None:
        async with self._open_lock:
            if not self._opened:
                await self.pool.open(wait=False)
                self._opened = True

    async def aclose(self) -> None:
        """Close every connection."""
        if self._opened:
            await self.pool.close()
            self._opened = False

    @asynccontextmanager
    async def connection(self, statement: str) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        """A pooled connection; refusals and an exhausted pool translated and named."""
        if not self._opened:
            await self._open()
        try:
            async with self.pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise await self._why_no_connection(exc, statement) from exc

    async def _why_no_connection(
        self, exc: psycopg_pool.PoolTimeout, statement: str
    ) -> BaseException:
        """Connect once ourselves: a refusal is named; else the pool is merely exhausted."""
        try:
            with anyio.fail_after(self.timeout_s + 1):
                conn = await psycopg.AsyncConnection.connect(
                    self.target.conninfo, **self.connect_options()
                )
            await conn.close()
        except psycopg.Error as refused:
            translated = self.access.translate(refused, statement)
            if isinstance(translated, RedisAccessError):
                return translated
            return RedisUnavailableError(f"cannot connect to PostgreSQL: {refused}")
        except (OSError, TimeoutError) as failed:
            return RedisUnavailableError(f"cannot connect to PostgreSQL: {failed}")
        stats = self.pool.get_stats()
        return RedisUnavailableError(
            f"the PostgreSQL connection pool is exhausted ({stats.get('pool_size', '?')} of "
            f"{self.pool.max_size} connections busy for {self.timeout_s:g}s): {exc}"
        )

    async def rows(self, statement: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Run one statement of ``sql/statements/``; return its rows (empty for none).

        Raises:
            StoreError: translated (errors.py); refusals are remembered by ``access``.
        """
        sql = self.statements[statement]
        try:
            with anyio.fail_after(self.timeout_s * 2):
                async with self.connection(statement) as conn:
                    cursor = await conn.execute(sql, params)
                    found = await cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                await self._check_idle()
            raise translate(self.access.translate(exc, statement)) from exc
        self.access.went_through(statement)
        return found

    async def row(self, statement: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """The first row of one statement (None when it gave none)."""
        found = await self.rows(statement, params)
        return found[0] if found else None

    async def value(self, statement: str, params: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row (None when there is none)."""
        found = await self.row(statement, params)
        return found[0] if found else None

    async def _check_idle(self) -> None:
        """After a broken connection, have the pool test its idle ones (a restart broke
        them all; each would otherwise fail one call before being dropped)."""
        if self._opened:
            try:
                await self.pool.check()
            except (psycopg.Error, OSError) as exc:  # the check itself is only a hint
                log.debug("pool check failed", extra={"error": str(exc)})

    async def script(self, sql: str) -> None:
        """Run a multi-statement script in one transaction (schema upgrades).

        Its own connection, not the pool's: ``cronrace db upgrade`` runs before any pool.
        """
        try:
            async with (
                await psycopg.AsyncConnection.connect(
                    self.target.conninfo, **self.connect_options()
                ) as conn,
                conn.transaction(),
            ):
                await conn.execute(sql.encode())
        except psycopg.Error as exc:
            raise translate(self.access.translate(exc, "upgrade")) from exc
