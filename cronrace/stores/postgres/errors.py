"""psycopg's exceptions into cronrace's own, once, where they leave the store.

The one table of this store (docs/design.md, STYLE.md "Boundaries"), used by every path:

- a refusal (a wrong password, a missing grant, a certificate, a missing or older
  schema): ``StoreAccessError`` and its family, translated by ``access.py``; never retried;
- a row another session holds locked past the functions' lock wait (lock_not_available):
  ``JobBusyError``, one job's, not an outage; it passes, retry apart from the other jobs;
- the statement certainly did not run to its commit: a serialization failure or deadlock,
  a lock not available, a statement cancelled (``statement_timeout``), a read-only
  (standby) server, a server starting up or out of connections, the pool exhausted:
  ``StoreUnavailableError``; it passes, retry;
- the connection broke or timed out with the statement in flight (``OperationalError``
  without one of those codes, a killed backend, the client's own timeout): the commit may
  or may not have happened: ``StoreAmbiguousError``; read back before deciding anything;
- anything else the server answered (a function's error, bad data): ``StoreDataError``.

These are the store errors of every backend (cronrace/errors.py), and the layers above
catch them alike; their older ``Redis*`` names are aliases of the same classes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from cronrace.errors import (
    JobBusyError,
    StoreAmbiguousError,
    StoreDataError,
    StoreError,
    StoreUnavailableError,
)

#: SQLSTATEs after which the statement's transaction was certainly rolled back.
DID_NOT_RUN = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
        "57014",  # query_canceled (statement_timeout, lock_timeout)
        "25006",  # read_only_sql_transaction: a standby, or a primary being demoted
        "57P03",  # cannot_connect_now: starting up, shutting down, in recovery
        "53300",  # too_many_connections
        "53400",  # configuration_limit_exceeded
        "53200",  # out_of_memory
        "53100",  # disk_full
    }
)

LOCK_NOT_AVAILABLE = "55P03"

#: What a call into psycopg may raise; the wrapped methods let nothing else of it out.
RAW_FAILURES: tuple[type[BaseException], ...] = (psycopg.Error, OSError, TimeoutError)

_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)


def one_line(exc: BaseException) -> str:
    """The error's text on one line, as log lines and readiness need it.

    psycopg's ``str()`` of a server error appends PostgreSQL's ``CONTEXT:`` lines, which
    for an error inside a PL/pgSQL function spell the whole statement it was running (a
    "not ready" line took 14 lines). The primary message, with its detail when there is
    one, is what an operator reads; the SQLSTATE is added by the caller.
    """
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if primary:
        detail = getattr(diag, "message_detail", None)
        return f"{primary} ({detail})" if detail else str(primary)
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def translate(exc: BaseException) -> StoreError:
    """Return cronrace's error for a failed call (``exc`` itself if it is one already)."""
    if isinstance(exc, StoreError):
        return exc
    text = one_line(exc)
    sqlstate = getattr(exc, "sqlstate", None) or ""
    translated: StoreError
    if isinstance(exc, psycopg_pool.PoolTimeout):
        translated = StoreUnavailableError(f"no connection to PostgreSQL: {text}")
    elif sqlstate == LOCK_NOT_AVAILABLE:
        translated = JobBusyError(f"{text} (SQLSTATE {sqlstate}): {LOCKED_HINT}")
    elif sqlstate in DID_NOT_RUN:
        translated = StoreUnavailableError(f"{text} (SQLSTATE {sqlstate})")
    elif isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, OSError)):
        translated = StoreAmbiguousError(text)
    elif isinstance(exc, TimeoutError):
        translated = StoreAmbiguousError(f"PostgreSQL did not answer in time: {text}")
    else:
        translated = StoreDataError(text)
    translated.__cause__ = exc
    return translated


#: What a call met that another session holds locked (lock_not_available) is named so.
LOCKED_HINT = (
    "another session holds the job's row locked (an open transaction? see pg_locks and "
    "pg_stat_activity); retrying"
)


def reply_error(job: str, what: str, error: str, sqlstate: str) -> StoreError:
    """The error for one request of a batch that failed inside its function."""
    message = f"{what} failed for job {job!r}: {error} (SQLSTATE {sqlstate})"
    if sqlstate == LOCK_NOT_AVAILABLE:
        return JobBusyError(f"{message}: {LOCKED_HINT}")
    if sqlstate in DID_NOT_RUN:
        return StoreUnavailableError(message)
    return StoreError(message)


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
