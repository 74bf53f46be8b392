"""``cronrace db``: the PostgreSQL store's schema (``upgrade`` it, or print its ``sql``).

An agent refuses a schema that is missing or older than its own, naming these commands:
``cronrace db upgrade`` creates or upgrades it (idempotent, one transaction, safe while
other nodes run; from a version before 23 it seeds every job's dense cursor from its
watermark, and says so); ``cronrace db sql`` prints the same script for a DBA who applies it with
``psql -1 -f`` (then the agents' role needs no CREATE privilege: README, "PostgreSQL").
"""

from __future__ import annotations

from typing import Annotated

import anyio
import typer

from cronrace.cli.options import (
    EXIT_CODES_HELP,
    EXIT_INVALID,
    EXIT_REDIS,
    ConfigOption,
    RedisOption,
    fail,
    fail_lines,
    refused,
)
from cronrace.errors import ConfigError, CronraceError, RedisAccessError, RedisUnavailableError

db_app = typer.Typer(
    help="The PostgreSQL store's schema: create or upgrade it, or print its SQL for a DBA.",
    no_args_is_help=True,
)

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store-url",
        help="The store's URL (beats the config file and CRONRACE_STORE_URL).",
    ),
]


def _url(config: object, store_url: str | None, redis_url: str | None) -> str:
    from cronrace.cli.operate import operator_settings

    return operator_settings(config, store_url or redis_url, None).store_url  # type: ignore[arg-type]


@db_app.command(epilog=EXIT_CODES_HELP)
def upgrade(
    config: ConfigOption = None,
    store_url: StoreOption = None,
    redis_url: RedisOption = None,
) -> None:
    """Create or upgrade cronrace's schema in the store's database (idempotent).

    Upgrading to version 23 seeds every job's dense cursor from its watermark, beside the
    old columns and functions; the message says so.
    """
    from cronrace.settings import redact_url
    from cronrace.stores.urls import upgrade_store_schema

    url = _url(config, store_url, redis_url)
    try:
        typer.echo(anyio.run(upgrade_store_schema, url))
    except ConfigError as exc:
        raise fail_lines(exc) from None
    except RedisAccessError as exc:
        raise refused(url, exc) from None
    except RedisUnavailableError as exc:
        raise fail(f"store at {redact_url(url)} unreachable: {exc}", EXIT_REDIS) from None
    except CronraceError as exc:
        raise fail(str(exc), EXIT_INVALID) from None


@db_app.command(epilog=EXIT_CODES_HELP)
def sql(
    store_url: StoreOption = None,
    schema: Annotated[
        str | None, typer.Option("--schema", help="The schema (default: the URL's, or cronrace).")
    ] = None,
    from_version: Annotated[
        int, typer.Option("--from-version", min=0, help="The version the schema is at now.")
    ] = 0,
) -> None:
    """Print the SQL that creates or upgrades the schema, for `psql -1 -f` (no connection)."""
    import os

    from cronrace.stores.urls import store_schema_sql

    url = store_url or os.environ.get("CRONRACE_STORE_URL") or os.environ.get("CRONRACE_REDIS_URL")
    if url is not None and not url.lower().startswith(("postgresql://", "postgres://")):
        url = None if store_url is None else url
    try:
        typer.echo(store_schema_sql(url, schema, from_version))
    except ConfigError as exc:
        raise fail_lines(exc) from None
