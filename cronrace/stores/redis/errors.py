"""redis-py's exceptions into cronrace's own, once, where they leave the store.

Every public coroutine of the store's command classes is wrapped by :func:`translating`:
whatever redis-py (or the socket under it) raises leaves the store as one of
:mod:`cronrace.errors`' store errors, so the layers above catch ``StoreError`` and its
subclasses and never import redis-py (docs/design.md section 7; a test walks the imports).
Inside the store, code goes on reading redis-py's classes where it must (``NOSCRIPT``,
``WRONGTYPE``, a shard that did not answer); refusals (a wrong password, ``NOPERM``, a
certificate) are translated earlier still, by the client (``access.py``), which also
remembers them for readiness.

Whether an error passes, and how, is decided in one table, :data:`PASSAGES`, read by
:func:`passage`: every path (a raised error, an error reply inside a pipeline, one shard's
failure on a cluster) asks it, so a claim, a decision, a renewal and a release never
disagree about the same error (docs/design.md section 11).

What leaves the store, by what redis-py raised or answered:

- a refusal (the client translated it already): ``RedisAccessError`` and its family;
- ``AuthenticationError``, ``NoPermissionError`` (fakeredis, untranslated): the same;
- ``ConnectionError``, ``TimeoutError``, ``OSError``, a garbled reply: ``RedisAmbiguousError``
  (the call may have run);
- ``TRYAGAIN``, ``ASK``, ``MOVED``, redis-py's ``ClusterError('TTL exhausted.')`` after
  them: ``RedisMovingError`` (a slot half-moved by a live resharding; it did not run);
- ``READONLY``, ``CLUSTERDOWN``, ``MASTERDOWN``, ``LOADING`` in a reply, cluster errors:
  ``RedisUnavailableError`` (it did not run; a failover passes);
- ``OOM`` (full under ``noeviction``): ``RedisOutOfMemoryError``, a refusal;
- any other error reply (``WRONGTYPE``, a script's error): ``RedisDataError``.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import (
    AskError,
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    InvalidResponse,
    MasterDownError,
    MovedError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cronrace.errors import (
    RedisAccessError,
    RedisAmbiguousError,
    RedisAuthError,
    RedisDataError,
    RedisMovingError,
    RedisOutOfMemoryError,
    RedisPermissionError,
    RedisUnavailableError,
    StoreError,
)

#: What a call into redis-py may raise; the wrapped methods let nothing else of it out.
RAW_FAILURES: tuple[type[BaseException], ...] = (RedisError, RedisClusterException, OSError)


class Passage(enum.Enum):
    """What an error means for the call that met it, and so what to do about it."""

    REFUSED = "refused"
    """Redis refuses this client (password, ACL, TLS): not retried as if it were down."""
    AMBIGUOUS = "ambiguous"
    """The call may have run: a write is read back (or is idempotent) before anything is
    decided from it."""
    MOVING = "moving"
    """It did not run: its Cluster slot is moving between shards. Retried at once; the
    cluster is healthy, so the node stays ready."""
    UNAVAILABLE = "unavailable"
    """It did not run: a failover, a restart, a primary still loading. Retried on the
    backoff, not ready meanwhile."""
    FAILED = "failed"
    """It ran and failed (a script's error, ``WRONGTYPE``): waiting will not fix it."""

    @property
    def passes(self) -> bool:
        """Whether the call may simply be sent again once Redis is back."""
        return self in (Passage.AMBIGUOUS, Passage.MOVING, Passage.UNAVAILABLE)


#: The one table, most specific class first (``ClusterDownError`` is a ``ClusterError``,
#: ``BusyLoadingError`` a ``ConnectionError``).
PASSAGES: tuple[tuple[type[BaseException], Passage], ...] = (
    (RedisAccessError, Passage.REFUSED),
    (AuthenticationError, Passage.REFUSED),
    (NoPermissionError, Passage.REFUSED),
    (OutOfMemoryError, Passage.REFUSED),  # full under noeviction: until memory is freed
    (StoreError, Passage.FAILED),  # translated already: see translate()
    (TryAgainError, Passage.MOVING),
    (AskError, Passage.MOVING),
    (MovedError, Passage.MOVING),
    (ClusterDownError, Passage.UNAVAILABLE),
    # redis-py gives up on a command redirected 16 times (TRYAGAIN, ASK, MOVED): every
    # attempt was refused before it ran.
    (ClusterError, Passage.MOVING),
    (ReadOnlyError, Passage.UNAVAILABLE),
    (MasterDownError, Passage.UNAVAILABLE),
    (BusyLoadingError, Passage.AMBIGUOUS),
    (RedisConnectionError, Passage.AMBIGUOUS),
    (RedisTimeoutError, Passage.AMBIGUOUS),
    (InvalidResponse, Passage.AMBIGUOUS),
    (OSError, Passage.AMBIGUOUS),
    (RedisClusterException, Passage.UNAVAILABLE),  # slots not covered, no node for a key
    (RedisError, Passage.FAILED),
)

#: An error reply inside a pipeline says the command did not run, where a raised error
#: of the same class (a connection that broke on it) might not: ``LOADING``.
_NOT_RUN_REPLIES: tuple[type[BaseException], ...] = (BusyLoadingError,)


def passage(exc: BaseException, *, in_reply: bool = False) -> Passage:
    """Whether and how ``exc`` passes (see :data:`PASSAGES`).

    Args:
        exc: what a call raised, or (``in_reply``) what a pipeline answered for one of its
            commands. A reply that is no Redis error at all is one that redis-py's own
            redirection put there (an ``ASK`` to a node it did not know yet raised
            ``AttributeError`` in redis-py 8.1): the command never reached a server.
    """
    if in_reply and isinstance(exc, _NOT_RUN_REPLIES):
        return Passage.UNAVAILABLE
    for cls, meaning in PASSAGES:
        if isinstance(exc, cls):
            if meaning is Passage.FAILED and isinstance(exc, StoreError):
                return _store_error_passage(exc)
            return meaning
    return Passage.MOVING if in_reply else Passage.FAILED


def _store_error_passage(exc: StoreError) -> Passage:
    if isinstance(exc, RedisMovingError):
        return Passage.MOVING
    if isinstance(exc, RedisAmbiguousError):
        return Passage.AMBIGUOUS
    if isinstance(exc, RedisUnavailableError):
        return Passage.UNAVAILABLE
    return Passage.FAILED


_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)


def translate(exc: BaseException, *, in_reply: bool = False) -> StoreError:
    """Return cronrace's error for a failed Redis call (``exc`` itself if it is one).

    The message is redis-py's (or the class name when it has none), so logs and records
    read as before; the original is kept as ``__cause__``.
    """
    if isinstance(exc, StoreError):
        return exc
    text = str(exc) or type(exc).__name__
    meaning = passage(exc, in_reply=in_reply)
    translated: StoreError
    if isinstance(exc, AuthenticationError):
        translated = RedisAuthError(f"authentication failed: {text}")
    elif isinstance(exc, NoPermissionError):
        translated = RedisPermissionError(f"permission denied: {text}", command="?")
    elif isinstance(exc, OutOfMemoryError):
        translated = RedisOutOfMemoryError(f"Redis is out of memory: {text}", command="?")
    elif meaning is Passage.AMBIGUOUS:
        translated = RedisAmbiguousError(text)
    elif meaning is Passage.MOVING:
        translated = RedisMovingError(f"slot moving between shards: {text}")
    elif meaning is Passage.UNAVAILABLE:
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
