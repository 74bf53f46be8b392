"""What every ``cronrace`` command shares: exit codes, options, and one-line failures.

Its own module so that the command groups (:mod:`cronrace.cli.operate`,
:mod:`cronrace.cli.schedules`) and the app that gathers them (:mod:`cronrace.cli.main`)
all import it, and none of them imports another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cronrace.errors import ConfigError, CronraceError, RedisAccessError

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_REDIS = 3
EXIT_REFUSED = 4

EXIT_CODES_HELP = (
    "Exit codes: 0 success; 1 invalid configuration or failed operator command; "
    "2 bad usage; 3 Redis unreachable; 4 Redis refused us (password, ACL, TLS)."
)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Sidecar config file; its [agent] table says where Redis is.",
        envvar="CRONRACE_CONFIG",
        dir_okay=False,
    ),
]
RedisOption = Annotated[
    str | None,
    typer.Option("--redis-url", help="Redis URL (beats the config file and CRONRACE_REDIS_URL)."),
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


def refused(redis_url: str, error: RedisAccessError) -> typer.Exit:
    """Print why the store refused us, naming the server; return the Exit to raise."""
    from cronrace.settings import redact_url  # the settings stack, only once Redis refused
    from cronrace.stores.urls import server_name

    server = server_name(redis_url)
    return fail(f"{server} at {redact_url(redis_url)} refused: {error}", EXIT_REFUSED)
