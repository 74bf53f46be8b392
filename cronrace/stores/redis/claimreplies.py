"""What the shards answered a wake-up's claims: errors, moving slots, shared replies.

Helpers of :meth:`~cronrace.stores.redis.Store.claim_each` (commands.py), which reads one
reply per claim of every wake-up: the common answers are shared values, and the errors are
found in one pass over the replies, not a call per claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cronrace.stores.redis.errors import Passage, passage
from cronrace.stores.redis.shards import ShardReply
from cronrace.stores.values import ClaimOutcome, ClaimReply

#: How many more times a wake-up's claims met by a moving slot are sent (at once).
CLAIM_MOVING_ROUNDS = 2


def add_again(add: Callable[[Any, int], object], indexes: list[int], pipe: Any, index: int) -> None:
    add(pipe, indexes[index])


#: The replies of nearly every claim, shared (a frozen value).
WON = ClaimReply(ClaimOutcome.WON)
LOST = ClaimReply(ClaimOutcome.LOST)


def first_error(reply: ShardReply) -> BaseException | None:
    return next((a for a in _as_list(reply.replies) if isinstance(a, BaseException)), None)


def failed_items(replies: Sequence[ShardReply]) -> list[int]:
    """The items whose commands got an error (one pass, no call per item)."""
    out = []
    for index, reply in enumerate(replies):
        answers = reply.replies
        if isinstance(answers, BaseException):
            out.append(index)
            continue
        for answer in answers:
            if isinstance(answer, BaseException):
                out.append(index)
                break
    return out


def slot_moving(reply: ShardReply) -> bool:
    """Whether a claim's commands were refused, before they ran, by a moving slot."""
    failed = first_error(reply)
    return failed is not None and passage(failed, in_reply=True) is Passage.MOVING


def _as_list(answers: list[Any] | BaseException) -> list[Any]:
    return [answers] if isinstance(answers, BaseException) else answers
