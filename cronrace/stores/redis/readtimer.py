"""One timer for a pipeline's reads, instead of one per reply.

redis-py bounds every read by the connection's ``socket_timeout`` (``redis_timeout_s``): it
enters an asyncio timeout around each reply, which schedules a timer and cancels it again.
A pipeline of a thousand claims paid that a thousand times, though its replies arrive
together, and bare redis-py without a socket timeout (the winner's path floor,
benchmarks/floor.py) paid none: at 10 nodes x 100 one-second jobs in one process it was
about a tenth of cronrace's CPU per run (benchmarks/RESULTS.md, 2026-12-06).

Inside :class:`OneReadTimer`, each read still fails once it has waited ``socket_timeout``
for its reply, exactly as redis-py's own timeout would make it (redis-py's ``TimeoutError``;
redis-py closes the connection, as the rest of the replies may still be on the wire), but
one timer watches all the pipeline's reads: it looks at the read under way when it comes
due, and comes due again when that read (or the next) could have waited that long. A
pipeline whose replies arrive together schedules one timer; a read cut short by this
process being busy between reads is not blamed on the server. Waiting for a connection
from the pool, connecting and sending keep their own timeouts, as before.

Only connections with :class:`SharedReadTimer` read this way: cronrace's own classes for
one primary (packing.py) and for Sentinel's primary (client.py). A Cluster pipeline reads
each shard's replies in a task of its own, which one timer of the calling task cannot
watch: its connections, and fakeredis's, go on bounding each read themselves.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError


class _Reads:
    """The reads of one pipeline's replies: one timer for all of them."""

    __slots__ = ("cancelling", "fired", "handle", "loop", "read_from", "task", "timeout_s")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.cancelling = task.cancelling()
        self.loop = asyncio.get_running_loop()
        self.handle: asyncio.TimerHandle | None = None
        self.timeout_s = 0.0
        #: When the read under way began (loop time); None between reads.
        self.read_from: float | None = None
        #: A read waited ``timeout_s``: this task was cancelled for it.
        self.fired = False

    def start(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.handle = self.loop.call_at(self.loop.time() + timeout_s, self._check)

    def _check(self) -> None:
        """Cancel the task if the read under way has waited ``timeout_s``; else look again
        when the read under way (or the next one) could have."""
        now = self.loop.time()
        read_from = self.read_from
        if read_from is not None and now - read_from >= self.timeout_s:
            self.fired = True
            self.task.cancel()
            return
        due = (now if read_from is None else read_from) + self.timeout_s
        self.handle = self.loop.call_at(due, self._check)


#: The reads of the pipeline whose replies this task is reading (None: none).
_PIPELINE_READS: ContextVar[_Reads | None] = ContextVar("cronrace_pipeline_reads", default=None)


class OneReadTimer:
    """Watch each read of the pipeline sent inside with one timer for all (see the module).

    ``where()`` names the server in the error raised when a read times out. A plain class,
    not a generator: it is entered once per pipeline.
    """

    __slots__ = ("reads", "token", "where")

    def __init__(self, where: Callable[[], str]) -> None:
        self.where = where

    def __enter__(self) -> None:
        task = asyncio.current_task()
        # Not in a task (never in cronrace): redis-py bounds each read itself.
        self.reads = None if task is None else _Reads(task)
        self.token = _PIPELINE_READS.set(self.reads)

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        _PIPELINE_READS.reset(self.token)
        reads = self.reads
        if reads is None:
            return
        if reads.handle is not None:
            reads.handle.cancel()
        if not reads.fired:
            return
        # As asyncio.timeout: the cancellation of ours is taken back whatever came of it,
        # and becomes a timeout; one from elsewhere too (the agent stopping) goes on.
        if reads.task.uncancel() <= reads.cancelling and kind is asyncio.CancelledError:
            raise RedisTimeoutError(f"Timeout reading from {self.where()}") from None


class SharedReadTimer:
    """A connection mixin: inside :class:`OneReadTimer`, reads share one timer."""

    socket_timeout: float | None

    async def read_response(
        self,
        disable_decoding: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 (redis-py's signature)
        **kwargs: Any,
    ) -> Any:
        reads = _PIPELINE_READS.get()
        if reads is None or timeout is not None or self.socket_timeout is None:
            return await super().read_response(  # type: ignore[misc]
                disable_decoding, timeout, **kwargs
            )
        if reads.handle is None:  # the pipeline's first read starts its timer
            reads.start(self.socket_timeout)
        reads.read_from = reads.loop.time()
        try:
            # math.inf: redis-py reads without a timeout of its own (redis-py 8.2; earlier
            # releases wait on a timer that never fires, and cost as before).
            return await super().read_response(  # type: ignore[misc]
                disable_decoding, math.inf, **kwargs
            )
        finally:
            reads.read_from = None
