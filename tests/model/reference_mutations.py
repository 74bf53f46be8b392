"""Bugs put in on purpose into the reference protocol, to show the exhaustive checker bites.

Each mutation names a function of ``cronrace/protocol/`` and one or more exact pieces of
its source text to replace. :func:`applied` compiles the mutated copy in the function's
own module namespace and swaps it in everywhere the original is bound (the module that
defines it and every ``cronrace.protocol`` module that imported it), for the length of a
``with`` block. A piece of text the reference no longer holds is an error (the mutation
would silently test nothing).

``python -m tests.model.explore --list-mutations`` lists them; ``--mutation NAME`` runs
the checker with one applied.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from cronrace.model.policies import Catchup, Overlap


@dataclass(frozen=True, slots=True)
class Mutation:
    """Replace each ``old`` by its ``new`` in the source of ``module.function``."""

    name: str
    what: str
    module: ModuleType
    function: str
    edits: tuple[tuple[str, str], ...]


# The package binds the function ``decide`` over its submodule's name: import the modules.
_DECIDE = importlib.import_module("cronrace.protocol.decide")
_LEASE = importlib.import_module("cronrace.protocol.lease")

MUTATIONS: dict[str, Mutation] = {
    m.name: m
    for m in (
        Mutation(
            "decide-without-cursor-check",
            "a decision does not compare the store's cursor with the one its caller planned "
            "from (no `moved`; a lost cursor is still noticed)",
            _DECIDE,
            "decide",
            (
                (
                    "elif state.cursor_s != req.cursor_s:",
                    "elif state.cursor_s is None and req.cursor_s is not None:",
                ),
            ),
        ),
        Mutation(
            "renew-without-fence-check",
            "a renewal extends the live lease whatever its fence",
            _LEASE,
            "renew",
            (
                (
                    "if lease is not None and lease.fence == req.fence:",
                    "if lease is not None:",
                ),
            ),
        ),
        Mutation(
            "records-only-when-firing",
            "a decision appends its records only when it fires a tick",
            _DECIDE,
            "decide",
            (
                (
                    ".appended(reply.records)",
                    ".appended(reply.records if req.fire_s else ())",
                ),
            ),
        ),
        Mutation(
            "trigger-kept",
            "a trigger's decision leaves its id outstanding",
            _DECIDE,
            "decide",
            (
                (
                    "state = replace(state, triggers=tuple(t for t in state.triggers "
                    "if t[0] != req.trigger_id))",
                    "pass",
                ),
            ),
        ),
        Mutation(
            "release-without-fence-check",
            "a release ends (or hands on) the live lease whatever its fence",
            _LEASE,
            "release",
            (("if lease is None or lease.fence != req.fence:", "if lease is None:"),),
        ),
        Mutation(
            "fence-without-clock-floor",
            "a missing fence counter is seeded without the store's clock, and a new fence "
            "is not floored at it",
            _LEASE,
            "next_fence",
            (
                (
                    "counter = max(now_us, live.fence if live is not None else 0, known_fence)",
                    "counter = max(live.fence if live is not None else 0, known_fence)",
                ),
                ("fence = max(counter, now_us) + 1", "fence = counter + 1"),
            ),
        ),
        Mutation(
            "replay-starts-after-newer-fence",
            "a replayed grant starts while its lease holds its fence, though the counter or "
            "its caller knows a higher one",
            _DECIDE,
            "_replay",
            (
                (
                    "if lease is not None and lease.fence == memo.fence and newest <= memo.fence:",
                    "if lease is not None and lease.fence == memo.fence:",
                ),
            ),
        ),
        Mutation(
            "sweep-forgets-abandoned",
            "a decision that finds a run's lease run out drops the run without recording it "
            "`abandoned`",
            _DECIDE,
            "_sweep",
            (("        if run is not None:", "        if False:"),),
        ),
        Mutation(
            "wipe-without-hold",
            "a decision that finds the job's data lost does not hold new grants",
            _LEASE,
            "start_hold",
            (
                (
                    "hold_until_ms=max(state.hold_until_ms, now_ms + ttl_ms),",
                    "hold_until_ms=state.hold_until_ms,",
                ),
            ),
        ),
    )
}


#: The smallest scope of the checker that reaches each mutation (``explore.Scope`` fields):
#: the faults it needs, the policy it breaks. ``--mutation NAME`` starts from it.
SCOPES: dict[str, dict[str, Any]] = {
    "decide-without-cursor-check": {"triggers": 0, "faults": 0},
    "renew-without-fence-check": {"triggers": 0, "crashes": 0, "freezes": 0, "lost": 0},
    "records-only-when-firing": {
        "triggers": 0,
        "freezes": 0,
        "lost": 0,
        "losses": 0,
        "catchup": Catchup.SKIP,
    },
    "trigger-kept": {"faults": 0},
    "release-without-fence-check": {
        "triggers": 0,
        "crashes": 0,
        "freezes": 0,
        "losses": 0,
        "catchup": Catchup.ALL,
    },
    "fence-without-clock-floor": {"triggers": 0, "crashes": 0, "freezes": 0, "lost": 0},
    # A lost answer, then a failover that puts back the grant's lease after its node saw a
    # newer fence: two faults on one path.
    "replay-starts-after-newer-fence": {
        "ticks": 2,
        "crashes": 0,
        "freezes": 0,
        "faults": 2,
        "overlap": Overlap.REPLACE,
    },
    "sweep-forgets-abandoned": {"triggers": 0, "freezes": 0, "lost": 0, "losses": 0},
    "wipe-without-hold": {"triggers": 0, "crashes": 0, "freezes": 0, "lost": 0},
}


def mutated(mutation: Mutation) -> Any:
    """The mutated copy of the function, compiled in its module's namespace."""
    original = getattr(mutation.module, mutation.function)
    source = textwrap.dedent(inspect.getsource(original))
    for old, new in mutation.edits:
        found = source.count(old)
        if found != 1:
            raise ValueError(
                f"mutation {mutation.name}: {old!r} found {found} times in "
                f"{mutation.module.__name__}.{mutation.function}"
            )
        source = source.replace(old, new)
    namespace = dict(vars(mutation.module))
    code = compile(
        "from __future__ import annotations\n" + source,
        f"<mutation {mutation.name}>",
        "exec",
    )
    exec(code, namespace)  # noqa: S102 - our own reference's source, edited above
    return namespace[mutation.function]


@contextmanager
def applied(name: str | None) -> Iterator[None]:
    """Run the block with the named mutation swapped into the reference (None: none)."""
    if name is None:
        yield
        return
    mutation = MUTATIONS[name]
    original = getattr(mutation.module, mutation.function)
    copy = mutated(mutation)
    bound = [
        module
        for module_name, module in list(sys.modules.items())
        if module_name.startswith("cronrace.protocol")
        and module is not None
        and getattr(module, mutation.function, None) is original
    ]
    for module in bound:
        setattr(module, mutation.function, copy)
    try:
        yield
    finally:
        for module in bound:
            setattr(module, mutation.function, original)
