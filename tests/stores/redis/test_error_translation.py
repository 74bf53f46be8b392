"""redis-py's errors become cronrace's own, once, where they leave the Redis store."""

from __future__ import annotations

import inspect

import pytest
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    DataError,
    InvalidResponse,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cronrace.errors import (
    RedisAmbiguousError,
    RedisAuthError,
    RedisDataError,
    RedisMovingError,
    RedisPermissionError,
    RedisUnavailableError,
    StoreError,
)
from cronrace.stores.contract import Store as ContractStore
from cronrace.stores.redis import Store
from cronrace.stores.redis.errors import Passage, passage, translate
from cronrace.stores.redis.fleet import FleetCommands
from cronrace.stores.redis.schedules import ScheduleCommands


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (RedisConnectionError("Connection reset by peer"), RedisAmbiguousError),
        (RedisTimeoutError("Timeout reading from socket"), RedisAmbiguousError),
        (ConnectionResetError(104, "reset"), RedisAmbiguousError),
        (InvalidResponse("Protocol error"), RedisAmbiguousError),
        (BusyLoadingError("LOADING"), RedisAmbiguousError),
        (ReadOnlyError("READONLY You can't write against a read only replica."), None),
        (ClusterDownError("CLUSTERDOWN The cluster is down"), None),
        (TryAgainError("TRYAGAIN"), RedisMovingError),
        (ClusterError("TTL exhausted."), RedisMovingError),
        (RedisClusterException("slots not covered"), None),
        (ResponseError("WRONGTYPE Operation against a key"), RedisDataError),
        (DataError("Invalid input of type: 'dict'"), RedisDataError),
        (AuthenticationError("invalid username-password pair"), RedisAuthError),
        (NoPermissionError("NOPERM this user has no permissions"), RedisPermissionError),
    ],
)
def test_redis_py_errors_are_translated_into_store_errors(
    raised: Exception, expected: type[StoreError] | None
) -> None:
    translated = translate(raised)
    if expected is None:  # transient, but the call did not run: not ambiguous
        assert type(translated) is RedisUnavailableError
    else:
        assert isinstance(translated, expected)
    assert translated.__cause__ is raised
    assert str(raised) in str(translated)


def test_a_store_error_passes_through_translation_unchanged() -> None:
    error = RedisUnavailableError("claim failed")
    assert translate(error) is error


@pytest.mark.parametrize("cls", [Store, FleetCommands, ScheduleCommands])
def test_every_public_store_coroutine_translates(cls: type) -> None:
    """The contract's own methods (``claim``: all or nothing over ``claim_each``) call only
    the store's, which translate: they are not the store's to wrap."""
    untranslated = [
        name
        for name, method in inspect.getmembers(cls, inspect.iscoroutinefunction)
        if not name.startswith("_")
        and not hasattr(method, "__wrapped__")
        and method is not getattr(ContractStore, name, None)
    ]
    assert untranslated == []


async def test_a_dropped_connection_reaches_the_caller_as_a_store_error() -> None:
    store = Store.from_url("redis://127.0.0.1:1/0", timeout_s=0.5)
    try:
        with pytest.raises(RedisAmbiguousError) as caught:
            await store.cursors(["job"])
    finally:
        await store.aclose()
    assert isinstance(caught.value.__cause__, (RedisConnectionError, OSError))


@pytest.mark.parametrize(
    ("answered", "meaning"),
    [
        (TryAgainError("TRYAGAIN"), Passage.MOVING),
        (ClusterError("TTL exhausted."), Passage.MOVING),
        (ClusterDownError("CLUSTERDOWN"), Passage.UNAVAILABLE),
        (BusyLoadingError("LOADING"), Passage.UNAVAILABLE),  # a reply: it did not run
        (ReadOnlyError("READONLY"), Passage.UNAVAILABLE),
        (RedisConnectionError("reset"), Passage.AMBIGUOUS),
        (ResponseError("ERR user_script:3: bad"), Passage.FAILED),
        (NoPermissionError("NOPERM"), Passage.REFUSED),
        (OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), Passage.REFUSED),
        # redis-py's own redirection failed (an ASK to a node it did not know yet):
        (AttributeError("'NoneType' object has no attribute 'connection_kwargs'"), Passage.MOVING),
    ],
)
def test_one_table_says_how_each_reply_error_passes(answered: Exception, meaning: Passage) -> None:
    assert passage(answered, in_reply=True) is meaning
    assert translate(answered, in_reply=True).__cause__ is answered
