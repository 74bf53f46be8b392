"""Every Redis key and command cronrace uses, and the Lua scripts (docs/design.md section 7).

This package is the only place that spells a key or a Redis command: ``keys`` spells the
keys, ``commands`` holds :class:`Store` with every command and script call, ``replies`` the
typed arguments and answers (enums and value types, decoded once), ``client`` the
connection pools (``clusterclient`` Cluster's), ``errors`` the translation of redis-py's
exceptions into cronrace's.
"""

from cronrace.stores.redis.client import make_client
from cronrace.stores.redis.commands import Store
from cronrace.stores.redis.keys import Keys
from cronrace.stores.values import (
    Claim,
    ClaimOutcome,
    ClaimReply,
    HeartbeatReply,
    JobState,
    LeaseInfo,
    NotReplicatedError,
    Owner,
    Renewal,
)

__all__ = [
    "Claim",
    "ClaimOutcome",
    "ClaimReply",
    "HeartbeatReply",
    "JobState",
    "Keys",
    "LeaseInfo",
    "NotReplicatedError",
    "Owner",
    "Renewal",
    "Store",
    "make_client",
]
