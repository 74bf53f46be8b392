"""Claims whose winner died before deciding them: taken over by a live node (issue 21).

A node that wins a claim and then dies, freezes or is cut off before its decision
reaches the store would take the tick with it: every other node lost that claim and moved
on. So each node remembers, for a while, the claims it lost. When its heartbeat reads a
member gone silent (:class:`~cronrace.fleet.membership.Membership`, a heartbeat older than
1.5 periods), it asks the store to take over those claims the departed nodes still hold
undecided (:meth:`~cronrace.stores.contract.Store.take_over`, a compare-and-set per
claim: of several nodes asking, one takes each). It then races for the ticks it took, as
for ticks whose racers left (``Scheduler._race_orphans``), reading its claim back, and
decides them under the job's catch-up policy: a tick a later decision has passed runs
late under ``catchup = "all"`` and is recorded ``missed`` otherwise. The winner, should it
come back, finds another owner under its claim and is answered ``stale``: the tick is
decided once.

How late: a member counts as departed once its last heartbeat is 1.5 periods old, and
every live node reads that at its next beat, at most one period later. A winner frozen or
killed at its claim (its last beat at or before the tick) has its tick decided at most 2.5
heartbeats after that beat, plus one take-over, claim and decision round trip: 5 s after
the tick at the default ``heartbeat_s = 2``, the bound of a tick whose k racers all died
(:func:`~cronrace.fleet.membership.late_fire_bound_s`). Within the job's catch-up window
(and its claim's TTL, which outlives that window) the tick fires; beyond it, it is missed.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection, Mapping, Sequence

from cronrace.errors import StoreError
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, Owner

log = logging.getLogger("cronrace.tick.takeover")

#: After a failed attempt (the store unreachable), wait this long before the next one.
RETRY_AFTER_S = 1.0
#: A claim this node looked at in a takeover and did not take is watched for ``keep_s``
#: more (another node may have taken it, and may die before deciding it), while its tick
#: is at most this many ``keep_s`` old: a winner and two takers dying in turn.
WATCH_LINKS = 3


class Takeovers:
    """The claims this node lost lately, and the members seen departing lately.

    Args:
        node_id: this node.
        keep_s: how long a lost claim, and a departed member, is remembered: long enough
            for a winner's silence to be seen (the late-fire bound and a heartbeat).
    """

    def __init__(self, node_id: str, keep_s: float) -> None:
        self.node_id = node_id
        self.keep_s = keep_s
        #: (when, tick, job) of every claim lost, oldest first. Kept from when it was lost,
        #: not from its tick: a node that races a tick late (it became a racer when a
        #: member left) loses its claim late, to a node that may have just taken it over.
        self._lost: deque[tuple[float, int, str]] = deque()
        #: The oldest tick a lost claim's plan decided with it when older than the claim's
        #: own (a backlog), by (tick, job): a taker decides from there (:meth:`covered`).
        self._backlogs: dict[tuple[int, str], int] = {}
        #: Claims looked at in a takeover and not taken by this node, by (tick, job), and
        #: when: another node may have taken one and died before deciding it, and nobody
        #: else lost it (the scheduler model: n1 won, froze; n2 took over, froze; n3
        #: had forgotten the claim by n2's departure, keep_s after the tick).
        self._watched: dict[tuple[int, str], float] = {}
        #: Members seen departing since the last look.
        self._departed: set[str] = set()
        #: Members that departed lately, and when this node first looked for their claims.
        self._recent: dict[str, float] = {}
        self._retry_at = float("-inf")
        #: Total claims taken over by this node (for tests and the status line).
        self.taken = 0

    def lost(self, job: str, tick_s: int, now: float, first_s: int | None = None) -> None:
        """Remember a claim this node lost (a tick, not a manual trigger).

        ``first_s``: the oldest tick this node's plan decided with that claim, when older
        than the claim's (a catch-up after an outage, a pause or a late wake-up: one claim,
        on the newest tick, decides the whole backlog). The winner planned the same, and
        its decision would have decided them: a node that takes the claim over must decide
        them too, or nobody does (its decision moves the watermark past them).
        """
        self._lost.append((now, tick_s, job))
        if first_s is not None and first_s < tick_s:
            self._backlogs[(tick_s, job)] = first_s
        oldest_s = now - self.keep_s
        while self._lost and self._lost[0][0] < oldest_s:
            _at, gone_s, gone_job = self._lost.popleft()
            pair = (gone_s, gone_job)
            if self._backlogs and pair not in self._watched:
                self._backlogs.pop(pair, None)

    def covered(self, job: str, tick_s: int) -> int:
        """The oldest tick a claim taken over decides (its lost plan's backlog from there)."""
        return self._backlogs.pop((tick_s, job), tick_s)

    def departed(self, nodes: Collection[str]) -> None:
        """Members seen departing (the membership's hook): their claims are looked at."""
        self._departed.update(node for node in nodes if node != self.node_id)

    def due(self, now_mono: float, orphans: Mapping[str, Sequence[int]] | None = None) -> bool:
        """Whether to look now: members departed since the last look, or ticks whose racers
        all left (``orphans``, racers = k) are about to be raced while departed members may
        hold their claims."""
        wanted = bool(self._departed) or bool(orphans and self._recent)
        return wanted and now_mono >= self._retry_at

    async def take(
        self,
        store: Store,
        owner: Owner,
        *,
        now: float,
        now_mono: float,
        orphans: Mapping[str, Sequence[int]] | None = None,
    ) -> dict[str, list[int]]:
        """Take over the undecided claims departed members hold among those this node lost,
        and among ``orphans``: ticks whose racers all left, which this node is about to race
        (with ``racers = k`` a racer that won such a tick and died before deciding it holds
        its claim; nobody else lost it).

        Returns:
            The ticks taken over, per job (oldest first): the caller races for them.
        """
        departed, self._departed = self._departed, set()
        for node in departed:
            # A node seen departing again (it came back, won claims, went silent again)
            # is looked back on from now: its earlier departure's time would drop it below.
            self._recent[node] = now
        oldest_s = now - self.keep_s
        self._recent = {node: at for node, at in self._recent.items() if at >= oldest_s}
        self._forget_watched(oldest_s)
        if not self._recent:
            return {}
        pairs = set()
        if departed:
            pairs = {(t, job) for at, t, job in self._lost if at >= oldest_s}
            pairs.update(self._watched)
        pairs |= {(t, job) for job, ticks in (orphans or {}).items() for t in ticks}
        if not pairs:
            return {}
        ordered = sorted(pairs)
        claims = [Claim(job, tick_s, 0) for tick_s, job in ordered]
        try:
            holders = await store.take_over(claims, set(self._recent), owner)
        except StoreError as exc:
            self._departed |= departed
            self._retry_at = now_mono + RETRY_AFTER_S
            log.warning(
                "cannot look for claims of departed nodes yet",
                extra={"node": self.node_id, "departed": sorted(departed)[:10], "error": str(exc)},
            )
            return {}
        taken: dict[str, list[int]] = {}
        oldest_tick_s = now - WATCH_LINKS * self.keep_s
        for (tick_s, job), holder in zip(ordered, holders, strict=True):
            if holder is None:
                if tick_s >= oldest_tick_s:
                    self._watched[(tick_s, job)] = now
                continue
            self._watched.pop((tick_s, job), None)
            taken.setdefault(job, []).append(tick_s)
            log.warning(
                "took over a claim whose winner went silent before deciding it",
                extra={"job": job, "tick": tick_s, "node": self.node_id, "winner": str(holder)},
            )
        if taken:
            gone = {(t, job) for job, ticks in taken.items() for t in ticks}
            self._lost = deque(lost for lost in self._lost if (lost[1], lost[2]) not in gone)
            self.taken += len(gone)
        return taken

    def _forget_watched(self, oldest_s: float) -> None:
        """Drop the claims watched since before ``oldest_s`` (and their backlogs)."""
        old = [pair for pair, at in self._watched.items() if at < oldest_s]
        if not old:
            return
        lost = {(t, job) for _at, t, job in self._lost} if self._backlogs else set()
        for pair in old:
            del self._watched[pair]
            if pair not in lost:
                self._backlogs.pop(pair, None)
