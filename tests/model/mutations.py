"""Protocol and scheduler bugs put in on purpose, to show that the models catch them.

``CRONRACE_MODEL_MUTATION=<name>`` makes every Store the models create run a mutated copy
of the Lua scripts, or (the scheduler's mutations) swaps a mutated function into the
agent while a scheduler model runs. Nothing changes when the variable is unset, which is
how the suite runs. ``python -m tests.model.mutate`` applies each mutation in turn to
each machine and reports which caught it, in how many steps (tests/model/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ENV = "CRONRACE_MODEL_MUTATION"


@dataclass(frozen=True, slots=True)
class Mutation:
    """Replace ``old`` by ``new`` in the scripts named (``*``: every script holding it)."""

    name: str
    what: str
    scripts: tuple[str, ...]
    old: str
    new: str


MUTATIONS = {
    m.name: m
    for m in (
        Mutation(
            "decide-without-cursor-check",
            "a decision does not compare the cursor it was planned from",
            ("decide",),
            "elseif cursor ~= expected then",
            "elseif false then",
        ),
        Mutation(
            "fence-from-zero",
            "a missing fence counter is re-seeded from zero",
            ("*",),
            "local seed = now_us()",
            "local seed = 0",
        ),
        Mutation(
            "renew-unfenced",
            "renew does not compare the fence",
            ("renew_lease",),
            "if held == fence then",
            "if held then",
        ),
        Mutation(
            "skip-runs-anyway",
            "the skip overlap policy runs the tick anyway",
            ("decide",),
            "elseif live and overlap == 'skip' then",
            "elseif false then",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class PythonMutation:
    """Swap a mutated function into the agent; ``patch()`` does it and returns the undo."""

    name: str
    what: str
    patch: Callable[[], Callable[[], None]]


def _fires_early() -> Callable[[], None]:
    from cronrace.tick.loop import Scheduler

    real = Scheduler._push

    def push(self: Scheduler, name: str, tick_s: int, *, wake_s: float | None = None) -> None:
        real(self, name, tick_s, wake_s=tick_s - 2 if wake_s is None else wake_s)

    Scheduler._push = push  # type: ignore[method-assign]
    return lambda: setattr(Scheduler, "_push", real)


def _catchup_fires_twice() -> Callable[[], None]:
    from cronrace.model.policies import Catchup
    from cronrace.protocol import Missed
    from cronrace.tick import plans

    real = plans.plan

    def plan(policy: Catchup, **kwargs: Any) -> tuple[tuple[int, ...], tuple[Missed, ...]]:
        fire, missed = real(policy, **kwargs)
        if policy is Catchup.ALL and len(fire) > 1:
            return (*fire, fire[-1]), missed
        return fire, missed

    plans.plan = plan  # type: ignore[assignment]

    def undo() -> None:
        plans.plan = real

    return undo


PYTHON_MUTATIONS = {
    m.name: m
    for m in (
        PythonMutation(
            "fires-early",
            "the tick loop wakes 2 s before a tick and fires it",
            _fires_early,
        ),
        PythonMutation(
            "catchup-fires-twice",
            "catch-up all fires the newest missed tick twice",
            _catchup_fires_twice,
        ),
    )
}


def _active_name() -> str | None:
    name = os.environ.get(ENV, "")
    if not name:
        return None
    if name not in MUTATIONS and name not in PYTHON_MUTATIONS:
        known = ", ".join([*MUTATIONS, *PYTHON_MUTATIONS])
        raise RuntimeError(f"{ENV}={name!r}: no such mutation; known: {known}")
    return name


def active() -> Mutation | None:
    """The active mutation of the Lua scripts, if any."""
    name = _active_name()
    return MUTATIONS.get(name) if name else None


def python_mutation() -> Callable[[], None]:
    """Apply the active mutation of the agent's Python code, if any; return the undo."""
    name = _active_name()
    mutation = PYTHON_MUTATIONS.get(name) if name else None
    return mutation.patch() if mutation is not None else lambda: None


def _sources(store: Any) -> dict[str, str]:
    scripts = getattr(store, "scripts", None)
    sources = getattr(scripts, "_sources", None) or getattr(store, "_sources", None)
    if not isinstance(sources, dict):
        raise TypeError("cannot find the Store's script sources to mutate")
    return sources


def apply_mutation(store: Any) -> None:
    """Swap the active mutation into ``store``'s scripts (no-op without one)."""
    mutation = active()
    if mutation is None:
        return
    sources = _sources(store)
    names = list(sources) if mutation.scripts == ("*",) else list(mutation.scripts)
    applied = 0
    for name in names:
        if mutation.old in sources[name]:
            sources[name] = sources[name].replace(mutation.old, mutation.new)
            applied += 1
    if not applied:
        raise RuntimeError(f"mutation {mutation.name!r} no longer applies: {mutation.old!r} gone")
