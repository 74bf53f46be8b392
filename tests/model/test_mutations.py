"""The mutation harness still bites: a bug put in on purpose makes the scheduler model fail.

The whole table (every mutation, shrunk) is ``python -m tests.model.mutate``
(tests/model/README.md); these keep the harness from rotting, without shrinking: the
scheduler model catches a tick fired before its time (the agent's Python) and a decision
that skips its cursor check (the store's Lua). The reference protocol's own mutations are
the exhaustive checker's (tests/model/explore.py).
"""

from __future__ import annotations

import pytest

from tests.model.mutate import catch

pytestmark = pytest.mark.model


def test_the_scheduler_model_catches_a_tick_fired_before_its_time() -> None:
    found = catch("fires-early", "scheduler", examples=3, shrink=False)
    assert found.failed
    assert "before its tick" in found.error


def test_the_scheduler_model_catches_a_decision_without_its_cursor_check() -> None:
    found = catch("decide-without-cursor-check", "scheduler", examples=10, shrink=False)
    assert found.failed
