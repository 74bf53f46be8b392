"""The reference protocol: pure functions over one job's state (docs/design.md section 16).

It is the specification the stores implement (``stores/redis/lua/decide.lua``, the
PostgreSQL ``decide()`` function), the oracle their differential tests compare against, and
what the exhaustive checker (``python -m tests.model.explore``) explores. No I/O, no clock:
every time is handed in.
"""

from cronrace.protocol.decide import claim, decide, post_trigger, set_paused
from cronrace.protocol.lease import next_fence, release, renew
from cronrace.protocol.plan import plan
from cronrace.protocol.values import (
    Answer,
    Claim,
    DecideReply,
    DecideRequest,
    JobState,
    Lease,
    Missed,
    Pending,
    Record,
    Release,
    ReleaseReply,
    ReleaseRequest,
    Renewal,
    RenewRequest,
    Verdict,
    trigger_key,
)

__all__ = [
    "Answer",
    "Claim",
    "DecideReply",
    "DecideRequest",
    "JobState",
    "Lease",
    "Missed",
    "Pending",
    "Record",
    "Release",
    "ReleaseReply",
    "ReleaseRequest",
    "RenewRequest",
    "Renewal",
    "Verdict",
    "claim",
    "decide",
    "next_fence",
    "plan",
    "post_trigger",
    "release",
    "renew",
    "set_paused",
    "trigger_key",
]
