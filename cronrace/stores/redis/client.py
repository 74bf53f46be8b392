"""Redis clients for each deployment (docs/design.md sections 7 and 11).

One primary (``redis://``, ``rediss://``, ``unix://``) gets a bounded blocking pool;
Sentinel (``redis+sentinel://``) a pool that asks the sentinels for the primary and follows
it through failovers; Cluster (``redis+cluster://``) redis-py's ``RedisCluster``, made in
:mod:`cronrace.stores.redis.clusterclient`; ``memory://`` fakeredis. This module is the
only place that picks one.

Every client but fakeredis translates refusals (a wrong password, ``NOPERM``, a certificate
that does not verify) into cronrace's errors for every command and pipeline, and tells its
:class:`~cronrace.stores.redis.access.AccessWatch` what was refused and what went through again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import NoBackoff
from redis.exceptions import ReadOnlyError, RedisError

from cronrace.stores.redis.access import AccessWatch, pipeline_replies, raise_translated
from cronrace.stores.redis.clusterclient import cluster_client
from cronrace.stores.redis.packing import (
    FastConnection,
    FastPacking,
    FastSSLConnection,
    FastUnixConnection,
    QuickSend,
)
from cronrace.stores.redis.readtimer import OneReadTimer, SharedReadTimer
from cronrace.stores.redis.urls import Deployment, RedisTarget, parse_redis_url

log = logging.getLogger("cronrace.stores.redis")

_MEMORY_SERVERS: dict[str, Any] = {}


@functools.cache
def embedded_connection() -> type:
    """The embedded store's connection class: fakeredis's, with a name, packing and sending
    as a connection to a server does (packing.py).

    Given a shared server, fakeredis (2.41) never sets a connection's ``server_key``,
    which its ``__str__`` returns, and redis-py (8.2) formats the connection into the
    debug line it logs when an operation fails: the failure then surfaces as an
    ``AttributeError`` from inside redis-py instead of the ``ConnectionError`` cronrace
    reads back after (a claim whose answer was lost became an unexpected error, and its
    tick was dropped).

    fakeredis executes what is written synchronously, inside the write, and its ``drain``
    returns at once: every send is taken at once.
    """
    from fakeredis._clients._async import FakeAsyncRedisConnection

    # fakeredis's connection redefines some of redis-py's with other signatures.
    class EmbeddedConnection(FastPacking, QuickSend, FakeAsyncRedisConnection):  # type: ignore[misc]
        server_key = "memory"

        def _takes_at_once(self, command: list[bytes]) -> bool:
            return True

        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            await super().send_packed_command(command, check_health)
            # A server's reply comes in a later turn of the event loop, never in the turn
            # that sent the command; fakeredis's comes at once. One turn here keeps the
            # interleaving of the tasks that share the store (the nodes of a simulated
            # fleet) what it is over a socket, at the cost of one turn, not a task.
            await asyncio.sleep(0)

    return EmbeddedConnection


def is_embedded(client: Any) -> bool:
    """Whether ``client`` talks to the embedded in-process store (fakeredis)."""
    return type(client).__module__.startswith("fakeredis")


def make_client(url: str, *, max_connections: int = 16, timeout_s: float = 5.0) -> Any:
    """Create a redis.asyncio client for ``url`` (``memory://NAME`` for the embedded one).

    Client-side retries are off: a retried ``SET NX`` whose first reply was lost answers
    "taken" and would make the node lose a tick it won. cronrace retries by itself and
    reads the key back instead (docs/design.md section 8).

    Raises:
        ValueError: the URL cannot be used (the message never contains a password).
    """
    target = parse_redis_url(url)
    if target.deployment is Deployment.MEMORY:
        import fakeredis

        server = _MEMORY_SERVERS.setdefault(target.memory_name, fakeredis.FakeServer())
        return fakeredis.FakeAsyncRedis(
            server=server, decode_responses=False, connection_class=embedded_connection()
        )
    options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "decode_responses": False,
        "retry": Retry(NoBackoff(), 0),
        **target.credentials(),
    }
    access = AccessWatch(tls=bool(options.get("ssl", False)))
    if target.deployment is Deployment.SENTINEL:
        primary = _sentinel_client(target, options, max_connections, timeout_s)
        primary.access = access
        return primary
    if target.deployment is Deployment.CLUSTER:
        return cluster_client(target, options, max_connections, access)
    tls = options.pop("ssl", False)
    if target.unix_path is not None:
        options.update(connection_class=FastUnixConnection, path=target.unix_path)
    else:
        host, port = target.hosts[0]
        options.update(host=host, port=port)
        options["connection_class"] = FastSSLConnection if tls else FastConnection
    pool = aioredis.BlockingConnectionPool(
        max_connections=max_connections, timeout=timeout_s, **options
    )
    client = cast(WatchedRedis, WatchedRedis.from_pool(pool))  # from_pool returns cls(...)
    client.access = access
    return client


# -- refusals into cronrace's errors ----------------------------------------------------


async def _leave_a_demoted_primary(pool: Any, exc: BaseException | None) -> None:
    """Close the pool's idle connections when the server they reach has become a replica.

    A coordinated failover behind one endpoint (``FAILOVER``, a managed service's name
    re-pointed) leaves every open connection on the old primary, which answers each write
    ``READONLY`` and will go on doing so: the connections, not Redis, are what is wrong.
    Connections opened from now on go through the endpoint again, to the new primary; the
    ones in use are closed when they come back and meet the same answer.
    """
    if not isinstance(exc, ReadOnlyError):
        return
    global _last_readonly_log_mono
    now = time.monotonic()
    if now - _last_readonly_log_mono >= 1.0:
        _last_readonly_log_mono = now
        log.warning(
            "Redis answered READONLY: the primary was demoted; reconnecting",
            extra={"error": str(exc)},
        )
    await pool.disconnect(inuse_connections=False)


_last_readonly_log_mono = float("-inf")


class _WatchedPipeline(Pipeline):
    access: AccessWatch

    def _where(self) -> str:
        """The server, as redis-py names it in a timeout's message (Sentinel's pools know
        only the primary's name)."""
        pool = self.connection_pool
        kwargs = pool.connection_kwargs
        if kwargs.get("path"):
            return str(kwargs["path"])
        if kwargs.get("host"):
            return f"{kwargs['host']}:{kwargs.get('port')}"
        return f"the primary {getattr(pool, 'service_name', '')!r}"

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        commands = [args for args, _options in self.command_stack]
        try:
            with OneReadTimer(self._where):  # named only on a timeout
                replies = await super().execute(raise_on_error=False)
        except RedisError as exc:
            await _leave_a_demoted_primary(self.connection_pool, exc)
            raise_translated(self.access, exc, commands[0] if commands else ())
        readonly = next((r for r in replies if isinstance(r, ReadOnlyError)), None)
        await _leave_a_demoted_primary(self.connection_pool, readonly)
        return pipeline_replies(self.access, commands, replies, raise_on_error)


class WatchedRedis(aioredis.Redis):
    """redis.asyncio's client, translating refusals for every command and pipeline."""

    access: AccessWatch

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            reply = await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except RedisError as exc:
            await _leave_a_demoted_primary(self.connection_pool, exc)
            raise_translated(self.access, exc, args)
        self.access.went_through((args,))
        return reply

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = _WatchedPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.access = self.access
        return pipe


# -- Sentinel ---------------------------------------------------------------------------


class _FastSentinelConnection(FastPacking, QuickSend, SharedReadTimer, SentinelManagedConnection):
    """Sentinel's connection to the primary, packing and sending as cronrace's others do
    (packing.py) and watching a pipeline's reads with one timer (readtimer.py)."""


class _FastSentinelSSLConnection(
    FastPacking, QuickSend, SharedReadTimer, SentinelManagedSSLConnection
):
    """The same, over TLS."""


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """A bounded, blocking pool to whichever node the sentinels call the primary.

    redis-py asks the sentinels only when a connection is opened, so a pooled connection
    to a demoted primary would go on writing there (Sentinel leaves the old primary
    writable for about ten seconds after ``SENTINEL FAILOVER``). A connection released
    while the sentinels name another primary is closed instead of being reused.
    """

    async def release(self, connection: Any) -> None:
        if self.master_address is not None and (
            (connection.host, connection.port) != self.master_address
        ):
            await connection.disconnect()
        await super().release(connection)


class _SentinelPrimary(WatchedRedis):
    """The primary's client; closing it also closes the connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager: Sentinel = cast(Any, self.connection_pool).sentinel_manager
        await manager.aclose()


def _sentinel_client(
    target: RedisTarget, options: dict[str, Any], max_connections: int, timeout_s: float
) -> Any:
    sentinel_options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    if target.sentinel_username is not None:
        sentinel_options["username"] = target.sentinel_username
    if target.sentinel_password is not None:
        sentinel_options["password"] = target.sentinel_password
    # Called through Any: redis-py annotates Sentinel.__init__ from 8.2 on and not before,
    # so neither a plain call nor a type: ignore passes mypy --strict on both.
    make_sentinel: Any = Sentinel
    sentinel = make_sentinel(list(target.hosts), sentinel_kwargs=sentinel_options)
    tls = options.get("ssl", False)  # the pool takes it off the connection's options
    return sentinel.master_for(
        target.master or "",
        redis_class=_SentinelPrimary,
        connection_pool_class=_BlockingSentinelPool,
        connection_class=_FastSentinelSSLConnection if tls else _FastSentinelConnection,
        max_connections=max_connections,
        timeout=timeout_s,
        **options,
    )
