"""How an agent is hosted: in a task of its own beside the host's code, or owning the process.

:func:`running` is what ``async with agent:`` does (a web app's lifespan, any service with
its own event loop); :func:`run_sync` is what ``agent.run_sync()``, ``cronrace run`` and
the sidecar do: the process is the agent's, so it watches SIGTERM and SIGINT, logs to
stderr unless the program set logging up, and freezes start-up's objects out of the
garbage collector's sight. Both run :meth:`Lifecycle.run` and stop it with
:meth:`Lifecycle.stop`, and let no task outlive them.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
from collections.abc import AsyncIterator

import anyio
from anyio.abc import TaskStatus

from cronrace.agent.lifecycle import Lifecycle
from cronrace.runtime.logs import configure_logging

# The lifecycle's logger: the signals' lines are the agent's, as before this module.
log = logging.getLogger("cronrace.agent.core")


@contextlib.asynccontextmanager
async def running(lifecycle: Lifecycle) -> AsyncIterator[None]:
    """Run in a task of its own while the body runs: what ``async with agent:`` does.

    Entering returns once the agent is ready (anyio's ``task_status`` protocol, as
    ``await task_group.start(agent.run)``) and raises there what start-up raised: a
    refusal at once, an unreachable store after ``startup_timeout_s``. Leaving stops
    gracefully (unless a stop was asked already: a second one would force it) and
    waits until the run is over, so no task outlives the block. A body cancelled
    (its host shutting down at once) cancels the run as a second stop would.
    """
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(lifecycle.run)
            try:
                yield
            finally:
                if not lifecycle.stop_requested:
                    lifecycle.stop()
    except BaseExceptionGroup as group:
        # The run is the group's only task: raise its error itself, as run_sync does.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


def run_sync(lifecycle: Lifecycle) -> None:
    """Run until SIGTERM or SIGINT; a second signal stops at once, as a second stop does.

    Logs go to stderr (``log_format``, ``log_level``) unless the program configured
    logging itself: a script that only calls ``run_sync()`` still shows its ticks.

    The process is the agent's (``cronrace run`` and the sidecar come here): once the
    agent is ready, what start-up left (modules, job definitions, the program's own
    objects) is moved out of the garbage collector's sight (``gc.freeze()``), so that
    its full collections walk only what the agent made since. In a fleet process of ten
    agents, full collections were about 12 % of the CPU of a run, 4 % with the freeze
    (benchmarks/RESULTS.md, 2026-12-06). Reference counting still frees what start-up
    objects stop using; only cycles among them are kept. An application that embeds the
    agent (``await agent.run()``) keeps its collector as it set it.

    Raises:
        StoreUnavailableError: the store could not be reached within the start-up timeout.
    """
    if not logging.getLogger().handlers and not logging.getLogger("cronrace").handlers:
        configure_logging(lifecycle.agent.settings.log_format, lifecycle.agent.settings.log_level)
    try:
        anyio.run(_run_with_signals, lifecycle)
    except BaseExceptionGroup as group:
        # The signal watcher's task group wraps what run() raised; callers (the CLI)
        # expect the error itself, e.g. StoreUnavailableError, not a group of one.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def _run_with_signals(lifecycle: Lifecycle) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(_watch_signals, lifecycle)
        await lifecycle.run(task_status=_FreezeWhenReady())
        tg.cancel_scope.cancel()


async def _watch_signals(lifecycle: Lifecycle, *, task_status: TaskStatus[None]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            name = signal.Signals(signum).name
            if lifecycle.stop_requested:
                log.warning(
                    "second signal: cancelling now; won ticks are still recorded",
                    extra={"signal": name},
                )
            else:
                log.info("signal received; shutting down gracefully", extra={"signal": name})
            lifecycle.stop()


class _FreezeWhenReady:
    """``task_status`` for :meth:`Lifecycle.run` from :func:`run_sync`: freeze start-up's
    objects once the agent is ready (see :func:`run_sync`)."""

    def started(self, value: object = None) -> None:
        gc.freeze()
