"""Taking over a won claim whose winner died before deciding it (``takeover.lua``).

A node that wins a claim and then dies, freezes or is cut off before its decision reaches
Redis would take the tick with it: every other node lost that claim and moved on. A live
node that lost the claim, once it sees the winner's heartbeat expire, takes the claim
over with a compare-and-set (the script changes it only while it still names the dead
winner and holds no decision), then claims and decides the tick itself. The winner, back
from a freeze, finds another owner under its claim and is answered ``stale``
(``acquire.lua``), so the tick fires once (tick/takeover.py is the agent's side).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from cronrace.stores.redis.errors import translate, translating
from cronrace.stores.redis.garbage import report_quarantined
from cronrace.stores.redis.replies import decode_claim_owner, decode_quarantined
from cronrace.stores.redis.runs import RunCommands
from cronrace.stores.values import Claim, Owner


@translating
class TakeoverCommands(RunCommands):
    """The takeover of undecided claims whose winner's node departed."""

    async def take_over(
        self, claims: Sequence[Claim], departed: Collection[str], owner: Owner
    ) -> list[Owner | None]:
        """Take over undecided claims of departed nodes: one script call per claim, one
        pipeline per shard (a claim and its job's keys share a slot)."""
        if not claims or not departed:
            return [None] * len(claims)
        nodes = " ".join(sorted(departed))
        calls = [
            ((self._claim_key(claim),), (str(owner), nodes, self.keys.quarantine(claim.job)))
            for claim in claims
        ]
        replies = await self.scripts.eval_many("takeover", calls)
        out: list[Owner | None] = []
        for claim, reply in zip(claims, replies, strict=True):
            if isinstance(reply, BaseException):
                raise translate(reply, in_reply=True)
            report_quarantined(
                decode_quarantined(reply[2]), script="takeover", job=claim.job, tick=claim.tick_s
            )
            out.append(decode_claim_owner(reply[1]) if int(reply[0]) == 1 else None)
        return out
