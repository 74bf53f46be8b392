"""A real redis-server for tests: own port, own directory, started and stopped by us.

Tests never use a server someone else started, and never port 6379. The server class is
``cronrace.testing.RedisServer``, public so that users can test their jobs the same way.
"""

from __future__ import annotations

import os

from cronrace.testing import REDIS_SERVER, RedisServer, free_port

__all__ = ["REDIS_SERVER", "RedisServer", "free_port", "redis_available", "require_redis_in_ci"]


def redis_available() -> bool:
    return REDIS_SERVER is not None


def require_redis_in_ci() -> None:
    """In CI a missing redis-server is a failure, not a skip."""
    if os.environ.get("CI") and REDIS_SERVER is None:
        raise RuntimeError("CI=true but redis-server is not installed (see scripts/test.sh)")
