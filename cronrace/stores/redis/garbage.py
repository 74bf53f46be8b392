"""Garbage in Redis: keys of ours holding the wrong type, reported and moved aside.

The scripts check their own keys before writing and move a bad one aside (``_lib.lua``);
this module reports what they moved, and does the same for plain commands sent in
pipelines (a run record's ``XADD``, a state ``HSET``): a command that fails with
``WRONGTYPE`` has its key moved aside by ``quarantine.lua`` and is sent once more. A key
that holds garbage is never left to fail every tick of its job, and never stops the other
jobs of the same pipeline.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ResponseError

from cronrace.stores.redis.replies import decode_quarantined
from cronrace.stores.redis.scripts import Scripts
from cronrace.stores.values import Quarantined

log = logging.getLogger("cronrace.stores.redis")


@dataclass(frozen=True, slots=True)
class Command:
    """One pipelined command whose key must be absent or hold ``key_type``."""

    method: str  # the redis-py pipeline method: xadd, hincrby, hset, ...
    key: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    key_type: str = "string"
    kind: str = ""
    quarantine_prefix: str = ""

    def queue(self, pipe: Any) -> None:
        getattr(pipe, self.method)(self.key, *self.args, **self.kwargs)


def is_wrong_type(reply: Any) -> bool:
    """Whether a pipelined reply is a ``WRONGTYPE`` error."""
    return isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE")


def report_quarantined(moved: Sequence[Quarantined], *, script: str, **context: Any) -> None:
    """Log every key a script moved aside, at ERROR, with its full name and new name."""
    if not moved:
        return
    for item in moved:
        log.error(
            "garbage found in Redis: the key was moved aside and the job goes on",
            extra={
                "script": script,
                "kind": item.kind,
                "key": item.key,
                "moved_to": item.moved_to,
                **context,
            },
        )


async def send_repairing(
    client: Any,
    scripts: Scripts,
    commands: Sequence[Command],
    *,
    time_first: bool = False,
    tail: Sequence[Command] = (),
) -> list[Any]:
    """Send ``commands`` in one pipeline; move a ``WRONGTYPE`` key aside and resend.

    With ``time_first`` the pipeline starts with ``TIME`` (every attempt), whose reply
    comes first in the result. ``tail`` rides in the first attempt's pipeline, after
    ``commands``: its replies come last in the result, as they are (errors included),
    never moved aside nor sent again.

    Raises:
        The first error that remains (not ``WRONGTYPE``, or ``WRONGTYPE`` again), after
        every other command was sent: one job's garbage never costs another its write.
    """
    results: list[Any] = [None] * len(commands)
    todo = list(range(len(commands)))
    server_time: Any = None
    tail_replies: list[Any] = []
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        if time_first:
            pipe.execute_command("TIME")  # a cluster pipeline refuses pipe.time()
        for index in todo:
            commands[index].queue(pipe)
        for command in tail if not attempt else ():
            command.queue(pipe)
        replies = await pipe.execute(raise_on_error=False)
        if time_first:
            server_time, *replies = replies
        if tail and not attempt:
            tail_replies = replies[len(replies) - len(tail) :]
            replies = replies[: len(replies) - len(tail)]
        for index, reply in zip(todo, replies, strict=True):
            results[index] = reply
        garbled = {commands[i].key: commands[i] for i in todo if is_wrong_type(results[i])}
        if attempt or not garbled:
            break
        for command in garbled.values():
            await quarantine(scripts, command)
        # Every command on a moved key goes again (a SET NX answered "exists" by garbage).
        todo = [i for i in todo if commands[i].key in garbled]
    for reply in [server_time, *results]:
        if isinstance(reply, Exception):
            raise reply
    return [server_time, *results, *tail_replies] if time_first else [*results, *tail_replies]


async def quarantine(scripts: Scripts, command: Command) -> tuple[Quarantined, ...]:
    """Move the key of ``command`` aside if it does not hold the type the command needs."""
    reply = await scripts.eval(
        "quarantine", [command.key], [command.key_type, command.kind, command.quarantine_prefix]
    )
    moved = decode_quarantined(reply)
    report_quarantined(moved, script="quarantine", command=command.method)
    return moved
