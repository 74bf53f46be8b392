"""The Lua scripts as Redis holds them: a flushed script cache, and errors named by line."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources

from cronrace.errors import StoreError
from cronrace.protocol import DecideReply, Renewal, RenewRequest, Verdict
from cronrace.stores.redis import Store
from tests.stores.contract.helpers import request


async def test_noscript_is_handled_by_reloading_also_in_pipelines(store: Store) -> None:
    try:
        await store.client.script_flush()
        replies = await store.decide([request(job="a", tick=100), request(job="b", tick=100)])
        assert [getattr(r, "verdict", r) for r in replies] == [Verdict.RUN, Verdict.RUN]
        await store.client.script_flush()
        first = replies[0]
        assert isinstance(first, DecideReply)
        assert await store.renew_lease("a", RenewRequest(first.fence, 5000)) is Renewal.RENEWED
    finally:
        await store.prepare()  # the server is shared: leave its cache as it was found


async def test_a_script_error_names_the_line_of_the_file_we_ship(store: Store) -> None:
    """Redis numbers the lines of _lib.lua and the script joined; the error is mapped back."""
    source = resources.files("cronrace.stores.redis.lua").joinpath("decide.lua").read_text()
    line = 1 + source.splitlines().index("if window > 0 then")
    bad = replace(request(100), trigger_window_ms="soon")  # type: ignore[arg-type]
    (reply,) = await store.decide([bad])
    assert isinstance(reply, StoreError)
    assert f"decide.lua:{line}:" in str(reply)
    assert "job 'j'" in str(reply)
    assert await store.cursors(["j"]) == {"j": None}  # the cursor did not move
