"""What every ``cronrace`` command shares: exit codes, options, and one-line failures.

Its own module so that the command groups (:mod:`cronrace.cli.operate`,
:mod:`cronrace.cli.schedules`) and the app that gathers them (:mod:`cronrace.cli.main`)
all import it, and none of them imports another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cronrace.errors import ConfigError, CronraceError, StoreAccessError, warn_renamed

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_REDIS = EXIT_UNREACHABLE  # its name before PostgreSQL
EXIT_REFUSED = 4

EXIT_CODES_HELP = (
    "Exit codes: 0 success; 1 invalid configuration or failed operator command; "
    "2 bad usage; 3 the store (Redis or PostgreSQL) unreachable; 4 the store refused us "
    "(password, ACL or grant, TLS, schema)."
)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Sidecar config file; its [agent] table says where the store is.",
        envvar="CRONRACE_CONFIG",
        dir_okay=False,
    ),
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store-url",
        help="The store's URL: redis://, rediss://, redis+sentinel://, redis+cluster://, "
        "postgresql:// (beats the config file and CRONRACE_STORE_URL).",
    ),
]
#: Deprecated: ``--store-url`` under its name before PostgreSQL (hidden from the help).
RedisOption = Annotated[
    str | None,
    typer.Option("--redis-url", hidden=True, help="Deprecated: use --store-url."),
]
NamespaceOption = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="Namespace (default from config or environment)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
WideOption = Annotated[
    bool,
    typer.Option(
        "--wide", "-w", help="Every column and the whole texts, however wide the table gets."
    ),
]
JobArgument = Annotated[str, typer.Argument(help="The job's name.")]


def fail(message: str, code: int) -> typer.Exit:
    """Print one line to stderr and return the Exit to raise."""
    typer.echo(f"cronrace: {message}", err=True)
    return typer.Exit(code)


def fail_lines(error: CronraceError, code: int = EXIT_INVALID) -> typer.Exit:
    """Print every problem of ``error`` on its own line to stderr; return the Exit."""
    problems = error.problems if isinstance(error, ConfigError) else [str(error)]
    for line in problems:
        typer.echo(line, err=True)
    return typer.Exit(code)


def store_url_flag(store_url: str | None, redis_url: str | None) -> str | None:
    """The store's URL from ``--store-url``, or from the deprecated ``--redis-url`` (warned)."""
    if redis_url is None:
        return store_url
    warn_renamed("--redis-url", "--store-url")
    return store_url if store_url is not None else redis_url


def refused(store_url: str, error: StoreAccessError) -> typer.Exit:
    """Print why the store refused us, naming the server; return the Exit to raise."""
    from cronrace.stores.urls import redact_url, server_name

    server = server_name(store_url)
    return fail(f"{server} at {redact_url(store_url)} refused: {error}", EXIT_REFUSED)


def unreachable(store_url: str, error: CronraceError) -> typer.Exit:
    """Print that the store cannot be reached, naming the server; return the Exit."""
    from cronrace.stores.urls import redact_url, server_name

    server = server_name(store_url)
    return fail(f"{server} at {redact_url(store_url)} unreachable: {error}", EXIT_UNREACHABLE)
