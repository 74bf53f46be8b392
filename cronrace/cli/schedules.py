"""``cronrace schedules``: add, change, remove, list, apply and export stored schedules.

Every command talks to the fleet's store like the other operator commands (``--config``,
``--store-url``, ``CRONRACE_STORE_URL``); with ``--config`` a target table is checked
against that file's ``allow_hosts``, as the sidecars reading the same file will check it.
A definition is checked fully before anything is written; ``apply`` writes the whole
difference in one script, or nothing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cronrace.cli import output as out
from cronrace.cli.operate import operator_settings, with_client
from cronrace.cli.options import (
    EXIT_CODES_HELP,
    EXIT_USAGE,
    ConfigOption,
    JsonOption,
    NamespaceOption,
    RedisOption,
    StoreOption,
    WideOption,
    fail,
    fail_lines,
)
from cronrace.cli.table import Col, fit
from cronrace.errors import CronraceError

if TYPE_CHECKING:  # the specs stack is imported by the commands that read or write TOML
    from cronrace.operate.client import OperatorClient
    from cronrace.operate.schedules import ScheduleDiff
    from cronrace.specs.stored import ScheduleSpec

schedules_app = typer.Typer(
    help="Stored schedules: added, changed and removed at runtime; every node follows.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

NameArgument = Annotated[str, typer.Argument(help="The schedule's name (a job name).")]
HandlerOption = Annotated[
    str | None, typer.Option("--handler", help="Registered handler to run (library agents).")
]
ArgsOption = Annotated[
    str | None, typer.Option("--args", help="JSON object handed to the handler, e.g. '{\"a\": 1}'.")
]
HttpOption = Annotated[
    str | None, typer.Option("--http", help="Target (sidecar): a URL, or a JSON [http] table.")
]
CommandOption = Annotated[
    str | None,
    typer.Option(
        "--command", help='Target (sidecar): a JSON argv list, e.g. \'["/bin/x", "-v"]\'.'
    ),
]
StreamOption = Annotated[
    str | None, typer.Option("--stream", help="Target (sidecar): a stream key, or a JSON table.")
]
TimezoneOption = Annotated[str | None, typer.Option(help="IANA zone (default UTC).")]
OverlapOption = Annotated[
    str | None, typer.Option(help="skip (default), queue_one, replace, allow.")
]
CatchupOption = Annotated[str | None, typer.Option(help="latest (default), skip, all.")]
LeaseTtlOption = Annotated[float | None, typer.Option(help="Seconds (default 30).")]
CatchupWindowOption = Annotated[float | None, typer.Option(help="Seconds (default 300).")]
StrictOption = Annotated[
    bool,
    typer.Option("--strict", help="Refuse a handler that no live node has registered."),
]


def _json(flag: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"{flag} {text!r}: is not JSON: {exc.msg}", EXIT_USAGE) from None


#: The flags of `add` and `update` that set a definition field of the same name.
PLAIN_FIELDS = ("schedule", "timezone", "overlap", "catchup", "lease_ttl", "catchup_window")


def _fields(flags: dict[str, Any]) -> dict[str, Any]:
    """The definition fields the flags of `add` or `update` give (None: not given).

    Args:
        flags: the command's parameters (its ``locals()``), named as the fields are.
    """
    fields = {key: flags[key] for key in PLAIN_FIELDS if flags.get(key) is not None}
    handler, args = flags.get("handler"), flags.get("args")
    http, command, stream = flags.get("http"), flags.get("command"), flags.get("stream")
    if handler is not None:
        fields["handler"] = handler
    if args is not None:
        fields["args"] = _json("--args", args)
    if http is not None:
        fields["http"] = _json("--http", http) if http.lstrip().startswith("{") else {"url": http}
    if command is not None:
        argv = _json("--command", command)
        fields["command"] = {"argv": argv} if isinstance(argv, list) else argv
    if stream is not None:
        fields["stream"] = _json("--stream", stream) if stream.startswith("{") else {"key": stream}
    return fields


def _describe(spec: ScheduleSpec) -> str:
    return f"{spec.schedule!r} {spec.timezone}, {spec.describe()}"


@schedules_app.command("add", epilog=EXIT_CODES_HELP)
def add(
    name: NameArgument,
    schedule: Annotated[str, typer.Argument(help="Cron, @alias or '@every 5m'; H hashes NAME.")],
    handler: HandlerOption = None,
    args: ArgsOption = None,
    http: HttpOption = None,
    command: CommandOption = None,
    stream: StreamOption = None,
    timezone: TimezoneOption = None,
    overlap: OverlapOption = None,
    catchup: CatchupOption = None,
    lease_ttl: LeaseTtlOption = None,
    catchup_window: CatchupWindowOption = None,
    strict: StrictOption = False,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store a new schedule; live nodes race for it from its next tick."""
    fields = _fields({**locals(), "schedule": None})  # an argument here, not a field
    settings = operator_settings(config, store_url, namespace, redis_url)
    found = fields.pop("handler", None)
    arguments = fields.pop("args", None)
    spec = with_client(
        settings,
        lambda client: client.schedules.add(
            name, schedule, handler=found, args=arguments, strict=strict or None, **fields
        ),
    )
    _done(spec, "added", as_json)


@schedules_app.command("update", epilog=EXIT_CODES_HELP)
def update(
    name: NameArgument,
    schedule: Annotated[str | None, typer.Option(help="A new schedule.")] = None,
    handler: HandlerOption = None,
    args: ArgsOption = None,
    http: HttpOption = None,
    command: CommandOption = None,
    stream: StreamOption = None,
    timezone: TimezoneOption = None,
    overlap: OverlapOption = None,
    catchup: CatchupOption = None,
    lease_ttl: LeaseTtlOption = None,
    catchup_window: CatchupWindowOption = None,
    strict: StrictOption = False,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change fields of a stored schedule; the others keep their values (pause too)."""
    fields = _fields(locals())
    if not fields:
        raise fail("nothing to change: give --schedule, --handler, --timezone, ...", EXIT_USAGE)
    settings = operator_settings(config, store_url, namespace, redis_url)
    spec = with_client(
        settings, lambda client: client.schedules.update(name, strict=strict or None, **fields)
    )
    _done(spec, "updated", as_json)


def _done(spec: ScheduleSpec, what: str, as_json: bool) -> None:
    if as_json:
        out.print_json({"name": spec.name, **spec.definition()})
    else:
        out.say(f"{what} {spec.name}: {_describe(spec)}; live nodes follow within a heartbeat")


@schedules_app.command("rm", epilog=EXIT_CODES_HELP)
def remove(
    name: NameArgument,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove a stored schedule: no node fires it once the change reaches it."""
    settings = operator_settings(config, store_url, namespace, redis_url)
    with_client(settings, lambda client: client.schedules.remove(name))
    if as_json:
        out.print_json({"name": name, "removed": True})
    else:
        out.say(f"removed {name}; its history, watermark and pause flag stay")


@schedules_app.command("ls", epilog=EXIT_CODES_HELP)
def list_(
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """List the stored schedules: schedule, zone, what each runs, its next tick."""
    settings = operator_settings(config, store_url, namespace, redis_url)
    specs = with_client(settings, lambda client: client.schedules.list())
    if as_json:
        out.print_json([{"name": spec.name, **spec.definition()} for spec in specs])
        return
    if not specs:
        out.say(f"no stored schedules in namespace {settings.namespace!r}")
        return
    now_s = time.time()
    rows = [
        (
            spec.name,
            spec.schedule,
            spec.timezone,
            spec.describe(),
            out.local_times(
                out.next_ticks(spec.name, spec.schedule, spec.timezone, now_s)[:1], spec.timezone
            ),
        )
        for spec in specs
    ]
    cols = (
        Col("name"),
        Col("schedule", 1, whole=True),
        Col("zone", 3),
        Col("runs", 2, text=True),
        Col("next tick (job's zone)", 4, whole=True),
    )
    title = f"{len(specs)} stored schedule(s) in namespace {settings.namespace!r}"
    out.print_table(fit(title, cols, rows, out.terminal_width(wide)))


@schedules_app.command("show", epilog=EXIT_CODES_HELP)
def show(
    name: NameArgument,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one stored schedule as TOML, and its next ticks."""
    from cronrace.specs.stored import dump_schedules

    settings = operator_settings(config, store_url, namespace, redis_url)
    spec = with_client(settings, lambda client: client.schedules.get(name))
    ticks = out.next_ticks(spec.name, spec.schedule, spec.timezone, time.time())
    if as_json:
        out.print_json({"name": spec.name, **spec.definition(), "next_ticks_s": ticks})
        return
    sys.stdout.write(dump_schedules([spec]))
    out.say(f"# next ticks: {out.local_times(ticks, spec.timezone).replace(chr(10), ', ')}")


@schedules_app.command("export", epilog=EXIT_CODES_HELP)
def export(
    file: Annotated[
        Path | None, typer.Argument(help="Write here instead of standard output.", dir_okay=False)
    ] = None,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
) -> None:
    """Print every stored schedule as TOML: a backup, or a file to keep under version control."""
    from cronrace.specs.stored import dump_schedules

    settings = operator_settings(config, store_url, namespace, redis_url)
    specs = with_client(settings, lambda client: client.schedules.list())
    text = dump_schedules(specs)
    if file is None:
        sys.stdout.write(text)
        return
    file.write_text(text, encoding="utf-8")
    out.say(f"wrote {len(specs)} stored schedule(s) to {file}", None)


@schedules_app.command("apply", epilog=EXIT_CODES_HELP)
def apply(
    file: Annotated[
        Path, typer.Argument(help="A TOML file of [[schedules]] tables.", dir_okay=False)
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the difference; write nothing.")
    ] = False,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune/--no-prune",
            help="Remove stored schedules the file does not name (default: the file is the set).",
        ),
    ] = True,
    strict: StrictOption = False,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make the stored schedules what FILE says: print the difference, then write it at once."""
    from cronrace.specs.stored import load_schedules

    settings = operator_settings(config, store_url, namespace, redis_url)
    try:
        wanted = load_schedules(file, allow_hosts=list(getattr(settings, "allow_hosts", [])))
    except CronraceError as exc:
        raise fail_lines(exc) from None

    async def operation(client: OperatorClient) -> ScheduleDiff:
        if dry_run:
            return await client.schedules.diff(wanted, prune=prune)
        return await client.schedules.apply(wanted, prune=prune, strict=strict or None)

    found = with_client(settings, operation)
    if as_json:
        out.print_json(
            {
                "added": [spec.name for spec in found.added],
                "updated": [new.name for _, new in found.updated],
                "removed": [spec.name for spec in found.removed],
                "unchanged": list(found.unchanged),
                "written": not dry_run and not found.empty,
            }
        )
        return
    for line in diff_lines(found):
        out.say(line)
    counts = (
        f"{len(found.added)} to add, {len(found.updated)} to update, "
        f"{len(found.removed)} to remove, {len(found.unchanged)} unchanged"
    )
    if dry_run:
        out.say(f"{counts} (dry run: nothing written)")
    elif found.empty:
        out.say(f"{counts}: nothing to write")
    else:
        out.say(f"{counts}: written; live nodes follow within a heartbeat")


def diff_lines(found: ScheduleDiff) -> list[str]:
    """``+ name: ...``, ``~ name: field old -> new``, ``- name`` lines."""
    lines = [f"+ {spec.name}: {_describe(spec)}" for spec in found.added]
    for old, new in found.updated:
        before, after = old.definition(), new.definition()
        changed = [
            f"{key} {json.dumps(before.get(key))} -> {json.dumps(after.get(key))}"
            for key in sorted(set(before) | set(after))
            if before.get(key) != after.get(key)
        ]
        lines.append(f"~ {new.name}: {'; '.join(changed)}")
    lines += [f"- {spec.name}: {_describe(spec)}" for spec in found.removed]
    return lines
