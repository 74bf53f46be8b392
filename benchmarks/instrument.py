"""Count what an agent sends to its store, by phase of its work, without changing the agent.

Two hooks, both outside ``cronrace/``:

- the agent's connection pool is given :class:`CountingConnection` (a redis-py connection
  subclass): every ``send_packed_command`` is one round trip and every ``pack_command`` one
  command sent, counted under the current *phase*;
- the agent's :class:`~cronrace.stores.redis.Store` instance has its public methods wrapped so
  that they set the phase (``claim``, ``decide``, ``end``, ...) for the duration of the
  call. The outermost phase wins, so a pipeline ``Store.end_runs`` sends counts as ``end``.

The phase lives in a context variable: asyncio copies the context into each task, so a
round trip is attributed to the Store call that awaited it, whatever runs concurrently.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

from redis.asyncio.connection import Connection

from cronrace.protocol import DecideRequest
from cronrace.stores.values import Claim

#: What the agent is doing when it talks to Redis.
PHASE: ContextVar[str] = ContextVar("cronrace_bench_phase", default="other")

#: Store methods and the phase they belong to. Tick path: claim, decide (the dense cursor's
#: decision, its records in it), end (a run's end: its record, the lease handed on or
#: released), record (what the agent still writes itself). Per-node background: heartbeat,
#: control (the manual-trigger reader), renew.
STORE_PHASES = {
    "claim": "claim",
    "claim_each": "claim",
    "read_claims": "claim",
    "decide": "decide",
    "end_run": "end",
    "end_runs": "end",
    "record": "record",
    "renew_lease": "renew",
    "heartbeat": "heartbeat",
    "read_control": "control",
    "control_position": "control",
    "load_scripts": "setup",
    "register_jobs": "setup",
    "cursors": "setup",
    "leave": "setup",
}
TICK_PHASES = ("claim", "decide", "end", "record")
BACKGROUND_PHASES = ("heartbeat", "control", "renew")


@dataclass
class Counters:
    """Round trips and commands of one process, by phase (and command name)."""

    round_trips: Counter[str] = field(default_factory=Counter)
    commands: Counter[tuple[str, str]] = field(default_factory=Counter)
    wakeups: int = 0
    claims: int = 0
    claims_by_tick: Counter[int] = field(default_factory=Counter)
    #: (tick, seconds from the tick to the claim pipeline being sent), one per wake-up.
    wake_lags: list[tuple[int, float]] = field(default_factory=list)
    #: (tick, seconds the claim pipeline took, send to reply), one per wake-up.
    claim_rtts: list[tuple[int, float]] = field(default_factory=list)
    #: (tick, seconds the decide pipeline took, send to reply), one per winning wake-up.
    decide_rtts: list[tuple[int, float]] = field(default_factory=list)
    #: What the decisions answered (decided, moved, covered, lost, stale; error: no reply):
    #: a ``moved`` is planned again and sent again, one more round trip for its wake-up.
    decide_answers: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy of the cumulative counts."""
        return {
            "round_trips": dict(self.round_trips),
            "commands": {f"{phase}|{name}": n for (phase, name), n in self.commands.items()},
            "wakeups": self.wakeups,
            "claims": self.claims,
            "decide_answers": dict(self.decide_answers),
        }


COUNTERS = Counters()


def _command_name(first: Any) -> str:
    raw = first.decode() if isinstance(first, bytes | bytearray) else str(first)
    return raw.split(" ", 1)[0].lower()


class CountingConnection(Connection):
    """A redis-py connection that counts round trips and commands under :data:`PHASE`.

    Used as a mixin over the class the store's pool already makes (:func:`_counting`), so
    that what the store does on its connections (its own packer) is what is counted.
    """

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        COUNTERS.round_trips[PHASE.get()] += 1
        await super().send_packed_command(command, check_health)

    def pack_command(self, *args: Any) -> list[bytes]:
        COUNTERS.commands[(PHASE.get(), _command_name(args[0]))] += 1
        return super().pack_command(*args)

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        if self.is_connected:
            COUNTERS.round_trips["disconnects"] += 1
        await super().disconnect(*args, **kwargs)

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        token = PHASE.set("connect")
        try:
            await super().on_connect_check_health(check_health)
        finally:
            PHASE.reset(token)


def _counting(base: type[Any] | None) -> type[Any]:
    """``base`` (the pool's connection class) counting like :class:`CountingConnection`."""
    if base is None or base is Connection:
        return CountingConnection
    if issubclass(base, CountingConnection):
        return base
    return type(f"Counting{base.__name__}", (CountingConnection, base), {})


def _phased(phase: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        if PHASE.get() != "other":
            return await method(*args, **kwargs)
        token = PHASE.set(phase)
        try:
            return await method(*args, **kwargs)
        finally:
            PHASE.reset(token)

    return call


def _counting_claim(method: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(method)
    async def claim(claims: Sequence[Claim], value: str, *args: Any, **kwargs: Any) -> Any:
        sent_s = time.time()
        COUNTERS.wakeups += 1
        COUNTERS.claims += len(claims)
        oldest = None
        for item in claims:
            if item.trigger_id is None:
                COUNTERS.claims_by_tick[item.tick_s] += 1
                oldest = item.tick_s if oldest is None else min(oldest, item.tick_s)
        reply = await method(claims, value, *args, **kwargs)
        if oldest is not None:
            COUNTERS.wake_lags.append((oldest, sent_s - oldest))
            COUNTERS.claim_rtts.append((oldest, time.time() - sent_s))
        return reply

    return claim


def _timed_decide(method: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(method)
    async def decide(requests: Sequence[DecideRequest], *args: Any, **kwargs: Any) -> Any:
        sent_s = time.time()
        reply = await method(requests, *args, **kwargs)
        if requests:
            tick = min(request.tick_s for request in requests)
            COUNTERS.decide_rtts.append((tick, time.time() - sent_s))
        for answer in reply:
            COUNTERS.decide_answers[str(getattr(answer, "answer", "error"))] += 1
        return reply

    return decide


def _counting_rows(method: Callable[..., Any]) -> Callable[..., Any]:
    """The PostgreSQL store's one way to the server: a statement, one round trip each."""

    @wraps(method)
    async def rows(statement: str, *args: Any, **kwargs: Any) -> Any:
        phase = PHASE.get()
        COUNTERS.round_trips[phase] += 1
        COUNTERS.commands[(phase, statement)] += 1
        return await method(statement, *args, **kwargs)

    return rows


def instrument(store: Any) -> None:
    """Count ``store``'s traffic in :data:`COUNTERS`; call before its first command.

    A Redis store: every command and round trip, through its connections. A PostgreSQL
    store: every statement, each its own round trip (``Database.rows``, the one call every
    statement goes through; one autocommit statement per call, no pipelining).
    """
    db = getattr(store, "db", None)
    if db is not None:
        db.rows = _counting_rows(db.rows)
    elif (pool := getattr(store.client, "connection_pool", None)) is not None:
        pool.connection_class = _counting(pool.connection_class)
    else:  # a cluster client: every node it discovers makes its connections from these
        kwargs = store.client.nodes_manager.connection_kwargs
        kwargs["connection_class"] = _counting(kwargs.get("connection_class"))
    for name, phase in STORE_PHASES.items():
        method = getattr(store, name, None)
        if method is None:  # a Redis-only method (load_scripts)
            continue
        if name == "claim_each":  # claim (all or nothing) calls it: count once
            method = _counting_claim(method)
        elif name == "decide":
            method = _timed_decide(method)
        setattr(store, name, _phased(phase, method))


def count_claims(store: Any) -> None:
    """Count only wake-ups and claims (by the wake-up's tick): what the harness needs to
    tell a cell it cannot drive, for cells measured against bare redis-py (the floor),
    which pays for no counting connection either."""
    method = store.claim_each

    @wraps(method)
    async def claim_each(claims: Sequence[Claim], *args: Any, **kwargs: Any) -> Any:
        COUNTERS.wakeups += 1
        COUNTERS.claims += len(claims)
        if claims:
            COUNTERS.claims_by_tick[claims[0].tick_s] += len(claims)
        return await method(claims, *args, **kwargs)

    setattr(store, "claim_each", claim_each)  # noqa: B010 (an instance attribute)
