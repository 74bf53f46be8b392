"""The embedded store's client fails the way a real one does."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from cronrace.stores.redis.client import embedded_connection, make_client


async def test_an_answer_lost_on_the_embedded_store_raises_a_connection_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, namespace: str
) -> None:
    # With redis-py's debug log on, a failed operation is logged with str(connection);
    # fakeredis's connection to a shared server had no name, so the failure came out as
    # an AttributeError, which the tick loop took for a surprise: the model check lost a
    # won tick that way (tests/model/test_scheduler.py, answers lost during a freeze).
    caplog.set_level(logging.DEBUG, logger="redis")
    client = make_client(f"memory://{namespace}")
    await client.set(b"k", b"v")  # connected: the answers below are lost, not refused
    connection = embedded_connection()
    answered = connection.read_response

    async def lost(self: Any, **kwargs: Any) -> Any:
        await answered(self, **kwargs)
        raise RedisConnectionError("the answer was lost on the way")

    monkeypatch.setattr(connection, "read_response", lost)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.set(b"k", b"w")
        with pytest.raises(RedisConnectionError, match="lost on the way"):
            await pipe.execute()
    finally:
        monkeypatch.undo()
        await client.aclose()
