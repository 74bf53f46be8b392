"""Following Sentinel's failovers: where the primary is now, and its announcements.

The clients themselves are built in :mod:`cronrace.stores.redis.client`; these functions
take one and return at once for every deployment but Sentinel.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import RedisError

log = logging.getLogger("cronrace.stores.redis")


async def follow_primary(client: Any) -> None:
    """Ask the sentinels where the primary is now, and drop idle connections elsewhere.

    A no-op for every deployment but Sentinel. Called with each heartbeat, it bounds the
    time a node keeps writing to a demoted primary to about one heartbeat. Sentinels that
    do not answer are only logged: the primary may be fine, and a new connection asks
    them again anyway.
    """
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return
    try:
        await pool.get_master_address()  # type: ignore[no-untyped-call]
    except (RedisError, OSError) as exc:
        log.warning("sentinels did not say where the primary is", extra={"error": str(exc)})


#: How long a sentinel listener waits before it subscribes again after an error.
SWITCH_RESUBSCRIBE_S = 1.0


async def follow_switch_master(client: Any) -> None:
    """Follow each sentinel's ``+switch-master`` announcement as it comes (until cancelled).

    The heartbeat asks the sentinels where the primary is (``follow_primary``), so a node
    leaves a demoted primary within a heartbeat; but Sentinel leaves the old primary
    writable for about ten seconds after a graceful failover, and a node still writing
    there for up to a heartbeat can win a tick another node wins on the new primary. The
    sentinels announce the switch at once: each one's announcement makes the node ask
    where the primary is and drop its idle connections elsewhere. Returns at once for
    every deployment but Sentinel.
    """
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return
    async with anyio.create_task_group() as tg:
        for sentinel in pool.sentinel_manager.sentinels:
            tg.start_soon(_listen_for_switch, client, sentinel, pool.service_name)


async def _listen_for_switch(client: Any, sentinel: Any, master: str) -> None:
    while True:
        pubsub = sentinel.pubsub()
        try:
            await pubsub.subscribe("+switch-master")
            async for message in pubsub.listen():
                data = message.get("data")
                text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
                if message.get("type") == "message" and text.split(" ", 1)[0] == master:
                    log.warning(
                        "Sentinel announced a new primary; following it now",
                        extra={"announcement": text},
                    )
                    await follow_primary(client)
        except (RedisError, OSError) as exc:
            log.info(
                "sentinel announcements not heard; subscribing again", extra={"error": str(exc)}
            )
        finally:
            with anyio.CancelScope(shield=True):
                await pubsub.aclose()
        await anyio.sleep(SWITCH_RESUBSCRIBE_S)
