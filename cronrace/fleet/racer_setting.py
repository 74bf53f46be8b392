"""The ``racers`` and ``racer_groups`` settings, and the hash every placement uses; pure.

:class:`Racers` says how many nodes race for each tick (all, or k) and whether jobs are
placed one by one or in groups (fleet/racers.py says how a placement is made). Kept apart
from the ring so that settings and the CLI read it without the ring's machinery.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from hashlib import blake2b


def hash64(data: bytes) -> int:
    """A stable 64-bit hash (blake2b; never Python's ``hash()``, salted per process)."""
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class Racers:
    """How many nodes race for each tick: all of them (``k is None``) or k; and whether
    jobs are placed one by one (``groups is None``) or in ``groups`` groups.

    Grouped, every job of a group has the group's racers in a window (:meth:`placed_as`),
    so at any moment at most k x groups nodes race anything and the rest only beat: each
    racing node makes one claim round for all its group's due jobs, where placed one by
    one every node of a fleet with k x J / period > N races a few jobs every second and
    pays the rounds of a tick for them (issue 19). The price is spread: within a window a
    group's runs land on its k racers.
    """

    k: int | None = None
    groups: int | None = None

    def __post_init__(self) -> None:
        if self.groups is not None and self.k is None:
            raise ValueError(
                f"racer_groups needs racers = k (an integer), got racers = all and "
                f"racer_groups = {self.groups}"
            )

    @classmethod
    def parse(cls, value: object, groups: object = None) -> Racers:
        """Read the ``racers`` setting: ``all`` or an integer k >= 1; and ``racer_groups``
        (:meth:`parse_groups`).

        Raises:
            ValueError: anything else, in one line naming the value.
        """
        grouped = cls.parse_groups(groups)
        if isinstance(value, Racers):
            return value if groups is None else cls(value.k, grouped)
        if isinstance(value, str):
            text = value.strip().lower()
            if text == "all":
                return cls(None, grouped)
            if text.isdigit() and int(text) >= 1:
                return cls(int(text), grouped)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return cls(value, grouped)
        raise ValueError(f"racers must be 'all' or an integer >= 1, got {value!r}")

    @staticmethod
    def parse_groups(value: object) -> int | None:
        """Read the ``racer_groups`` setting: ``jobs`` (or nothing: each job placed alone)
        or an integer >= 1.

        Raises:
            ValueError: anything else, in one line naming the value.
        """
        if value is None:
            return None
        if isinstance(value, str):
            text = value.strip().lower()
            if text in ("", "jobs"):
                return None
            if text.isdigit() and int(text) >= 1:
                return int(text)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        raise ValueError(f"racer_groups must be 'jobs' or an integer >= 1, got {value!r}")

    def placed_as(self, job: str) -> str:
        """The name a job's racers are placed by: its own, or its group's.

        A group's name holds a NUL, which no job name does (``JOB_NAME_PATTERN``), so the two
        never meet; its number is a stable hash of the job's name, the same on every node.
        """
        return job if self.groups is None else _group_name(job, self.groups)

    def __str__(self) -> str:
        if self.k is None:
            return "all"
        return str(self.k) if self.groups is None else f"{self.k} in {self.groups} groups"


@functools.lru_cache(maxsize=1 << 16)
def group_of(job: str, groups: int) -> int:
    """Which of ``groups`` groups a job is placed in: a stable hash of its name."""
    return hash64(f"{job}\x00group".encode()) % groups


@functools.lru_cache(maxsize=1 << 16)
def _group_name(job: str, groups: int) -> str:
    # Asked for every tick a node races (three times): one dict look-up, not a hash and a
    # new string each time.
    return f"\x00group\x00{group_of(job, groups)}"
