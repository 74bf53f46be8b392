"""Store URLs: which backend a URL names, and opening a store on it.

The scheme picks the backend, and its package is imported only then: nothing above
``stores/`` names a backend except by the scheme of the URL it was given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cronrace.errors import ConfigError

if TYPE_CHECKING:
    from cronrace.stores.contract import RedisFeatures, Store

#: The schemes of the Redis store (one primary, Sentinel, Cluster, the embedded store).
REDIS_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "memory",
)
#: The schemes of the PostgreSQL store (libpq URLs).
POSTGRES_SCHEMES = ("postgresql", "postgres")
POSTGRES_EXTRA = "pip install 'cronrace[postgres]'"


def scheme_of(url: str) -> str:
    """The URL's scheme, lower case ('' when it has none)."""
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def server_name(url: str) -> str:
    """The kind of server ``url`` names, as messages call it (``Redis``, ``PostgreSQL``)."""
    scheme = scheme_of(url)
    if scheme in POSTGRES_SCHEMES:
        return "PostgreSQL"
    return "the embedded store" if scheme == "memory" else "Redis"


def is_embedded(url: str) -> bool:
    """Whether ``url`` names the embedded in-process store (it serves one process only)."""
    return scheme_of(url) == "memory"


def redact_url(url: str) -> str:
    """Hide the credentials of a store URL (for logs and error lines).

    The user and password before ``@`` and the value of every query option whose name
    contains ``password`` become ``***``; the rest is kept so that an operator can see
    which server is meant.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, qmark, query = rest.partition("?")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    if qmark:
        parts = []
        for part in query.split("&"):
            name, eq, _value = part.partition("=")
            parts.append(f"{name}=***" if eq and "password" in name.lower() else part)
        query = "&".join(parts)
    return f"{scheme}{sep}{rest}{qmark}{query}"


def check_store_url(url: str) -> None:
    """Check ``url`` fully without connecting.

    Raises:
        ValueError: one line saying what is wrong (the scheme, a host, an option).
    """
    scheme = scheme_of(url)
    if scheme in REDIS_SCHEMES:
        from cronrace.stores.redis.urls import parse_redis_url

        parse_redis_url(url)
        return
    if scheme in POSTGRES_SCHEMES:
        from cronrace.stores.postgres.urls import parse_postgres_url

        parse_postgres_url(url)
        return
    schemes = ", ".join(f"{name}://" for name in (*REDIS_SCHEMES, *POSTGRES_SCHEMES))
    if not scheme:
        raise ValueError(f"is not a URL: use one of {schemes}")
    raise ValueError(f"unknown scheme {scheme + '://'!r}: use one of {schemes}")


def open_store(url: str, namespace: str = "cronrace", **options: Any) -> Store:
    """Open a store of ``namespace`` on ``url``, lazily: nothing is sent before its first call.

    Args:
        url: the store's URL; its scheme picks the backend.
        namespace: the fleet's namespace (fleets with different ones ignore each other).
        **options: connection options of the backend (``max_connections``, ``timeout_s``).

    Raises:
        ConfigError: the URL names no backend this cronrace has.
    """
    try:
        check_store_url(url)
    except ValueError as exc:
        raise ConfigError(f"store URL: {exc}") from None
    if scheme_of(url) in POSTGRES_SCHEMES:
        return _open_postgres(url, namespace, **options)
    from cronrace.stores.redis import Store as RedisStore

    return RedisStore.from_url(url, namespace, **options)


def _open_postgres(url: str, namespace: str, **options: Any) -> Store:
    try:
        from cronrace.stores.postgres import PostgresStore
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] in ("psycopg", "psycopg_pool"):
            raise ConfigError(
                f"store URL {redact_url(url)!r} needs the PostgreSQL driver: {POSTGRES_EXTRA}"
            ) from None
        raise
    return PostgresStore.from_url(url, namespace, **options)


def open_redis(url: str, **options: Any) -> RedisFeatures:
    """Open a Redis store for what only Redis offers (the stream target, fenced writes).

    Raises:
        ConfigError: ``url`` is not a Redis URL.
    """
    if scheme_of(url) not in REDIS_SCHEMES:
        raise ConfigError(f"{redact_url(url)!r} is not a Redis URL (a Redis-only feature)")
    from cronrace.stores.redis import Store as RedisStore

    return RedisStore.from_url(url, **options)


async def upgrade_store_schema(url: str, **options: Any) -> str:
    """Create or upgrade the schema of the store at ``url``; return one line saying what
    was done (``cronrace db upgrade``). Redis keeps no schema: nothing to do there.

    Raises:
        ConfigError: the URL names no backend, or its driver is missing.
        StoreError: translated; a refusal names what the role may not do.
    """
    check = open_store(url, **options)  # checks the URL and the driver
    try:
        if scheme_of(url) not in POSTGRES_SCHEMES:
            return f"{redact_url(url)}: Redis keeps no schema; nothing to upgrade"
        from cronrace.stores.postgres.schema import upgrade, upgrade_notes

        before, after = await upgrade(check.db)  # type: ignore[attr-defined]
        schema = check.db.target.schema  # type: ignore[attr-defined]
    finally:
        await check.aclose()
    if before == after:
        return f"schema {schema!r} is at version {after}; its functions were refreshed"
    done = f"schema {schema!r} upgraded from version {before} to {after}"
    return "; ".join([done, *upgrade_notes(before, after)])


def store_schema_sql(url: str | None, schema: str | None = None, from_version: int = 0) -> str:
    """The DDL that creates or upgrades cronrace's PostgreSQL schema (``cronrace db sql``),
    for a DBA to run in one transaction (``psql -1 -f``); no connection is made.

    Args:
        url: a PostgreSQL URL whose ``?schema=`` names the schema, or None.
        schema: the schema when the URL names none (default ``cronrace``).
        from_version: the version the schema is at (0: none; the script is idempotent).

    Raises:
        ConfigError: ``url`` is not a PostgreSQL URL, or the schema name is not usable.
    """
    from cronrace.stores.postgres.urls import parse_postgres_url, validate_schema_name

    if url is not None and scheme_of(url) not in POSTGRES_SCHEMES:
        raise ConfigError(f"{redact_url(url)!r} is not a PostgreSQL URL (Redis has no schema)")
    try:
        name = parse_postgres_url(url, schema).schema if url else schema or "cronrace"
        validate_schema_name(name)
    except ValueError as exc:
        raise ConfigError(f"store URL: {exc}") from None
    from cronrace.stores.postgres.ddl import upgrade_sql

    return upgrade_sql(name, from_version)


def postgres_schema_version() -> int:
    """The PostgreSQL schema version this cronrace creates and needs (``cronrace --version``).

    Read from the migration files shipped in the package: no driver, no connection.
    """
    from cronrace.stores.postgres.queries import latest_version

    return latest_version()
