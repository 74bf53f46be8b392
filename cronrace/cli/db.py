"""``cronrace db``: the PostgreSQL store's schema (``upgrade`` it, or print its ``sql``).

An agent refuses a schema that is missing or older than its own, naming these commands:
``cronrace db upgrade`` creates or upgrades it (idempotent, one transaction, safe while
other nodes run; from a version before 23 it seeds every job's dense cursor from its
watermark, and says so); ``cronrace db sql`` prints the same script for a DBA who applies it with
``psql -1 -f`` (then the agents' role needs no CREATE privilege: README, "PostgreSQL").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer

from cronrace.cli.options import (
    EXIT_CODES_HELP,
    EXIT_INVALID,
    ConfigOption,
    RedisOption,
    StoreOption,
    fail,
    fail_lines,
    refused,
    unreachable,
)
from cronrace.errors import (
    ConfigError,
    CronraceError,
    StoreAccessError,
    StoreUnavailableError,
    warn_renamed,
)

db_app = typer.Typer(
    help="The PostgreSQL store's schema: create or upgrade it, or print its SQL for a DBA.",
    no_args_is_help=True,
)


def _url(config: Path | None, store_url: str | None, redis_url: str | None) -> str:
    from cronrace.cli.operate import operator_settings

    return operator_settings(config, store_url, None, redis_url).store_url


@db_app.command(epilog=EXIT_CODES_HELP)
def upgrade(
    config: ConfigOption = None,
    store_url: StoreOption = None,
    redis_url: RedisOption = None,
) -> None:
    """Create or upgrade cronrace's schema in the store's database (idempotent).

    Upgrading an older schema seeds every job's dense cursor from its watermark (version
    23), then drops the watermark protocol's functions and columns (version 24): stop the
    agents of the older protocol first. The message says what the upgrade did.
    """
    from cronrace.stores.urls import upgrade_store_schema

    url = _url(config, store_url, redis_url)
    try:
        typer.echo(anyio.run(upgrade_store_schema, url))
    except ConfigError as exc:
        raise fail_lines(exc) from None
    except StoreAccessError as exc:
        raise refused(url, exc) from None
    except StoreUnavailableError as exc:
        raise unreachable(url, exc) from None
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

    url = store_url or os.environ.get("CRONRACE_STORE_URL")
    if url is None and os.environ.get("CRONRACE_REDIS_URL"):
        warn_renamed("CRONRACE_REDIS_URL", "CRONRACE_STORE_URL")
        url = os.environ["CRONRACE_REDIS_URL"]
    if url is not None and not url.lower().startswith(("postgresql://", "postgres://")):
        url = None if store_url is None else url
    try:
        typer.echo(store_schema_sql(url, schema, from_version))
    except ConfigError as exc:
        raise fail_lines(exc) from None
