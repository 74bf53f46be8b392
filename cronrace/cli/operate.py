"""The ``cronrace`` operator commands: status, history, nodes, pause, resume, trigger.

Each talks to a fleet through an :class:`~cronrace.operate.client.OperatorClient` of its own
(no Agent is built): settings from the flags, then the environment, then the config
file; failures are one line and an exit code (see :mod:`cronrace.cli.main`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import typer

from cronrace.cli import output as out
from cronrace.cli.options import (
    EXIT_INVALID,
    EXIT_USAGE,
    ConfigOption,
    JobArgument,
    JsonOption,
    NamespaceOption,
    RedisOption,
    StoreOption,
    WideOption,
    fail,
    fail_lines,
    refused,
    store_url_flag,
    unreachable,
)
from cronrace.errors import (
    CronraceError,
    StoreAccessError,
    StoreDataError,
    StoreUnavailableError,
    UnknownJobError,
)
from cronrace.model.records import RunRecord
from cronrace.operate.fleetview import look

if TYPE_CHECKING:  # imported by the command that runs (see operator_settings, with_client)
    from cronrace.operate.client import OperatorClient
    from cronrace.settings import AgentSettings

T = TypeVar("T")


def operator_settings(
    config: Path | None,
    store_url: str | None,
    namespace: str | None,
    redis_url: str | None = None,
) -> AgentSettings:
    """Settings for talking to a fleet: flags, then environment, then the config file.

    Args:
        config: ``--config``.
        store_url: ``--store-url``.
        namespace: ``--namespace``.
        redis_url: the deprecated ``--redis-url`` (warned; ``--store-url`` wins).
    """
    # The settings (pydantic-settings) and the sidecar's config stacks load here, when a
    # command runs, not when `cronrace --help` declares it.
    from cronrace.settings import is_embedded, load_settings
    from cronrace.sidecar.service import load_config

    url = store_url_flag(store_url, redis_url)
    try:
        settings: AgentSettings
        if config is not None:
            settings = load_config(config, store_url=url, namespace=namespace).agent
        else:
            settings = load_settings(store_url=url, namespace=namespace)
    except CronraceError as exc:
        raise fail_lines(exc) from None
    if is_embedded(settings.store_url):
        raise fail(
            "no store to talk to: give --config FILE, --store-url URL or CRONRACE_STORE_URL",
            EXIT_USAGE,
        )
    return settings


def with_client(settings: AgentSettings, operation: Callable[[OperatorClient], Awaitable[T]]) -> T:
    """Run ``operation`` with an operator client; one line and an exit code on failure."""
    from cronrace.operate.client import OperatorClient

    async def main() -> T:
        async with OperatorClient(settings) as client:
            return await operation(client)

    try:
        return anyio.run(main)
    except UnknownJobError as exc:
        raise fail(str(exc), EXIT_INVALID) from None
    except StoreAccessError as exc:
        raise refused(settings.store_url, exc) from None
    except (StoreUnavailableError, StoreDataError) as exc:
        raise unreachable(settings.store_url, exc) from None
    except CronraceError as exc:
        raise fail(str(exc), EXIT_INVALID) from None


def status(
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Show every job: schedule, next and last tick, lease holder and fence, counters.

    Exits 1 when no agent has registered in the namespace yet (no jobs, no live nodes).
    """
    settings = operator_settings(config, store_url, namespace, redis_url)
    view = with_client(settings, look)
    if as_json:
        out.print_json([out.status_dict(row) for row in view.jobs])
    if not view.registered:
        raise fail(
            f"no agent has registered in namespace {settings.namespace!r} yet: agents "
            "register their jobs when they first reach the store (a few seconds after "
            "start); if this lasts, check the namespace and the store's URL",
            EXIT_INVALID,
        )
    if as_json:
        return
    if not view.jobs:
        names = ", ".join(node.node_id for node in view.nodes)
        out.say(f"no jobs in namespace {settings.namespace!r}; live node(s) without jobs: {names}")
        return
    out.print_status(
        list(view.jobs), list(view.nodes), settings.namespace, view.now_s, out.terminal_width(wide)
    )


def history(
    job: JobArgument,
    limit: Annotated[int, typer.Option("--limit", "-l", min=1, help="How many records.")] = 20,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Show a job's newest run records, newest tick first."""
    settings = operator_settings(config, store_url, namespace, redis_url)
    records = with_client(settings, lambda client: client.history(job, limit))
    if as_json:
        out.print_json([out.record_dict(record) for record in records])
    else:
        out.print_history(job, records, out.terminal_width(wide))


def nodes(
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Show the live nodes of the namespace and their last heartbeat."""
    settings = operator_settings(config, store_url, namespace, redis_url)
    rows = with_client(settings, lambda client: client.nodes())
    if as_json:
        out.print_json([out.node_dict(row) for row in rows])
    else:
        out.print_nodes(rows, settings.namespace, out.terminal_width(wide))


def pause(
    job: JobArgument,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pause a job on every node: its ticks are recorded as skipped:paused."""
    settings = operator_settings(config, store_url, namespace, redis_url)
    with_client(settings, lambda client: client.pause(job))
    if as_json:
        out.print_json({"job": job, "paused": True})
    else:
        out.say(f"paused {job}: every node records its ticks as skipped:paused")


def resume(
    job: JobArgument,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume a paused job on every node."""
    settings = operator_settings(config, store_url, namespace, redis_url)
    with_client(settings, lambda client: client.resume(job))
    if as_json:
        out.print_json({"job": job, "paused": False})
    else:
        out.say(f"resumed {job}")


def trigger(
    job: JobArgument,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait for the run's record; exit 1 unless it is ok (a timeout says who was "
            "alive and whether a node claimed the trigger).",
        ),
    ] = False,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=0.1, help="With --wait: give up after seconds.")
    ] = 60.0,
    config: ConfigOption = None,
    store_url: StoreOption = None,
    namespace: NamespaceOption = None,
    redis_url: RedisOption = None,
    as_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Ask the fleet for one immediate run of a job (same lease and overlap policy).

    Exits 1 without asking when no node of the namespace is alive: nothing would run it.
    """
    settings = operator_settings(config, store_url, namespace, redis_url)

    async def operation(
        client: OperatorClient,
    ) -> tuple[str, RunRecord | None, dict[str, Any] | None]:
        trigger_id = await client.trigger(job)
        if not as_json:
            out.say(f"triggered {job}: trigger id {trigger_id}")
        if not wait:
            return trigger_id, None, None
        queued = False
        with anyio.move_on_after(timeout_s):
            while True:
                for record in await client.history(job, 50):
                    if record.trigger_id != trigger_id:
                        continue
                    if record.outcome not in ("queued", "granted"):
                        return trigger_id, record, None  # its result, not its decision
                    queued = queued or record.outcome == "queued"
                await anyio.sleep(0.2)
        return trigger_id, None, await _trigger_timeout(client, job, trigger_id, timeout_s, queued)

    trigger_id, record, timeout = with_client(settings, operation)
    if not wait:
        if as_json:
            out.print_json({"job": job, "trigger_id": trigger_id})
        return
    if record is None:
        assert timeout is not None
        if as_json:
            out.print_json({"job": job, **timeout})
        raise fail(timeout["error"], EXIT_INVALID)
    if as_json:
        out.print_json(out.record_dict(record))
    else:
        out.print_run(record, out.terminal_width(wide))
    if record.outcome != "ok":
        raise typer.Exit(EXIT_INVALID)


async def _trigger_timeout(
    client: OperatorClient, job: str, trigger_id: str, timeout_s: float, queued: bool
) -> dict[str, Any]:
    """Say why a waited-for trigger has no record: who was alive, who claimed it."""
    live = [node.node_id for node in await client.nodes()]
    claimant = await client.trigger_claimant(job, trigger_id)
    lease = next((s for s in await client.jobs_status() if s.job == job), None)
    alive = f"{len(live)} live node(s): {', '.join(live)}" if live else "no live node now"
    if claimant is None:
        why = (
            f"no node claimed it ({alive}); a node runs triggers only for the jobs it "
            "defines: does any define it?"
            if live
            else f"no node claimed it and {alive}"
        )
    elif queued:
        why = f"node {claimant} claimed it and queued it behind a run still going (queue_one)"
    elif lease is not None and lease.lease_owner == claimant:
        why = (
            f"node {claimant} claimed it and its run is still going "
            f"(lease fence {lease.lease_fence}); see `cronrace history {job}` later"
        )
    else:
        why = (
            f"node {claimant} claimed it but wrote no record ({alive}): it may have "
            "stopped before deciding; see its log"
        )
    return {
        "outcome": "timeout",
        "trigger_id": trigger_id,
        "live_nodes": live,
        "claimed_by": claimant,
        "error": f"job {job!r}: no record of trigger {trigger_id} within {timeout_s:g}s: {why}",
    }


#: Registered on the ``cronrace`` app, in this order, by :mod:`cronrace.cli.main`.
COMMANDS = (status, history, nodes, pause, resume, trigger)
