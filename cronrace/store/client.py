"""Redis clients: a bounded pool for ``redis://``/``rediss://``/``unix://``, fakeredis for
``memory://``."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: Errors after which a command may or may not have run on the server.
AMBIGUOUS_ERRORS: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
)

_MEMORY_SERVERS: dict[str, Any] = {}


def make_client(url: str, *, max_connections: int = 16, timeout_s: float = 5.0) -> Any:
    """Create a redis.asyncio client for ``url`` (``memory://NAME`` for the embedded one).

    Client-side retries are off: a retried ``SET NX`` whose first reply was lost answers
    "taken" and would make the node lose a tick it won. cronrace retries by itself and
    reads the key back instead (DESIGN.md section 8).
    """
    if url.startswith("memory://"):
        import fakeredis

        name = url.removeprefix("memory://") or "default"
        server = _MEMORY_SERVERS.setdefault(name, fakeredis.FakeServer())
        return fakeredis.FakeAsyncRedis(server=server, decode_responses=False)
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        decode_responses=False,
        retry=Retry(NoBackoff(), 0),
    )
    return aioredis.Redis.from_pool(pool)
