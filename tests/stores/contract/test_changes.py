"""The fleet's change log: a heartbeat or an exchange reads only what changed since a cursor."""

from __future__ import annotations

from typing import Any

from cronrace.stores.contract import Store
from cronrace.stores.values import FleetRequest, HeartbeatReply
from tests.stores.contract.test_fleet import server_ms

TTL = 6000


def live_after(now_ms: int) -> int:
    """The expiry a member must have to be live: it beat within the last 3 s."""
    return now_ms - 3000 + TTL


async def read_changes(store: Store, now_ms: int, since: str, **kwargs: Any) -> HeartbeatReply:
    """n1's beat at ``now_ms`` that reads the changes since ``since`` (logging no join)."""
    return await store.heartbeat(
        "n1",
        now_ms=now_ms,
        ttl_ms=TTL,
        epoch_candidate="e",
        since=since,
        joined=False,
        live_after_ms=live_after(now_ms),
        **kwargs,
    )


async def test_a_read_of_changes_lists_only_who_joined_left_or_went_silent(store: Store) -> None:
    now_ms = await server_ms(store)
    for node in ("n1", "n2", "quiet"):
        await store.heartbeat(node, now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    full = await store.heartbeat("n1", now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    assert full.full
    assert full.cursor
    assert {"n1", "n2", "quiet"} <= set(full.members)

    later = now_ms + 4000  # "quiet" beat 4 s ago: silent (3 s) but not expired (6 s)
    await store.heartbeat("n2", now_ms=later, ttl_ms=TTL, epoch_candidate="e", joined=False)
    await store.heartbeat("new", now_ms=later, ttl_ms=TTL, epoch_candidate="e", joined=True)
    await store.leave("n2")
    changes = await read_changes(store, later, full.cursor, prune=False)
    assert not changes.full
    assert not changes.gap
    assert changes.members == {"new": later + TTL}  # n2's plain beat is no change
    assert changes.left == ("n2",)
    assert changes.silent == {"quiet": now_ms + TTL}
    assert changes.live_count == 2  # n1 and new
    assert changes.cursor != full.cursor

    # Nothing happened since: nothing is read but the count.
    again = await read_changes(store, later, changes.cursor, prune=False)
    assert (again.members, again.left, again.live_count) == ({}, (), 2)
    assert again.cursor == changes.cursor


async def test_a_node_that_left_and_came_back_reads_as_joined(store: Store) -> None:
    now_ms = await server_ms(store)
    full = await store.heartbeat("n1", now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    await store.heartbeat("back", now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    await store.leave("back")
    await store.heartbeat("back", now_ms=now_ms + 1, ttl_ms=TTL, epoch_candidate="e")
    changes = await read_changes(store, now_ms, full.cursor)
    assert changes.members == {"back": now_ms + 1 + TTL}
    assert changes.left == ()


async def test_members_read_silent_and_asked_for_again_read_as_back_once_they_beat(
    store: Store,
) -> None:
    # A late beat logs no join (issue 19): the nodes that read its member silent ask for
    # it again (recheck) and see it back, with its new expiry, once it beats again; one
    # still silent, one gone, one that left and one never seen are not back.
    now_ms = await server_ms(store)
    for node in ("n1", "late", "still", "leaver"):
        await store.heartbeat(node, now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    full = await store.heartbeat("n1", now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    later = now_ms + 4000  # all three silent by now (their beats are 4 s old)
    await store.heartbeat("late", now_ms=later, ttl_ms=TTL, epoch_candidate="e", joined=False)
    await store.heartbeat("leaver", now_ms=later, ttl_ms=TTL, epoch_candidate="e", joined=False)
    await store.leave("leaver")
    changes = await read_changes(
        store, later, full.cursor, recheck=("late", "still", "leaver", "never"), prune=False
    )
    assert changes.members == {"late": later + TTL}
    assert changes.silent == {"still": now_ms + TTL}
    assert changes.left == ("leaver",)
    assert changes.live_count == 2  # n1 and late
    # Without recheck the late beat is no change: the count alone disagrees.
    blind = await read_changes(store, later, full.cursor, prune=False)
    assert "late" not in blind.members


async def test_more_changes_than_a_read_takes_is_a_gap(store: Store) -> None:
    now_ms = await server_ms(store)
    full = await store.heartbeat("n1", now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    for index in range(1001):  # each logged: a leave is the cheapest change to make
        await store.leave(f"m{index}")
    changes = await read_changes(store, now_ms, full.cursor)
    assert changes.gap
    assert not changes.full


async def test_an_exchange_of_changes_reads_only_new_fingerprints(store: Store) -> None:
    now_ms = await server_ms(store)
    for node in ("n1", "n2"):
        await store.heartbeat(node, now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    await store.fleet.exchange("n2", "j d2", details=b"{}", now_ms=now_ms)
    full = await store.fleet.exchange("n1", "j d1", details=b"{}", now_ms=now_ms)
    assert full.full
    assert full.fingerprints == {"n1": "j d1", "n2": "j d2"}

    quiet = await store.fleet.exchange(
        "n2", "j d2", details=None, now_ms=now_ms, since=full.cursor, changed=False
    )
    assert (quiet.full, quiet.fingerprints, quiet.gap) == (False, {}, False)
    await store.fleet.exchange("n2", "j d3", details=b"{}", now_ms=now_ms, since=quiet.cursor)
    changes = await store.fleet.exchange(
        "n1", "j d1", details=None, now_ms=now_ms, since=full.cursor, changed=False
    )
    assert changes.fingerprints == {"n2": "j d3"}
    assert not changes.details_missing
    assert changes.schedules_version == 0
    # The change reached the full read too.
    assert (await store.fleet.exchange("n1", "j d1", details=None, now_ms=now_ms)).fingerprints[
        "n2"
    ] == "j d3"


async def test_an_exchange_sent_with_the_heartbeat_answers_as_one_sent_alone(
    store: Store,
) -> None:
    now_ms = await server_ms(store)
    await store.heartbeat("n2", now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    await store.fleet.exchange("n2", "j d2", details=b"{}", now_ms=now_ms)
    first = await store.heartbeat(
        "n1",
        now_ms=now_ms,
        ttl_ms=TTL,
        epoch_candidate="e",
        fleet=FleetRequest("j d1", b'{"jobs":1}'),
    )
    assert first.fleet is not None
    assert first.fleet.full
    assert first.fleet.fingerprints == {"n1": "j d1", "n2": "j d2"}
    assert not first.fleet.details_missing
    assert {"n1", "n2"} <= first.members.keys()

    await store.fleet.exchange("n2", "j d3", details=b"{}", now_ms=now_ms, since=first.cursor)
    changes = await read_changes(
        store,
        now_ms,
        first.cursor,
        fleet=FleetRequest("j d1", None, since=first.fleet.cursor, changed=False),
    )
    assert changes.fleet is not None
    assert not changes.fleet.full
    assert (changes.fleet.fingerprints, changes.fleet.gap) == ({"n2": "j d3"}, False)
    assert not changes.full
    assert (changes.members, changes.live_count) == ({}, 2)
    # A beat without an exchange has no reply to one.
    alone = await store.heartbeat("n1", now_ms=now_ms, ttl_ms=TTL, epoch_candidate="e")
    assert alone.fleet is None
