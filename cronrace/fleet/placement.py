"""Which jobs a node races after a membership change: every job's key in its current
window, sorted; pure.

With ``racers = k`` a node keeps in its heap only the jobs it races in their current
placement window (racers.py). When the members change, it must find the jobs it now races
without placing all J again on every node at every change (a fleet of 1,000 nodes starting
within a minute changes membership at every heartbeat). A node races exactly the keys in
its own arcs (:meth:`~cronrace.fleet.racers.Ring.arcs`: the ranges whose first k nodes
include it), so this index keeps each job's current key sorted, and a change costs this
node's arcs on the new ring (about k points walked for each of its 160) and a binary search
per arc, plus the jobs found: about k·J/N, however many members changed at once. (Looking
for the arcs of the nodes that changed instead cost about k·J/N per changed node: a beat
that read hundreds of joins placed every job again.)
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from cronrace.fleet.racers import Ring, key_point


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

    def put_all(self, entries: Iterable[tuple[str, int]]) -> None:
        """Index many jobs, each at its window's start: one sort into an empty index (a
        node's start places every job; 10,000 sorted inserts cost it ~30 ms)."""
        if self._names:
            for name, window_s in entries:
                self.put(name, window_s)
            return
        keyed = sorted((key_point(name, window_s), name) for name, window_s in entries)
        self._keys = [key for key, _name in keyed]
        self._names = [name for _key, name in keyed]
        self._key_of = {name: key for key, name in keyed}

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

    def raced_by(
        self, ring: Ring, node: str, k: int, cache: dict[str, list[int]] | None = None
    ) -> set[str] | None:
        """The jobs ``node`` (a member of ``ring``) races on it in their current windows;
        None: every job (the ring has at most k nodes besides it).

        Exact: a job is returned iff ``node`` is among its first k nodes on ``ring``
        (tests/unit/fleet/test_placement.py holds it to that).
        """
        arcs = ring.arcs(node, k, cache)
        return None if arcs is None else self.within(arcs)
