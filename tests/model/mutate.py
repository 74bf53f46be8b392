"""Put each mutation in (tests/model/mutations.py) and report which machine catches it.

    python -m tests.model.mutate [NAME ...] [--machine scheduler]

For every mutation and machine: whether the machine failed, the number of steps of the
example hypothesis shrank it to, the first line of the failure, and the steps. The table
in tests/model/README.md is its output.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from tests.model.mutations import ENV, MUTATIONS, PYTHON_MUTATIONS
from tests.model.scheduler import SchedulerModel

MACHINES: dict[str, tuple[type[RuleBasedStateMachine], int, int]] = {
    # name: (machine, examples, steps)
    "scheduler": (SchedulerModel, 60, 15),
}


@dataclass
class Caught:
    mutation: str
    machine: str
    failed: bool
    steps: list[str]
    error: str
    seconds: float


@contextmanager
def mutated(name: str) -> Iterator[None]:
    old = os.environ.get(ENV)
    os.environ[ENV] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = old


def catch(
    name: str,
    machine: str,
    *,
    examples: int | None = None,
    shrink: bool = True,
    cls: type[RuleBasedStateMachine] | None = None,
) -> Caught:
    """Run ``machine`` with mutation ``name`` in; return what it found (derandomized).

    ``cls`` runs another class of that machine (the protocol model on PostgreSQL, whose
    mutation is in its schema's functions already).
    """
    default_cls, default_examples, steps = MACHINES[machine]
    cls = cls or default_cls
    budget = settings(
        max_examples=examples or default_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate],
        report_multiple_bugs=False,
        print_blob=False,
    )
    started = time.monotonic()
    with mutated(name):
        try:
            run_state_machine_as_test(cls, settings=budget)
        except BaseException as exc:  # what the machine found is the result
            while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
                exc = exc.exceptions[0]
            notes = "\n".join(getattr(exc, "__notes__", []))
            lines = [line.strip() for line in notes.splitlines()]
            shown = [line for line in lines if line.startswith("state.") and "teardown" not in line]
            taken = [line for line in shown if not line.startswith(("state.the_", "state.noth"))]
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return Caught(name, machine, True, taken, error, time.monotonic() - started)
    return Caught(name, machine, False, [], "", time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", default=[*MUTATIONS, *PYTHON_MUTATIONS])
    parser.add_argument("--machine", choices=list(MACHINES), action="append")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    for name in args.names:
        machines = args.machine or list(MACHINES)
        if name in PYTHON_MUTATIONS:
            machines = [m for m in machines if m == "scheduler"]
        for machine in machines:
            found = catch(name, machine)
            verdict = f"caught in {len(found.steps)} steps" if found.failed else "not caught"
            print(f"## {name} / {machine}: {verdict} ({found.seconds:.0f} s)")
            if found.failed:
                print(f"   {found.error[:200]}")
                for step in found.steps:
                    print(f"   {step}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
