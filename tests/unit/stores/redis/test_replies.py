"""Script replies decoded once, into enums and value types (store/replies.py)."""

from __future__ import annotations

import pytest

from cronrace.errors import StoreError
from cronrace.model.policies import Outcome
from cronrace.stores.redis.replies import (
    decode_acquire,
    decode_claim_owner,
    decode_release,
    decode_renewal,
)
from cronrace.stores.values import AcquireDecision, Owner, ReleaseDecision, Renewal


def acquire_reply(decision: bytes, *, holder: bytes = b"", abandoned: bytes = b"") -> list[object]:
    return [decision, 9, -1, 3, holder, 0, 0, abandoned, b"", 0, 0, 0, b"", 0, 0, 0]


def test_an_owner_is_built_and_read_back_alike() -> None:
    owner = Owner.new("node-1")
    assert Owner.parse(str(owner)) == owner
    assert owner.node_id == "node-1"
    assert len(owner.nonce) == 12
    assert Owner.new("node-1") != owner  # one process, one nonce


@pytest.mark.parametrize(
    ("raw", "owner"),
    [
        (None, None),
        (b"n1:ab12", Owner("n1", "ab12")),
        (b"n1:ab12\nrun:100\n{...}", Owner("n1", "ab12")),  # decided: the answer appended
        ("n2:ff", Owner("n2", "ff")),
    ],
)
def test_a_claim_value_names_its_owner(raw: object, owner: Owner | None) -> None:
    assert decode_claim_owner(raw) == owner


@pytest.mark.parametrize(
    ("raw", "decision", "outcome"),
    [
        (b"run", AcquireDecision.RUN, None),
        (b"marked", AcquireDecision.MARKED, None),
        (b"stale", AcquireDecision.STALE, Outcome.STALE),
        (b"skipped:paused", AcquireDecision.SKIPPED_PAUSED, Outcome.SKIPPED_PAUSED),
        (b"skipped:overlap", AcquireDecision.SKIPPED_OVERLAP, Outcome.SKIPPED_OVERLAP),
        (b"queued", AcquireDecision.QUEUED, Outcome.QUEUED),
    ],
)
def test_acquire_decisions_decode_to_enums_with_their_outcome(
    raw: bytes, decision: AcquireDecision, outcome: Outcome | None
) -> None:
    reply = decode_acquire(acquire_reply(raw, holder=b"n2:x"))
    assert reply.decision is decision
    assert decision.outcome is outcome
    assert reply.holder_owner == Owner("n2", "x")
    assert reply.abandoned_owner is None
    assert reply.prev_watermark_s is None


def test_an_unknown_decision_is_a_store_error_not_a_crash() -> None:
    with pytest.raises(StoreError, match="unknown decision"):
        decode_acquire(acquire_reply(b"launched"))
    with pytest.raises(StoreError, match="unknown decision"):
        decode_release([b"kept", 0, 0, b"", 0, b""], ())


@pytest.mark.parametrize(
    ("raw", "decision"),
    [
        (b"released", ReleaseDecision.RELEASED),
        (b"run", ReleaseDecision.HANDED_ON),
        (b"not_owner", ReleaseDecision.NOT_OWNER),
    ],
)
def test_release_decisions_decode_to_enums(raw: bytes, decision: ReleaseDecision) -> None:
    assert decode_release([raw, 5, 101, b"", 0, b"t1"], ()).decision is decision


@pytest.mark.parametrize(
    ("raw", "renewal"),
    [(1, Renewal.RENEWED), (2, Renewal.REASSERTED), (0, Renewal.GONE), (-1, Renewal.TAKEN)],
)
def test_renewals_decode_to_enums(raw: int, renewal: Renewal) -> None:
    assert decode_renewal(raw) is renewal


def test_an_unknown_renewal_answer_is_a_store_error() -> None:
    with pytest.raises(StoreError, match=r"renew\.lua answered"):
        decode_renewal(3)


def test_change_log_entries_decode_from_bytes_or_text_and_skip_malformed_ones() -> None:
    from cronrace.stores.redis import changes

    reply = [
        (b"5-0", {b"n": b"a", b"k": b"join", b"v": b"9000"}),
        (b"6-0", {b"n": b"b", b"k": b"leave"}),
        (b"7-0", {b"x": b"garbage"}),
        (b"8-0", {}),
        ("9-0", {"n": "c", "k": "print", "v": "f1 f2"}),
    ]
    assert changes.decode(reply) == [
        ("5-0", "a", "join", "9000"),
        ("6-0", "b", "leave", ""),
        ("9-0", "c", "print", "f1 f2"),
    ]
