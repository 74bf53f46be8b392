"""Overlap and catch-up policies, and the outcomes a run record can carry.

The decisions they make are the reference protocol's (cronrace/protocol/): the overlap
policy inside the decision (atomic with the lease check), the catch-up policy in its pure
planner.
"""

from __future__ import annotations

from enum import StrEnum


class Overlap(StrEnum):
    """What to do with a tick when the job's previous run is still alive."""

    SKIP = "skip"
    """Record ``skipped:overlap`` and run nothing (the default)."""
    QUEUE_ONE = "queue_one"
    """Keep this tick pending (a newer one replaces it); the owner runs it on release."""
    REPLACE = "replace"
    """Take the lease with a new fence; the old run is cancelled at its next renewal."""
    ALLOW = "allow"
    """Run anyway, with a new fence and no lease."""


class Catchup(StrEnum):
    """What to do with ticks that were missed (start-up, Redis outage, a paused process)."""

    SKIP = "skip"
    """Fire none of them; write one ``missed`` record with the count."""
    LATEST = "latest"
    """Fire only the most recent missed tick (the default)."""
    ALL = "all"
    """Fire each in order, at most ``max_catchup`` of them (the newest), the rest missed."""


class Outcome(StrEnum):
    """The outcome written in a run record: one per decision."""

    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    SKIPPED_OVERLAP = "skipped:overlap"
    SKIPPED_PAUSED = "skipped:paused"
    QUEUED = "queued"
    MISSED = "missed"
    STALE = "stale"
    ABANDONED = "abandoned"
    NOT_REPLICATED = "skipped:not_replicated"
    GRANTED = "granted"
    """Decided to run (the decision's record; the run's own result follows it)."""
    DATA_LOST = "data_lost"
    """The store lost the job's data: the ticks up to the record's were decided by whom
    and how is unknown (their records went with it)."""
