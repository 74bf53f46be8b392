"""Runs as plain asyncio tasks, owned by the agent's task group of runs.

Every run is a task of its own (a slow handler must not hold up the others). An anyio task
costs about 25 µs more to start and end than a plain asyncio one (its own cancel scope,
event and bookkeeping, measured on the benchmark machine): the largest single cost of a
short run on the winner's path. So a run is a plain task, and the group of runs owns them
through one supervisor task, alive while runs are: when the group is cancelled (a forced
stop, the end of the shutdown grace) the supervisor cancels every run once and waits for
all of them, shielded, as the group itself would. A run's own clean-up (its record and
release, shielded and bounded) then runs as before; leaving the group still means every
run has ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine
from typing import Any

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger("cronrace.run")


class RunTasks:
    """The runs alive, as plain tasks, and the supervisor that ties them to a task group."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._all_done: anyio.Event | None = None
        self._supervised = False
        # Bound once, and run in an empty context: add_done_callback would otherwise copy
        # the caller's context for every run, and keep the copy and a bound method alive
        # for as long as the run (_done reads no context variable).
        self._on_done = self._done
        self._done_context = contextvars.Context()

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, coro: Coroutine[Any, Any, None], name: str, group: TaskGroup) -> None:
        """Start ``coro`` as a task owned by ``group``: cancelled with it, waited for by it."""
        if not self._supervised:
            try:
                group.start_soon(self._supervise, name="cronrace runs")
            except BaseException:  # the group is over: nothing runs
                coro.close()
                raise
            self._supervised = True
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_done, context=self._done_context)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # A run catches its handler's exceptions; what ends its task is a bug or an
            # interpreter exit, and must not pass unseen.
            log.error("a run's task ended with an error", exc_info=exc)
        if not self._tasks and self._all_done is not None:
            self._all_done.set()

    async def _supervise(self) -> None:
        """Wait while runs are alive; when cancelled, cancel them and wait for all of them."""
        try:
            while self._tasks:
                self._all_done = anyio.Event()
                await self._all_done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                cancelled: set[asyncio.Task[None]] = set()
                while self._tasks:
                    for task in self._tasks - cancelled:  # once each: its clean-up is shielded
                        task.cancel()
                        cancelled.add(task)
                    await asyncio.wait(list(self._tasks), return_when=asyncio.FIRST_COMPLETED)
            raise
        finally:
            self._all_done = None
            self._supervised = False
