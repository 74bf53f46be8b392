"""The store is the only layer that speaks redis-py (DESIGN.md section 7)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    DataError,
    InvalidResponse,
    NoPermissionError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import cronrace
from cronrace.errors import (
    RedisAmbiguousError,
    RedisAuthError,
    RedisDataError,
    RedisPermissionError,
    RedisUnavailableError,
    StoreError,
)
from cronrace.stores.redis import Store
from cronrace.stores.redis.errors import translate
from cronrace.stores.redis.fleet import FleetCommands
from cronrace.stores.redis.schedules import ScheduleCommands

PACKAGE = Path(cronrace.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (``if TYPE_CHECKING`` too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_nothing_above_the_store_imports_redis() -> None:
    above = [
        path for path in PACKAGE.rglob("*.py") if PACKAGE / "stores" / "redis" not in path.parents
    ]
    assert len(above) > 20  # the walk found the package
    leaks = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in imported_modules(path) if name.split(".")[0] == "redis"
        )
        for path in above
    }
    assert {path: names for path, names in leaks.items() if names} == {}


def test_the_store_itself_is_seen_importing_redis() -> None:
    """The walk above would find an import: the store's own modules show it does."""
    assert "redis.exceptions" in imported_modules(PACKAGE / "stores" / "redis" / "errors.py")


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
        (TryAgainError("TRYAGAIN"), None),
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
    untranslated = [
        name
        for name, method in inspect.getmembers(cls, inspect.iscoroutinefunction)
        if not name.startswith("_") and not hasattr(method, "__wrapped__")
    ]
    assert untranslated == []


async def test_a_dropped_connection_reaches_the_caller_as_a_store_error() -> None:
    store = Store.from_url("redis://127.0.0.1:1/0", timeout_s=0.5)
    try:
        with pytest.raises(RedisAmbiguousError) as caught:
            await store.watermarks(["job"])
    finally:
        await store.aclose()
    assert isinstance(caught.value.__cause__, (RedisConnectionError, OSError))
