"""The line an operator reads first when the store refuses a call says what ends it."""

from __future__ import annotations

import logging

import pytest

from cronrace.errors import RedisOutOfMemoryError, StoreAccessError, StorePermissionError
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import Readiness
from cronrace.runtime.watchdog import LoopWatchdog


def refused_line(error: StoreAccessError, caplog: pytest.LogCaptureFixture) -> str:
    readiness = Readiness("n1", Observer(), LoopWatchdog(threshold_s=1.0), lambda: "refused")
    readiness.running = True
    with caplog.at_level(logging.ERROR, logger="cronrace.agent.core"):
        readiness.refused("claims", error, first=True)
    [line] = [r.getMessage() for r in caplog.records if "refused a call" in r.getMessage()]
    return line


def test_a_full_redis_is_said_to_pass_once_memory_is_freed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    line = refused_line(RedisOutOfMemoryError("Redis is out of memory", command="set"), caplog)
    assert line == (
        "Redis refused a call (out_of_memory); this is not an outage, and it passes once"
        " memory is freed or maxmemory raised"
    )


def test_a_missing_permission_is_said_not_to_pass_by_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    line = refused_line(StorePermissionError("NOPERM", command="evalsha"), caplog)
    assert line.endswith("(permission); this is not an outage, and it will not pass by itself")
