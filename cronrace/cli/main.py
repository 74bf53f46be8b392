"""The ``cronrace`` command: run an agent or a sidecar, check a config, operate a fleet.

Exit codes: 0 success; 1 invalid configuration or a failed operator command (unknown job,
a triggered run that did not end ``ok``, a trigger no live node will see); 2 bad usage
(unknown module, attribute or arguments, no store given); 3 the store (Redis or
PostgreSQL) unreachable; 4 the store refused us (authentication, ACL permission or
grant, TLS certificate, a missing or older PostgreSQL schema).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO, TypeVar

import typer

from cronrace.cli import output as out
from cronrace.cli.db import db_app
from cronrace.cli.operate import COMMANDS
from cronrace.cli.options import (
    EXIT_CODES_HELP,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    ConfigOption,
    JsonOption,
    NamespaceOption,
    RedisOption,
    StoreOption,
    WideOption,
    fail,
    fail_lines,
    refused,
    store_url_flag,
)
from cronrace.cli.schedules import schedules_app
from cronrace.errors import (
    ConfigError,
    CronraceDeprecationWarning,
    CronraceError,
    StoreAccessError,
    StoreUnavailableError,
)

# `cronrace --help` declares every command; each command imports the stack it runs (the
# agent, the sidecar, the metrics server) in its body, so the help and the operator
# commands never pay for the others (tests/unit/test_import_cost.py).
if TYPE_CHECKING:
    from cronrace.agent.core import Agent
    from cronrace.web.probes import MetricsServer

T = TypeVar("T")

app = typer.Typer(
    name="cronrace",
    help="Fire recurring jobs exactly once per tick across a fleet, with no leader.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain click help: rich mode prints flags as `--wait <bool>`, and boxes waste columns.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# -- run -------------------------------------------------------------------------------


def load_agent(target: str) -> Agent:
    """Import ``MODULE:ATTR`` (from the current directory or PYTHONPATH) and return the Agent."""
    from cronrace.agent.core import Agent

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
    except SyntaxError as exc:
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else "?"
        message = f"cannot import module {module_name!r}: {where}: {exc.msg}"
        raise fail(message, EXIT_USAGE) from None
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
    except StoreAccessError as exc:
        raise refused(agent.settings.store_url, exc) from None
    except StoreUnavailableError as exc:
        raise fail(str(exc), EXIT_UNREACHABLE) from None
    except CronraceError as exc:
        raise fail(str(exc), EXIT_INVALID) from None
    except KeyboardInterrupt:
        pass


def _serve_metrics(agent: Agent, address: str, actions: bool) -> MetricsServer:
    """Serve metrics, probes and the status page for an agent loaded from MODULE:ATTR."""
    from cronrace.runtime.observer import Observer
    from cronrace.settings import parse_address
    from cronrace.web.metrics import PrometheusObserver
    from cronrace.web.probes import MetricsServer

    try:
        host, port = parse_address(address)
    except ValueError as exc:
        raise fail(f"--metrics-address {address!r}: {exc}", EXIT_USAGE) from None
    observer = agent.observer
    if type(observer) is Observer:
        observer = agent.observer = PrometheusObserver()
    if not isinstance(observer, PrometheusObserver):
        raise fail("--metrics-address needs the agent's observer to be a PrometheusObserver", 2)
    server = MetricsServer.for_agent(agent, observer, host, port, actions=actions)
    try:
        server.start()
    except OSError as exc:
        raise fail(f"--metrics-address {address!r}: cannot listen: {exc}", EXIT_INVALID) from None
    return server


def version_text() -> str:
    """``cronrace --version``: the package, its protocol and its PostgreSQL schema."""
    from cronrace.model.versions import PROTOCOL_VERSION, __version__
    from cronrace.stores.urls import postgres_schema_version

    return (
        f"cronrace {__version__} (protocol {PROTOCOL_VERSION}, "
        f"PostgreSQL schema {postgres_schema_version()})"
    )


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            is_eager=True,
            callback=_print_version,
            help="Print the version, the protocol's and the PostgreSQL schema's, and exit.",
        ),
    ] = False,
) -> None:
    """Fire recurring jobs exactly once per tick across a fleet, with no leader."""


@app.command(epilog=EXIT_CODES_HELP)
def run(
    target: Annotated[
        str | None, typer.Argument(help="MODULE:ATTR of an Agent, e.g. app.jobs:agent")
    ] = None,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    metrics_address: Annotated[
        str | None,
        typer.Option(
            help="host:port for /metrics, /healthz, /readyz and the status page at / ('off' "
            "disables). With --config the default comes from the file (127.0.0.1:9464); "
            "with MODULE:ATTR, off."
        ),
    ] = None,
    status_actions: Annotated[
        bool,
        typer.Option(
            "--status-actions",
            help="With MODULE:ATTR: pause, resume and trigger buttons on the status page "
            "(with --config: status_page_actions in the file).",
        ),
    ] = False,
) -> None:
    """Run an agent (MODULE:ATTR) or a sidecar (--config FILE) until SIGTERM or SIGINT.

    A first signal stops claiming and lets runs finish within the grace; a second cancels them.
    """
    from cronrace.runtime.logs import configure_logging
    from cronrace.sidecar.pid1 import supervise_if_pid1

    supervise_if_pid1()  # as a container's PID 1, reap orphans (before any thread starts)
    store_url = store_url_flag(store_url, redis_url)
    if target is not None:
        if store_url is not None or namespace is not None:
            # The agent was built by the user's module, from its own arguments or the
            # environment: a flag cannot reach it without silently overriding that code.
            raise fail(
                "--store-url and --namespace go with --config; with MODULE:ATTR set "
                "CRONRACE_STORE_URL / CRONRACE_NAMESPACE or pass them to Agent(...)",
                EXIT_USAGE,
            )
        agent = load_agent(target)
        configure_logging(agent.settings.log_format, agent.settings.log_level)
        server = None
        if metrics_address and metrics_address != "off":
            server = _serve_metrics(agent, metrics_address, status_actions)
        try:
            run_agent(agent)
        finally:
            if server is not None:
                server.stop()
        return
    if config is None:
        raise fail("give MODULE:ATTR or --config FILE", EXIT_USAGE)
    if not config.exists():  # e.g. a container started without its config mounted
        raise fail(
            f"{config}: no such file: mount your config file there (docker run -v "
            f'"$PWD/cronrace.toml:{config}:ro" ..., or a ConfigMap on {config.parent}), '
            "or give --config FILE",
            EXIT_INVALID,
        )
    from cronrace.sidecar.service import Sidecar

    try:
        sidecar = Sidecar.from_file(
            config, metrics_address=metrics_address, store_url=store_url, namespace=namespace
        )
    except CronraceError as exc:
        raise fail_lines(exc) from None
    settings = sidecar.config.agent
    configure_logging(settings.log_format, settings.log_level)
    try:
        sidecar.run_sync()
    except StoreAccessError as exc:
        raise refused(settings.store_url, exc) from None
    except StoreUnavailableError as exc:
        raise fail(str(exc), EXIT_UNREACHABLE) from None
    except CronraceError as exc:
        raise fail_lines(exc) from None
    except KeyboardInterrupt:
        pass


@app.command(epilog=EXIT_CODES_HELP)
def validate(
    file: Annotated[Path, typer.Argument(help="The sidecar config file.", dir_okay=False)],
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Check a config file: print every problem, one line each, and exit 1 if any.

    The environment's CRONRACE_* variables are applied as `run` would apply them.
    """
    from cronrace.sidecar.service import check_file

    try:
        config = check_file(file)
    except CronraceError as exc:
        if as_json:
            problems = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
            out.print_json({"file": str(file), "ok": False, "problems": problems})
            raise typer.Exit(EXIT_INVALID) from None
        raise fail_lines(exc) from None
    if as_json:
        out.print_json(out.config_dict(config, time.time()))
    else:
        out.print_config(config, out.terminal_width(wide))


# The operator commands (status, history, nodes, pause, resume, trigger) and the
# `schedules` subcommands, each group in its own module.
for _command in COMMANDS:
    app.command(epilog=EXIT_CODES_HELP)(_command)

app.add_typer(schedules_app, name="schedules", epilog=EXIT_CODES_HELP)
app.add_typer(db_app, name="db", epilog=EXIT_CODES_HELP)


def show_deprecations() -> None:
    """Show cronrace's deprecation warnings as one ``cronrace: warning:`` line each.

    Python hides deprecation warnings outside ``__main__``; a user of ``--redis-url`` or
    ``CRONRACE_REDIS_URL`` must still be told (once per place) what replaces it.
    """
    warnings.simplefilter("default", CronraceDeprecationWarning)
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, CronraceDeprecationWarning):
            typer.echo(f"cronrace: warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def main() -> None:
    """Entry point of the ``cronrace`` console script."""
    show_deprecations()
    try:
        app()
    except CronraceError as exc:  # a last line of defence: never a traceback for bad input
        typer.echo(f"cronrace: {exc}", err=True)
        sys.exit(EXIT_INVALID)
