"""Connections to PostgreSQL: a bounded pool, one statement per call, errors translated.

Nothing here keeps session state that a transaction-mode pooler (PgBouncer) would break:
every call is one autocommit statement (its own transaction), server-side prepared
statements are off (``prepare_threshold=None``), locks are row locks or transaction-level
advisory locks, never session ones. The pool connects lazily, at the first call.

A pool whose connections cannot be made answers only "timed out" (it connects in the
background, retrying). So every connection the pool makes goes through
:class:`Database`'s own connection class, which keeps the last refusal (a wrong password, a
missing database, a certificate that does not verify) until a connection is made again; a
call waiting for a connection looks at it every :data:`REFUSAL_CHECK_S` and raises it, so
that a refusal is named at once, not retried as an outage until the pool's timeout. The
same class keeps the last failure of any kind: while the pool holds no connection at all
and its last attempt failed (the server down: "Connection refused"), a call fails at once
naming that cause, as a Redis call does, rather than waiting ``timeout_s`` to say "timed
out". A call that times out otherwise connects once itself to learn why (down, or
exhausted).

psycopg-pool logs every failed attempt as a WARNING of its own ("error connecting in
'cronrace': ...", three lines each) on the ``psycopg.pool`` logger, which no handler of
cronrace's formats. What the pool logs while it works for cronrace (its tasks, and
cronrace's calls into it) goes to ``cronrace.stores.postgres`` at DEBUG instead: the
agent names the cause itself, once, in its own format. The pools of the host program are
left alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any, Self

import anyio
import psycopg
import psycopg_pool

from cronrace.errors import StoreAccessError, StoreAmbiguousError, StoreUnavailableError
from cronrace.stores.postgres.access import AccessWatch, classify
from cronrace.stores.postgres.errors import one_line, translate
from cronrace.stores.postgres.queries import Statements
from cronrace.stores.postgres.urls import PostgresTarget

log = logging.getLogger("cronrace.stores.postgres")

Row = tuple[Any, ...]

#: How often (s) a call waiting for a pooled connection checks whether the pool's last
#: attempt to connect was refused.
REFUSAL_CHECK_S = 0.1

#: How long (s) a statement past its deadline has for the server to confirm its
#: cancellation before the connection is dropped instead.
CANCEL_GRACE_S = 1.0

#: True in the pool's own tasks (they copy it from :meth:`Database._open`) and in
#: cronrace's calls into the pool: what psycopg-pool logs there is cronrace's to report.
_IN_OUR_POOL: ContextVar[bool] = ContextVar("cronrace_postgres_pool", default=False)


class _PoolLogs(logging.Filter):
    """Re-log what psycopg-pool says for cronrace's pools at DEBUG, in cronrace's format."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _IN_OUR_POOL.get():
            return True  # another pool of the program: its logging is the program's
        log.debug("connection pool: %s", " ".join(record.getMessage().split()))
        return False


_POOL_LOGS = _PoolLogs()


@contextmanager
def _our_pool() -> Iterator[None]:
    token = _IN_OUR_POOL.set(True)
    try:
        yield
    finally:
        _IN_OUR_POOL.reset(token)


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
        #: The pool's last attempt to connect was refused (None: it was not, or it made one).
        self.connect_refused: psycopg.Error | None = None
        #: The pool's last attempt to connect failed, for any reason (None: it made one).
        self.connect_failed: psycopg.Error | None = None
        #: Connections made and not closed yet (in the pool or lent out).
        self.live_connections = 0
        pool_logger = logging.getLogger("psycopg.pool")
        if _POOL_LOGS not in pool_logger.filters:
            pool_logger.addFilter(_POOL_LOGS)
        self.pool = psycopg_pool.AsyncConnectionPool(
            target.conninfo,
            connection_class=self._connection_class(),
            min_size=1,
            max_size=max(1, max_connections),
            open=False,
            timeout=timeout_s,
            kwargs=self.connect_options(),
            name="cronrace",
        )
        self._opened = False
        self._open_lock = anyio.Lock()

    def _connection_class(self) -> type[psycopg.AsyncConnection[Row]]:
        """The pool's connection class: it notes whether each attempt to connect was refused."""
        db = self

        class Connection(psycopg.AsyncConnection[Row]):
            counted = False

            @classmethod
            async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
                try:
                    conn = await super().connect(conninfo, **kwargs)
                except psycopg.Error as exc:
                    refused = classify(exc, db.target.schema, "connect") is not None
                    db.connect_refused = exc if refused else None
                    db.connect_failed = exc
                    raise
                db.connect_refused = db.connect_failed = None
                conn.counted = True
                db.live_connections += 1
                return conn

            async def close(self) -> None:
                if self.counted:
                    self.counted = False
                    db.live_connections -= 1
                await super().close()

        return Connection

    def connect_options(self) -> dict[str, Any]:
        """What every connection is made with (pooler-safe, autocommit)."""
        options: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
        if "connect_timeout" not in self.target.conninfo:
            options["connect_timeout"] = max(1, round(self.timeout_s))
        return options

    async def _open(self) -> None:
        async with self._open_lock:
            if not self._opened:
                with _our_pool():  # the pool's tasks, started here, keep the mark
                    await self.pool.open(wait=False)
                self._opened = True

    async def aclose(self) -> None:
        """Close every connection."""
        if self._opened:
            with _our_pool():
                await self.pool.close()
            self._opened = False

    @asynccontextmanager
    async def connection(self, statement: str) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        """A pooled connection; refusals and an exhausted pool translated and named."""
        with _our_pool():
            conn = await self._getconn(statement)
        try:
            async with conn:  # as the pool's own connection(): commit or roll back
                yield conn
        finally:
            with _our_pool():
                await self.pool.putconn(conn)

    async def _getconn(self, statement: str) -> psycopg.AsyncConnection[Row]:
        """Wait up to ``timeout_s`` for a connection, raising the pool's refusal at once."""
        if not self._opened:
            await self._open()
        deadline = time.monotonic() + self.timeout_s
        while True:
            left_s = deadline - time.monotonic()
            try:
                return await self.pool.getconn(timeout=max(0.001, min(REFUSAL_CHECK_S, left_s)))
            except psycopg_pool.PoolTimeout as exc:
                refused = self.connect_refused
                if refused is not None:
                    raise self.access.translate(refused, statement) from refused
                failed = self.connect_failed
                if failed is not None and self.live_connections == 0:
                    # No connection at all, and the last attempt failed: the server is
                    # down or unreachable now; say why at once (the pool keeps trying).
                    raise StoreUnavailableError(
                        f"cannot connect to PostgreSQL: {one_line(failed)}"
                    ) from failed
                if left_s <= REFUSAL_CHECK_S:
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
            if isinstance(translated, StoreAccessError):
                return translated
            return StoreUnavailableError(f"cannot connect to PostgreSQL: {one_line(refused)}")
        except (OSError, TimeoutError) as failed:
            return StoreUnavailableError(f"cannot connect to PostgreSQL: {one_line(failed)}")
        stats = self.pool.get_stats()
        return StoreUnavailableError(
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
            # Two deadlines. asyncio's is edge-triggered: psycopg, interrupted once, sends
            # the server a cancel request and waits for the statement to stop, so the
            # connection goes back to the pool and no backend is left waiting on the
            # server. anyio's scope (level-triggered: it interrupts the cancel request
            # too, and psycopg then drops the connection) bounds that when the server does
            # not answer at all. A statement cut off by anyio alone lived on in its
            # backend: waiting for a lock, it ran once the lock was let go, and a fleet's
            # queue of such heartbeats and claims held the next ones up for seconds.
            with anyio.fail_after(self.timeout_s * 2 + CANCEL_GRACE_S):
                async with asyncio.timeout(self.timeout_s * 2):
                    async with self.connection(statement) as conn:
                        cursor = await conn.execute(sql, params)
                        found = await cursor.fetchall() if cursor.description else []
        except TimeoutError as exc:
            # Whether the statement had committed before it was cancelled is unknown.
            raise StoreAmbiguousError(
                f"PostgreSQL did not answer {statement} in {self.timeout_s * 2:g}s (a lock "
                "held by another session, an overloaded server?)"
            ) from exc
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
