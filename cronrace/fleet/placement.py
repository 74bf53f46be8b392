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
from collections.abc import Callable, Iterable

from cronrace.fleet.racers import Ring, key_point

#: Keys per bucket of the index, on average, when it is sized (:class:`KeyIndex`).
_PER_BUCKET = 8


class KeyIndex:
    """Each job's key in its current placement window, in buckets by the key's top bits.

    Keys are uniform 64-bit hashes, so the top bits spread them evenly: a window's turn
    (every job, once a window, on every node) moves one key between two buckets of about
    :data:`_PER_BUCKET` keys, where one sorted list of every key cost two inserts and two
    deletes moving about J/2 entries each (10,000 jobs: most of a turn's 13 µs).

    A job's key is that of the name its racers are placed by (``placed_as``: its own, or
    its group's, :meth:`~cronrace.fleet.racers.Racers.placed_as`). Grouped, many jobs share
    one key: those of a key are kept in name order, so that one is found by a binary search
    and not by walking the group's jobs (a group's turn moves every job of it).
    """

    def __init__(self, placed_as: Callable[[str], str] | None = None) -> None:
        self._placed_as = placed_as
        self._shift = 64
        self._buckets: list[tuple[list[int], list[str]]] = [([], [])]
        self._key_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._key_of)

    def __contains__(self, name: object) -> bool:
        return name in self._key_of

    def _resize(self, count: int) -> None:
        """Size the buckets for ``count`` keys and put every key back in them."""
        bits = max(0, (count // _PER_BUCKET).bit_length())
        self._shift = 64 - bits
        entries = sorted((key, name) for name, key in self._key_of.items())
        self._buckets = [([], []) for _ in range(1 << bits)]
        for key, name in entries:
            keys, names = self._buckets[key >> self._shift]
            keys.append(key)
            names.append(name)

    def put(self, name: str, window_s: int) -> int:
        """Index ``name`` at its window starting ``window_s`` (replacing its last one);
        returns its key."""
        self.drop(name)
        key = self._key(name, window_s)
        self._key_of[name] = key
        if len(self._key_of) > 4 * _PER_BUCKET * len(self._buckets):
            self._resize(len(self._key_of))  # jobs added at runtime: a few times at most
            return key
        keys, names = self._buckets[key >> self._shift]
        i = self._find(keys, names, key, name)
        keys.insert(i, key)
        names.insert(i, name)
        return key

    def put_all(self, entries: Iterable[tuple[str, int]]) -> None:
        """Index many jobs, each at its window's start (a node's start places every job)."""
        for name, window_s in entries:
            self._key_of[name] = self._key(name, window_s)
        self._resize(len(self._key_of))

    def drop(self, name: str) -> None:
        """Forget ``name`` (a job removed at runtime)."""
        key = self._key_of.pop(name, None)
        if key is None:
            return
        keys, names = self._buckets[key >> self._shift]
        i = self._find(keys, names, key, name)
        del keys[i]
        del names[i]

    def _key(self, name: str, window_s: int) -> int:
        return key_point(name if self._placed_as is None else self._placed_as(name), window_s)

    @staticmethod
    def _find(keys: list[int], names: list[str], key: int, name: str) -> int:
        """Where (``key``, ``name``) is or goes in a bucket: by key, then by name."""
        lo = bisect.bisect_left(keys, key)
        if lo == len(keys) or keys[lo] != key:
            return lo
        return bisect.bisect_left(names, name, lo, bisect.bisect_right(keys, key, lo))

    def names(self) -> list[str]:
        """Every indexed job, in ring order."""
        out: list[str] = []
        for _keys, names in self._buckets:
            out += names
        return out

    def within(self, arcs: Iterable[tuple[int, int]]) -> set[str]:
        """The jobs whose key lies in any of ``arcs`` (``(lo, hi]``, wrapping when lo >= hi)."""
        found: set[str] = set()
        for lo, hi in arcs:
            if lo < hi:
                self._span(lo, hi, found)
            else:
                self._span(lo, (1 << 64) - 1, found)
                self._span(-1, hi, found)
        return found

    def _span(self, lo: int, hi: int, found: set[str]) -> None:
        """Add the jobs with ``lo < key <= hi`` (``-1 <= lo < hi < 2**64``) to ``found``."""
        buckets, shift = self._buckets, self._shift
        first, last = max(lo, 0) >> shift, hi >> shift
        for b in range(first, last + 1):
            keys, names = buckets[b]
            if not keys:
                continue
            start = bisect.bisect_right(keys, lo) if b == first else 0
            end = bisect.bisect_right(keys, hi) if b == last else len(keys)
            found.update(names[start:end])

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
