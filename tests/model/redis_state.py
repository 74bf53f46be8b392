"""What the models do to Redis from outside the protocol: time, snapshots, garbage.

These are the faults a fleet lives with, done to one namespace of a real or fake server:

- **time passes**: every key's TTL is shortened by the same amount (and the key deleted when
  it would have expired). The scripts are given TTLs far longer than an example lasts on
  the wall clock, so expiry happens only when the model says time passed, never by chance.
- **a failover to a lagging replica**: the namespace is put back as a snapshot taken some
  steps earlier saw it (type-aware, with the TTLs the keys had then).
- **garbage**: a value of any type under any key.

Everything here spells Redis commands directly, on a synchronous client of the same server:
it is the test's hand on the server, not cronrace's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

GARBAGE_KINDS = ("text", "number", "hash", "list", "set", "zset", "stream")


@dataclass(frozen=True, slots=True)
class KeyCopy:
    """One key as a snapshot saw it."""

    key: bytes
    kind: str
    value: Any
    pttl_ms: int  # -1: no expiry


def namespace_keys(client: Any, namespace: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{namespace}:*", count=500))


def shorten_ttls(client: Any, namespace: str, elapsed_ms: int) -> None:
    """Let ``elapsed_ms`` pass for every key with a TTL: shorten it, or delete the key."""
    keys = namespace_keys(client, namespace)
    if not keys:
        return
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.pttl(key)
    ttls = pipe.execute()
    pipe = client.pipeline(transaction=False)
    for key, ttl in zip(keys, ttls, strict=True):
        if ttl is None or int(ttl) < 0:
            continue
        if int(ttl) <= elapsed_ms:
            pipe.delete(key)
        else:
            pipe.pexpire(key, int(ttl) - elapsed_ms)
    pipe.execute()


def snapshot(client: Any, namespace: str) -> list[KeyCopy]:
    """Copy every key of the namespace with its type, value and remaining TTL."""
    out = []
    for key in namespace_keys(client, namespace):
        kind = (client.type(key)).decode()
        reader = {
            "string": client.get,
            "hash": client.hgetall,
            "list": lambda k: client.lrange(k, 0, -1),
            "set": client.smembers,
            "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
            "stream": lambda k: client.xrange(k, "-", "+"),
        }.get(kind)
        if reader is None:
            continue  # expired between SCAN and TYPE
        value = reader(key)
        out.append(KeyCopy(key, kind, value, int(client.pttl(key))))
    return out


def restore(client: Any, namespace: str, copies: list[KeyCopy], *, elapsed_ms: int = 0) -> None:
    """Make the namespace hold exactly ``copies`` (a failover to a replica that lags),
    ``elapsed_ms`` after they were taken: keys that have expired since are not restored."""
    pipe = client.pipeline(transaction=True)
    for key in namespace_keys(client, namespace):
        pipe.delete(key)
    for copy in copies:
        if copy.pttl_ms > 0:
            if copy.pttl_ms <= elapsed_ms:
                continue
            copy = dataclasses.replace(copy, pttl_ms=copy.pttl_ms - elapsed_ms)
        if copy.kind == "string":
            pipe.set(copy.key, copy.value)
        elif copy.kind == "hash" and copy.value:
            pipe.hset(copy.key, mapping=copy.value)
        elif copy.kind == "list" and copy.value:
            pipe.rpush(copy.key, *copy.value)
        elif copy.kind == "set" and copy.value:
            pipe.sadd(copy.key, *copy.value)
        elif copy.kind == "zset" and copy.value:
            pipe.zadd(copy.key, dict(copy.value))
        elif copy.kind == "stream":
            for entry_id, fields in copy.value:
                pipe.xadd(copy.key, fields, id=entry_id)
        if copy.pttl_ms > 0:
            pipe.pexpire(copy.key, copy.pttl_ms)
    pipe.execute()


def put_garbage(client: Any, key: str, kind: str) -> None:
    """Replace whatever is under ``key`` with a value of the given kind."""
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    if kind == "text":
        pipe.set(key, b"\xff garbage \x00")
    elif kind == "number":
        # An integer where one may be expected, but not one any script wrote.
        pipe.set(key, b"7")
    elif kind == "hash":
        pipe.hset(key, mapping={"fence": "x", "owner": "nobody", "junk": "1"})
    elif kind == "list":
        pipe.rpush(key, "a", "b")
    elif kind == "set":
        pipe.sadd(key, "a")
    elif kind == "zset":
        pipe.zadd(key, {"a": 1.0})
    elif kind == "stream":
        pipe.xadd(key, {"junk": "1"})
    else:
        raise ValueError(f"unknown garbage kind {kind!r}")
    pipe.execute()


def flush_scripts(client: Any) -> None:
    """Empty the server's script cache (a restart, a failover, ``SCRIPT FLUSH``)."""
    client.script_flush()
