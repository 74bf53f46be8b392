"""cronrace: fire recurring jobs exactly once per tick across a fleet, with no leader."""

from cronrace.agent.core import Agent
from cronrace.errors import (
    ConfigError,
    CronraceError,
    JobDefinitionError,
    RedisAmbiguousError,
    RedisDataError,
    RedisUnavailableError,
    ScheduleError,
    StoreError,
    TargetError,
    UnknownJobError,
)
from cronrace.model.job import Job, JobOptions, RunContext
from cronrace.model.policies import Catchup, Outcome, Overlap
from cronrace.model.records import JobStatus, NodeInfo, RunRecord
from cronrace.operate.client import OperatorClient
from cronrace.settings import AgentSettings
from cronrace.timing.schedule import Schedule

__all__ = [
    "Agent",
    "AgentSettings",
    "Catchup",
    "ConfigError",
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
    "StoreError",
    "TargetError",
    "UnknownJobError",
]

__version__ = "0.1.0"
