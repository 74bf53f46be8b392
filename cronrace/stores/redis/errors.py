"""redis-py's exceptions into cronrace's own, once, where they leave the store.

Every public coroutine of the store's command classes is wrapped by :func:`translating`:
whatever redis-py (or the socket under it) raises leaves the store as one of
:mod:`cronrace.errors`' store errors, so the layers above catch ``StoreError`` and its
subclasses and never import redis-py (DESIGN.md section 7; a test walks the imports).
Inside the store, code goes on reading redis-py's classes where it must (``NOSCRIPT``,
``WRONGTYPE``, a shard that did not answer); refusals (a wrong password, ``NOPERM``, a
certificate) are translated earlier still, by the client (``access.py``), which also
remembers them for readiness.

What leaves the store, by what redis-py raised:

- a refusal (the client translated it already): ``RedisAccessError`` and its family;
- ``AuthenticationError``, ``NoPermissionError`` (fakeredis, untranslated): the same;
- ``ConnectionError``, ``TimeoutError``, ``OSError``, a garbled reply: ``RedisAmbiguousError``
  (the call may have run);
- ``READONLY``, ``CLUSTERDOWN``, ``TRYAGAIN``, cluster errors: ``RedisUnavailableError``
  (it did not run; a failover passes);
- any other error reply (``WRONGTYPE``, a script's error): ``RedisDataError``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import (
    AuthenticationError,
    InvalidResponse,
    NoPermissionError,
    RedisClusterException,
    RedisError,
)

from cronrace.errors import (
    RedisAmbiguousError,
    RedisAuthError,
    RedisDataError,
    RedisPermissionError,
    RedisUnavailableError,
    StoreError,
)
from cronrace.stores.redis.shards import AMBIGUOUS_ERRORS, TRANSIENT_ERRORS

#: What a call into redis-py may raise; the wrapped methods let nothing else of it out.
RAW_FAILURES: tuple[type[BaseException], ...] = (RedisError, RedisClusterException, OSError)

_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)


def translate(exc: BaseException) -> StoreError:
    """Return cronrace's error for a failed Redis call (``exc`` itself if it is one).

    The message is redis-py's (or the class name when it has none), so logs and records
    read as before; the original is kept as ``__cause__``.
    """
    if isinstance(exc, StoreError):
        return exc
    text = str(exc) or type(exc).__name__
    translated: StoreError
    if isinstance(exc, AuthenticationError):
        translated = RedisAuthError(f"authentication failed: {text}")
    elif isinstance(exc, NoPermissionError):
        translated = RedisPermissionError(f"permission denied: {text}", command="?")
    elif isinstance(exc, (*AMBIGUOUS_ERRORS, InvalidResponse)):
        translated = RedisAmbiguousError(text)
    elif isinstance(exc, TRANSIENT_ERRORS):
        translated = RedisUnavailableError(text)
    else:  # an error reply (WRONGTYPE, a script's error), an argument redis-py refused
        translated = RedisDataError(text)
    translated.__cause__ = exc
    return translated


def _translated(method: Callable[..., Awaitable[_T]]) -> Callable[..., Awaitable[_T]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> _T:
        try:
            return await method(*args, **kwargs)
        except RAW_FAILURES as exc:
            raise translate(exc) from exc

    return call


def translating(cls: _C) -> _C:
    """Wrap every public coroutine method ``cls`` defines so it raises only store errors."""
    for name, attr in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(attr):
            setattr(cls, name, _translated(attr))
    return cls
