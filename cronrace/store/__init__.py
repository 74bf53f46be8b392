"""Every Redis key and command cronrace uses, and the Lua scripts (DESIGN.md section 7).

This package is the only place that spells a key or a Redis command: ``keys`` spells the
keys, ``commands`` holds :class:`Store` with every command and script call, ``replies`` the
typed arguments and answers, ``client`` the connection pools.
"""

from cronrace.store.client import make_client
from cronrace.store.commands import Store
from cronrace.store.keys import Keys
from cronrace.store.replies import (
    AcquireReply,
    AcquireRequest,
    Claim,
    ClaimOutcome,
    ClaimReply,
    HeartbeatReply,
    NotReplicatedError,
    ReleaseReply,
)

__all__ = [
    "AcquireReply",
    "AcquireRequest",
    "Claim",
    "ClaimOutcome",
    "ClaimReply",
    "HeartbeatReply",
    "Keys",
    "NotReplicatedError",
    "ReleaseReply",
    "Store",
    "make_client",
]
