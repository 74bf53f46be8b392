"""A claim whose reply was lost is read back, never decided from the error alone.

docs/design.md section 8: the claim's value is ``<node_id>:<nonce>``, unique to the process; after
an error the node claims again *and reads the key back*, so a claim that had been written
(the reply was lost, not the request) is found to be its own and the tick runs, once; a key
holding anyone else's value is a lost race. The agent runs on a fake clock and an embedded
store whose claim replies are lost on purpose; a real proxy cutting real connections:
tests/faults/test_acquire_outage.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from cronrace import Agent, RunContext
from cronrace.errors import RedisUnavailableError
from cronrace.stores.values import Claim
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import history

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000


def lose_the_reply_to_the_claim_of(
    agent: Agent, tick_s: int, *, written_by: str | None
) -> list[dict[str, Any]]:
    """Lose the reply to the agent's first claim of ``tick_s``; return, per claim call of it,
    whether it was read back.

    ``written_by=None``: the claim was written (the reply was lost on its way back).
    Otherwise the request never arrived, and the key holds ``written_by``'s claim.
    """
    store = agent.store
    claim_each = store.claim_each
    calls: list[dict[str, Any]] = []

    async def lossy(claims: Sequence[Claim], owner: Any, **options: Any) -> Any:
        if any(c.tick_s == tick_s for c in claims):
            asked = options.get("read_back", False)
            calls.append({"read_back": asked or any(c.read_back for c in claims)})
            if len(calls) == 1:
                if written_by is None:
                    await claim_each(claims, owner, **options)
                else:
                    await store.client.set(store.keys.claim("job", tick_s), written_by)
                raise RedisUnavailableError("connection lost before the reply (test fault)")
        return await claim_each(claims, owner, **options)

    store.claim_each = lossy  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize(
    ("written_by", "runs"),
    [
        (None, True),  # our own claim, written: the tick is ours and runs
        # Another node's, never decided (its node died): lost here, not run; the next
        # tick's decision covers it (catch-up latest: missed).
        ("other-node:5f3c", False),
    ],
)
async def test_a_claim_whose_reply_was_lost_is_decided_from_what_the_key_holds(
    written_by: str | None, runs: bool
) -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[int] = []

    def note(ctx: RunContext) -> None:
        ran.append(ctx.tick_s - T0)

    agent = memory_agent(clock)
    agent.add_job(note, "* * * * * *", name="job", catchup="latest")
    calls = lose_the_reply_to_the_claim_of(agent, T0 + 1, written_by=written_by)
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.advance(3.0)  # ticks 0, 1 (its reply lost, then retried), 2
        records = await history(agent, "job", first_s=T0, last_s=T0 + 2)
        agent.stop()
    # The retry (after a backoff well inside the tick) read the key back.
    assert len(calls) == 2
    assert calls[1]["read_back"] is True
    assert ran == ([0, 1, 2] if runs else [0, 2])
    assert [(r.tick_s - T0, r.outcome.value) for r in records] == (
        [(0, "ok"), (1, "ok"), (2, "ok")] if runs else [(0, "ok"), (1, "missed"), (2, "ok")]
    )
