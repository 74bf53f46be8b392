"""The ``cronrace`` command.

Exit codes: 0 success; 1 invalid configuration or a failed operator command; 2 bad
usage (unknown module, attribute, or arguments); 3 Redis unreachable.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated

import typer

from cronrace.agent import Agent
from cronrace.errors import CronraceError, RedisUnavailableError
from cronrace.logs import configure_logging

app = typer.Typer(
    name="cronrace",
    help="Fire recurring jobs exactly once per tick across a fleet, with no leader.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_REDIS = 3


def fail(message: str, code: int) -> typer.Exit:
    """Print one line to stderr and return the Exit to raise."""
    typer.echo(f"cronrace: {message}", err=True)
    return typer.Exit(code)


def load_agent(target: str) -> Agent:
    """Import ``MODULE:ATTR`` (from the current directory or PYTHONPATH) and return the Agent."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise fail(f"{target!r} is not MODULE:ATTR (for example app.jobs:agent)", EXIT_USAGE)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except CronraceError as exc:
        raise fail(str(exc), EXIT_INVALID) from None
    except ImportError as exc:
        raise fail(f"cannot import module {module_name!r}: {exc}", EXIT_USAGE) from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise fail(f"module {module_name!r} has no attribute {attr!r}", EXIT_USAGE) from None
    if not isinstance(obj, Agent):
        kind = type(obj).__name__
        raise fail(f"{target!r} is a {kind}, not a cronrace Agent", EXIT_USAGE)
    return obj


def run_agent(agent: Agent) -> None:
    """Run ``agent`` until SIGTERM/SIGINT; map failures to one line and an exit code."""
    try:
        agent.run_sync()
    except RedisUnavailableError as exc:
        raise fail(str(exc), EXIT_REDIS) from None
    except CronraceError as exc:
        raise fail(str(exc), EXIT_INVALID) from None
    except KeyboardInterrupt:
        pass


@app.callback()
def _root() -> None:
    """Fire recurring jobs exactly once per tick across a fleet, with no leader."""


@app.command()
def run(
    target: Annotated[
        str | None, typer.Argument(help="MODULE:ATTR of an Agent, e.g. app.jobs:agent")
    ] = None,
) -> None:
    """Run an agent until SIGTERM or SIGINT."""
    if target is None:
        raise fail("give MODULE:ATTR", EXIT_USAGE)
    try:
        agent = load_agent(target)
    except CronraceError as exc:
        raise fail(str(exc), EXIT_INVALID) from None
    configure_logging(agent.settings.log_format, agent.settings.log_level)
    run_agent(agent)


def main() -> None:
    """Entry point of the ``cronrace`` console script."""
    try:
        app()
    except CronraceError as exc:  # a last line of defence: never a traceback for bad input
        typer.echo(f"cronrace: {exc}", err=True)
        sys.exit(EXIT_INVALID)
