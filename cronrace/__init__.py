"""cronrace: fire recurring jobs exactly once per tick across a fleet, with no leader.

``import cronrace`` stays cheap: a module of handlers needs the job model, the policies and
the errors, not the agent's settings, the store's driver nor the sidecar's HTTP client. The
public names whose modules bring those stacks (:data:`_LAZY`) are imported on first use
(PEP 562), so ``from cronrace import Agent`` works as before and pays for the agent alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cronrace.errors import (
    ConfigError,
    CronraceDeprecationWarning,
    CronraceError,
    JobDefinitionError,
    RedisAmbiguousError,
    RedisDataError,
    RedisUnavailableError,
    ScheduleError,
    StoreAmbiguousError,
    StoreDataError,
    StoreError,
    StoreUnavailableError,
    TargetError,
    UnknownJobError,
)
from cronrace.model.job import Job, JobOptions, RunContext
from cronrace.model.policies import Catchup, Outcome, Overlap
from cronrace.model.records import JobStatus, NodeInfo, RunRecord
from cronrace.model.versions import __version__ as __version__
from cronrace.timing.schedule import Schedule

if TYPE_CHECKING:  # the names _LAZY imports on first use, for type checkers and editors
    from cronrace.agent.core import Agent
    from cronrace.operate.client import OperatorClient
    from cronrace.settings import AgentSettings

__all__ = [
    "Agent",
    "AgentSettings",
    "Catchup",
    "ConfigError",
    "CronraceDeprecationWarning",
    "CronraceError",
    "Job",
    "JobDefinitionError",
    "JobOptions",
    "JobStatus",
    "NodeInfo",
    "OperatorClient",
    "Outcome",
    "Overlap",
    "RedisAmbiguousError",
    "RedisDataError",
    "RedisUnavailableError",
    "RunContext",
    "RunRecord",
    "Schedule",
    "ScheduleError",
    "StoreAmbiguousError",
    "StoreDataError",
    "StoreError",
    "StoreUnavailableError",
    "TargetError",
    "UnknownJobError",
]

#: Public name -> the module that defines it, for the names imported on first use: each
#: brings pydantic-settings and the store's driver, which a handler module never needs.
_LAZY = {
    "Agent": "cronrace.agent.core",
    "AgentSettings": "cronrace.settings",
    "OperatorClient": "cronrace.operate.client",
}


def __getattr__(name: str) -> Any:
    """Import a public name of :data:`_LAZY` on first use (PEP 562), then keep it here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
