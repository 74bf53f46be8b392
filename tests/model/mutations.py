"""Protocol bugs put in on purpose, to show that the models catch them.

``CRONRACE_MODEL_MUTATION=<name>`` makes every Store the models create run a mutated copy
of the Lua scripts (or, for ``python`` mutations, a mutated function). Nothing changes
when the variable is unset, which is how the suite runs. ``python -m tests.model.mutate``
applies each mutation in turn and reports which machine caught it.
"""

from __future__ import annotations

import os
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
            "stale-equal-accepted",
            "acquire accepts a tick equal to the watermark",
            ("acquire",),
            "if prev >= decide_tick then",
            "if prev > decide_tick then",
        ),
        Mutation(
            "fence-from-zero",
            "a missing fence counter is re-seeded from zero",
            ("*",),
            "local seed = now_us()",
            "local seed = 0",
        ),
        Mutation(
            "release-unfenced",
            "release does not compare the fence",
            ("release",),
            "if held ~= ARGV[1] then",
            "if not held then",
        ),
        Mutation(
            "renew-unfenced",
            "renew does not compare the fence",
            ("renew",),
            "if held ~= ARGV[1] then",
            "if false then",
        ),
        Mutation(
            "skip-runs-anyway",
            "the skip overlap policy runs the tick anyway",
            ("acquire",),
            "elseif overlap ~= 'replace' then",
            "elseif false then",
        ),
    )
}


def active() -> Mutation | None:
    name = os.environ.get(ENV, "")
    if not name:
        return None
    if name not in MUTATIONS:
        raise RuntimeError(f"{ENV}={name!r}: no such mutation; known: {', '.join(MUTATIONS)}")
    return MUTATIONS[name]


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
