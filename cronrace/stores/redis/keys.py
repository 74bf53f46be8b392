"""The spelling of every Redis key of a namespace (docs/design.md section 2).

All keys of one job share the hash tag ``{<job>}``, so every script touches one Cluster slot.
"""

from __future__ import annotations

from typing import NamedTuple

from cronrace.errors import StoreError

#: The most jobs whose keys :meth:`Keys.of` keeps spelled; past it the table starts again.
KEPT_JOBS_MAX = 1 << 16


class JobKeys(NamedTuple):
    """The keys of one job that every decision and release names (spelled once)."""

    lease: str
    fence: str
    pending: str
    state: str
    runs: str
    hold: str
    quarantine: str
    cursor: str
    triggers: str


class Keys:
    """The spelling of every key of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.ns = namespace
        self._jobs: dict[str, JobKeys] = {}

    def of(self, job: str) -> JobKeys:
        """``job``'s keys, as :meth:`lease`, :meth:`fence`, ... spell them (kept per job:
        a winner names eight of them per run)."""
        keys = self._jobs.get(job)
        if keys is None:
            keys = JobKeys(
                self.lease(job),
                self.fence(job),
                self.pending(job),
                self.state(job),
                self.runs(job),
                self.hold(job),
                self.quarantine(job),
                self.cursor(job),
                self.triggers(job),
            )
            if len(self._jobs) >= KEPT_JOBS_MAX:
                self._jobs.clear()
            self._jobs[job] = keys
        return keys

    def claim(self, job: str, tick_s: int) -> str:
        return f"{self.ns}:claim:{{{job}}}:{tick_s}"

    def trigger_claim(self, job: str, trigger_id: str) -> str:
        return f"{self.ns}:claim:{{{job}}}:trigger:{trigger_id}"

    def lease(self, job: str) -> str:
        return f"{self.ns}:lease:{{{job}}}"

    def fence(self, job: str) -> str:
        return f"{self.ns}:fence:{{{job}}}"

    def cursor(self, job: str) -> str:
        """Every tick of ``job`` up to this one is decided and recorded (docs/design.md 3)."""
        return f"{self.ns}:cursor:{{{job}}}"

    def triggers(self, job: str) -> str:
        """Hash: the manual triggers of ``job`` still outstanding, id -> posted (ms)."""
        return f"{self.ns}:triggers:{{{job}}}"

    def pending(self, job: str) -> str:
        return f"{self.ns}:pending:{{{job}}}"

    def state(self, job: str) -> str:
        return f"{self.ns}:state:{{{job}}}"

    def runs(self, job: str) -> str:
        return f"{self.ns}:runs:{{{job}}}"

    def hold(self, job: str) -> str:
        """Present (with an expiry) while new runs of ``job`` must wait: Redis lost its data."""
        return f"{self.ns}:hold:{{{job}}}"

    def quarantine(self, job: str) -> str:
        """The prefix under which scripts move a key of ``job`` that held garbage."""
        return f"{self.ns}:quarantine:{{{job}}}"

    def quarantine_of(self, key: str) -> str:
        """The quarantine prefix for a namespace-wide key: its whole name as the hash tag,
        so the moved key stays in the slot of the original (which has no tag)."""
        return f"{self.ns}:quarantine:{{{key}}}"

    @property
    def nodes(self) -> str:
        return f"{self.ns}:nodes"

    @property
    def epoch(self) -> str:
        return f"{self.ns}:epoch"

    @property
    def asserted(self) -> str:
        """Hash node -> the epoch for which it re-asserted its runs' leases (after a wipe)."""
        return f"{self.ns}:asserted"

    @property
    def jobs(self) -> str:
        return f"{self.ns}:jobs"

    @property
    def specs(self) -> str:
        """Hash job -> the spec (JSON) last published into its state hash (register_jobs)."""
        return f"{self.ns}:specs"

    @property
    def control(self) -> str:
        return f"{self.ns}:control"

    @property
    def schedules(self) -> str:
        """Stored schedules: hash name -> definition (JSON), plus their ``:version``."""
        return f"{self.ns}:schedules"

    @property
    def fleet_defs(self) -> str:
        """What each node runs: hash node -> fingerprint of its job definitions."""
        return f"{self.ns}:fleet:defs"

    @property
    def fleet_log(self) -> str:
        """The fleet's change log: a stream of joins, leaves and new fingerprints."""
        return f"{self.ns}:fleet:log"

    @property
    def fleet_details(self) -> str:
        """What each node runs, in detail: hash node -> JSON (job digests, handlers)."""
        return f"{self.ns}:fleet:details"


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes when it is not the whole key, or None.

    Cluster's rule: the text between the first ``{`` and the first ``}`` after it, when
    that text is not empty.
    """
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def fence_key(key: str) -> str:
    """The key keeping the highest fence that wrote ``key`` (``fenced_set``).

    It must live in ``key``'s Cluster slot, so that one script can touch both, and start
    with ``key``, so that an ACL key pattern granting ``key`` grants it too: a key with a
    hash tag keeps ``<key>:cronrace-fence`` (same tag); a key without braces gets itself as
    the tag, ``<key>{<key>}:cronrace-fence``.

    Raises:
        StoreError: ``key`` has braces but no hash tag: no such name shares its slot.
    """
    if hash_tag(key) is not None:
        return f"{key}:cronrace-fence"
    if "{" in key or "}" in key:
        raise StoreError(
            f"fenced_set key {key!r} has braces but no hash tag: no key in its Cluster slot "
            "can hold the fence; give it a hash tag, e.g. '{reports}:latest'"
        )
    return f"{key}{{{key}}}:cronrace-fence"
