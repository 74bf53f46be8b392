"""Which jobs a membership change moves: every job's key in its current window, sorted; pure.

With ``racers = k`` a node keeps in its heap only the jobs it races in their current
placement window (racers.py). When the members change, it must find the jobs whose racers
changed without placing all J again on every node at every change (a fleet of 1,000
nodes starting within a minute changes membership at every heartbeat). A job's racers
change exactly when its key lies in an arc (:meth:`~cronrace.fleet.racers.Ring.arcs`) of
a node that joined (on the new ring) or left (on the old one): keys in no such arc keep
their first k nodes. So this index keeps each job's current key sorted, and a change
costs the arcs of the nodes that changed (about k·160 points walked each) and a binary
search per arc, plus the jobs found: about k·J/N for one join or leave.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from cronrace.fleet.racers import Ring, key_point

#: Past this share of the members changed at once, the arcs cost more than placing every
#: job again (and nearly every job moves anyway): the change moves every job.
WHOLE_CHANGE_SHARE = 0.25


class KeyIndex:
    """Each job's key in its current placement window, sorted by ring position."""

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._names: list[str] = []
        self._key_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._key_of

    def put(self, name: str, window_s: int) -> None:
        """Index ``name`` at its window starting ``window_s`` (replacing its last one)."""
        self.drop(name)
        key = key_point(name, window_s)
        i = bisect.bisect_left(self._keys, key)
        self._keys.insert(i, key)
        self._names.insert(i, name)
        self._key_of[name] = key

    def drop(self, name: str) -> None:
        """Forget ``name`` (a job removed at runtime)."""
        key = self._key_of.pop(name, None)
        if key is None:
            return
        i = bisect.bisect_left(self._keys, key)
        while self._names[i] != name:
            i += 1
        del self._keys[i]
        del self._names[i]

    def names(self) -> list[str]:
        """Every indexed job, in ring order."""
        return list(self._names)

    def within(self, arcs: Iterable[tuple[int, int]]) -> set[str]:
        """The jobs whose key lies in any of ``arcs`` (``(lo, hi]``, wrapping when lo >= hi)."""
        keys, names = self._keys, self._names
        found: set[str] = set()
        for lo, hi in arcs:
            start, end = bisect.bisect_right(keys, lo), bisect.bisect_right(keys, hi)
            if lo < hi:
                found.update(names[start:end])
            else:
                found.update(names[start:])
                found.update(names[:end])
        return found

    def moved(
        self, before: Ring, after: Ring, k: int, cache: dict[str, list[int]] | None = None
    ) -> set[str] | None:
        """The jobs whose racers may differ between two rings; None: possibly every job.

        Exact for the jobs' current windows: a job is returned iff its first k nodes on
        ``before`` and on ``after`` differ (tests/unit/test_placement.py holds it to that).
        """
        added, removed = after.members - before.members, before.members - after.members
        if not added and not removed:
            return set()
        if len(before.members) <= k or len(after.members) <= k:
            return None  # some view races every job: every job's racers may change
        if len(added) + len(removed) > WHOLE_CHANGE_SHARE * len(after.members):
            return None
        arcs: list[tuple[int, int]] = []
        for ring, nodes in ((after, added), (before, removed)):
            for node in nodes:
                found = ring.arcs(node, k, cache)
                if found is None:
                    return None
                arcs.extend(found)
        return self.within(arcs)
