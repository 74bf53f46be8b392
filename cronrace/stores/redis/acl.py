"""Least privilege: the Redis ACL a cronrace user needs, and nothing more.

:data:`COMMANDS` lists every command cronrace sends, by ACL name: those of :class:`Store`
and those the Lua scripts run (a script runs its commands as the calling user). The
README's ``ACL SETUSER`` line is :func:`acl_setuser` for the default namespace; tests check
that the scripts use nothing else and that a fleet, its manual triggers and the operator
commands run under exactly this user with no refusal in ``ACL LOG``.
"""

from __future__ import annotations

#: Sent by Store (store/commands.py, garbage.py, scripts.py).
CLIENT_COMMANDS = (
    "eval",  # a call answered NOSCRIPT is sent again with its source (scripts.py)
    "evalsha",
    "get",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hmget",
    "hset",
    "info",  # the eviction check at start-up (base.py): INFO memory, read only
    "mget",  # the cursors read at start-up, on one primary (shards.py)
    "ping",
    "pttl",
    "sadd",
    "script|load",
    "set",
    "smembers",
    "time",
    "wait",
    "xadd",
    "xrange",
    "xread",
    "xrevrange",
    "zadd",
    "zcount",  # the heartbeat checks its view of the live set adds up (members.py)
    "zmscore",  # ... and asks for the members it read silent again (Redis 6.2 or later)
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
)
#: Run by the Lua scripts (cronrace/stores/redis/lua/*.lua).
SCRIPT_COMMANDS = (
    "del",
    "exists",
    "get",
    "hdel",
    "hexists",
    "hget",
    "hgetall",  # decide.lua reads the state hash and the outstanding triggers whole
    "hincrby",
    "hmget",
    "hset",
    "incr",
    "pexpire",
    "pttl",
    "rename",
    "set",
    "time",
    "type",
    "xadd",
)
#: Every command a cronrace user must be allowed, sorted.
COMMANDS = tuple(sorted(set(CLIENT_COMMANDS) | set(SCRIPT_COMMANDS)))


def acl_setuser(user: str = "cronrace", namespace: str = "cronrace", password: str = "") -> str:
    """Return the ``ACL SETUSER`` line for a user that can run agents and operator commands.

    Args:
        user: the ACL user name.
        namespace: the agents' namespace: the user may touch ``<namespace>:*`` only.
        password: the password; default a ``>PASSWORD`` placeholder to replace.
    """
    secret = f">{password}" if password else ">PASSWORD"
    allowed = " ".join(f"+{command}" for command in COMMANDS)
    return f"ACL SETUSER {user} reset on {secret} ~{namespace}:* resetchannels -@all {allowed}"
