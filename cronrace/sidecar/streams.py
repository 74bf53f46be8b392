"""The stream target: one Redis stream entry per run, the hand-off to a worker queue.

Each entry carries the job, the tick and the run's fence (``job``, ``tick``, ``fence``,
``node``, ``idempotency_key``), so that the workers reading the stream can refuse a stale
holder (docs/design.md section 9). The stream is on the agent's own Redis, or on another one
(``redis_url``): stores of other Redis servers are kept per URL for the agent's life
(:class:`OtherRedis`), not opened on every run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from cronrace.errors import StoreError, TargetError
from cronrace.model.job import RunContext
from cronrace.runtime import tracing
from cronrace.settings import redact_url
from cronrace.specs.targets import StreamSpec
from cronrace.stores.contract import RedisFeatures, Store
from cronrace.stores.urls import open_redis


class OtherRedis:
    """Stores of Redis servers other than the agent's, one per URL, open for the agent's life.

    Stream targets that name another Redis share them: the first run opens the store (its
    scripts, its connection pool), the next runs reuse it, and :meth:`aclose` closes them
    all when the agent stops (:meth:`serve` as an agent service does that).

    Args:
        timeout_s: the Redis timeout of those stores.
    """

    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._stores: dict[str, RedisFeatures] = {}

    def store(self, url: str) -> RedisFeatures:
        """The store of ``url``, opened on first use."""
        if url not in self._stores:
            self._stores[url] = open_redis(url, timeout_s=self.timeout_s)
        return self._stores[url]

    async def aclose(self) -> None:
        """Close every store opened so far (each gets up to 2 s)."""
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await store.aclose()

    async def serve(self) -> None:
        """Wait until cancelled (the agent stopping, after its runs), then close the stores."""
        try:
            await anyio.sleep_forever()
        finally:
            await self.aclose()


class StreamTarget:
    """Append one entry per run to a Redis stream; a worker group does the slow part.

    Args:
        spec: the stream and its options.
        agent_store: returns the agent's store (used when ``spec.redis_url`` is unset).
        timeout_s: the Redis timeout for another Redis.
        other_redis: the stores of other Redis servers, shared by the agent's targets;
            default: the target's own (closed by :meth:`aclose`).
    """

    def __init__(
        self,
        spec: StreamSpec,
        *,
        agent_store: Callable[[], Store],
        timeout_s: float = 5.0,
        other_redis: OtherRedis | None = None,
    ) -> None:
        self.spec = spec
        self._agent_store = agent_store
        self._own = other_redis is None
        self._other_redis = other_redis if other_redis is not None else OtherRedis(timeout_s)

    async def aclose(self) -> None:
        """Close the connections to another Redis this target opened itself."""
        if self._own:
            await self._other_redis.aclose()

    def fields(self, ctx: RunContext) -> dict[str, str]:
        """The entry of run ``ctx``."""
        out = {
            **self.spec.fields,
            "job": ctx.job,
            "tick": str(ctx.tick_s),
            "fence": str(ctx.fence),
            "node": ctx.node_id,
            "idempotency_key": ctx.idempotency_key,
            **tracing.inject({}),  # traceparent: a consumer continues the run's trace
        }
        if ctx.trigger_id:
            out["trigger_id"] = ctx.trigger_id
        return out

    async def __call__(self, ctx: RunContext) -> dict[str, Any]:
        spec = self.spec
        where = redact_url(spec.redis_url) if spec.redis_url else "the agent's Redis"
        try:
            if spec.redis_url is None:
                agent_store = self._agent_store()
                if not isinstance(agent_store, RedisFeatures):
                    raise TargetError(
                        f"job {ctx.job!r}: stream {spec.key!r}: the agent's store is not Redis;"
                        " give the target a redis_url"
                    )
                entry_id = await agent_store.push_stream(spec.key, self.fields(ctx), spec.maxlen)
            else:
                store = self._other_redis.store(spec.redis_url)
                entry_id = await store.push_stream(spec.key, self.fields(ctx), spec.maxlen)
        except StoreError as exc:
            raise TargetError(f"stream {spec.key!r} at {where}: {exc}") from exc
        return {"stream": spec.key, "id": entry_id}
