"""Cancelling one run's handler when its lease is lost, level-triggered, without a scope.

A lost lease must stop the handler (docs/design.md section 4) the way an anyio cancel scope
around it would: at its next await, and again at every await after that until it returns,
so that a handler which catches the cancellation and goes on is stopped again. Entering an
anyio ``CancelScope`` in a plain asyncio task (a run's task, tick/tasks.py) costs each run
its first registration with anyio (a weak reference and a task state), the scope and its
two sets: 11-17 µs of CPU per run on the winner's path, and six objects the cyclic garbage
collector has to walk while the run waits for its release. Nearly no run ever loses its
lease, so :class:`HandlerCancel` costs a run two attribute writes, and does the work only
when :meth:`~HandlerCancel.cancel` is called: it cancels the task (``Task.cancel``) and
keeps doing so once per turn of the event loop while the handler has not returned, as
anyio's own delivery does, skipping a task that is inside a shielded anyio scope (a
handler's shielded clean-up runs, as it did under the scope). On leaving, the cancellation
it caused is taken back (``Task.uncancel``) and its ``CancelledError`` swallowed, unless
someone else cancelled the task too (a forced stop), which then goes on.
"""

from __future__ import annotations

import asyncio
import importlib
from types import TracebackType
from typing import Any, Protocol

#: The message of the cancellations a lost lease causes (seen in a handler's traceback).
LEASE_LOST_MESSAGE = "cronrace: the run's lease was lost"
#: How often a handler inside a shielded anyio scope is looked at again.
SHIELDED_POLL_S = 0.01

_anyio_states: Any = None  # anyio's registry of the tasks that entered its scopes


def _shielded(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is inside a shielded anyio cancel scope right now.

    anyio keeps no public way to ask: this reads its asyncio backend's registry of tasks,
    and counts nothing as shielded if that registry is not where it is expected.
    """
    global _anyio_states
    if _anyio_states is None:
        backend = importlib.import_module("anyio._backends._asyncio")
        _anyio_states = getattr(backend, "_task_states", {})
    state = _anyio_states.get(task)
    scope = getattr(state, "cancel_scope", None)
    while scope is not None:
        if getattr(scope, "shield", False):
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False


class Cancellable(Protocol):
    """What a lost lease cancels: a :class:`HandlerCancel`, or an anyio ``CancelScope``."""

    def cancel(self) -> None: ...


class HandlerCancel:
    """Cancels the code run under it (``with cancel:``), in one plain asyncio task.

    It is the victim a lost lease cancels (:meth:`Lease.keep`, :class:`Renewals`), as an
    anyio ``CancelScope`` can be: anything with ``cancel()`` will do there.
    """

    __slots__ = ("_at_enter", "_delivered", "_inside", "_task", "cancel_called")

    def __init__(self) -> None:
        self._task: asyncio.Task[Any] | None = None
        self._inside = False
        self._at_enter = 0
        self._delivered = 0
        self.cancel_called = False

    def __enter__(self) -> HandlerCancel:
        task = asyncio.current_task()
        assert task is not None, "HandlerCancel is entered in a task"
        self._task, self._inside, self._at_enter = task, True, task.cancelling()
        if self.cancel_called:
            self._deliver()
        return self

    def cancel(self) -> None:
        """Cancel the code under it now and at each of its awaits until it has left."""
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._inside:
            self._deliver()

    def _deliver(self) -> None:
        task = self._task
        if not self._inside or task is None or task.done():
            return
        # As anyio delivers: never the task now running (it is cancelled at its next
        # await, on a later turn), nor one already due to be, nor one whose awaited
        # future is done (it is about to resume with that result).
        if task is not asyncio.current_task() and not getattr(task, "_must_cancel", False):
            if _shielded(task):
                # anyio stops delivering while a task is in a shielded scope and starts
                # again as it leaves it; with no hook there, look again a little later
                # rather than at every turn of the loop (a long clean-up would spin it).
                task.get_loop().call_later(SHIELDED_POLL_S, self._deliver)
                return
            waiter = getattr(task, "_fut_waiter", None)
            if waiter is None or not waiter.done():
                task.cancel(LEASE_LOST_MESSAGE)
                self._delivered += 1
        task.get_loop().call_soon(self._deliver)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._inside = False
        task = self._task
        self._task = None
        if not self.cancel_called or task is None:
            return False
        while self._delivered:
            task.uncancel()
            self._delivered -= 1
        if task.cancelling() > self._at_enter:
            return False  # cancelled by someone else as well: that goes on
        return isinstance(exc, asyncio.CancelledError)
