"""The pure planner: which ticks of (cursor, tick] a decision fires (docs/design.md section 5).

A caller plans from the cursor it expects. The ticks older than the catch-up window are
counted, never fired; of those inside it, the catch-up policy fires

- ``skip``: the newest, only when it is on time;
- ``latest``: the newest;
- ``all``: the newest ``max_catchup``, in order;

and the rest are one ``missed`` range (with the count from the job's schedule). What is
fired is always a suffix of the due ticks, so what is not is one contiguous range.
"""

from __future__ import annotations

from collections.abc import Sequence

from cronrace.model.policies import Catchup
from cronrace.protocol.values import Missed


def plan(
    policy: Catchup,
    *,
    due_s: Sequence[int],
    on_time: bool,
    expired: Missed | None,
    max_catchup: int,
) -> tuple[tuple[int, ...], tuple[Missed, ...]]:
    """Split (cursor, tick] into the ticks to fire and the range not fired.

    Args:
        policy: the job's catch-up policy.
        due_s: the ticks of (cursor, tick] inside the catch-up window, oldest first; the
            decision's own tick is the last.
        on_time: whether the newest due tick is on time (at most ``live_grace_s`` late).
        expired: the ticks of (cursor, tick] older than the window, if any.
        max_catchup: the most ticks ``all`` fires.

    Returns:
        The ticks to fire (oldest first) and the missed ranges (at most one).
    """
    if not due_s:
        return (), ((expired,) if expired is not None and expired.count else ())
    if policy is Catchup.ALL:
        fire = tuple(due_s[-max(1, max_catchup) :])
    elif policy is Catchup.SKIP and not on_time:
        fire = ()
    else:
        fire = (due_s[-1],)
    unfired = due_s[: len(due_s) - len(fire)]
    count = len(unfired) + (expired.count if expired is not None else 0)
    if not count:
        return fire, ()
    first_s = expired.first_s if expired is not None and expired.count else unfired[0]
    last_s = unfired[-1] if unfired else expired.last_s  # type: ignore[union-attr]
    return fire, (Missed(first_s, last_s, count),)
